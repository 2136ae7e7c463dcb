"""The declared seams of the loop: a drafter family and a feature capture, as the phases use them.

An EAGLE drafter (``runtime.drafter.Drafter``), a target's own MTP head (``runtime.mtp.MtpDrafter``, chained:
``runtime.mtp_chain``) and the next families plug into the same round by speaking :class:`DraftModel`; the two
captures of target features (``runtime.capture.LayerCapture``, ``runtime.mtp.MtpCapture``) speak
:class:`FeatureCapture`. The phases type against these, never against a concrete class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from local_eagle.llamacpp.model import Context


class DraftSpec(Protocol):
    """What the loop reads of a drafter's checkpoint: its draft vocabulary (None: the whole one)."""

    draft_ids: np.ndarray | None


class DraftModel(Protocol):
    """A drafter on its own llama.cpp context, fed the target's features row by row (``runtime.feed``)."""

    spec: DraftSpec
    ctx: Context
    prefix_seqs: tuple[int, ...]  # branch sequences that receive every committed row (trees), or none
    drafts_blocks: bool  # one call proposes a whole block (``runtime.dflash``): a chain takes its rows in order

    def encode(self, features: np.ndarray) -> np.ndarray: ...

    def feedback(self, prenorm: np.ndarray) -> np.ndarray: ...

    def prime(self, token: int, seq: int = 0) -> None: ...

    def decode(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def decode_rows(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def decode_last(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None: ...

    def decode_branches(
        self,
        tokens: np.ndarray,
        g: np.ndarray,
        positions: np.ndarray,
        seqs: list[list[int]],
        columns: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def remove_from(self, pos: int, seq: int = 0) -> None: ...

    def close(self) -> None: ...


class FeatureCapture(Protocol):
    """The target's per-row features for the drafter, recorded during the target's own decodes."""

    width: int
    callback: object | None  # an eval callback the target context must be built with, or None (staged natively)

    @property
    def can_pause(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    def attach(self, ctx: Context) -> None: ...

    def set_enabled(self, on: bool) -> None: ...

    def pause(self, paused: bool) -> None: ...

    def features(self, n_rows: int, rows: np.ndarray | None = None) -> np.ndarray: ...

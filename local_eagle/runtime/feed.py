"""The drafter's input, fed lazily: rows queue while no draft is due and are decoded in one call when one is.

The drafter reads row P = (token[P+1], g[P]) for every position P, g[P] being its projection of the target's
features at P. Decoding those rows after every round costs a drafter call per round (about 1.4 ms of a 19 ms
round for Gemma 3 270M on a 2-core CPU: its graph writes 262K-wide logits for every row, wanted or not).
While the draft-length policy drafts nothing that work is wasted, so rows wait here, and the first draft
step of the next drafting round decodes them all in one call, whose last row gives that step's logits.

On a CPU that catch-up costs about the same per row as the rounds it replaces, so after a long idle stretch
only the last ``window`` rows are decoded, into a cleared drafter cache: the drafter then sees a sliding
window of the text, which is enough to tell whether drafting pays again (a probe) and costs a bounded call.
Rows are kept complete (no window) whenever the drafter is fed at least every ``window`` rows, which is
always the case while drafting pays.
"""

from __future__ import annotations

import numpy as np

from local_eagle.runtime.policy.defaults import IDLE_CONTEXT, PROBE_CONTEXT  # noqa: F401 - read here too
from local_eagle.runtime.seams import DraftModel
from local_eagle.runtime.treeverify import PrefixTags


class DrafterFeed:
    """Rows the drafter has not decoded yet, in a buffer reused across rounds (no per-round allocation)."""

    def __init__(self, drafter: DraftModel, width: int, window: int = IDLE_CONTEXT, seq: int | None = None) -> None:
        self.drafter = drafter
        self.window = window
        self.seq = seq or 0  # the drafter cache's sequence these rows go to
        self._shared = seq is not None  # other sequences share the cache: clear only this one's cells
        self._tokens = np.empty(0, dtype=np.int32)
        self._features = np.empty((0, width), dtype=np.float32)
        self._head = self._tail = 0
        self.first = 0  # the position of the first queued row
        self._restart = False  # rows were dropped: the drafter's cache must be cleared before the next decode
        self.tags = PrefixTags()  # the tree branch sequences sharing this cache's prefix (runtime.treeround)

    @property
    def pending(self) -> int:
        return self._tail - self._head

    def reset(self) -> None:
        """An empty drafter cache and queue, for a new generation."""
        self._clear()
        self._head = self._tail = self.first = 0
        self._restart = False

    def push(self, position: int, tokens: list[int] | np.ndarray, features: np.ndarray) -> None:
        """Queue rows (tokens[i], features[i]) at positions ``position + i``, right after those queued."""
        n = len(tokens)
        if position != self.first + self.pending:
            raise AssertionError(f"drafter rows pushed at {position}, expected {self.first + self.pending}")
        if self._tail + n > len(self._tokens):
            self._make_room(n)
        self._tokens[self._tail : self._tail + n] = tokens
        self._features[self._tail : self._tail + n] = features
        self._tail += n

    def trim(self) -> None:
        """Keep only the last ``window`` queued rows: the older ones will never be decoded."""
        drop = self.pending - self.window
        if drop > 0:
            self._head += drop
            self.first += drop
            self._restart = True

    def skip(self, position: int, n: int) -> None:
        """Rows ``position .. position + n - 1`` will never exist (their features were not captured):
        drop the queue, and clear the drafter's cache before it decodes again."""
        if position != self.first + self.pending:
            raise AssertionError(f"drafter rows skipped at {position}, expected {self.first + self.pending}")
        self._head = self._tail = 0
        self.first = position + n
        self._restart = True

    def ready(self, position: int) -> bool:
        """Can a draft start at ``position``: the row before it is queued, and the drafter sees either its
        whole context or a full window of it (not a few rows after a skip, which draft poorly)."""
        n = self.pending
        return n > 0 and self.first + n == position and (not self._restart or n >= self.window)

    def flush(self) -> None:
        """Decode every queued row but the last now, keeping the drafter's whole context (a prompt, say)."""
        n = self.pending - 1
        if n <= 0:
            return
        h = self._head
        self._clear_if_restarted()
        g = self.drafter.encode(self._features[h : h + n])
        self.drafter.decode_kv(self._tokens[h : h + n], g, np.arange(self.first, self.first + n), self.seq)
        self._head += n
        self.first += n

    def catch_up(self, columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Decode every queued row in one call: the last row's (logits, prenorm), the round's first draft step,
        and how many rows it took. The queue must hold at least the row of the round's last token. ``columns``:
        only those target ids' logits (an EAGLE drafter's draft vocabulary, ``Drafter.decode_last``)."""
        tokens, features, positions = self.take_rows()
        g = self.drafter.encode(features)
        logits, prenorm = self.drafter.decode_last(tokens, g, positions, self.seq, columns=columns)
        return logits, prenorm, len(tokens)

    def take_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every queued row (tokens, features, positions), for a catch-up the caller decodes now (several
        sequences' in one call, ``runtime.chain``); the queue is then empty, the drafter's cache ready for them."""
        h, n = self._head, self.pending
        if n <= 0:
            raise AssertionError("no drafter row to catch up on")
        self._clear_if_restarted()
        rows = self._tokens[h : self._tail], self._features[h : self._tail], np.arange(self.first, self.first + n)
        self._head = self._tail = 0
        self.first += n
        return rows

    def _clear_if_restarted(self) -> None:
        if self._restart:
            self._clear()
            self._restart = False

    def _clear(self) -> None:
        if self._shared:
            self.drafter.ctx.seq_remove(self.seq)
        else:
            self.drafter.ctx.clear()
        self.tags.reset()

    def _make_room(self, n: int) -> None:
        """Move the queued rows to the front, growing the buffer when they would not fit."""
        h, m = self._head, self.pending
        if m + n > len(self._tokens):
            size = max(2 * (m + n), 4 * self.window)
            tokens = np.empty(size, dtype=np.int32)
            features = np.empty((size, self._features.shape[1]), dtype=np.float32)
        else:
            tokens, features = self._tokens, self._features
        tokens[:m] = self._tokens[h : h + m]
        features[:m] = self._features[h : h + m]
        self._tokens, self._features = tokens, features
        self._head, self._tail = 0, m

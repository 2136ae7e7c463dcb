"""The engine as the server sees it: one protocol for a model run in this process or in a runner process.

The job slot, both APIs and the embeddings route speak only :class:`ServedEngine`. A runner
(:class:`~local_eagle.serve.runners.RunnerEngine`) speaks it over its pipes; :class:`LocalEngine` speaks it for
an :class:`~local_eagle.runtime.engine.Engine` loaded here (tests, benchmarks), and the runner process answers
its pipe with a ``LocalEngine`` too, so both sides read the vocabulary and embed the same way.

This module imports llama.cpp's bindings lazily: the runner process imports it before it has loaded a model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine, EngineOptions

_VOCAB_SPM, _VOCAB_BPE = 1, 2  # llama_vocab_type: LLAMA_VOCAB_TYPE_SPM, LLAMA_VOCAB_TYPE_BPE
_CONTROL, _USER_DEFINED = 1 << 3, 1 << 4  # LLAMA_TOKEN_ATTR_CONTROL, LLAMA_TOKEN_ATTR_USER_DEFINED


class EmbedCancelled(Exception):
    """An embedding stopped because its caller said so (the client left)."""


class Streamed(Protocol):
    """A generation as it runs: its pieces, then ``result`` (None if it never finished)."""

    result: Any

    def __iter__(self) -> Iterator[str]: ...

    def close(self) -> None: ...


class ServedEngine(Protocol):
    """What a server asks of the model it serves, wherever the model runs.

    ``live()`` is the model's process as a request finds it (None in this process): a request passes it back as
    ``seen`` so that a runner that died under the request fails it rather than restart beneath it.
    """

    n_ctx: int
    options: EngineOptions
    max_prompt_bytes: int | None
    tree_refusal: str | None
    gpu_share: float

    def live(self) -> object | None: ...

    def tokenize(self, text: str) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    def pieces(self, tokens: list[int]) -> list[bytes]: ...

    def tag_tokens(self, text: str) -> tuple[list[int], list[bool]]: ...

    def embed(self, request: dict[str, Any], cancelled: Callable[[], bool] | None = None) -> dict[str, Any]: ...

    def stream(self, prompt: np.ndarray, cancelled: Callable[[], bool] | None = None, seen: object | None = None,
               **kwargs: Any) -> Streamed: ...  # fmt: skip

    def close(self) -> None: ...


class LocalEngine:
    """An :class:`Engine` in this process, speaking :class:`ServedEngine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.n_ctx = engine.n_ctx
        self.options = engine.options
        self.tree_refusal = engine.tree_refusal
        self.gpu_share = engine.gpu_share
        self.max_prompt_bytes = max_prompt_bytes(engine.model, engine.n_ctx)

    def live(self) -> None:
        return None

    def tokenize(self, text: str) -> np.ndarray:
        return self.engine.tokenize(text)

    def count_tokens(self, text: str) -> int:
        """The tokens of a generated text, without the BOS (a timed-out generation's count)."""
        return len(self.engine.model.tokenize(text, add_special=False, parse_special=False))

    def pieces(self, tokens: list[int]) -> list[bytes]:
        return token_pieces(self.engine.model, tokens)

    def tag_tokens(self, text: str) -> tuple[list[int], list[bool]]:
        return tag_tokens(self.engine.model, text)

    def embed(self, request: dict[str, Any], cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
        """``llamacpp.embed.answer`` on the engine's model, in a context of its own; raises
        :class:`EmbedCancelled` between texts and decode batches once ``cancelled()``."""
        from local_eagle.llamacpp.embed import answer

        def progress() -> None:
            if cancelled is not None and cancelled():
                raise EmbedCancelled

        return answer(self.engine.model, request, self.n_ctx, self.options.n_threads, progress)

    def stream(self, prompt: np.ndarray, cancelled: Callable[[], bool] | None = None, seen: object | None = None,
               **kwargs: Any) -> Streamed:  # fmt: skip
        return self.engine.stream(prompt, cancelled=cancelled, **kwargs)

    def close(self) -> None:
        self.engine.close()


def served(engine: Engine | ServedEngine) -> ServedEngine:
    """The server's view of ``engine``: an engine loaded here is wrapped, a runner speaks it already."""
    from local_eagle.runtime.engine import Engine

    return LocalEngine(engine) if isinstance(engine, Engine) else engine


def max_prompt_bytes(model: Any, n_ctx: int) -> int | None:
    """The longest prompt, in UTF-8 bytes, that might fit the context: llama.cpp's tokenizer is quadratic on a
    long word (3 MB of "x" took minutes), so a prompt that cannot fit is refused before it is tokenized. Exact
    for SentencePiece and byte-level BPE vocabularies, where a token stands for at most its own piece's bytes;
    None for those that normalise the text (WordPiece, Unigram), where it is not."""
    from local_eagle.llamacpp.bindings import C

    if int(C.llama_vocab_type(model.vocab)) not in (_VOCAB_SPM, _VOCAB_BPE):
        return None
    longest = max(len(model.token_to_piece(t, special=True)) for t in range(model.n_vocab))
    return n_ctx * max(longest, 4)  # an unknown character, up to 4 bytes, becomes one token


def token_pieces(model: Any, tokens: Any) -> list[bytes]:
    """Each token's text as the model writes it, control tokens included (``<eos>``, ``[TOOL_CALLS]``)."""
    n = model.n_vocab
    return [model.token_to_piece(int(t), special=True) if 0 <= int(t) < n else b"" for t in tokens]


def tag_tokens(model: Any, text: str) -> tuple[list[int], list[bool]]:
    """``text`` tokenized with its special tokens parsed (``[TOOL_CALLS]`` as the one control token it is), and
    for each token whether it is special as the grammar's tokenizer marks them (``runtime.grammar``: control
    tokens, and user-defined ones written ``<...>``), so that a grammar names it by id and the output must be
    rendered with ``special`` for the text to show it."""
    from local_eagle.llamacpp.lib import C

    tokens = [int(t) for t in model.tokenize(text, add_special=False, parse_special=True)]
    special = []
    for t in tokens:
        attr = int(C.llama_vocab_get_attr(model.vocab, t))
        piece = model.token_to_piece(t, special=True)
        written = piece.startswith(b"<") and piece.endswith(b">")
        special.append(bool(attr & _CONTROL or (attr & _USER_DEFINED and written)))
    return tokens, special

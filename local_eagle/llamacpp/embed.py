"""Embeddings from a loaded model, as Ollama serves them (``/api/embed``): one vector per text, pooled as the model
says, in a llama.cpp context of its own on the same weights.

An embedding model's GGUF names its pooling (``{arch}.pooling_type``: mean, CLS or last token, as
nomic-embed-text's mean); its whole input goes through in one batch, since a non-causal encoder cannot be fed in
parts and a mean or CLS pooled over parts would be wrong. A generation model has none, and Ollama still serves
embeddings from it: its llama runner takes the hidden state of the input's last token, so here such a model is
pooled ``last``, fed in small chunks (every token of an embeddings context is an output, with its logits row:
chunks bound that buffer) through a causal context whose last chunk ends on the last token. Reranking models
(``rank``) are refused. The context is made for a request's texts and freed after it, so that a model served for
generation holds no second cache between requests.

Everything here runs in the process that holds the model: a runner's (``serve.runnerproc``), or the caller's.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import Keys

from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.llamacpp.lib import C, last_log_error
from local_eagle.llamacpp.model import DECODE, ENCODE, Model, prefix_tokens, usable_threads

POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK = 0, 1, 2, 3, 4  # enum llama_pooling_type
POOLING_NAMES = {POOLING_NONE: "none", POOLING_MEAN: "mean", POOLING_CLS: "cls", POOLING_LAST: "last",
                 POOLING_RANK: "rank"}  # fmt: skip
LOGITS_FLOATS = 1 << 24  # a generation model's chunk: its logits rows (every token is an output) within 64 MiB
CTX_STEP = 256  # llama.cpp pads a context to this many cells


class EmbedInputError(LocalEagleError):
    """A text that cannot be embedded as asked (empty, or too long for the context without truncation): a 400."""


@dataclass
class Embedded:
    """A request's vectors, one per text in order, and the tokens read for them (Ollama's prompt_eval_count)."""

    vectors: list[list[float]]
    tokens: int
    pooling: str


def model_pooling(model: Model) -> int:
    """The pooling the GGUF names (``{arch}.pooling_type``), POOLING_NONE when it names none (a generation model)."""
    buffer = ctypes.create_string_buffer(32)
    key = Keys.LLM.POOLING_TYPE.format(arch=model.arch()).encode()
    if C.llama_model_meta_val_str(model.ptr, key, buffer, len(buffer)) < 0:
        return POOLING_NONE
    try:
        return int(buffer.value.decode())
    except ValueError:
        return POOLING_NONE


def embedding_width(model: Model) -> int:
    """How many values one of ``model``'s vectors has (its output embedding, else its hidden size)."""
    return int(C.llama_model_n_embd_out(model.ptr)) or model.n_embd


def context_limit(model: Model, n_ctx: int) -> int:
    """The most tokens one text may have: the server's context, and never past the model's training length (an
    encoder's position table ends there)."""
    train = int(C.llama_model_n_ctx_train(model.ptr))
    return max(1, min(n_ctx, train) if train > 0 else n_ctx)


def text_tokens(model: Model, text: str, limit: int) -> np.ndarray:
    """``text``'s tokens as :func:`tokens_of` keeps them, without tokenizing more of a long text than it needs
    (:func:`~local_eagle.llamacpp.model.prefix_tokens`): 16 texts of a megabyte each cost what 16 texts of the
    context's length do, and with ``truncate`` off the prefix's count is enough to refuse one."""
    return prefix_tokens(lambda t: model.tokenize(t, add_special=True, parse_special=True), text, limit)


def tokens_of(model: Model, texts: list[str], limit: int, truncate: bool,
              progress: Callable[[], None] | None = None) -> list[np.ndarray]:  # fmt: skip
    """Each text's tokens, special ones added as the vocabulary says (BOS, or BERT's CLS and SEP), as Ollama
    tokenizes them; one over ``limit`` is cut to it (keeping a closing EOS/SEP) or, without ``truncate``, refused.
    ``progress`` is called after each text (it may raise to stop)."""
    add_eos = bool(C.llama_vocab_get_add_eos(model.vocab)) or bool(C.llama_vocab_get_add_sep(model.vocab))
    out = []
    for i, text in enumerate(texts):
        tokens = text_tokens(model, text, limit)
        if len(tokens) == 0:
            raise EmbedInputError(f"input {i} has no tokens")
        if len(tokens) > limit:
            if not truncate:
                raise EmbedInputError(f"input {i} has over {limit} tokens, more than the context of {limit} allows "
                                      "(truncate it, or leave truncate on)")  # fmt: skip
            # a closing EOS/SEP kept (a clipped prefix is tokenized with its own)
            tokens = np.concatenate([tokens[: limit - 1], tokens[-1:]]) if add_eos and limit > 1 else tokens[:limit]
        out.append(tokens)
        if progress is not None:
            progress()
    return out


class _EmbedContext:
    """A llama_context with embeddings on, pooled, and its batch; freed by ``close``."""

    def __init__(self, model: Model, pooling: int, n_ctx: int, n_batch: int, n_threads: int) -> None:
        params = C.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.embeddings = True
        params.pooling_type = pooling
        threads = usable_threads(n_threads)
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        self.model = model
        self.batch = None
        self.ptr = C.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            detail = last_log_error()
            raise LlamaError(f"{model.path}: llama.cpp could not create an embeddings context"
                             + (f" ({detail})" if detail else ""))  # fmt: skip
        self.n_batch = int(C.llama_n_batch(self.ptr))
        self.mem = C.llama_get_memory(self.ptr)
        self.batch = C.llama_batch_ext_init(self.ptr)
        self.kind = ENCODE if C.llama_model_has_encoder(model.ptr) and not C.llama_model_has_decoder(model.ptr) \
            else DECODE  # fmt: skip
        self.width = embedding_width(model)
        self._pos = ctypes.c_int32(0)

    def run(self, tokens: np.ndarray, progress: Callable[[], None] | None = None) -> np.ndarray:
        """The pooled vector of one text: its tokens fed from an empty cache, ``n_batch`` at a time, ``progress``
        called after each batch."""
        if self.mem:
            C.llama_memory_clear(self.mem, True)
        for start in range(0, len(tokens), self.n_batch):
            if progress is not None and start:
                progress()
            C.llama_batch_ext_clear(self.batch)
            for j, token in enumerate(tokens[start : start + self.n_batch]):
                idx = C.llama_batch_ext_add_token(self.batch, 0, int(token))
                if idx < 0:
                    raise LlamaError(f"the embeddings batch rejected token {int(token)} (code {idx})")
                self._pos.value = start + j
                C.llama_batch_ext_set_pos(self.batch, idx, ctypes.byref(self._pos))
                C.llama_batch_ext_set_output_embd(self.batch, idx, True)
            rc = C.llama_process(self.ptr, self.kind, self.batch)
            if rc != 0:
                raise LlamaError(f"llama.cpp could not compute the embeddings (code {rc}): {last_log_error()}")
        ptr = C.llama_get_embeddings_seq(self.ptr, 0)
        if not ptr:
            raise LlamaError(f"llama.cpp returned no pooled embedding: {last_log_error()}")
        return np.ctypeslib.as_array(ptr, shape=(self.width,)).astype(np.float64)

    def close(self) -> None:
        if self.batch:
            C.llama_batch_ext_free(self.batch)
            self.batch = None
        if self.ptr:
            C.llama_free(self.ptr)
            self.ptr = None


def normalized(vector: np.ndarray) -> np.ndarray:
    """``vector`` at unit L2 length, as Ollama's ``normalize`` (a zero vector stays zero)."""
    return vector / max(float(np.sqrt(np.dot(vector, vector))), 1e-12)


def embed(model: Model, texts: list[str], n_ctx: int, n_threads: int = 0, truncate: bool = True,
          normalize: bool = True, dimensions: int | None = None,
          progress: Callable[[], None] | None = None) -> Embedded:  # fmt: skip
    """The vectors of ``texts`` (module docstring): L2-normalised unless ``normalize`` is off (Ollama's legacy
    ``/api/embeddings``), cut to ``dimensions`` and normalised again when it is given and shorter. ``progress`` is
    called after each text's tokens and each batch of its decode, never more than a batch apart: a runner tells its
    watchdog it is alive from it, and it may raise to stop the work (the client left)."""
    pooling = model_pooling(model)
    if pooling == POOLING_RANK:
        raise EmbedInputError(f"{model.path.name} is a reranking model: it scores pairs, it does not embed text")
    if pooling not in POOLING_NAMES:
        raise LlamaError(f"{model.path.name}: unknown pooling type {pooling}")
    width = embedding_width(model)
    if dimensions is not None and dimensions > width:  # OpenAI's answer too: the vector cannot be made longer
        raise EmbedInputError(f"dimensions must be at most {width}, the length of {model.path.name}'s vectors, got "
                              f"{dimensions}")  # fmt: skip
    limit = context_limit(model, n_ctx)
    token_lists = tokens_of(model, texts, limit, truncate, progress)
    if not token_lists:
        return Embedded([], 0, POOLING_NAMES[pooling if pooling != POOLING_NONE else POOLING_LAST])
    longest = max(len(t) for t in token_lists)
    cells = min(math.ceil(longest / CTX_STEP) * CTX_STEP, max(limit, CTX_STEP))
    if pooling == POOLING_NONE:  # a generation model: its last token, fed in chunks
        pooling = POOLING_LAST
        n_batch = max(32, min(512, LOGITS_FLOATS // max(model.n_vocab, 1)))
    else:  # the whole text in one batch
        n_batch = cells
    ctx = _EmbedContext(model, pooling, cells, min(n_batch, cells), n_threads)
    try:
        vectors = []
        for tokens in token_lists:
            v = ctx.run(tokens, progress)
            if not np.all(np.isfinite(v)):
                raise LlamaError("the embedding holds NaN or infinite values")
            if normalize:
                v = normalized(v)
            if dimensions is not None and 0 < dimensions < len(v):  # equal: the vector as it is
                v = normalized(v[:dimensions])
            vectors.append([float(x) for x in v.astype(np.float32)])
            if progress is not None:
                progress()
    finally:
        ctx.close()
    return Embedded(vectors, sum(len(t) for t in token_lists), POOLING_NAMES[pooling])


def answer(model: Model, request: dict[str, Any], n_ctx: int, n_threads: int = 0,
           progress: Callable[[], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """An embed request as the serve layer sends it (``texts``, ``truncate``, ``normalize``, ``dimensions``), in
    the process that holds ``model``: ``{"embeddings", "tokens"}``, or ``{"error"}`` for input it cannot take (a
    400). The one entry point for a runner (over its pipe) and for an engine in the server's own process."""
    try:
        out = embed(model, list(request["texts"]), n_ctx, n_threads, truncate=bool(request.get("truncate", True)),
                    normalize=bool(request.get("normalize", True)), dimensions=request.get("dimensions"),
                    progress=progress)  # fmt: skip
    except EmbedInputError as e:
        return {"error": str(e)}
    return {"embeddings": out.vectors, "tokens": out.tokens, "pooling": out.pooling}

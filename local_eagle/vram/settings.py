"""The llama.cpp settings that change memory, and the sizes a context derives from them.

One frozen ``MemoryConfig`` is one configuration: the plan prices it and ``--suggest`` searches over
copies of it, so everything here is a value with no reference to a model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from local_eagle import DEFAULT_CTX
from local_eagle.gguf import pad
from local_eagle.vram.types import KV_TYPES, PlanError

MAX_SEQ = 256
"""llama.cpp's LLAMA_MAX_SEQ: the most sequences one context holds."""


@dataclass(frozen=True)
class MemoryConfig:
    """One llama.cpp configuration: the knobs that change memory.

    Not :class:`local_eagle.settings.Settings` (what a user asked for, resolved from flags, Modelfile and request):
    this is only what the planner prices, which the loader derives from those settings.

    ``n_gpu_layers`` None means "auto": the most layers that fit. The drafter context is created
    at the target's context (its KV cache covers the whole context) with its own batch sizes.

    ``n_ctx`` is the context one request may use. With ``parallel`` N above 1 (``--parallel``) both contexts
    are opened at N x ``n_ctx`` cells (:attr:`cells`), with N sequences in one unified cache, as the engine
    opens them (and as Ollama multiplies ``num_ctx`` by ``OLLAMA_NUM_PARALLEL``); :meth:`with_parallel`
    sets the sequence fields to match.
    """

    n_ctx: int = DEFAULT_CTX
    n_seq: int = 1
    n_batch: int = 2048
    n_ubatch: int = 512
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True
    n_gpu_layers: int | None = None
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    draft_batch: int = 512
    draft_ubatch: int = 512
    draft_max: int = 8
    swa_full: bool = True
    kv_unified: bool = False
    draft_n_seq: int | None = None
    """Sequences of the drafter's context (None: as many as the target's); draft trees give it its own count."""
    parallel: int = 1
    """Requests decoded at once, each in its own sequence of up to ``n_ctx`` tokens (see :meth:`with_parallel`)."""
    mtp: bool = False
    """With no drafter, the target drafts with its own MTP (NextN) head, as the engine does by default: the NextN
    block is loaded (``load_mtp``) and an MTP context opened on it, both priced. The caller decides whether the
    head will draft (``shapes.mtp_refusal``); a target without NextN blocks ignores it."""

    @property
    def drafter_seqs(self) -> int:
        return self.n_seq if self.draft_n_seq is None else self.draft_n_seq

    @property
    def cells(self) -> int:
        """The context llama.cpp is asked for (before padding): ``n_ctx`` for each of the ``parallel`` requests."""
        return self.n_ctx * self.parallel

    def with_parallel(self, n: int) -> MemoryConfig:
        """These settings for ``n`` requests at once, as the engine opens them: both contexts at ``n`` x ``n_ctx``
        cells, ``n`` sequences in one unified cache (``n_seq_max``, ``kv_unified``), no draft-tree sequences.
        ``n`` = 1 is the plain one-sequence context."""
        return replace(self, parallel=n, n_seq=n, kv_unified=n > 1, draft_n_seq=None)

    def validate(self) -> None:
        """Refuse what llama.cpp would refuse, naming the CLI flag, before anything is priced."""
        flags = {"type_k": "--kv-type-k", "type_v": "--kv-type-v", "draft_type_k": "--draft-kv-type"}
        for k in ("type_k", "type_v", "draft_type_k", "draft_type_v"):
            v = getattr(self, k)
            if v not in KV_TYPES:
                flag = flags.get(k, "--draft-kv-type")
                raise PlanError(f"KV cache type {v!r} ({flag} / --kv-type): expected one of {', '.join(KV_TYPES)}")
        if not self.flash_attn and (KV_TYPES[self.type_v].quantized or KV_TYPES[self.draft_type_v].quantized):
            raise PlanError("a quantised V cache needs flash attention (llama.cpp refuses it otherwise)")
        sizes = {
            "n_ctx": "--ctx",
            "n_seq": "--parallel",
            "n_batch": "--batch",
            "n_ubatch": "--ubatch",
            "draft_batch": "drafter n_batch",
            "draft_ubatch": "--draft-ubatch",
        }
        for k, flag in sizes.items():
            if getattr(self, k) < 1:
                raise PlanError(f"{flag} must be at least 1, got {getattr(self, k)}")
        if self.draft_max < 0:
            raise PlanError(f"--draft-max must be >= 0, got {self.draft_max}")
        if self.parallel < 1:
            raise PlanError(f"--parallel must be at least 1, got {self.parallel}")
        seqs = max(self.n_seq, self.drafter_seqs)
        if seqs > MAX_SEQ:
            raise PlanError(f"--parallel {seqs}: a llama.cpp context holds at most {MAX_SEQ} sequences")
        n = self.parallel
        if n > 1 and (self.n_seq, self.drafter_seqs, self.kv_unified) != (n, n, True):
            raise PlanError(
                f"parallel {self.parallel} needs {self.parallel} sequences in unified caches "
                f"(got n_seq {self.n_seq}, drafter {self.drafter_seqs}, unified {self.kv_unified}): use with_parallel"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CtxDims:
    """The sizes llama.cpp derives from MemoryConfig (``llama_context`` constructor)."""

    n_ctx: int
    n_ctx_seq: int
    n_stream: int
    n_batch: int
    n_ubatch: int
    n_seq: int
    unified: bool


def ctx_dims(n_ctx: int, n_seq: int, n_batch: int, n_ubatch: int, kv_unified: bool) -> CtxDims:
    """What a context is really created with: the context padded to 256 cells and split per stream."""
    b = min(n_ctx, n_batch)  # causal attention: a batch never exceeds the (unpadded) context
    ub = min(b, n_ubatch)
    c = pad(n_ctx, 256)
    if kv_unified:
        seq = c
    else:
        seq = pad(c // n_seq, 256)
        c = seq * n_seq
    return CtxDims(c, seq, 1 if kv_unified else n_seq, b, ub, n_seq, kv_unified)

"""``--parallel N``: do N requests at once fit, and if not, what would?

The engine serves N requests at once by opening the target's and the drafter's contexts at N x the
per-request context (``--ctx``), with a sequence per request in one unified cache
(:meth:`~local_eagle.vram.settings.MemoryConfig.with_parallel`). What grows with N is the KV caches, the
compute buffers (their attention spans the whole unified cache) and the logits buffer (a verify of
``draft_max`` + 1 rows per request); the weights do not. :func:`parallel_refusal` prices that against
the memory a caller has and, when it does not fit, names in one line the most requests that fit at
the requested context and the longest context that fits at the requested N.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from local_eagle.units import human_bytes
from local_eagle.vram.memory import n_offloadable
from local_eagle.vram.plan import GPUBudget, breakdown
from local_eagle.vram.settings import MemoryConfig
from local_eagle.vram.shapes import ModelShape
from local_eagle.vram.types import CPU, CUDA, Backend

FIXED = frozenset({"target_weights", "draft_weights", "mtp_weights", "overhead"})
"""The components that do not change with the requests or the context: the rest are "KV cache and buffers"."""

CTX_STEP = 256
"""Contexts the alternative search tries: multiples of llama.cpp's cell padding."""


def parallel_bytes(
    target: ModelShape,
    draft: ModelShape | None,
    settings: MemoryConfig,
    available: GPUBudget | int,
    backend: Backend | None = None,
) -> tuple[int, int]:
    """What ``settings`` need for their KV caches and buffers, and the room those have, in bytes.

    With a :class:`GPUBudget`: the GPU side of the plan at ``settings.n_gpu_layers`` (None or negative:
    every layer, the engine's default), and the budget's free VRAM less the weights on the GPU and the
    CUDA allowance. With a number of bytes (the memory a CPU-only machine has, or whatever the caller
    counts): the KV caches, compute and output buffers wherever they live, against that number (on
    the CPU backend llama.cpp's buffers exactly; with CUDA, the pinned host graph inputs besides).
    """
    n_max = n_offloadable(target)
    if isinstance(available, GPUBudget):
        ngl = settings.n_gpu_layers
        ngl = n_max if ngl is None or ngl < 0 else min(ngl, n_max)
        comps, _ = breakdown(target, draft, settings, ngl, available, backend or CUDA)
        fixed = sum(c.gpu for c in comps if c.key in FIXED)
        return sum(c.gpu for c in comps) - fixed, available.free - fixed
    backend = backend or CPU
    none = GPUBudget("memory", available, available, "manual", 0)
    comps, _ = breakdown(target, draft, settings, n_max, none, backend, CPU)
    # on a CPU build the graph inputs (a compute component's host side) live inside the compute buffer
    inputs = backend is CPU
    return sum(
        c.gpu + (0 if inputs and c.key.endswith("_compute") else c.host) for c in comps if c.key not in FIXED
    ), available


def parallel_refusal(
    target: ModelShape,
    draft: ModelShape | None,
    settings: MemoryConfig,
    available: GPUBudget | int,
    *,
    parallel: int | None = None,
    backend: Backend | None = None,
) -> str | None:
    """None when ``parallel`` requests of ``settings.n_ctx`` tokens each fit ``available``, else one line
    saying what they need, what is free, and what would fit.

    ``settings`` hold the per-request context (``n_ctx``, ``--ctx``) and the other knobs; ``parallel``
    (default ``settings.parallel``) replaces their sequences as the engine opens them
    (:meth:`MemoryConfig.with_parallel`). ``available`` is a :class:`GPUBudget` (VRAM: the weights on the GPU
    and the CUDA allowance come off its free memory first) or a number of bytes for the KV caches and
    buffers alone (see :func:`parallel_bytes`); ``backend`` prices the compute buffers (default CUDA for a
    budget, CPU for bytes). The line names the most requests that fit at ``n_ctx`` and the longest
    context (a multiple of 256) that fits at ``parallel``, each of which this function then accepts.
    Settings llama.cpp would refuse (``parallel`` above 256, a quantised V cache without flash attention)
    raise :class:`~local_eagle.vram.types.PlanError`.
    """
    n = settings.parallel if parallel is None else parallel
    ctx = settings.n_ctx

    def price(n_req: int, n_ctx: int) -> tuple[int, int]:
        return parallel_bytes(target, draft, replace(settings, n_ctx=n_ctx).with_parallel(n_req), available, backend)

    def fits(n_req: int, n_ctx: int) -> bool:
        need, room = price(n_req, n_ctx)
        return need <= room

    settings.with_parallel(n).validate()
    need, room = price(n, ctx)
    if need <= room:
        return None
    fewer = largest(1, n - 1, lambda k: fits(k, ctx))
    shorter = largest(1, (ctx - 1) // CTX_STEP, lambda k: fits(n, k * CTX_STEP))
    where = "of VRAM are free after the weights" if isinstance(available, GPUBudget) else "of memory are free"
    head = (
        f"--parallel {n} ({n} sequences x {ctx} tokens) needs {human_bytes(need)} of KV cache and buffers, "
        f"{human_bytes(max(room, 0))} {where}"
    )
    if fewer is not None and shorter is not None:
        return f"{head}: --parallel {fewer} fits at --ctx {ctx} (or --ctx {shorter * CTX_STEP} at {n})"
    if fewer is not None:
        return f"{head}: --parallel {fewer} fits at --ctx {ctx}"
    if shorter is not None:
        return f"{head}: --ctx {shorter * CTX_STEP} fits at --parallel {n}"
    return f"{head}: neither --parallel 1 at --ctx {ctx} nor --parallel {n} at --ctx {CTX_STEP} fits"


def largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest k in [lo, hi] with ok(k), ok being monotone (true up to some k, false above); None if none."""
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best

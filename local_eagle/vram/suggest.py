"""``fit --suggest``: the best configuration that fits when the requested one does not.

A search over contexts, offload, KV cache types and drafter settings, pricing each candidate
with ``make_plan``; compute buffers are memoised on the shapes, so the candidates cost little.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from local_eagle.vram.parallel import largest
from local_eagle.vram.plan import GPUBudget, Plan, make_plan
from local_eagle.vram.settings import MemoryConfig
from local_eagle.vram.shapes import ModelShape
from local_eagle.vram.types import CUDA, Backend

# contexts tried below the requested one, largest first
CTX_STEPS = (262144, 196608, 131072, 98304, 65536, 49152, 32768, 24576, 16384, 12288, 8192, 6144, 4096, 2048, 1024, 512)


@dataclass
class Suggestion:
    """The best configuration that fits, and what it gave up relative to the request."""

    requested: MemoryConfig
    plan: Plan | None
    traded: list[str]
    dropped_drafter: bool = False
    evaluated: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.plan is not None,
            "settings": None if self.plan is None else self.plan.to_dict()["settings"],
            "traded": list(self.traded),
            "dropped_drafter": self.dropped_drafter,
            "plan": None if self.plan is None else self.plan.to_dict(),
        }


_KV_RANK = {"f32": 0, "f16": 1, "bf16": 1, "q8_0": 2, "q5_1": 3, "q5_0": 3, "q4_1": 4, "iq4_nl": 4, "q4_0": 4}


def _kv_options(s: MemoryConfig) -> list[tuple[str, str]]:
    """The requested KV types, then q8_0 and q4_0 where they quantise more (V stays f16 without FA)."""
    opts = [(s.type_k, s.type_v)]
    for t in ("q8_0", "q4_0"):
        if _KV_RANK[t] > _KV_RANK[s.type_k]:
            opts.append((t, t if s.flash_attn else s.type_v))
    return opts


def _draft_options(s: MemoryConfig) -> list[dict[str, Any]]:
    """Drafter settings to give up, least costly first: smaller ubatches, then a q8_0 drafter cache."""
    opts: list[dict[str, Any]] = [{}]
    for ub in (256, 128, 64, 32):
        if ub < s.draft_ubatch:
            opts.append({"draft_ubatch": ub, "draft_batch": min(s.draft_batch, max(ub, 512))})
    if s.draft_type_k == "f16" and s.draft_type_v == "f16":
        q = {"draft_type_k": "q8_0", "draft_type_v": "q8_0" if s.flash_attn else "f16"}
        opts.append({**opts[-1], **q})
    return opts


def _describe(req: MemoryConfig, plan: Plan, dropped: bool, req_draft: bool) -> list[str]:
    """What ``plan`` gave up against the request, one phrase per setting, for people to read."""
    got = plan.settings
    out = []
    if got.parallel != req.parallel:
        out.append(f"parallel {req.parallel} -> {got.parallel} (fewer requests at once)")
    if got.n_ctx != req.n_ctx:
        out.append(f"context {req.n_ctx} -> {got.n_ctx}")
    n_max = plan.n_layers_max
    if plan.n_gpu_layers < n_max:
        was = "all" if req.n_gpu_layers is None or req.n_gpu_layers < 0 else str(req.n_gpu_layers)
        out.append(f"GPU layers {was} -> {plan.n_gpu_layers}/{n_max} (partial offload: slower)")
    if got.swa_full != req.swa_full:
        out.append("sliding-window layers' cache full-size -> window-sized (--no-swa-full)")
    if (got.type_k, got.type_v) != (req.type_k, req.type_v):
        out.append(f"KV cache {req.type_k}/{req.type_v} -> {got.type_k}/{got.type_v}")
    if dropped:
        out.append("drafter dropped: nothing fits with it")
    elif req_draft:
        if got.draft_ubatch != req.draft_ubatch:
            out.append(f"drafter ubatch {req.draft_ubatch} -> {got.draft_ubatch} (slower drafter prefill)")
        if (got.draft_type_k, got.draft_type_v) != (req.draft_type_k, req.draft_type_v):
            out.append(
                f"drafter KV cache {req.draft_type_k}/{req.draft_type_v} -> {got.draft_type_k}/{got.draft_type_v}"
            )
    return out


def suggest(
    target: ModelShape,
    draft: ModelShape | None,
    requested: MemoryConfig,
    budget: GPUBudget,
    max_ctx: int | None = None,
    backend: Backend = CUDA,
) -> Suggestion:
    """Search the settings for the best plan that fits, preferring, in this order: the largest context
    (up to ``max_ctx`` or the request), the most layers on the GPU, the least KV quantisation (a
    window-sized cache for sliding-window layers comes before quantising), and the requested
    drafter settings. A plan needs at least one target layer on the GPU.

    With ``requested.parallel`` N above 1 the context is each request's and the N requests are kept; only
    when nothing fits with N is it looked for with the most requests that fit, and then without the drafter.
    """
    requested.validate()
    top = max_ctx or requested.n_ctx
    ctxs = [top] + [c for c in CTX_STEPS if c < top]
    res = _search(target, draft, requested, budget, ctxs, backend)
    if res.plan is None and requested.parallel > 1:
        evaluated = res.evaluated
        found: dict[int, Suggestion] = {}

        def fits(n: int) -> bool:
            nonlocal evaluated
            found[n] = _search(target, draft, requested.with_parallel(n), budget, ctxs, backend)
            evaluated += found[n].evaluated
            return found[n].plan is not None

        best = largest(1, requested.parallel - 1, fits)  # memory grows with the requests
        if best is not None:
            res = found[best]
            res.requested, res.traded = requested, _describe(requested, res.plan, False, draft is not None)
        res.evaluated = evaluated
    if res.plan is None and draft is not None:
        alt = _search(target, None, requested, budget, ctxs, backend)
        alt.evaluated += res.evaluated
        if alt.plan is not None:
            alt.dropped_drafter = True
            alt.traded = _describe(requested, alt.plan, True, True)
        return alt
    return res


def _search(
    target: ModelShape,
    draft: ModelShape | None,
    req: MemoryConfig,
    budget: GPUBudget,
    ctxs: list[int],
    backend: Backend,
) -> Suggestion:
    """The best plan at the largest context of ``ctxs`` where any fits (see ``suggest`` for the order)."""
    n_eval = 0
    fixed_ngl = req.n_gpu_layers
    for ctx in ctxs:
        best: tuple[tuple[int, int, int], Plan] | None = None
        swa = [req.swa_full, False] if req.swa_full and any(target.is_swa) else [req.swa_full]
        kv_opts = [(tk, tv, sf) for tk, tv in _kv_options(req) for sf in swa]
        for ki, (tk, tv, sf) in enumerate(kv_opts):
            for di, dopt in enumerate(_draft_options(req) if draft is not None else [{}]):
                s = replace(req, n_ctx=ctx, type_k=tk, type_v=tv, swa_full=sf, **dopt)
                if fixed_ngl is not None:
                    s_plan = make_plan(target, draft, s, budget, backend)
                    n_eval += 1
                    ok = s_plan.fits
                else:
                    s_plan = make_plan(target, draft, replace(s, n_gpu_layers=None), budget, backend)
                    n_eval += 1
                    ok = s_plan.fits and s_plan.n_gpu_layers >= 1
                if not ok:
                    continue
                rank = (s_plan.n_gpu_layers, -ki, -di)
                if best is None or rank > best[0]:
                    best = (rank, s_plan)
        if best is not None:
            plan = best[1]
            return Suggestion(req, plan, _describe(req, plan, False, draft is not None), False, n_eval)
    return Suggestion(req, None, [], False, n_eval)

"""The plan: every buffer llama.cpp will allocate for one configuration, per side, against a budget.

Weights and KV cache come from ``memory``, compute buffers from the graph replay in ``graph``;
this module adds the host-side inputs and outputs, the CUDA allowance, and with ``-ngl auto``
the most target layers that fit (llama.cpp's ``--fit``). See ``local_eagle.vram`` for the
formulas as a whole.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from local_eagle.gguf.info import drafts_with
from local_eagle.units import MiB
from local_eagle.vram import block
from local_eagle.vram.graph import drafter_graph, encoder_graph, graph_bytes, graph_dims, mtp_graph, target_graph
from local_eagle.vram.memory import (
    MTP_KV_TYPE,
    attention_kv,
    kv_cache,
    layer_on_gpu,
    n_offloadable,
    recurrent_state,
    rs_snapshots,
    tensor_on_gpu,
    weights,
)
from local_eagle.vram.settings import CtxDims, MemoryConfig, ctx_dims
from local_eagle.vram.shapes import CHECKPOINT_ROLLBACK_ARCHS, TOKEN_EMBD_HOST, ModelShape, has_state
from local_eagle.vram.types import CPU, CUDA, Backend


@dataclass(frozen=True)
class GPUBudget:
    """The VRAM one plan may use. ``free`` is what is available to llama.cpp before it loads."""

    name: str
    total: int
    free: int
    source: str  # "preset", "detected" or "manual"
    overhead: int  # CUDA context, cuBLAS workspaces and the CUDA memory pool: outside llama.cpp's buffers


DEFAULT_OVERHEAD = 768 * MiB


@dataclass
class Component:
    """One line of the plan: a buffer (or allowance) and its bytes on the GPU and on the host."""

    key: str
    label: str
    gpu: int
    host: int


@dataclass
class Plan:
    """One configuration's memory, per component, and whether it fits the budget."""

    target: ModelShape
    draft: ModelShape | None
    settings: MemoryConfig
    budget: GPUBudget
    n_gpu_layers: int
    components: list[Component]
    notes: list[str]

    @property
    def n_layers_max(self) -> int:
        return n_offloadable(self.target)

    @property
    def full_offload(self) -> bool:
        return self.n_gpu_layers >= self.n_layers_max

    @property
    def total_gpu(self) -> int:
        return sum(c.gpu for c in self.components)

    @property
    def total_host(self) -> int:
        return sum(c.host for c in self.components)

    @property
    def free(self) -> int:
        return self.budget.free - self.total_gpu

    @property
    def fits(self) -> bool:
        return self.free >= 0

    def component(self, key: str) -> Component:
        return next(c for c in self.components if c.key == key)

    def to_dict(self) -> dict[str, Any]:
        s = self.settings.to_dict()
        s["n_gpu_layers"] = self.n_gpu_layers
        return {
            "target": {"path": str(self.target.path), "arch": self.target.arch, "name": self.target.name},
            "draft": None
            if self.draft is None
            else {"path": str(self.draft.path), "arch": self.draft.arch, "name": self.draft.name},
            "gpu": asdict(self.budget),
            "settings": s,
            # the context each request may use, the requests at once, and the context llama.cpp is asked for
            "context": {
                "per_request": self.settings.n_ctx,
                "parallel": self.settings.parallel,
                "n_ctx": self.settings.cells,
            },
            "mtp": prices_mtp(self.target, self.draft, self.settings),  # the target's own MTP head is priced
            "n_gpu_layers": self.n_gpu_layers,
            "n_layers_max": self.n_layers_max,
            "full_offload": self.full_offload,
            "components": {c.key: {"gpu": c.gpu, "host": c.host} for c in self.components},
            "total_gpu": self.total_gpu,
            "total_host": self.total_host,
            "free": self.free,
            "fits": self.fits,
            "notes": list(self.notes),
        }


@dataclass
class _Compute:
    """Compute buffer bytes of the two contexts of a pair."""

    target: int
    draft: int


def target_compute(target: ModelShape, s: MemoryConfig, backend: Backend = CUDA) -> int:
    """The target context's compute buffer (memoised on the shape: the suggest search asks often)."""
    key = ("t", s.cells, s.n_seq, s.n_batch, s.n_ubatch, s.type_k, s.type_v, s.flash_attn, s.swa_full, s.kv_unified)
    key += (backend,)
    hit = target.cache.get(key)
    if hit is None:
        d = ctx_dims(s.cells, s.n_seq, s.n_batch, s.n_ubatch, s.kv_unified)
        g, fa = target_graph(target, graph_dims(target, d, s, s.type_k, s.type_v, s.n_ubatch))
        hit = target.cache[key] = graph_bytes(g, backend, fa)
    return hit


def block_dims(draft: ModelShape) -> block.BlockDims:
    """A block drafter's sizes for ``vram.block``'s formulas (its first layer's heads: the stack is uniform)."""
    return block.BlockDims(
        n_layer=draft.n_layer,
        n_embd=draft.n_embd,
        n_head=draft.n_head[0],
        n_head_kv=draft.n_head_kv[0],
        head_k=draft.head_k[0],
        head_v=draft.head_v[0],
        n_ff=draft.n_ff[0],
        n_vocab=draft.n_vocab,
        block_size=draft.block_size or 1,
        n_target_layers=len(draft.target_layers or ()),
    )


def drafter_dims(draft: ModelShape, s: MemoryConfig) -> CtxDims:
    """The drafter context's sizes: the target's context, plus a block drafter's block rows (``block.block_cells``)."""
    cells = block.block_cells(s.cells, draft.block_size or 0) if draft.is_block_drafter else s.cells
    return ctx_dims(cells, s.drafter_seqs, s.draft_batch, s.draft_ubatch, s.kv_unified)


def draft_compute(draft: ModelShape, s: MemoryConfig, backend: Backend = CUDA, encoder: bool = True) -> int:
    """The drafter context's compute buffer: the larger of its decoder and encoder graphs.

    llama.cpp reserves the decoder graph when the context is created; the first encode of a
    ubatch of target features grows the buffer if the encoder graph needs more. A block drafter's is
    ``block.block_compute_bytes``: its block graph or its injection graph, whichever is larger.
    """
    if draft.is_block_drafter:
        dd = drafter_dims(draft, s)
        rows = min(dd.n_ctx, s.draft_ubatch, dd.n_batch)
        nbytes = block.block_compute_bytes(block_dims(draft), dd.n_ctx_seq, rows, s.flash_attn)
        return backend.tensor_bytes(nbytes, 0, 0)
    key = ("d", s.cells, s.drafter_seqs, s.draft_batch, s.draft_ubatch, s.draft_type_k, s.draft_type_v, s.flash_attn)
    key += (s.kv_unified, backend, encoder)
    hit = draft.cache.get(key)
    if hit is None:
        dd = ctx_dims(s.cells, s.drafter_seqs, s.draft_batch, s.draft_ubatch, s.kv_unified)
        gdd = graph_dims(draft, dd, s, s.draft_type_k, s.draft_type_v, s.draft_ubatch)
        gg, fa = drafter_graph(draft, gdd, "norm_before_residual" in draft.flags)
        hit = graph_bytes(gg, backend, fa)
        if encoder:
            enc = encoder_graph(draft, gdd.n_tokens, "norm_before_fc" in draft.flags)
            hit = max(hit, graph_bytes(enc, backend))
        draft.cache[key] = hit
    return hit


def mtp_compute(target: ModelShape, s: MemoryConfig, backend: Backend = CUDA) -> int:
    """The MTP context's compute buffer: its NextN graph over a ubatch of the target's context options.

    ``runtime.mtp.MtpDrafter`` opens it with the target's context and batch, the drafter's sequences (the target's,
    or with trees a drafter's branch sequences, ``MemoryConfig.draft_n_seq``) and an f16 cache.
    """
    key = ("m", s.cells, s.drafter_seqs, s.n_batch, s.n_ubatch, s.flash_attn, s.kv_unified, backend)
    hit = target.cache.get(key)
    if hit is None:
        d = ctx_dims(s.cells, s.drafter_seqs, s.n_batch, s.n_ubatch, s.kv_unified)
        g, fa = mtp_graph(target, graph_dims(target, d, s, MTP_KV_TYPE, MTP_KV_TYPE, s.n_ubatch))
        hit = target.cache[key] = graph_bytes(g, backend, fa)
    return hit


MTP_GRAPHS = frozenset({"glm4moe", "qwen35", "qwen35moe"})
"""Families whose NextN graph ``graph.mtp_graph`` follows (the rest are estimated from glm4moe's)."""


def prices_mtp(target: ModelShape, draft: ModelShape | None, s: MemoryConfig) -> bool:
    """Whether the plan has an MTP context: asked for (``MemoryConfig.mtp``), no drafter named, a NextN block there."""
    return s.mtp and draft is None and target.n_nextn > 0


def compute_buffers(target: ModelShape, draft: ModelShape | None, s: MemoryConfig, backend: Backend = CUDA) -> _Compute:
    """Compute buffer bytes of the target context and of the drafter context (0 without a drafter)."""
    return _Compute(target_compute(target, s, backend), 0 if draft is None else draft_compute(draft, s, backend))


def _largest_host_matrix(shape: ModelShape, ngl: int) -> int:
    """The biggest weight a partially offloaded model leaves on the host for the GPU to borrow.

    With ``op_offload`` (llama.cpp's default) a large-batch matrix multiply whose weight stays on
    the host runs on the GPU, the weight copied into the GPU compute buffer for that split.
    """
    best = 0
    for t in shape.tensors:
        if len(t.ne) >= 2 and t.ne[1] > 1 and t.name not in TOKEN_EMBD_HOST and not tensor_on_gpu(shape, t, ngl):
            best = max(best, CUDA.tensor_bytes(t.nbytes, t.ne[0], t.type))
    return best


def breakdown(
    target: ModelShape,
    draft: ModelShape | None,
    s: MemoryConfig,
    ngl: int,
    budget: GPUBudget,
    backend: Backend = CUDA,
    host: Backend = CPU,
) -> tuple[list[Component], list[str]]:
    """Every component's GPU and host bytes for ``ngl`` target layers on the GPU (drafter fully offloaded)."""
    notes: list[str] = []
    d = ctx_dims(s.cells, s.n_seq, s.n_batch, s.n_ubatch, s.kv_unified)
    n_max = n_offloadable(target)
    ngl = max(0, min(ngl, n_max))
    tw = weights(target, ngl, backend, host)
    tkv = attention_kv(target, d, s, ngl, False, backend, host)
    comp = compute_buffers(target, draft, s, backend)
    n_tok = min(d.n_ctx, s.n_ubatch, d.n_batch)
    inputs_host = 2 * target.n_embd * n_tok * 4 + _mask_bytes(target, d, s, n_tok)
    if ngl >= n_max:
        tc = Component("target_compute", "target compute", comp.target, inputs_host)
    elif ngl == 0:
        borrow = _largest_host_matrix(target, 0) if n_tok >= 32 else 0
        tc = Component("target_compute", "target compute", borrow, comp.target)
        if borrow:
            notes.append("no target layer on the GPU: llama.cpp still runs large-batch matrix multiplies there")
    else:
        borrow = _largest_host_matrix(target, ngl) if n_tok >= 32 else 0
        tc = Component("target_compute", "target compute", comp.target + borrow, comp.target)
        notes.append(
            f"partial offload ({ngl}/{n_max} layers): each side's compute buffer is estimated from the "
            f"whole graph, plus the largest host weight the GPU borrows for large batches"
        )
    # logits rows: llama.cpp keeps at least one per sequence and grows the buffer to the largest decode's
    # outputs: a verify of draft_max + 1 rows for each of the parallel requests (at most a batch per decode)
    n_out = max(s.n_seq, min(s.parallel * (s.draft_max + 1), d.n_batch))
    mtp = prices_mtp(target, draft, s)
    # staged features per batch row: EAGLE's three captured layers, a block drafter's own count of them
    # (block.captured_bytes), or the state an MTP head reads (h_nextn)
    n_capture = 3 if draft is not None else 1 if mtp else 0
    if draft is not None and draft.is_block_drafter:
        n_capture = len(draft.target_layers or ())
    out_target = target.n_vocab * n_out * 4 + block.captured_bytes(n_capture, target.n_embd, d.n_batch)
    comps = [
        Component("target_weights", "target weights", tw.gpu, tw.host),
        Component("target_kv", "target KV cache", tkv.gpu, tkv.host),
    ]
    if has_state(target):  # a recurrent or hybrid target: its recurrent layers' state, apart from attention's KV
        st = recurrent_state(target, s, ngl, backend, host)
        comps.append(Component("target_state", "target recurrent state", st.gpu, st.host))
    comps.append(tc)
    if draft is not None:
        dn = n_offloadable(draft)
        dw = weights(draft, dn, backend, host)
        dd = drafter_dims(draft, s)
        dkv = kv_cache(draft, dd, s, dn, True, backend, host)
        n_dtok = min(dd.n_ctx, s.draft_ubatch, dd.n_batch)
        out_draft = (draft.n_vocab + draft.n_embd) * dd.n_batch * 4
        inputs_draft = 2 * draft.n_embd * n_dtok * 4 + _mask_bytes(draft, dd, s, n_dtok)
        if draft.is_block_drafter:  # a block's logits per request, and the feature rows and block mask as inputs
            out_draft = draft.n_vocab * (draft.block_size or 1) * s.parallel * 4
            inputs_draft = block.block_inputs_bytes(block_dims(draft), dd.n_ctx_seq, n_dtok, s.flash_attn)
        comps += [
            Component("draft_weights", "draft weights", dw.gpu, dw.host),
            Component("draft_kv", "draft KV cache", dkv.gpu, dkv.host),
            Component("draft_compute", "draft compute", comp.draft, inputs_draft),
        ]
    elif mtp:
        # the NextN block loads with the model (load_mtp) and drafts in a second context on it: its own KV cache
        # of the NextN layer(s) at the target's context, f16, with a drafter's sequences, and its own compute buffer
        on_gpu = layer_on_gpu(target, target.n_layer - 1, ngl)
        mw = weights(target, ngl, backend, host, nextn=True)
        md = ctx_dims(s.cells, s.drafter_seqs, s.n_batch, s.n_ubatch, s.kv_unified)
        mkv = attention_kv(target, md, s, ngl, False, backend, host, mtp=True)
        mc = mtp_compute(target, s, backend if on_gpu else host)
        inputs_mtp = 2 * target.n_embd * n_tok * 4 + _mask_bytes(target, d, s, n_tok)
        comps += [
            Component("mtp_weights", "MTP head weights", mw.gpu, mw.host),
            Component("mtp_kv", "MTP KV cache", mkv.gpu, mkv.host),
            Component("mtp_compute", "MTP compute", mc if on_gpu else 0, inputs_mtp if on_gpu else mc),
        ]
        # its logits and its own staged state for every row of a batch (all outputs where one is read)
        out_draft = (target.n_vocab + target.n_embd) * d.n_batch * 4
    else:
        out_draft = 0
    comps.append(Component("outputs", "output buffers (host)", 0, out_target + out_draft))
    # the CUDA backend is initialised (and used for large batches) even with no layer offloaded
    comps.append(Component("overhead", "CUDA context + pool", budget.overhead, 0))
    return comps, notes


def _mask_bytes(shape: ModelShape, d: CtxDims, s: MemoryConfig, n_tok: int) -> int:
    """The KQ mask input(s) in the host input buffer: one per cache, f16 with flash attention."""
    per = 2 if s.flash_attn else 4
    n = d.n_ctx_seq * n_tok * per
    return 2 * n if any(shape.is_swa) else n


def make_plan(
    target: ModelShape,
    draft: ModelShape | None,
    s: MemoryConfig,
    budget: GPUBudget,
    backend: Backend = CUDA,
) -> Plan:
    """The plan for ``s``; with ``n_gpu_layers`` None, the most target layers that fit (llama.cpp's --fit)."""
    s.validate()
    n_max = n_offloadable(target)
    if s.n_gpu_layers is not None:
        ngl = n_max if s.n_gpu_layers < 0 else min(s.n_gpu_layers, n_max)
        comps, notes = breakdown(target, draft, s, ngl, budget, backend)
    else:
        ngl, comps, notes = _auto_layers(target, draft, s, budget, backend)
    notes = list(target.notes) + ([f"drafter: {n}" for n in draft.notes] if draft else []) + notes
    if draft is not None and draft.is_block_drafter:
        notes.append(
            f"block drafter ({draft.block_family or 'dflash'}, block of {draft.block_size}, "
            f"{len(draft.target_layers or ())} target layers): its KV cache holds the context plus a block, its "
            "compute is estimated (vram.block)"
            + ("" if drafts_with(draft.block_family) else "; local-eagle does not draft with this family yet")
        )
    if prices_mtp(target, draft, s) and target.arch not in MTP_GRAPHS:
        notes.append(f"MTP compute: the NextN graph of '{target.arch}' is estimated from glm4moe's")
    n_rs = rs_snapshots(target, s)
    if n_rs:
        notes.append(
            f"recurrent state: {1 + n_rs} copies per sequence (n_rs_seq={n_rs}, the draft bound): llama.cpp keeps a "
            "snapshot per draft so that rejected drafts roll back"
        )
    elif prices_mtp(target, draft, s) and has_state(target) and target.arch in CHECKPOINT_ROLLBACK_ARCHS:
        notes.append(
            "recurrent state: no snapshots for this family; rejected drafts roll back by a checkpoint, one more copy "
            "of the state per round in host memory, and a replay of the kept rows"
        )
    return Plan(target, draft, s, budget, ngl, comps, notes)


def _auto_layers(
    target: ModelShape, draft: ModelShape | None, s: MemoryConfig, budget: GPUBudget, backend: Backend
) -> tuple[int, list[Component], list[str]]:
    """The most target layers whose plan fits ``budget`` (0 when none does), with that plan's components."""
    n_max = n_offloadable(target)
    lo, hi = 0, n_max
    comps, notes = breakdown(target, draft, s, n_max, budget, backend)
    if sum(c.gpu for c in comps) <= budget.free:
        return n_max, comps, notes
    best: tuple[int, list[Component], list[str]] | None = None
    while lo <= hi:  # GPU bytes grow with the layer count: binary search the largest that fits
        mid = (lo + hi) // 2
        c, n = breakdown(target, draft, s, mid, budget, backend)
        if sum(x.gpu for x in c) <= budget.free:
            best = (mid, c, n)
            lo = mid + 1
        else:
            hi = mid - 1
    if best is None:
        c, n = breakdown(target, draft, s, 0, budget, backend)
        return 0, c, n
    return best

"""Compute buffers: llama.cpp's reserved graph, replayed through ggml-alloc.

llama.cpp sizes a context's compute buffer by building the worst-case graph (n_ubatch tokens,
every one an output) and running ggml-alloc over it (ggml_gallocr: leafs first, then each node
in graph order, an element-wise op taking over a dying parent's memory, best-fit free blocks).
The peak offset it reaches is the buffer size. The builders below create the same tensors in
the same order (ggml_build_forward_expand is a depth-first walk over sources) for the graphs
llama.cpp assembles from its llm_graph_context helpers, and the allocator is replayed, so the
result is the buffer size itself rather than a rule of thumb. Weights and KV-cache views live
in other buffers and are left out; a store into the KV cache only consumes its sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from local_eagle.gguf import pad
from local_eagle.vram.settings import CtxDims, MemoryConfig
from local_eagle.vram.shapes import ModelShape
from local_eagle.vram.types import KV_TYPES, Backend, KVType

_F32, _F16, _I32, _I64 = "f32", "f16", "i32", "i64"
_ELSIZE = {_F32: 4, _F16: 2, _I32: 4, _I64: 8}


@dataclass
class _GT:
    """One tensor as ggml-alloc sees it: its size, layout (for in-place reuse), sources and role."""

    nbytes: int
    layout: tuple[Any, ...]
    srcs: tuple[int, ...] = ()
    view_of: int | None = None
    inplace: bool = False
    output: bool = False
    external: bool = False
    leaf: bool = False


class _Graph:
    """A ggml graph reduced to what ggml-alloc looks at: sizes, sources, views, in-place ops."""

    def __init__(self) -> None:
        self.t: list[_GT] = []
        self.leafs: list[int] = []
        self.nodes: list[int] = []
        self._seen: set[int] = set()

    def _add(self, g: _GT) -> int:
        self.t.append(g)
        return len(self.t) - 1

    def leaf(self, dtype: str, *ne: int) -> int:
        return self._add(_GT(_ELSIZE[dtype] * math.prod(ne), (dtype, ne, True), leaf=True))

    def op(self, dtype: str, ne: tuple[int, ...], *srcs: int | None, inplace: bool = False) -> int:
        return self._add(
            _GT(
                _ELSIZE[dtype] * math.prod(ne),
                (dtype, ne, True),
                tuple(x for x in srcs if x is not None),
                None,
                inplace,
            )
        )

    def like(self, src: int, *more: int | None, inplace: bool = True) -> int:
        """An element-wise op whose result has ``src``'s shape (norm, mul, add, rope, scale, ...)."""
        dtype, ne = self.t[src].layout[0], self.t[src].layout[1]
        return self.op(dtype, ne, src, *more, inplace=inplace)

    def view(self, src: int, *ne: int, permuted: bool = False, also: tuple[int, ...] = ()) -> int:
        """A view (reshape, view, permute) of ``src``; ``also`` adds sources (SET_ROWS into a tensor)."""
        root = self.t[src].view_of if self.t[src].view_of is not None else src
        dtype = self.t[src].layout[0]
        layout = (dtype, ne, ("permuted", len(self.t)) if permuted else True)
        return self._add(_GT(self.t[src].nbytes, layout, (*also, src) if also else (src,), root))

    def store(self, *srcs: int | None) -> int:
        """SET_ROWS into the KV cache: a view of a buffer allocated elsewhere."""
        return self._add(_GT(0, ("ext", len(self.t)), tuple(x for x in srcs if x is not None), external=True))

    def output(self, i: int) -> int:
        self.t[i].output = True
        return i

    def ne(self, i: int) -> tuple[int, ...]:
        return self.t[i].layout[1]

    def expand(self, i: int) -> None:
        """ggml_build_forward_expand: depth-first over sources, leafs and nodes in visit order."""
        stack: list[tuple[int, int]] = [(i, 0)]
        while stack:
            j, k = stack.pop()
            if k == 0:
                if j in self._seen:
                    continue
                self._seen.add(j)
            srcs = self.t[j].srcs
            if k < len(srcs):
                stack.append((j, k + 1))
                stack.append((srcs[k], 0))
                continue
            (self.leafs if self.t[j].leaf else self.nodes).append(j)


class _DynAlloc:
    """ggml_dyn_tallocr: best fit among the free blocks before the last, else the last; frees merge."""

    def __init__(self, alignment: int) -> None:
        self.align = alignment
        self.blocks: list[list[int]] = [[0, 1 << 62]]
        self.peak = 0

    def alloc(self, size: int) -> int:
        size = pad(size, self.align)
        best, best_size = len(self.blocks) - 1, None
        for i, (_, bsize) in enumerate(self.blocks[:-1]):
            if bsize >= size and (best_size is None or bsize <= best_size):
                best, best_size = i, bsize
        b = self.blocks[best]
        off = b[0]
        b[0] += size
        b[1] -= size
        if b[1] == 0:
            self.blocks.pop(best)
        self.peak = max(self.peak, off + size)
        return off

    def free(self, off: int, size: int) -> None:
        size = pad(size, self.align)
        bl = self.blocks
        for i, b in enumerate(bl):
            if b[0] + b[1] == off:
                b[1] += size
                if i < len(bl) - 1 and b[0] + b[1] == bl[i + 1][0]:
                    b[1] += bl[i + 1][1]
                    bl.pop(i + 1)
                return
            if off + size == b[0]:
                b[0] = off
                b[1] += size
                if i > 0 and bl[i - 1][0] + bl[i - 1][1] == b[0]:
                    bl[i - 1][1] += b[1]
                    bl.pop(i)
                return
        j = 0
        while j < len(bl) and bl[j][0] < off:
            j += 1
        bl.insert(j, [off, size])


def replay_allocator(g: _Graph, alignment: int, alloc_size: dict[int, int] | None = None) -> int:
    """ggml_gallocr_alloc_graph_impl over ``g``: the size of the buffer it needs."""
    t = g.t
    n = len(t)
    n_children, n_views = [0] * n, [0] * n
    allocated, offset, size_of = [False] * n, [0] * n, [0] * n
    d = _DynAlloc(alignment)
    sizes = alloc_size or {}

    def allocate(i: int) -> None:
        x = t[i]
        if allocated[i] or x.view_of is not None or x.external:
            return
        allocated[i] = True
        if x.inplace:
            # only a parent this allocator owns, not an output, same layout, last consumer
            for p in x.srcs:
                px = t[p]
                if not allocated[p] or px.output or px.layout != x.layout:
                    continue
                if n_children[p] == 1 and n_views[p] == 0:
                    offset[i], size_of[i] = offset[p], size_of[p]
                    allocated[p] = False
                    return
        size_of[i] = sizes.get(i, x.nbytes)
        offset[i] = d.alloc(size_of[i])

    def free(i: int) -> None:
        if t[i].output:
            return
        d.free(offset[i], size_of[i])
        allocated[i] = False

    for i in g.leafs:
        allocate(i)
    for i in g.nodes:
        if t[i].view_of is not None:
            n_views[t[i].view_of] += 1
        for p in t[i].srcs:
            n_children[p] += 1
    for i in g.nodes:
        allocate(i)
        for p in t[i].srcs:
            n_children[p] -= 1
            if n_children[p] == 0 and n_views[p] == 0:
                r = t[p].view_of
                if r is not None:
                    n_views[r] -= 1
                    if n_views[r] == 0 and n_children[r] == 0 and allocated[r]:
                        free(r)
                elif allocated[p]:
                    free(p)
    return d.peak


@dataclass(frozen=True)
class GraphDims:
    """The sizes a reserved graph is built with (``llama_context::sched_reserve``)."""

    n_tokens: int  # min(n_ctx, n_ubatch)
    n_outputs: int
    n_kv: int  # KV cells per stream the non-SWA layers attend to
    n_kv_swa: int
    n_stream: int
    flash_attn: bool
    k_rot: int  # side of the Hadamard rotation applied for a quantised K cache (0: none)
    v_rot: int
    v_trans_width: int  # V row width stored transposed without flash attention (n_embd_v_gqa_max)
    k_quantized: bool
    v_quantized: bool


def _k_rot(head_k: int, t: KVType) -> int:
    """llama_kv_cache's attn_rot_k: the largest power-of-two block (>= 64) dividing the K head size."""
    if not t.quantized or head_k <= 0 or head_k % 64:
        return 0
    n = 64
    while head_k % (n * 2) == 0:
        n *= 2
    return n


def graph_dims(shape: ModelShape, d: CtxDims, s: MemoryConfig, type_k: str, type_v: str, n_ubatch: int) -> GraphDims:
    """The sizes one context's reserved graph is built with, from its context sizes and cache types."""
    n_outputs = min(d.n_ctx, n_ubatch, d.n_batch)
    n_tokens = -(-n_outputs // d.n_seq) * d.n_seq  # graph_reserve rounds up to a multiple of n_seq
    n_kv_swa = d.n_ctx_seq
    if any(shape.is_swa) and not s.swa_full:
        n_kv_swa = pad(min(d.n_ctx_seq, shape.n_swa * (d.n_seq if d.unified else 1) + d.n_ubatch), 256)
    tk, tv = KV_TYPES[type_k], KV_TYPES[type_v]
    attn = [il for il in range(shape.n_layer) if not shape.recurrent[il] and shape.n_head_kv[il]]
    hk = {shape.head_k[il] for il in attn}
    hv = {shape.head_v[il] for il in attn}
    v_w = max((shape.head_v[il] * shape.n_head_kv[il] for il in attn), default=0)
    return GraphDims(
        n_tokens=n_tokens,
        n_outputs=n_outputs,
        n_kv=d.n_ctx_seq,
        n_kv_swa=n_kv_swa,
        n_stream=d.n_stream,
        flash_attn=s.flash_attn,
        k_rot=_k_rot(hk.pop(), tk) if len(hk) == 1 else 0,
        v_rot=64 if len(hv) == 1 and tv.quantized and hv.pop() % 64 == 0 else 0,
        v_trans_width=v_w,
        k_quantized=tk.quantized,
        v_quantized=tv.quantized,
    )


@dataclass
class _KVInputs:
    """One cache's graph inputs (build_attn_inp_kv): rotations, row indices, KQ mask."""

    n_kv: int
    k_rot: int | None
    v_rot: int | None
    k_idxs: int
    v_idxs: int
    mask: int


def _kv_inputs(g: _Graph, gd: GraphDims, n_kv: int) -> _KVInputs:
    """The input leafs of one cache, created once per graph and shared by every layer that reads it."""
    T = gd.n_tokens
    return _KVInputs(
        n_kv=n_kv,
        k_rot=g.leaf(_F32, gd.k_rot, gd.k_rot) if gd.k_rot else None,
        v_rot=g.leaf(_F32, gd.v_rot, gd.v_rot) if gd.v_rot else None,
        k_idxs=g.leaf(_I64, T),
        v_idxs=g.leaf(_I64, T if gd.flash_attn else T * gd.v_trans_width),
        mask=g.leaf(_F16 if gd.flash_attn else _F32, n_kv, T),
    )


def _hadamard(g: _Graph, x: int, rot: int | None, n: int) -> int:
    """llama_mul_mat_hadamard: reshape to [n, -1], multiply by the rotation, reshape back."""
    if rot is None:
        return x
    ne = g.ne(x)
    total = math.prod(ne)
    r = g.view(x, n, total // n)
    m = g.op(_F32, (n, total // n), rot, r)
    return g.view(m, *ne)


@dataclass(frozen=True)
class _Style:
    """How one architecture's graph differs from llama's."""

    qkv_bias: bool = False
    qk_norm: bool = False
    gemma: bool = False  # scaled embeddings, Q scale after RoPE, post-attention/FFN norms, q-k-v order


_STYLES = {
    "qwen2": _Style(qkv_bias=True),
    "qwen3": _Style(qk_norm=True),
    "gemma3": _Style(qk_norm=True, gemma=True),
}


def _attention(
    g: _Graph,
    gd: GraphDims,
    x: int,
    pos: int,
    kv: _KVInputs,
    hq: int,
    hkv: int,
    dk: int,
    dv: int,
    style: _Style,
    fa_extra: dict[int, tuple[int, int]],
    iswa: bool = False,
    gated: bool = False,
) -> int:
    """build_qkv + build_attn (KV cache) + build_attn_mha, up to the attention output before wo.

    The sliding-window variant of build_attn expands Q, K, V in that order, the plain one Q, V, K. ``gated``: Qwen3.5's
    gated attention, the Q projection twice as wide (queries and their gates interleaved per head), the output
    times sigmoid(gate) (``ggml_cont_2d`` of the gate view, reached only after the attention).
    """
    T = gd.n_tokens

    def project(n_out: int, d: int, h: int, norm: bool, rope: bool) -> int:
        y = g.op(_F32, (n_out, T), x)
        if style.qkv_bias:
            y = g.like(y)
        y = g.view(y, d, h, T)
        if norm:
            y = g.like(g.like(y))
        if rope:
            y = g.like(y, pos)
        return y

    q_full = None
    if gated:
        q_full = g.op(_F32, (2 * hq * dk, T), x)
        q = g.view(q_full, dk, hq, T)
        if style.qk_norm:
            q = g.like(g.like(q))
        q = g.like(q, pos)
    else:
        q = project(hq * dk, dk, hq, style.qk_norm, True)
    if style.gemma:
        q = g.like(q)
    k = project(hkv * dk, dk, hkv, style.qk_norm, True)
    v = project(hkv * dv, dv, hkv, False, False)
    q = _hadamard(g, q, kv.k_rot, gd.k_rot)
    k = _hadamard(g, k, kv.k_rot, gd.k_rot)
    v = _hadamard(g, v, kv.v_rot, 64)
    for t in (q, k, v) if iswa else (q, v, k):
        g.expand(t)
    g.expand(g.store(g.view(k, hkv * dk, T), kv.k_idxs))
    if gd.flash_attn:
        g.expand(g.store(g.view(v, hkv * dv, T), kv.v_idxs))
    else:
        g.expand(g.store(g.view(g.view(v, hkv * dv, T), 1, hkv * dv * T), kv.v_idxs))
    qp = g.view(g.view(q, dk, hq, T), dk, T, hq, permuted=True)
    if gd.flash_attn:
        fa = g.op(_F32, (dv, hq, T), qp, kv.mask)
        n_k = dk * hkv * kv.n_kv * gd.n_stream
        fa_extra[fa] = (n_k * 2 if gd.k_quantized else 0, dv * hkv * kv.n_kv * gd.n_stream * 2 if gd.v_quantized else 0)
        out = g.view(fa, dv * hq, T)
    else:
        kq = g.op(_F32, (kv.n_kv, T, hq), qp)
        sm = g.like(kq, kv.mask)
        kqv = g.op(_F32, (dv, T, hq), sm)
        out = g.op(_F32, (dv * hq, T), g.view(kqv, dv, hq, T, permuted=True))
    g.expand(out)
    out = _hadamard(g, out, kv.v_rot, 64)
    if q_full is not None:
        gate = g.op(_F32, (hq * dk, T), g.view(q_full, dk, hq, T))
        out = g.like(out, g.like(gate))
    return out


def _ffn(g: _Graph, x: int, n_ff: int) -> int:
    """build_ffn with a gate (SwiGLU/GeGLU): gate, up, fused GLU, down."""
    ne = g.ne(x)
    gate = g.op(_F32, (n_ff, ne[1]), x)
    up = g.op(_F32, (n_ff, ne[1]), x)
    return g.op(_F32, ne, g.op(_F32, (n_ff, ne[1]), gate, up))


def _ssm_estimate(g: _Graph, x: int, shape: ModelShape, T: int, n_seq: int) -> int:
    """A Mamba-style recurrent layer (in-projection, convolution, selective scan, gate, out-projection).

    Not a replay of a specific llama.cpp graph: recurrent architectures are estimated.
    """
    E = shape.n_embd
    di, ds, dt, dc = shape.ssm_dims
    di, ds, dt, dc = di or 2 * E, ds or 16, dt or max(1, E // 16), dc or 4
    xn = g.like(g.like(x))
    xz = g.op(_F32, (2 * di, T), xn)
    conv_in = g.op(_F32, (dc - 1 + T, di), g.view(g.view(xz, di, T), di, T, permuted=True))
    cv = g.like(g.like(g.op(_F32, (di, T), conv_in)))
    xdb = g.op(_F32, (dt + 2 * ds, T), cv)
    dtv = g.like(g.op(_F32, (di, T), g.op(_F32, (dt, T), g.view(xdb, dt, T, permuted=True))))
    scan = g.op(_F32, (di * T + ds * di * n_seq,), cv, dtv, g.view(xdb, ds, T, permuted=True))
    z = g.op(_F32, (di, T), g.view(xz, di, T, permuted=True))
    y = g.like(g.view(scan, di, T), g.like(cv))
    out = g.op(_F32, (E, T), g.op(_F32, (di, T), z, y))
    return g.like(out, x)


def target_graph(shape: ModelShape, gd: GraphDims) -> tuple[_Graph, dict[int, tuple[int, int]]]:
    """The decoder graph llama.cpp reserves for a llama-family / gemma3 target (over the trunk's blocks; layers
    with routed experts get the MoE estimate, matching glm4moe's buffer on the tiny models)."""
    style = _STYLES.get(shape.arch, _Style())
    g = _Graph()
    T, n_out, E = gd.n_tokens, gd.n_outputs, shape.n_embd
    fa_extra: dict[int, tuple[int, int]] = {}
    tokens = g.leaf(_I32, T)
    embd = g.op(_F32, (E, T), tokens)
    g.expand(embd)
    g.expand(g.leaf(_F32, E, T))  # the vector-embedding input left unselected (ggml_build_forward_select)
    x = g.like(embd) if style.gemma else embd
    pos = g.leaf(_I32, T)
    base = _kv_inputs(g, gd, gd.n_kv)
    swa = _kv_inputs(g, gd, gd.n_kv_swa) if any(shape.is_swa) else base
    out_ids = g.leaf(_I32, n_out)
    n_layer = shape.n_trunk  # NextN blocks run in the MTP context's graph, not the target's
    last = max((il for il in range(n_layer) if not shape.recurrent[il]), default=n_layer - 1)
    for il in range(n_layer):
        if shape.recurrent[il] or shape.n_head_kv[il] == 0:
            if shape.recurrent[il]:
                x = _ssm_estimate(g, x, shape, T, gd.n_stream)
            continue
        a = g.like(g.like(x))
        kv = swa if shape.is_swa[il] else base
        o = _attention(
            g,
            gd,
            a,
            pos,
            kv,
            shape.n_head[il],
            shape.n_head_kv[il],
            shape.head_k[il],
            shape.head_v[il],
            style,
            fa_extra,
            iswa=any(shape.is_swa),
        )
        o = g.op(_F32, (E, T), o)
        if il == last:
            o = g.op(_F32, (E, n_out), o, out_ids)
            x = g.op(_F32, (E, n_out), x, out_ids)
        if style.gemma:
            sa = g.like(g.like(g.like(o)), x)
            f = _ffn(g, g.like(g.like(sa)), shape.n_ff[il])
            x = g.like(g.like(g.like(f)), sa)
        else:
            fi = g.like(o, x)
            fn = g.like(g.like(fi))
            if shape.moe[0] and shape.tensor(f"blk.{il}.ffn_gate_exps.weight") is not None:
                f = _moe(g, fn, shape)
                if shape.moe[3]:
                    f = g.like(f, _ffn(g, fn, shape.moe[2] * shape.moe[3]))
            else:
                f = _ffn(g, fn, shape.n_ff[il])
            x = g.like(f, fi)
    rn = g.output(g.like(g.like(x)))
    g.expand(g.output(g.op(_F32, (shape.n_vocab, n_out), rn)))
    return g, fa_extra


def _moe(g: _Graph, x: int, shape: ModelShape) -> int:
    """build_moe_ffn, estimated: router, top-k selection and weights, the used experts' FFN, their weighted sum."""
    n_exp, n_used, n_ff_exp, _ = shape.moe
    E, T = g.ne(x)[0], g.ne(x)[1]
    probs = g.like(g.op(_F32, (n_exp, T), x))  # router logits, sigmoid / softmax
    sel = g.like(probs, inplace=False)  # + the selection bias
    ids = g.view(g.op(_I32, (n_exp, T), sel), n_used, T)  # argsort, top-k
    w = g.op(_F32, (1, n_used, T), g.view(probs, 1, n_exp, T), ids)
    w = g.like(w, g.op(_F32, (1, T), w))  # normalised over the used experts
    xe = g.view(x, E, 1, T)
    up = g.op(_F32, (n_ff_exp, n_used, T), xe, ids)
    gate = g.op(_F32, (n_ff_exp, n_used, T), xe, ids)
    down = g.op(_F32, (E, n_used, T), g.op(_F32, (n_ff_exp, n_used, T), gate, up), ids)
    down = g.like(down, w)
    out = g.op(_F32, (E, T), g.view(down, E, T), g.view(down, E, T))
    for _ in range(2, n_used):
        out = g.like(out, g.view(down, E, T))
    return out


def mtp_graph(shape: ModelShape, gd: GraphDims) -> tuple[_Graph, dict[int, tuple[int, int]]]:
    """The MTP context's graph (``graph_mtp``, e.g. ``src/models/glm4-moe.cpp``), estimated: the NextN block alone.

    ``eh_proj([enorm(embd(x)); hnorm(h)])``, one decoder block on the MTP context's own cache (a MoE FFN with its
    shared experts where the model has experts), the head's norm (its output, the staged ``h_nextn``) and logits.
    """
    il = shape.n_trunk
    g = _Graph()
    T, n_out, E = gd.n_tokens, gd.n_outputs, shape.n_embd
    fa_extra: dict[int, tuple[int, int]] = {}
    tokens = g.leaf(_I32, T)
    embd = g.op(_F32, (E, T), tokens)
    h = g.leaf(_F32, E, T)
    pos = g.leaf(_I32, T)
    out_ids = g.leaf(_I32, n_out)
    kv = _kv_inputs(g, gd, gd.n_kv)
    hn = g.like(g.like(h))
    en = g.like(g.like(embd))
    x = g.op(_F32, (E, T), g.op(_F32, (2 * E, T), en, hn))
    a = g.like(g.like(x))
    qk_norm = shape.tensor(f"blk.{il}.attn_q_norm.weight") is not None
    style = _Style(qkv_bias=shape.tensor(f"blk.{il}.attn_q.bias") is not None, qk_norm=qk_norm)
    gated = shape.arch in ("qwen35", "qwen35moe")  # gated attention (src/models/qwen35*.cpp graph_mtp)
    o = _attention(
        g,
        gd,
        a,
        pos,
        kv,
        shape.n_head[il],
        shape.n_head_kv[il],
        shape.head_k[il],
        shape.head_v[il],
        style,
        fa_extra,
        gated=gated,
    )
    fi = g.like(g.op(_F32, (E, T), o), x)
    fn = g.like(g.like(fi))
    shexp = shape.tensor(f"blk.{il}.ffn_up_shexp.weight")
    if shape.moe[0] and shape.tensor(f"blk.{il}.ffn_gate_exps.weight") is not None:
        f = _moe(g, fn, shape)
        if gated and shexp is not None:  # qwen35moe: the shared expert times sigmoid(ffn_gate_inp_shexp(x))
            sh = _ffn(g, fn, shexp.ne[1])
            f = g.like(f, g.like(sh, g.like(g.op(_F32, (1, T), fn))))
        elif shape.moe[3]:
            f = g.like(f, _ffn(g, fn, shape.moe[2] * shape.moe[3]))
    else:
        f = _ffn(g, fn, shape.n_ff[il])
    rn = g.output(g.like(g.like(g.like(f, fi))))
    g.expand(g.output(g.op(_F32, (shape.n_vocab, n_out), g.op(_F32, (E, n_out), rn, out_ids))))
    return g, fa_extra


def drafter_graph(
    draft: ModelShape, gd: GraphDims, norm_before_residual: bool
) -> tuple[_Graph, dict[int, tuple[int, int]]]:
    """The eagle3 decoder graph (src/models/eagle3.cpp): logits over the draft vocabulary, scattered by d2t."""
    g = _Graph()
    T, E = gd.n_tokens, draft.n_embd
    fa_extra: dict[int, tuple[int, int]] = {}
    tokens = g.leaf(_I32, T)
    g_in = g.leaf(_F32, E, T)
    ie = g.op(_F32, (E, T), tokens)
    en = g.like(g.like(ie))
    gn = g.like(g.like(g_in))
    cat = g.op(_F32, (2 * E, T), en, gn)
    pos = g.leaf(_I32, T)
    kv = _kv_inputs(g, gd, gd.n_kv)
    o = _attention(
        g, gd, cat, pos, kv, draft.n_head[0], draft.n_head_kv[0], draft.head_k[0], draft.head_v[0], _Style(), fa_extra
    )
    o = g.op(_F32, (E, T), o)
    fi = g.like(o, gn if norm_before_residual else g_in)
    f = _ffn(g, g.like(g.like(fi)), draft.n_ff[0])
    pre = g.output(g.like(f, fi))
    rn = g.like(g.like(pre))
    nd = draft.draft_vocab or draft.n_vocab
    logits = g.op(_F32, (nd, T), rn)
    if draft.tensor("d2t") is not None:
        r = g.view(logits, 1, nd, T)
        fill = g.output(g.like(g.leaf(_F32, 1, draft.n_vocab, T)))
        sr = g.view(fill, 1, draft.n_vocab, T, also=(r,))
        g.expand(g.view(sr, draft.n_vocab, T))
    else:
        g.expand(g.output(logits))
    return g, fa_extra


def encoder_graph(draft: ModelShape, n_tokens: int, norm_before_fc: bool) -> _Graph:
    """The eagle3 encoder graph: the captured target features through ``fc``."""
    g = _Graph()
    x = g.leaf(_F32, 3 * (draft.target_hidden or draft.n_embd), n_tokens)
    if norm_before_fc:
        x = g.like(g.like(x))
    g.expand(g.output(g.op(_F32, (draft.n_embd, n_tokens), x)))
    return g


def graph_bytes(g: _Graph, backend: Backend, fa_extra: dict[int, tuple[int, int]] | None = None) -> int:
    """The compute buffer ``g`` needs on ``backend``; CUDA's flash attention adds f16 copies of quantised K/V."""
    sizes: dict[int, int] = {}
    if backend.quant_row_pad and fa_extra:
        for i, (k16, v16) in fa_extra.items():
            if k16 or v16:
                sizes[i] = pad(g.t[i].nbytes, 128) + pad(k16, 128) + v16
    return replay_allocator(g, backend.alignment, sizes)

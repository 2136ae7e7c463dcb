"""VRAM budget planner: what llama.cpp will allocate for a target (+ EAGLE drafter), before loading.

Everything here is a pure function of GGUF headers and settings, so it runs on a laptop with
no GPU. The formulas follow the pinned llama.cpp (``vendor/llama.cpp`` of llama-cpp-python
0.3.36) allocation by allocation:

* weights: every tensor goes to the device of its layer; ``token_embd`` stays on the host; the
  repeating layers offload from the back and the output layer counts as one of ``-ngl``
  (``llama_model::load_tensors``); a model with tied embeddings gets a copy of
  ``token_embd`` as its output tensor on the output device. Each tensor is padded to the
  buffer's alignment, and CUDA pads the last row of quantised matrices to 512 elements.
* KV cache: one K and one V tensor per layer with KV on that layer's device, ``n_ctx`` padded to
  256, per-layer KV heads and head sizes, sliding-window layers in a window-sized cache
  (``n_swa + n_ubatch`` padded to 256), MLA layers storing only the compressed K, quantised
  types in whole blocks (``llama_kv_cache``), recurrent state for SSM layers.
* compute: llama.cpp sizes each context's compute buffer by running ggml-alloc over the
  worst-case graph (``n_ubatch`` tokens, every one an output; ``llama_context::sched_reserve``).
  The planner builds the same graph, node by node, for the architectures it knows and replays
  the allocator, so logits, KQ mask, attention scores, FFN activations and in-place reuse come
  out as llama.cpp's own peak; other architectures get a llama-like estimate and a note.
* the drafter: its own weights (it borrows the target's ``token_embd``/``output`` when it has
  none), a one-layer KV cache at the target's context, and the larger of its decoder graph
  (logits over the draft vocabulary scattered into a full-vocabulary buffer) and encoder graph.

What llama.cpp does not allocate through its buffers (the CUDA context, cuBLAS workspaces, the
memory pool) is an ``overhead`` allowance. Host memory is reported apart from VRAM.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from local_eagle.errors import GGUFError, LocalEagleError
from local_eagle.gguf import DRAFTER_ARCH, ArrayInfo, GGUFHeader, Tensor, read_header  # noqa: F401

MiB = 1024 * 1024
GiB = 1024 * MiB


class PlanError(LocalEagleError):
    """Settings that llama.cpp would refuse (e.g. a quantised V cache without flash attention)."""


# --- ggml types ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVType:
    name: str
    ggml: int
    block: int
    size: int

    @property
    def quantized(self) -> bool:
        return self.block > 1


def _kv(name: str) -> KVType:
    t = GGMLQuantizationType[name.upper()]
    block, size = GGML_QUANT_SIZES[t]
    return KVType(name, int(t), block, size)


KV_TYPES: dict[str, KVType] = {
    n: _kv(n) for n in ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")
}


def row_bytes(t: GGMLQuantizationType | int, n: int) -> int:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
    return n // block * size


def pad(n: int, a: int) -> int:
    return (n + a - 1) // a * a


# --- backends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """How a device's buffers round tensor sizes (``get_alignment`` / ``get_alloc_size``)."""

    name: str
    alignment: int
    quant_row_pad: int = 0  # CUDA: last row of quantised matrices padded to MATRIX_ROW_PADDING

    def tensor_bytes(self, nbytes: int, ne0: int, t: int) -> int:
        size = nbytes
        if self.quant_row_pad and GGML_QUANT_SIZES[GGMLQuantizationType(t)][0] > 1 and ne0 % self.quant_row_pad:
            size += row_bytes(t, self.quant_row_pad - ne0 % self.quant_row_pad)
        return pad(size, self.alignment)


CUDA = Backend("CUDA", 128, 512)
CPU = Backend("CPU", 32)


# --- model shapes from GGUF headers ---------------------------------------------------------------


# Architectures whose compute graphs are rebuilt node by node (checked against llama.cpp);
# others get generic estimates and a note saying so.
KNOWN_ARCHS = {"llama", "qwen2", "qwen3", "gemma3", "eagle3"}
# Default SWA layer pattern (every n-th layer is global) where llama.cpp hard-codes one.
SWA_PATTERN_DEFAULTS = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "olmo2": 4, "exaone4": 4}
SWA_WINDOW_DEFAULTS = {"gemma2": 4096}
TOKEN_EMBD_HOST = ("token_embd.weight", "per_layer_token_embd.weight", "token_types.weight")


@dataclass
class ModelShape:
    """What the planner needs from one GGUF: hyper-parameters per layer and the tensor table."""

    path: Path
    arch: str
    name: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: list[int]
    n_head_kv: list[int]
    n_ff: list[int]
    head_k: list[int]
    head_v: list[int]
    is_swa: list[bool]
    n_swa: int
    mla: bool
    recurrent: list[bool]
    ssm_r: int  # recurrent state floats per sequence and layer (conv / token shift)
    ssm_s: int  # (ssm / wkv state)
    tensors: list[Tensor]
    known: bool
    notes: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    ssm_dims: tuple[int, int, int, int] = (0, 0, 0, 0)  # d_inner, d_state, dt_rank, d_conv
    cache: dict[Any, int] = field(default_factory=dict, repr=False, compare=False)
    # drafter only
    target_hidden: int | None = None
    draft_vocab: int | None = None

    @property
    def is_drafter(self) -> bool:
        return self.arch == DRAFTER_ARCH

    @property
    def tied_output(self) -> bool:
        names = {t.name for t in self.tensors}
        return not self.is_drafter and "output.weight" not in names and "token_embd.weight" in names

    def tensor(self, name: str) -> Tensor | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None


def _per_layer(v: Any, n: int, key: str, path: Path) -> list[int]:
    if v is None:
        return []
    if isinstance(v, list):
        if len(v) != n:
            raise GGUFError(f"{path}: '{key}' holds {len(v)} values, expected one per layer ({n})")
        return [int(x) for x in v]
    return [int(v)] * n


def _other_splits(h: GGUFHeader, what: str) -> list[Tensor]:
    """The tensors of the remaining files of a split GGUF (``name-00001-of-0000N.gguf``)."""
    count = int(h.kv.get("split.count", 0) or 0)
    if count <= 1:
        return []
    p = h.path
    no = int(h.kv.get("split.no", 0) or 0)
    m = re.match(r"(.*)-(\d{5})-of-(\d{5})\.gguf$", p.name)
    if no != 0:
        first = f"{m.group(1)}-00001-of-{m.group(3)}.gguf" if m else "the first split"
        raise GGUFError(f"{p}: this is split {no + 1} of {count}; pass the first file ({first})")
    if m is None:
        raise GGUFError(f"{p}: split GGUF of {count} files not named <name>-00001-of-{count:05d}.gguf")
    out: list[Tensor] = []
    for i in range(2, count + 1):
        q = p.with_name(f"{m.group(1)}-{i:05d}-of-{m.group(3)}.gguf")
        out += read_header(q, f"{what} (split {i} of {count})").tensors
    return out


def read_shape(path: str | os.PathLike[str], what: str = "target GGUF") -> ModelShape:
    """Read one GGUF's header into a ModelShape; the weights are never read."""
    h = read_header(path, what)
    p = h.path
    more = _other_splits(h, what)
    arch = h.kv.get("general.architecture")
    if not isinstance(arch, str):
        raise GGUFError(f"{p}: {what} has no general.architecture")

    def key(k: str, default: Any = None) -> Any:
        v = h.kv.get(f"{arch}.{k}", default)
        return default if v is None else v

    def need(k: str) -> int:
        v = key(k)
        if v is None:
            raise GGUFError(f"{p}: {what} lacks the key '{arch}.{k}'")
        return int(v)

    n_layer = need("block_count")
    n_embd = need("embedding_length")
    if n_layer <= 0 or n_embd <= 0:
        raise GGUFError(f"{p}: {what} has block_count={n_layer}, embedding_length={n_embd}; expected positive sizes")
    tensors = h.tensors + more
    names = {t.name for t in tensors}

    tok = h.kv.get("tokenizer.ggml.tokens")
    if tok is not None:
        n_vocab = len(tok)
    elif key("vocab_size") is not None:
        n_vocab = int(key("vocab_size"))
    elif "token_embd.weight" in names:
        n_vocab = next(t.ne[1] for t in tensors if t.name == "token_embd.weight")
    else:
        raise GGUFError(f"{p}: {what} has no vocabulary (tokenizer.ggml.tokens or {arch}.vocab_size)")

    notes: list[str] = []
    known = arch in KNOWN_ARCHS
    d_conv, d_inner = int(key("ssm.conv_kernel", 0) or 0), int(key("ssm.inner_size", 0) or 0)
    d_state, n_group = int(key("ssm.state_size", 0) or 0), int(key("ssm.group_count", 0) or 0)
    wkv = int(key("wkv.head_size", 0) or 0)
    has_state = bool((d_inner and d_state) or wkv)
    head = _per_layer(key("attention.head_count"), n_layer, f"{arch}.attention.head_count", p)
    if not head:
        head = [0 if has_state else max(1, n_embd // 128)] * n_layer
        if not has_state:
            notes.append(f"{arch}.attention.head_count missing: assumed {head[0]} heads of 128")
    head_kv = _per_layer(key("attention.head_count_kv"), n_layer, f"{arch}.attention.head_count_kv", p) or list(head)
    n_ff = _per_layer(key("feed_forward_length"), n_layer, f"{arch}.feed_forward_length", p) or [4 * n_embd] * n_layer
    hk_default = n_embd // max(head) if max(head) else 0
    hk = int(key("attention.key_length", hk_default))
    hv = int(key("attention.value_length", hk))

    n_swa = int(key("attention.sliding_window", 0) or 0) or SWA_WINDOW_DEFAULTS.get(arch, 0)
    is_swa = [False] * n_layer
    if n_swa > 0:
        pat = key("attention.sliding_window_pattern")
        if isinstance(pat, list):
            is_swa = [bool(x) for x in pat][:n_layer] + [False] * max(0, n_layer - len(pat))
        else:
            n_pat = int(pat) if pat is not None else SWA_PATTERN_DEFAULTS.get(arch)
            if n_pat is None:
                n_pat = 0
                notes.append(f"{arch}: sliding window without a layer pattern; assumed every layer is windowed")
            is_swa = [n_pat == 0 or (il % n_pat < n_pat - 1) for il in range(n_layer)]
    hk_swa = int(key("attention.key_length_swa", hk))
    hv_swa = int(key("attention.value_length_swa", hv))
    head_k = [hk_swa if s else hk for s in is_swa]
    head_v = [hv_swa if s else hv for s in is_swa]

    mla = key("attention.key_length_mla") is not None and key("attention.value_length_mla") is not None

    ssm_r = ssm_s = 0
    recurrent = [False] * n_layer
    if d_inner and d_state:
        ssm_r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        ssm_s = d_state * d_inner
    elif wkv:
        ssm_r = int(key("token_shift_count", 2) or 2) * n_embd
        ssm_s = n_embd * wkv
    if ssm_r or ssm_s:
        # hybrid models mark attention layers with a zero KV-head count
        recurrent = [h == 0 for h in head_kv] if any(head_kv) else [True] * n_layer
        if not any(head_kv):
            head_kv = [0] * n_layer

    shape = ModelShape(
        path=p,
        arch=arch,
        name=str(h.kv.get("general.name") or p.stem),
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=n_vocab,
        n_ctx_train=int(key("context_length", 0) or 0),
        n_head=head,
        n_head_kv=head_kv,
        n_ff=n_ff,
        head_k=head_k,
        head_v=head_v,
        is_swa=is_swa,
        n_swa=n_swa,
        mla=mla,
        recurrent=recurrent,
        ssm_r=ssm_r,
        ssm_s=ssm_s,
        tensors=tensors,
        known=known,
        notes=notes,
        ssm_dims=(d_inner, d_state, int(key("ssm.time_step_rank", 0) or 0), d_conv),
    )
    if not known:
        shape.notes.insert(
            0,
            f"architecture '{arch}' is not modelled exactly: weights and KV/state come from the tensor table "
            f"and generic keys, the compute buffer is estimated with a llama-like graph"
            + (" (Mamba-like for recurrent layers)" if any(recurrent) else ""),
        )
    if arch == DRAFTER_ARCH:
        ths = key("target_hidden_size")
        if ths is None:
            raise GGUFError(f"{p}: drafter lacks '{arch}.target_hidden_size'")
        shape.target_hidden = int(ths)
        d2t = shape.tensor("d2t")
        shape.draft_vocab = d2t.ne[0] if d2t else n_vocab
        shape.flags = {k for k in ("norm_before_residual", "norm_before_fc") if key(k, False)}
    return shape


def check_pair(target: ModelShape, draft: ModelShape) -> None:
    """The drafter must have been built for this target: hidden size and vocabulary."""
    if not draft.is_drafter:
        raise LocalEagleError(f"{draft.path}: architecture is '{draft.arch}', expected an {DRAFTER_ARCH} drafter")
    if target.is_drafter:
        raise LocalEagleError(f"{target.path}: --model is an {DRAFTER_ARCH} drafter; pass the target model there")
    if draft.target_hidden != target.n_embd:
        raise LocalEagleError(
            f"{draft.path}: drafter expects target hidden size {draft.target_hidden} "
            f"({DRAFTER_ARCH}.target_hidden_size), {target.path.name} has {target.n_embd}"
        )
    if draft.n_vocab != target.n_vocab:
        raise LocalEagleError(
            f"{draft.path}: drafter vocabulary has {draft.n_vocab} tokens, {target.path.name} has {target.n_vocab}"
        )
    fc = draft.tensor("fc.weight")
    if fc is not None and fc.ne[0] != 3 * target.n_embd:
        raise LocalEagleError(f"{draft.path}: fc.weight takes {fc.ne[0]} inputs, expected 3 x {target.n_embd}")
    if draft.tensor("token_embd.weight") is None:
        if target.tensor("token_embd.weight") is None:
            raise LocalEagleError(f"{draft.path}: neither the drafter nor the target has token_embd.weight")
        if draft.n_embd != target.n_embd:
            raise LocalEagleError(
                f"{draft.path}: drafter has no token_embd.weight and borrows the target's, which needs its hidden "
                f"size {draft.n_embd} to equal the target's {target.n_embd}"
            )
    if draft.tensor("output.weight") is None:
        if draft.n_embd != target.n_embd or (draft.draft_vocab or draft.n_vocab) != target.n_vocab:
            raise LocalEagleError(
                f"{draft.path}: drafter has no output.weight and borrows the target's, which needs hidden size "
                f"{target.n_embd} and the full vocabulary ({target.n_vocab}); it has {draft.n_embd} and "
                f"{draft.draft_vocab or draft.n_vocab}"
            )


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """One llama.cpp configuration: the knobs that change memory.

    ``n_gpu_layers`` None means "auto": the most layers that fit. The drafter context is created
    at the target's ``n_ctx`` (its KV cache covers the whole context) with its own batch sizes.
    """

    n_ctx: int = 8192
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

    def validate(self) -> None:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CtxDims:
    """The sizes llama.cpp derives from Settings (``llama_context`` constructor)."""

    n_ctx: int
    n_ctx_seq: int
    n_stream: int
    n_batch: int
    n_ubatch: int
    n_seq: int
    unified: bool


def ctx_dims(n_ctx: int, n_seq: int, n_batch: int, n_ubatch: int, kv_unified: bool) -> CtxDims:
    b = min(n_ctx, n_batch)  # causal attention: a batch never exceeds the (unpadded) context
    ub = min(b, n_ubatch)
    c = pad(n_ctx, 256)
    if kv_unified:
        seq = c
    else:
        seq = pad(c // n_seq, 256)
        c = seq * n_seq
    return CtxDims(c, seq, 1 if kv_unified else n_seq, b, ub, n_seq, kv_unified)


# --- placement -----------------------------------------------------------------------------------


def n_offloadable(shape: ModelShape) -> int:
    """Highest useful ``-ngl``: every repeating layer plus the output layer."""
    return shape.n_layer + 1


def layer_on_gpu(shape: ModelShape, il: int, ngl: int) -> bool:
    """llama.cpp's ``get_layer_buft_list``: the last ``ngl`` of (layers + output) go to the GPU."""
    start = max(shape.n_layer + 1 - ngl, 0)
    return il >= start


def tensor_on_gpu(shape: ModelShape, t: Tensor, ngl: int) -> bool:
    if t.name in TOKEN_EMBD_HOST:
        return False
    if t.name == "rope_freqs.weight":
        return layer_on_gpu(shape, 0, ngl)
    il = t.layer
    if il is None or il >= shape.n_layer:
        il = shape.n_layer  # output layer (output, output_norm, fc, d2t, rope_freqs, ...)
    return layer_on_gpu(shape, il, ngl)


@dataclass
class Split:
    """Bytes on the GPU and on the host."""

    gpu: int = 0
    host: int = 0

    @property
    def total(self) -> int:
        return self.gpu + self.host


def weights(shape: ModelShape, ngl: int, gpu: Backend = CUDA, host: Backend = CPU) -> Split:
    """Weight buffers per side. A tied output is a second copy of token_embd on the output device."""
    s = Split()
    for t in shape.tensors:
        if tensor_on_gpu(shape, t, ngl):
            s.gpu += gpu.tensor_bytes(t.nbytes, t.ne[0], t.type)
        else:
            s.host += host.tensor_bytes(t.nbytes, t.ne[0], t.type)
    # a duplicated tensor is created again only in a buffer type that lacks it (llama_model_loader)
    te = shape.tensor("token_embd.weight")
    if shape.tied_output and te is not None and layer_on_gpu(shape, shape.n_layer, ngl):
        s.gpu += gpu.tensor_bytes(te.nbytes, te.ne[0], te.type)
    rf = shape.tensor("rope_freqs.weight")
    if rf is not None and 0 < ngl and not layer_on_gpu(shape, 0, ngl):
        s.gpu += gpu.tensor_bytes(rf.nbytes, rf.ne[0], rf.type)
    return s


# --- KV cache and recurrent state ----------------------------------------------------------------


@dataclass
class KVLayer:
    il: int
    cells: int
    k_bytes: int
    v_bytes: int


def kv_layers(
    shape: ModelShape, d: CtxDims, type_k: str, type_v: str, flash_attn: bool, swa_full: bool
) -> list[KVLayer]:
    """Per layer with a KV cache: cells and K/V bytes (``llama_kv_cache`` / ``llama_kv_cache_iswa``)."""
    tk, tv = KV_TYPES[type_k], KV_TYPES[type_v]
    v_trans = not flash_attn
    size_swa = d.n_ctx_seq
    if any(shape.is_swa) and not swa_full:
        size_swa = pad(min(d.n_ctx_seq, shape.n_swa * (d.n_seq if d.unified else 1) + d.n_ubatch), 256)
    v_max = max((hv * h for hv, h in zip(shape.head_v, shape.n_head_kv, strict=True)), default=0)
    out = []
    for il in range(shape.n_layer):
        if shape.recurrent[il] or shape.n_head_kv[il] == 0:
            continue
        cells = (size_swa if shape.is_swa[il] else d.n_ctx_seq) * d.n_stream
        n_k = shape.head_k[il] * shape.n_head_kv[il]
        n_v = v_max if v_trans else shape.head_v[il] * shape.n_head_kv[il]
        for n, t, what in ((n_k, tk, "K"), (n_v, tv, "V")):
            if t.quantized and n % t.block:
                raise PlanError(
                    f"{shape.path.name}: layer {il} has {what} rows of {n} values, not a multiple of the "
                    f"{t.name} block ({t.block}); llama.cpp cannot use that cache type"
                )
        k = row_bytes(tk.ggml, n_k) * cells
        v = 0 if shape.mla else row_bytes(tv.ggml, n_v) * cells
        out.append(KVLayer(il, cells, k, v))
    return out


def kv_cache(
    shape: ModelShape, d: CtxDims, s: Settings, ngl: int, draft: bool = False, gpu: Backend = CUDA, host: Backend = CPU
) -> Split:
    """KV (and recurrent state) bytes per side; a layer's cache lives with the layer (offload_kqv)."""
    tk, tv = (s.draft_type_k, s.draft_type_v) if draft else (s.type_k, s.type_v)
    out = Split()
    for kl in kv_layers(shape, d, tk, tv, s.flash_attn, s.swa_full):
        on_gpu = layer_on_gpu(shape, kl.il, ngl)
        b = gpu if on_gpu else host
        n = b.tensor_bytes(kl.k_bytes, 0, 0) + (b.tensor_bytes(kl.v_bytes, 0, 0) if kl.v_bytes else 0)
        if on_gpu:
            out.gpu += n
        else:
            out.host += n
    if shape.ssm_r or shape.ssm_s:
        rows = max(1, s.n_seq)
        for il in range(shape.n_layer):
            if not shape.recurrent[il]:
                continue
            on_gpu = layer_on_gpu(shape, il, ngl)
            b = gpu if on_gpu else host
            n = b.tensor_bytes(4 * shape.ssm_r * rows, 0, 0) + b.tensor_bytes(4 * shape.ssm_s * rows, 0, 0)
            if on_gpu:
                out.gpu += n
            else:
                out.host += n
    return out


# --- compute buffers: llama.cpp's reserved graph, replayed through ggml-alloc ----------------------
#
# llama.cpp sizes a context's compute buffer by building the worst-case graph (n_ubatch tokens,
# every one an output) and running ggml-alloc over it (ggml_gallocr: leafs first, then each node
# in graph order, an element-wise op taking over a dying parent's memory, best-fit free blocks).
# The peak offset it reaches is the buffer size. The builders below create the same tensors in
# the same order (ggml_build_forward_expand is a depth-first walk over sources) for the graphs
# llama.cpp assembles from its llm_graph_context helpers, and the allocator is replayed, so the
# result is the buffer size itself rather than a rule of thumb. Weights and KV-cache views live
# in other buffers and are left out; a store into the KV cache only consumes its sources.

_F32, _F16, _I32, _I64 = "f32", "f16", "i32", "i64"
_ELSIZE = {_F32: 4, _F16: 2, _I32: 4, _I64: 8}


@dataclass
class _GT:
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


def graph_dims(shape: ModelShape, d: CtxDims, s: Settings, type_k: str, type_v: str, n_ubatch: int) -> GraphDims:
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
) -> int:
    """build_qkv + build_attn (KV cache) + build_attn_mha, up to the attention output before wo.

    The sliding-window variant of build_attn expands Q, K, V in that order, the plain one Q, V, K.
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
    return _hadamard(g, out, kv.v_rot, 64)


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
    """The decoder graph llama.cpp reserves for a llama-family / gemma3 target."""
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
    last = max((il for il in range(shape.n_layer) if not shape.recurrent[il]), default=shape.n_layer - 1)
    for il in range(shape.n_layer):
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
            f = _ffn(g, g.like(g.like(fi)), shape.n_ff[il])
            x = g.like(f, fi)
    rn = g.output(g.like(g.like(x)))
    g.expand(g.output(g.op(_F32, (shape.n_vocab, n_out), rn)))
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


# --- the plan ------------------------------------------------------------------------------------


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
    key: str
    label: str
    gpu: int
    host: int


@dataclass
class Plan:
    """One configuration's memory, per component, and whether it fits the budget."""

    target: ModelShape
    draft: ModelShape | None
    settings: Settings
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
    target: int
    draft: int


def target_compute(target: ModelShape, s: Settings, backend: Backend = CUDA) -> int:
    """The target context's compute buffer (memoised on the shape: the suggest search asks often)."""
    key = ("t", s.n_ctx, s.n_seq, s.n_batch, s.n_ubatch, s.type_k, s.type_v, s.flash_attn, s.swa_full, s.kv_unified)
    key += (backend,)
    hit = target.cache.get(key)
    if hit is None:
        d = ctx_dims(s.n_ctx, s.n_seq, s.n_batch, s.n_ubatch, s.kv_unified)
        g, fa = target_graph(target, graph_dims(target, d, s, s.type_k, s.type_v, s.n_ubatch))
        hit = target.cache[key] = graph_bytes(g, backend, fa)
    return hit


def draft_compute(draft: ModelShape, s: Settings, backend: Backend = CUDA, encoder: bool = True) -> int:
    """The drafter context's compute buffer: the larger of its decoder and encoder graphs.

    llama.cpp reserves the decoder graph when the context is created; the first encode of a
    ubatch of target features grows the buffer if the encoder graph needs more.
    """
    key = ("d", s.n_ctx, s.n_seq, s.draft_batch, s.draft_ubatch, s.draft_type_k, s.draft_type_v, s.flash_attn)
    key += (s.kv_unified, backend, encoder)
    hit = draft.cache.get(key)
    if hit is None:
        dd = ctx_dims(s.n_ctx, s.n_seq, s.draft_batch, s.draft_ubatch, s.kv_unified)
        gdd = graph_dims(draft, dd, s, s.draft_type_k, s.draft_type_v, s.draft_ubatch)
        gg, fa = drafter_graph(draft, gdd, "norm_before_residual" in draft.flags)
        hit = graph_bytes(gg, backend, fa)
        if encoder:
            enc = encoder_graph(draft, gdd.n_tokens, "norm_before_fc" in draft.flags)
            hit = max(hit, graph_bytes(enc, backend))
        draft.cache[key] = hit
    return hit


def compute_buffers(target: ModelShape, draft: ModelShape | None, s: Settings, backend: Backend = CUDA) -> _Compute:
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
    s: Settings,
    ngl: int,
    budget: GPUBudget,
    backend: Backend = CUDA,
    host: Backend = CPU,
) -> tuple[list[Component], list[str]]:
    """Every component's GPU and host bytes for ``ngl`` target layers on the GPU (drafter fully offloaded)."""
    notes: list[str] = []
    d = ctx_dims(s.n_ctx, s.n_seq, s.n_batch, s.n_ubatch, s.kv_unified)
    n_max = n_offloadable(target)
    ngl = max(0, min(ngl, n_max))
    tw = weights(target, ngl, backend, host)
    tkv = kv_cache(target, d, s, ngl, False, backend, host)
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
    n_out = max(s.n_seq, s.draft_max + 1)
    n_capture = 3 if draft is not None else 0
    out_target = (target.n_vocab * n_out + n_capture * target.n_embd * d.n_batch) * 4
    comps = [
        Component("target_weights", "target weights", tw.gpu, tw.host),
        Component("target_kv", "target KV cache", tkv.gpu, tkv.host),
        tc,
    ]
    if draft is not None:
        dn = n_offloadable(draft)
        dw = weights(draft, dn, backend, host)
        dd = ctx_dims(s.n_ctx, s.n_seq, s.draft_batch, s.draft_ubatch, s.kv_unified)
        dkv = kv_cache(draft, dd, s, dn, True, backend, host)
        n_dtok = min(dd.n_ctx, s.draft_ubatch, dd.n_batch)
        out_draft = (draft.n_vocab + draft.n_embd) * dd.n_batch * 4
        comps += [
            Component("draft_weights", "draft weights", dw.gpu, dw.host),
            Component("draft_kv", "draft KV cache", dkv.gpu, dkv.host),
            Component(
                "draft_compute",
                "draft compute",
                comp.draft,
                2 * draft.n_embd * n_dtok * 4 + _mask_bytes(draft, dd, s, n_dtok),
            ),
        ]
    else:
        out_draft = 0
    comps.append(Component("outputs", "output buffers (host)", 0, out_target + out_draft))
    # the CUDA backend is initialised (and used for large batches) even with no layer offloaded
    comps.append(Component("overhead", "CUDA context + pool", budget.overhead, 0))
    return comps, notes


def _mask_bytes(shape: ModelShape, d: CtxDims, s: Settings, n_tok: int) -> int:
    per = 2 if s.flash_attn else 4
    n = d.n_ctx_seq * n_tok * per
    return 2 * n if any(shape.is_swa) else n


def make_plan(
    target: ModelShape,
    draft: ModelShape | None,
    s: Settings,
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
    return Plan(target, draft, s, budget, ngl, comps, notes)


def _auto_layers(
    target: ModelShape, draft: ModelShape | None, s: Settings, budget: GPUBudget, backend: Backend
) -> tuple[int, list[Component], list[str]]:
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


# --- --suggest -----------------------------------------------------------------------------------

CTX_STEPS = (262144, 196608, 131072, 98304, 65536, 49152, 32768, 24576, 16384, 12288, 8192, 6144, 4096, 2048, 1024, 512)


@dataclass
class Suggestion:
    """The best configuration that fits, and what it gave up relative to the request."""

    requested: Settings
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


def _kv_options(s: Settings) -> list[tuple[str, str]]:
    """The requested KV types, then q8_0 and q4_0 where they quantise more (V stays f16 without FA)."""
    opts = [(s.type_k, s.type_v)]
    for t in ("q8_0", "q4_0"):
        if _KV_RANK[t] > _KV_RANK[s.type_k]:
            opts.append((t, t if s.flash_attn else s.type_v))
    return opts


def _draft_options(s: Settings) -> list[dict[str, Any]]:
    opts: list[dict[str, Any]] = [{}]
    for ub in (256, 128, 64, 32):
        if ub < s.draft_ubatch:
            opts.append({"draft_ubatch": ub, "draft_batch": min(s.draft_batch, max(ub, 512))})
    if s.draft_type_k == "f16" and s.draft_type_v == "f16":
        q = {"draft_type_k": "q8_0", "draft_type_v": "q8_0" if s.flash_attn else "f16"}
        opts.append({**opts[-1], **q})
    return opts


def _describe(req: Settings, plan: Plan, dropped: bool, req_draft: bool) -> list[str]:
    got = plan.settings
    out = []
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
    requested: Settings,
    budget: GPUBudget,
    max_ctx: int | None = None,
    backend: Backend = CUDA,
) -> Suggestion:
    """Search the settings for the best plan that fits, preferring, in this order: the largest context
    (up to ``max_ctx`` or the request), the most layers on the GPU, the least KV quantisation (a
    window-sized cache for sliding-window layers comes before quantising), and the requested
    drafter settings. A plan needs at least one target layer on the GPU.
    """
    requested.validate()
    top = max_ctx or requested.n_ctx
    ctxs = [top] + [c for c in CTX_STEPS if c < top]
    res = _search(target, draft, requested, budget, ctxs, backend)
    if res.plan is None and draft is not None:
        alt = _search(target, None, requested, budget, ctxs, backend)
        alt.evaluated += res.evaluated
        if alt.plan is not None:
            alt.dropped_drafter = True
            alt.traded = _describe(requested, alt.plan, True, True)
        return alt
    return res


def _search(
    target: ModelShape, draft: ModelShape | None, req: Settings, budget: GPUBudget, ctxs: list[int], backend: Backend
) -> Suggestion:
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

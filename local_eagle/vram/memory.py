"""Weights and KV cache: which device each tensor lives on and how many bytes its buffer takes.

Follows ``llama_model::load_tensors`` (placement from the back, ``-ngl`` counting the output
layer) and ``llama_kv_cache`` (a layer's cache lives with the layer), so a partial offload is
priced per side, GPU and host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gguf import GGMLQuantizationType

from local_eagle.gguf import Tensor, pad
from local_eagle.vram.settings import CtxDims, MemoryConfig
from local_eagle.vram.shapes import RS_ROLLBACK_ARCHS, TOKEN_EMBD_HOST, ModelShape, has_state
from local_eagle.vram.types import CPU, CUDA, KV_TYPES, Backend, PlanError, row_bytes


def n_offloadable(shape: ModelShape) -> int:
    """Highest useful ``-ngl``: every repeating layer plus the output layer."""
    return shape.n_layer + 1


def layer_on_gpu(shape: ModelShape, il: int, ngl: int) -> bool:
    """llama.cpp's ``get_layer_buft_list``: the last ``ngl`` of (layers + output) go to the GPU."""
    start = max(shape.n_layer + 1 - ngl, 0)
    return il >= start


def tensor_on_gpu(shape: ModelShape, t: Tensor, ngl: int) -> bool:
    """Where llama.cpp puts one tensor: with its layer, token embeddings on the host (looked up by row)."""
    if t.name in TOKEN_EMBD_HOST:
        return False
    if t.name == "rope_freqs.weight":
        return layer_on_gpu(shape, 0, ngl)
    il = t.layer
    if il is None or il >= shape.n_layer:
        il = shape.n_layer  # output layer (output, output_norm, fc, d2t, rope_freqs, ...)
    return layer_on_gpu(shape, il, ngl)


FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)


def as_q8_0(shape: ModelShape) -> ModelShape:
    """The same model with its float matrices at q8_0, as ``convert --outtype q8_0`` and llama.cpp's q8_0 recipe write
    them (1-D tensors and rows not a multiple of 32 kept): what a float drafter would weigh quantised."""
    q8 = GGMLQuantizationType.Q8_0

    def q(t: Tensor) -> Tensor:
        if t.type in FLOAT_TYPES and len(t.ne) >= 2 and t.name.endswith(".weight") and t.ne[0] % 32 == 0:
            return replace(t, type=int(q8), nbytes=row_bytes(q8, t.ne[0]) * math.prod(t.ne[1:]))
        return t

    return replace(shape, tensors=[q(t) for t in shape.tensors], cache={})


def float_matrices(shape: ModelShape) -> str | None:
    """The type of a model's matrices when all of them are floats (``F16``, ``BF16``, ``F32``: a drafter as it
    ships), else None."""
    types = {t.type for t in shape.tensors if len(t.ne) >= 2 and t.name.endswith(".weight")}
    if not types or not types <= set(FLOAT_TYPES):
        return None
    return "/".join(GGMLQuantizationType(x).name for x in sorted(types))


@dataclass
class Split:
    """Bytes on the GPU and on the host."""

    gpu: int = 0
    host: int = 0

    @property
    def total(self) -> int:
        return self.gpu + self.host


def weights(shape: ModelShape, ngl: int, gpu: Backend = CUDA, host: Backend = CPU, nextn: bool = False) -> Split:
    """Weight buffers per side. A tied output is a second copy of token_embd on the output device.

    NextN (MTP) blocks are left out: llama.cpp skips them unless the model is loaded with ``load_mtp``, and then
    they are the MTP head's, which ``nextn=True`` prices alone.
    """
    s = Split()
    for t in shape.tensors:
        if shape.is_nextn(t) != nextn:
            continue
        if tensor_on_gpu(shape, t, ngl):
            s.gpu += gpu.tensor_bytes(t.nbytes, t.ne[0], t.type)
        else:
            s.host += host.tensor_bytes(t.nbytes, t.ne[0], t.type)
    if nextn:
        return s
    # a duplicated tensor is created again only in a buffer type that lacks it (llama_model_loader)
    te = shape.tensor("token_embd.weight")
    if shape.tied_output and te is not None and layer_on_gpu(shape, shape.n_layer, ngl):
        s.gpu += gpu.tensor_bytes(te.nbytes, te.ne[0], te.type)
    rf = shape.tensor("rope_freqs.weight")
    if rf is not None and 0 < ngl and not layer_on_gpu(shape, 0, ngl):
        s.gpu += gpu.tensor_bytes(rf.nbytes, rf.ne[0], rf.type)
    return s


# --- KV cache and recurrent state ----------------------------------------------------------------

MTP_KV_TYPE = "f16"
"""The MTP context's K and V type: ``runtime.mtp.MtpDrafter`` opens it f16 whatever the target's cache is."""


@dataclass
class KVLayer:
    """One layer's cache: cells (context or window) and the bytes of its K and V tensors."""

    il: int
    cells: int
    k_bytes: int
    v_bytes: int


def kv_layers(
    shape: ModelShape, d: CtxDims, type_k: str, type_v: str, flash_attn: bool, swa_full: bool, mtp: bool = False
) -> list[KVLayer]:
    """Per layer with a KV cache: cells and K/V bytes (``llama_kv_cache`` / ``llama_kv_cache_iswa``).

    A model with NextN blocks filters its caches (``llama_model::create_memory``): the main context holds the
    trunk's layers, an MTP context (``mtp``) only the NextN layers, in a plain attention cache. A ``bailingmoe3``
    target's hybrid cache has no attention filter, so it holds its NextN blocks' KV too.
    """
    tk, tv = KV_TYPES[type_k], KV_TYPES[type_v]
    v_trans = not flash_attn
    size_swa = d.n_ctx_seq
    if any(shape.is_swa) and not swa_full:
        size_swa = pad(min(d.n_ctx_seq, shape.n_swa * (d.n_seq if d.unified else 1) + d.n_ubatch), 256)
    v_max = max((hv * h for hv, h in zip(shape.head_v, shape.n_head_kv, strict=True)), default=0)
    out = []
    split = shape.n_nextn > 0 and shape.n_trunk > 0
    for il in range(shape.n_layer):
        if shape.recurrent[il] or shape.n_head_kv[il] == 0:
            continue
        if split and (il >= shape.n_trunk) != mtp and not (shape.arch == "bailingmoe3" and not mtp):
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


def rs_snapshots(shape: ModelShape, s: MemoryConfig) -> int:
    """Recurrent-state snapshots per sequence the target context is opened with (``n_rs_seq``).

    The engine asks for them only where a recurrent or hybrid target drafts with its own head (``MemoryConfig.mtp``, the
    caller having checked ``shapes.mtp_refusal``): one per draft a round may reject, ``max(1, draft_max)``, as
    ``cli.loading`` sets ``EngineOptions.rollback``. llama.cpp then keeps 1 + n_rs_seq copies of each recurrent
    layer's state per sequence (``src/llama-memory-recurrent.cpp``). A family without snapshots (``qwen3next``) gets
    none: its rounds roll back by a host checkpoint of one state instead (``Context.checkpoint``).
    """
    snapshots = s.mtp and shape.n_nextn > 0 and has_state(shape) and shape.arch in RS_ROLLBACK_ARCHS
    return max(1, s.draft_max) if snapshots else 0


def attention_kv(
    shape: ModelShape,
    d: CtxDims,
    s: MemoryConfig,
    ngl: int,
    draft: bool = False,
    gpu: Backend = CUDA,
    host: Backend = CPU,
    mtp: bool = False,
) -> Split:
    """Attention KV bytes per side, a layer's cache with the layer (offload_kqv); recurrent layers hold none.

    ``mtp``: the MTP context's cache, the NextN layers only, in the types ``runtime.mtp.MtpDrafter`` opens it
    with (:data:`MTP_KV_TYPE`).
    """
    tk, tv = (s.draft_type_k, s.draft_type_v) if draft else (s.type_k, s.type_v)
    if mtp:
        tk = tv = MTP_KV_TYPE
    out = Split()
    for kl in kv_layers(shape, d, tk, tv, s.flash_attn, s.swa_full, mtp):
        on_gpu = layer_on_gpu(shape, kl.il, ngl)
        b = gpu if on_gpu else host
        n = b.tensor_bytes(kl.k_bytes, 0, 0) + (b.tensor_bytes(kl.v_bytes, 0, 0) if kl.v_bytes else 0)
        if on_gpu:
            out.gpu += n
        else:
            out.host += n
    return out


def recurrent_state(shape: ModelShape, s: MemoryConfig, ngl: int, gpu: Backend = CUDA, host: Backend = CPU) -> Split:
    """Recurrent state bytes per side (``llama_memory_recurrent``): per recurrent trunk layer an r (conv / token
    shift) and an s (ssm / wkv) f32 tensor of ``max(1, n_seq) x (1 + n_rs_seq)`` rows (:func:`rs_snapshots`)."""
    out = Split()
    if not (shape.ssm_r or shape.ssm_s):
        return out
    rows = max(1, s.n_seq) * (1 + rs_snapshots(shape, s))
    for il in range(shape.n_trunk):
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


def kv_cache(
    shape: ModelShape,
    d: CtxDims,
    s: MemoryConfig,
    ngl: int,
    draft: bool = False,
    gpu: Backend = CUDA,
    host: Backend = CPU,
    mtp: bool = False,
) -> Split:
    """A context's memory per side: attention KV (:func:`attention_kv`) and the recurrent state
    (:func:`recurrent_state`; the MTP context's cache holds none)."""
    kv = attention_kv(shape, d, s, ngl, draft, gpu, host, mtp)
    if mtp or draft:
        return kv
    st = recurrent_state(shape, s, ngl, gpu, host)
    return Split(kv.gpu + st.gpu, kv.host + st.host)

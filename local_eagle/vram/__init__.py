"""VRAM budget planner (``fit``): what llama.cpp will allocate for a target (+ EAGLE drafter), before loading.

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
  types in whole blocks (``llama_kv_cache``). Recurrent state apart (``recurrent_state``): an r and an s tensor
  per recurrent layer (a hybrid's from ``attention.recurrent_layers`` or ``full_attention_interval``) and sequence,
  times 1 + ``n_rs_seq`` where a hybrid drafts with its own head (``rs_snapshots``: the snapshots rollback needs).
* compute: llama.cpp sizes each context's compute buffer by running ggml-alloc over the
  worst-case graph (``n_ubatch`` tokens, every one an output; ``llama_context::sched_reserve``).
  The planner builds the same graph, node by node, for the architectures it knows and replays
  the allocator, so logits, KQ mask, attention scores, FFN activations and in-place reuse come
  out as llama.cpp's own peak; other architectures get a llama-like estimate and a note.
* the drafter: its own weights (it borrows the target's ``token_embd``/``output`` when it has
  none), a one-layer KV cache at the target's context, and the larger of its decoder graph
  (logits over the draft vocabulary scattered into a full-vocabulary buffer) and encoder graph.

* a block drafter (DFlash, ``dflash`` GGUF; ``block``): its weights, a K/V cache of its layers over the context plus
  a block, the larger of its block and injection graphs (an estimate), and the target's captured layers staged for
  it (``len(target_layers) x n_embd`` per batch row). DFlash,
  DSpark and DFlash2 draft (``runtime.dflash``).

* a model's own MTP (NextN) head (``MemoryConfig.mtp``, no drafter): the NextN block's weights (loaded only with
  ``load_mtp``; the target's weights and cache never hold that block), the MTP context's f16 KV cache of the NextN
  layer at the target's context, and its NextN graph (``mtp_compute``).

What llama.cpp does not allocate through its buffers (the CUDA context, cuBLAS workspaces, the
memory pool) is an ``overhead`` allowance. Host memory is reported apart from VRAM.

* ``--parallel N``: both contexts at N x the per-request context, N sequences in one unified cache
  (``MemoryConfig.with_parallel``), the logits buffer sized for a verify of ``draft_max`` + 1 rows per
  request; ``parallel_refusal`` says in one line whether N fit and, if not, the most that would.

Modules, lowest first: ``types`` (ggml cache types, backend rounding), ``shapes`` (GGUF headers),
``settings``, ``memory`` (placement, weights, KV cache), ``graph`` (compute buffers), ``plan``,
``parallel``, ``suggest``; beside them ``gpus`` (budgets), ``report`` (tables, JSON) and ``measure`` (llama.cpp's
own numbers). The names below are the planner's API; import the side modules by name.
"""

from local_eagle.units import GiB, MiB
from local_eagle.vram.memory import (
    KVLayer,
    Split,
    attention_kv,
    kv_cache,
    kv_layers,
    layer_on_gpu,
    n_offloadable,
    recurrent_state,
    rs_snapshots,
    tensor_on_gpu,
    weights,
)
from local_eagle.vram.parallel import parallel_bytes, parallel_refusal
from local_eagle.vram.plan import (
    DEFAULT_OVERHEAD,
    Component,
    GPUBudget,
    Plan,
    breakdown,
    compute_buffers,
    draft_compute,
    make_plan,
    mtp_compute,
    target_compute,
)
from local_eagle.vram.settings import CtxDims, MemoryConfig, ctx_dims
from local_eagle.vram.shapes import ModelShape, check_pair, read_shape
from local_eagle.vram.suggest import Suggestion, suggest
from local_eagle.vram.types import CPU, CUDA, KV_TYPES, Backend, KVType, PlanError, row_bytes

__all__ = [
    "CPU",
    "CUDA",
    "DEFAULT_OVERHEAD",
    "KV_TYPES",
    "Backend",
    "Component",
    "CtxDims",
    "GPUBudget",
    "GiB",
    "KVLayer",
    "KVType",
    "MiB",
    "ModelShape",
    "Plan",
    "PlanError",
    "MemoryConfig",
    "Split",
    "Suggestion",
    "attention_kv",
    "breakdown",
    "check_pair",
    "compute_buffers",
    "ctx_dims",
    "draft_compute",
    "kv_cache",
    "kv_layers",
    "layer_on_gpu",
    "make_plan",
    "mtp_compute",
    "n_offloadable",
    "parallel_bytes",
    "parallel_refusal",
    "read_shape",
    "recurrent_state",
    "row_bytes",
    "rs_snapshots",
    "suggest",
    "target_compute",
    "tensor_on_gpu",
    "weights",
]

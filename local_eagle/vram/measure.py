"""Ask llama.cpp what it really allocates, to hold the planner's predictions against.

llama.cpp's own ``--fit`` does exactly this: a dry-run load (``no_alloc``: metadata only, every
allocation simulated) and then ``llama_get_memory_breakdown``, which reports per buffer type
the bytes taken by the model's weights, the context's memory (KV cache / recurrent state) and
the compute buffers. That staging function returns a C++ ``std::map`` by value, so it is
called here through the Itanium ABI's hidden return pointer and the map's red-black tree is
walked read-only (libstdc++ layout, checked at run time against the map's own node count). The
few map nodes are not freed: a few hundred bytes per measurement.

On this project's CPU build every buffer is a host buffer; with a CUDA build the same call
reports the ``CUDA0`` buffers, which is what the planner predicts for a GPU.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from local_eagle.errors import LlamaError
from local_eagle.llamacpp import bindings
from local_eagle.llamacpp.lib import sibling_library
from local_eagle.vram.memory import MTP_KV_TYPE
from local_eagle.vram.settings import MAX_SEQ, MemoryConfig
from local_eagle.vram.shapes import check_pair, read_shape
from local_eagle.vram.types import KV_TYPES

_BREAKDOWN_SYM = "_Z26llama_get_memory_breakdownPK13llama_context"
_MAP_SIZE = 48  # sizeof(std::map) in libstdc++ (x86-64 and aarch64)


@dataclass
class BufferSizes:
    """Bytes per buffer type name ("CPU", "CUDA0", "CUDA_Host", ...)."""

    model: dict[str, int] = field(default_factory=dict)
    context: dict[str, int] = field(default_factory=dict)
    compute: dict[str, int] = field(default_factory=dict)

    def total(self, part: str) -> int:
        return sum(getattr(self, part).values())

    def device(self, part: str) -> int:
        """Bytes in GPU buffers only (not CPU, not pinned host buffers)."""
        return sum(v for k, v in getattr(self, part).items() if not (k.startswith("CPU") or "Host" in k))


@dataclass
class Measurement:
    """What llama.cpp reported for the target and, when given, the drafter context."""

    backend: str
    dry_run: bool
    target: BufferSizes
    draft: BufferSizes | None = None
    n_ctx: int = 0
    mtp: BufferSizes | None = None
    """The MTP context: its KV cache and compute, and as ``model`` the NextN block's weights (what loading the
    model with ``load_mtp`` adds; ``target.model`` is then the model loaded without them)."""
    target_state: int | None = None
    """Of ``target.context``, the recurrent state's bytes (a recurrent or hybrid target; None: none, or not told
    apart). llama.cpp reports KV and state as one sum; one more sequence adds one sequence's state and, in a
    unified cache, no KV, so the state is ``n_seq`` times that difference (:func:`_state_bytes`)."""
    n_rs_seq: int = 0
    """The recurrent-state snapshots per sequence the target context was opened with (``memory.rs_snapshots``)."""


def _lib() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    if not sys.platform.startswith("linux"):
        raise LlamaError("--measure reads a libstdc++ std::map from libllama and is supported on Linux only")
    bindings._install_logger()
    C = bindings.C
    lib = C._lib
    if not hasattr(lib, _BREAKDOWN_SYM):
        raise LlamaError(
            f"libllama lacks llama_get_memory_breakdown ({_BREAKDOWN_SYM}); --measure needs "
            f"llama-cpp-python=={bindings.PINNED_VERSION}"
        )
    return lib, sibling_library("ggml-base")


def memory_breakdown(ctx_ptr: int) -> BufferSizes:
    """llama.cpp's memory breakdown of one context, keyed by buffer type name."""
    lib, ggml = _lib()
    fn = getattr(lib, _BREAKDOWN_SYM)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_void_p
    name_fn = ggml.ggml_backend_buft_name
    name_fn.argtypes = [ctypes.c_void_p]
    name_fn.restype = ctypes.c_char_p

    out = ctypes.create_string_buffer(_MAP_SIZE + 16)
    base = ctypes.addressof(out)
    fn(base, ctx_ptr)

    def word(addr: int) -> int:
        return ctypes.c_size_t.from_address(addr).value

    # _Rb_tree_impl: key_compare (padded to 8), header node {color, parent, left, right}, node_count
    root, count = word(base + 16), word(base + 40)
    res = BufferSizes()
    stack = [root] if root else []
    seen = 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > count:
            break
        # node: _Rb_tree_node_base (32 bytes) then pair<buft, {model, context, compute}>
        buft = word(node + 32)
        name = (name_fn(buft) or b"?").decode()
        model, context, compute = word(node + 40), word(node + 48), word(node + 56)
        for part, val in (("model", model), ("context", context), ("compute", compute)):
            if val:
                d = getattr(res, part)
                d[name] = d.get(name, 0) + val
        for off in (16, 24):
            child = word(node + off)
            if child:
                stack.append(child)
    if seen != count:
        raise LlamaError(f"llama_get_memory_breakdown returned a map this build cannot read ({seen} != {count} nodes)")
    return res


def _load_error() -> str:
    """llama.cpp's reason for refusing a model: its "error loading model" line, else the last error."""
    for ln in reversed(bindings.log_lines()):
        if "error loading model" in ln:
            return ln.split("error loading model:", 1)[-1].strip()
    return bindings.last_log_error() or "no reason logged"


class _DryModel:
    """A model loaded for measurement: weights never read (``no_alloc``) unless ``dry_run`` is off."""

    def __init__(self, path: Path, n_gpu_layers: int, dry_run: bool, what: str, load_mtp: bool = False) -> None:
        C = bindings.C
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.load_mtp = load_mtp
        params.use_extra_bufts = False  # AMX repack buffers segfault on some CPUs (docs/architecture.md)
        params.no_alloc = dry_run
        params.load_mode = 0  # LLAMA_LOAD_MODE_NONE: a dry run cannot map the file
        self._params = params
        ptr = C.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            raise LlamaError(f"{path}: llama.cpp could not load the {what} ({_load_error()})")
        self.ptr = ptr

    def close(self) -> None:
        if self.ptr:
            bindings.C.llama_model_free(self.ptr)
            self.ptr = None


class _DryContext:
    def __init__(
        self,
        model: _DryModel,
        s: MemoryConfig,
        draft: bool,
        other: _DryContext | None,
        what: str,
        mtp: bool = False,
        n_rs_seq: int = 0,
    ) -> None:
        C = bindings.C
        p = C.llama_context_default_params()
        p.n_ctx = s.cells  # the per-request context times the parallel requests
        p.n_batch = s.draft_batch if draft else s.n_batch
        p.n_ubatch = s.draft_ubatch if draft else s.n_ubatch
        p.n_seq_max = s.drafter_seqs if draft or mtp else s.n_seq  # an MTP context has a drafter's sequences
        p.n_threads = p.n_threads_batch = 1
        p.flash_attn_type = 1 if s.flash_attn else 0
        p.type_k = KV_TYPES[s.draft_type_k if draft else s.type_k].ggml
        p.type_v = KV_TYPES[s.draft_type_v if draft else s.type_v].ggml
        p.no_perf = True
        p.swa_full = s.swa_full
        p.kv_unified = s.kv_unified
        p.n_rs_seq = n_rs_seq
        if mtp:  # as runtime.mtp.MtpDrafter opens it: the target's options, an f16 cache, type MTP
            p.ctx_type = C.LLAMA_CONTEXT_TYPE_MTP
            p.type_k = p.type_v = KV_TYPES[MTP_KV_TYPE].ggml
        if other is not None:
            p.ctx_other = other.ptr
        self._params = p
        self._other = other
        ptr = C.llama_init_from_model(model.ptr, p)
        if not ptr:
            detail = bindings.last_log_error()
            raise LlamaError(f"llama.cpp could not create the {what} context" + (f" ({detail})" if detail else ""))
        self.ptr = ptr
        self.n_ctx = int(C.llama_n_ctx(ptr))

    def close(self) -> None:
        if self.ptr:
            bindings.C.llama_free(self.ptr)
            self.ptr = None


def _has_state(model: _DryModel) -> bool:
    """A recurrent or hybrid model, as llama.cpp judges it (``Model.branching_refusal``'s test)."""
    C = bindings.C
    return bool(C.llama_model_is_recurrent(model.ptr) or C.llama_model_is_hybrid(model.ptr))


def _state_bytes(model: _DryModel, s: MemoryConfig, context: int, n_rs_seq: int) -> int | None:
    """The recurrent state within a target context's ``context`` bytes, from a second dry context with one more
    sequence in a unified cache: its attention KV is the same (a unified cache's cells do not grow with the
    sequences) and each sequence's state is the same, so the state is ``n_seq`` times the difference. None where
    that second context could not hold the same KV (several streams of a non-unified cache)."""
    n_seq = max(1, s.n_seq)
    if (n_seq > 1 and not s.kv_unified) or n_seq >= MAX_SEQ:
        return None
    more = replace(s, n_seq=n_seq + 1, kv_unified=True)
    ctx = _DryContext(model, more, False, None, "target (one more sequence)", n_rs_seq=n_rs_seq)
    try:
        per_seq = memory_breakdown(ctx.ptr).total("context") - context
    finally:
        ctx.close()
    return per_seq * n_seq if per_seq > 0 else None


def measure(
    target: str | os.PathLike[str],
    settings: MemoryConfig,
    draft: str | os.PathLike[str] | None = None,
    *,
    dry_run: bool = True,
) -> Measurement:
    """Load the pair as llama.cpp would and return the buffer sizes it reports."""
    bindings._install_logger()
    if draft is not None:
        # a mismatched pair trips assertions inside llama.cpp (an abort, not an error): refuse it first
        check_pair(read_shape(target, "target GGUF"), read_shape(draft, "drafter GGUF"))
    n_gpu = -1 if settings.n_gpu_layers is None else settings.n_gpu_layers
    backend = "GPU" if bindings.gpu_offload_supported() else "CPU"
    mtp = settings.mtp and draft is None
    objs: list[_DryModel | _DryContext] = []
    try:
        trunk: dict[str, int] | None = None
        if mtp:  # the weights without the NextN block first, so that its own can be told apart
            tm = _DryModel(Path(target), n_gpu, dry_run, "target")
            objs.append(tm)
            tc = _DryContext(tm, settings, False, None, "target")
            objs.append(tc)
            trunk = memory_breakdown(tc.ptr).model
            for o in (tc, tm):
                o.close()
            objs.clear()
        tm = _DryModel(Path(target), n_gpu, dry_run, "target", load_mtp=mtp)
        objs.append(tm)
        # a hybrid drafting with its own head keeps recurrent-state snapshots (runtime.engine, n_rs_seq)
        state = _has_state(tm)
        head = mtp and int(bindings.C.llama_model_n_layer_nextn(tm.ptr)) > 0
        n_rs = max(1, settings.draft_max) if head and state else 0
        tc = _DryContext(tm, settings, False, None, "target", n_rs_seq=n_rs)
        objs.append(tc)
        res = Measurement(backend=backend, dry_run=dry_run, target=memory_breakdown(tc.ptr), n_ctx=tc.n_ctx)
        res.n_rs_seq = int(bindings.C.llama_n_rs_seq(tc.ptr))  # granted: 0 for a family without rollback
        if state:
            res.target_state = _state_bytes(tm, settings, res.target.total("context"), n_rs)
        if trunk is not None and head:
            mc = _DryContext(tm, settings, False, tc, "MTP", mtp=True)
            objs.append(mc)
            res.mtp = memory_breakdown(mc.ptr)
            full = res.target.model
            res.mtp.model = {k: v - trunk.get(k, 0) for k, v in full.items() if v != trunk.get(k, 0)}
            res.target.model = trunk
        if draft is not None:
            dm = _DryModel(Path(draft), n_gpu, dry_run, "drafter")
            objs.append(dm)
            dc = _DryContext(dm, settings, True, tc, "drafter")
            objs.append(dc)
            res.draft = memory_breakdown(dc.ptr)
        return res
    finally:
        for o in reversed(objs):
            o.close()

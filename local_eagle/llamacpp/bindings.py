"""The one place that touches llama.cpp's C API and pointers.

llama-cpp-python (pinned) binds the public API; the staging API of ``src/llama-ext.h`` is
exported from libllama only under C++-mangled names, so it is bound here by those names.
Everything above this module speaks numpy arrays. Every buffer and callback handed to
llama.cpp is kept referenced by its Python owner for as long as llama.cpp may read it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from local_eagle.errors import LlamaError

try:
    import llama_cpp
    from llama_cpp import llama_cpp as C
except Exception as e:  # pragma: no cover - reported at use
    llama_cpp = None
    C = None
    _IMPORT_ERROR: Exception | None = e
else:
    _IMPORT_ERROR = None

PINNED_VERSION = "0.3.36"

ENCODE = 0  # LLAMA_PROCESS_TYPE_ENCODE
DECODE = 1  # LLAMA_PROCESS_TYPE_DECODE

FLASH_ATTN_AUTO = -1  # LLAMA_FLASH_ATTN_TYPE_AUTO: llama.cpp enables it where every layer's device supports it
FLASH_ATTN_DISABLED = 0
FLASH_ATTN_ENABLED = 1
GGML_TYPE_F16 = 1

_c_ctx = ctypes.c_void_p
_c_model = ctypes.c_void_p
_f32p = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int32)

# name -> (mangled symbol, argtypes, restype); mangling per the Itanium C++ ABI of llama-ext.h
STAGING: dict[str, tuple[str, list, object]] = {
    "set_embeddings_nextn": (
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        [_c_ctx, ctypes.c_bool, ctypes.c_bool],
        None,
    ),
    "get_embeddings_nextn": ("_Z26llama_get_embeddings_nextnP13llama_context", [_c_ctx], _f32p),
    "get_embeddings_nextn_ith": (
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        [_c_ctx, ctypes.c_int32],
        _f32p,
    ),
    "set_embeddings_layer_inp": (
        "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        [_c_ctx, ctypes.c_uint32, ctypes.c_bool],
        None,
    ),
    "get_embeddings_layer_inp": (
        "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
        [_c_ctx, ctypes.c_uint32],
        _f32p,
    ),
    "model_target_layer_ids": ("_Z28llama_model_target_layer_idsPK11llama_model", [_c_model], _i32p),
    "model_target_layer_ids_n": (
        "_Z30llama_model_target_layer_ids_nPK11llama_model",
        [_c_model],
        ctypes.c_uint32,
    ),
}


def _require_llama() -> None:
    if C is None:
        raise LlamaError(
            f"llama-cpp-python is not importable ({_IMPORT_ERROR}); install llama-cpp-python=={PINNED_VERSION}"
        )


class _Staging:
    """Lazily resolved staging symbols; a missing one is a clear error, not a crash."""

    def __init__(self) -> None:
        self._fns: dict[str, Callable] = {}

    def available(self) -> dict[str, bool]:
        _require_llama()
        return {name: hasattr(C._lib, sym) for name, (sym, _, _) in STAGING.items()}

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._fns.get(name)
        if fn is None:
            _require_llama()
            sym, argtypes, restype = STAGING[name]
            try:
                fn = getattr(C._lib, sym)
            except AttributeError:
                raise LlamaError(
                    f"libllama lacks the staging symbol llama_{name} ({sym}); local-eagle needs "
                    f"llama-cpp-python=={PINNED_VERSION}"
                ) from None
            fn.argtypes = argtypes
            fn.restype = restype
            self._fns[name] = fn
        return fn


staging = _Staging()

# --- logging: llama.cpp's chatter is kept, not printed, so errors can quote it -------------------

_log_lines: deque[str] = deque(maxlen=50)
_log_lock = threading.Lock()
_log_cb = None
_backend_ready = False


def _install_logger() -> None:
    global _log_cb, _backend_ready
    if _backend_ready:
        return
    _require_llama()

    @C.llama_log_callback
    def _cb(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if os.environ.get("LOCAL_EAGLE_LLAMA_LOG"):
            print(text.decode("utf-8", "replace"), end="", flush=True)
        with _log_lock:
            _log_lines.append(text.decode("utf-8", "replace"))

    _log_cb = _cb  # must outlive every llama.cpp call
    C.llama_log_set(_log_cb, ctypes.c_void_p(0))
    C.llama_backend_init()
    _backend_ready = True


def last_log_error() -> str:
    """The last error-looking line llama.cpp logged, to make a failure message concrete."""
    with _log_lock:
        lines = [ln.strip() for ln in _log_lines if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if "error" in low or "failed" in low or "wrong" in low or "invalid" in low:
            return ln
    return lines[-1] if lines else ""


def gpu_offload_supported() -> bool:
    _require_llama()
    return bool(C.llama_supports_gpu_offload())


def system_info() -> str:
    _require_llama()
    return C.llama_print_system_info().decode("utf-8", "replace")


# --- model ----------------------------------------------------------------------------------------


class Model:
    """A loaded GGUF model. ``use_extra_bufts`` stays off on CPU builds (AMX repack segfault)."""

    def __init__(self, path: str | os.PathLike[str], n_gpu_layers: int = -1, what: str = "model") -> None:
        _install_logger()
        p = Path(path)
        if not p.is_file():
            raise LlamaError(f"{p}: {what} file not found")
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers if gpu_offload_supported() else 0
        if not gpu_offload_supported():
            params.use_extra_bufts = False
        self._params = params
        ptr = C.llama_model_load_from_file(str(p).encode(), params)
        if not ptr:
            detail = last_log_error()
            raise LlamaError(f"{p}: llama.cpp could not load the {what}" + (f" ({detail})" if detail else ""))
        self.ptr = ptr
        self.path = p
        self.vocab = C.llama_model_get_vocab(ptr)
        self.n_embd = int(C.llama_model_n_embd(ptr))
        self.n_layer = int(C.llama_model_n_layer(ptr))
        self.n_vocab = int(C.llama_vocab_n_tokens(self.vocab))

    def arch(self) -> str:
        buf = ctypes.create_string_buffer(128)
        C.llama_model_meta_val_str(self.ptr, b"general.architecture", buf, len(buf))
        return buf.value.decode()

    def target_layer_ids(self) -> list[int]:
        n = int(staging.model_target_layer_ids_n(self.ptr))
        ids = staging.model_target_layer_ids(self.ptr)
        return [int(ids[i]) for i in range(n)]

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> np.ndarray:
        data = text.encode("utf-8") if isinstance(text, str) else text
        n_max = len(data) + 16
        buf = (ctypes.c_int32 * n_max)()
        n = C.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (ctypes.c_int32 * n_max)()
            n = C.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise LlamaError("llama.cpp failed to tokenize the prompt")
        return np.ctypeslib.as_array(buf)[:n].astype(np.int32)

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = C.llama_token_to_piece(self.vocab, int(token), buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = C.llama_token_to_piece(self.vocab, int(token), buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(C.llama_vocab_is_eog(self.vocab, int(token)))

    def bos(self) -> int:
        return int(C.llama_vocab_bos(self.vocab))

    def close(self) -> None:
        if getattr(self, "ptr", None):
            C.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass


# --- context --------------------------------------------------------------------------------------


@dataclass
class ContextOptions:
    n_ctx: int = 2048
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0  # 0: all cores
    flash_attn: bool | None = None  # None: LLAMA_FLASH_ATTN_TYPE_AUTO, on where the backend supports it
    type_k: int = GGML_TYPE_F16  # KV cache element types (ggml_type)
    type_v: int = GGML_TYPE_F16


class Context:
    """A llama_context plus the batch it is fed through."""

    def __init__(
        self,
        model: Model,
        opts: ContextOptions | None = None,
        ctx_other: Context | None = None,
        cb_eval: Callable | None = None,
    ) -> None:
        opts = opts or ContextOptions()
        params = C.llama_context_default_params()
        params.n_ctx = opts.n_ctx
        params.n_batch = opts.n_batch
        params.n_ubatch = min(opts.n_ubatch, opts.n_batch)
        params.n_seq_max = 1
        threads = opts.n_threads or (os.cpu_count() or 1)
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        if opts.flash_attn is None:
            params.flash_attn_type = FLASH_ATTN_AUTO
        else:
            params.flash_attn_type = FLASH_ATTN_ENABLED if opts.flash_attn else FLASH_ATTN_DISABLED
        params.type_k = opts.type_k
        params.type_v = opts.type_v
        if ctx_other is not None:
            params.ctx_other = ctx_other.ptr
        if cb_eval is not None:
            params.cb_eval = cb_eval
            params.cb_eval_user_data = None
        self._cb_eval = cb_eval  # keep alive
        self._ctx_other = ctx_other  # the other context must outlive this one
        self.model = model
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            detail = last_log_error()
            raise LlamaError(f"{model.path}: llama.cpp could not create a context" + (f" ({detail})" if detail else ""))
        self.ptr = ptr
        self.n_ctx = int(C.llama_n_ctx(ptr))
        self.n_batch = int(C.llama_n_batch(ptr))
        self.n_ubatch = int(C.llama_n_ubatch(ptr))
        self.mem = C.llama_get_memory(ptr)
        self.batch = C.llama_batch_ext_init(ptr)
        self._pos = ctypes.c_int32(0)

    # batches ------------------------------------------------------------------------------------

    def _add_token(self, token: int, pos: int, output: bool, embd: np.ndarray | None) -> None:
        idx = C.llama_batch_ext_add_token(self.batch, 0, int(token))
        if idx < 0:
            raise LlamaError(f"batch rejected token {token} (code {idx}; batch holds at most {self.n_batch})")
        self._pos.value = pos
        C.llama_batch_ext_set_pos(self.batch, idx, ctypes.byref(self._pos))
        if embd is not None:
            e = C.llama_embd(embd.ctypes.data_as(_f32p), 1, embd.shape[-1])
            if not C.llama_batch_ext_set_embd_token(self.batch, idx, e):
                raise LlamaError(f"batch rejected an embedding of width {embd.shape[-1]}: {last_log_error()}")
        if output:
            C.llama_batch_ext_set_output_logits(self.batch, idx, True)

    def _add_embd(self, row: np.ndarray, pos: int, output: bool) -> None:
        e = C.llama_embd(row.ctypes.data_as(_f32p), 1, row.shape[-1])
        idx = C.llama_batch_ext_add_embd(self.batch, 0, e)
        if idx < 0:
            raise LlamaError(f"batch rejected an embedding row of width {row.shape[-1]} (code {idx})")
        self._pos.value = pos
        C.llama_batch_ext_set_pos(self.batch, idx, ctypes.byref(self._pos))
        if output:
            C.llama_batch_ext_set_output_logits(self.batch, idx, True)

    def _run(self, kind: int, what: str) -> None:
        rc = C.llama_process(self.ptr, kind, self.batch)
        if rc != 0:
            hint = " (context full)" if rc == 1 else ""
            raise LlamaError(f"llama.cpp {what} failed with code {rc}{hint}: {last_log_error()}")

    def decode(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        outputs: np.ndarray | bool = False,
        embd: np.ndarray | None = None,
    ) -> None:
        """Decode rows (token, position[, embedding]); ``outputs`` marks rows whose logits are kept."""
        n = len(tokens)
        if n > self.n_batch:
            raise LlamaError(f"batch of {n} rows exceeds n_batch={self.n_batch}")
        out = np.broadcast_to(np.asarray(outputs, dtype=bool), (n,))
        if embd is not None:
            embd = np.ascontiguousarray(embd, dtype=np.float32)
        C.llama_batch_ext_clear(self.batch)
        for i in range(n):
            self._add_token(int(tokens[i]), int(positions[i]), bool(out[i]), None if embd is None else embd[i])
        self._run(DECODE, "decode")

    def encode_rows(self, rows: np.ndarray, positions: np.ndarray) -> None:
        """Run the encoder graph over embedding rows (every row is an output)."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        C.llama_batch_ext_clear(self.batch)
        for i in range(len(rows)):
            self._add_embd(rows[i], int(positions[i]), True)
        self._run(ENCODE, "encode")

    # outputs ------------------------------------------------------------------------------------

    def logits(self, i: int, n_vocab: int) -> np.ndarray:
        ptr = C.llama_get_logits_ith(self.ptr, i)
        if not ptr:
            raise LlamaError(f"llama.cpp has no logits for output row {i}")
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()

    def embeddings_nextn(self, n_rows: int, width: int) -> np.ndarray:
        ptr = staging.get_embeddings_nextn(self.ptr)
        if not ptr:
            raise LlamaError("llama.cpp returned no nextn embeddings (was set_embeddings_nextn called?)")
        return np.ctypeslib.as_array(ptr, shape=(n_rows, width)).copy()

    def embeddings_nextn_ith(self, i: int, width: int) -> np.ndarray:
        ptr = staging.get_embeddings_nextn_ith(self.ptr, i)
        if not ptr:
            raise LlamaError(f"llama.cpp returned no nextn embedding for output row {i}")
        return np.ctypeslib.as_array(ptr, shape=(width,)).copy()

    def set_embeddings_nextn(self, value: bool, masked: bool) -> None:
        staging.set_embeddings_nextn(self.ptr, value, masked)

    def set_layer_capture(self, layer: int, value: bool) -> None:
        staging.set_embeddings_layer_inp(self.ptr, layer, value)

    def layer_input(self, layer: int, n_rows: int, width: int) -> np.ndarray:
        ptr = staging.get_embeddings_layer_inp(self.ptr, layer)
        if not ptr:
            raise LlamaError(f"llama.cpp captured no input for layer {layer}")
        return np.ctypeslib.as_array(ptr, shape=(n_rows, width)).copy()

    # memory -------------------------------------------------------------------------------------

    def remove_from(self, pos: int) -> None:
        """Drop KV entries at positions >= pos."""
        if not C.llama_memory_seq_rm(self.mem, 0, pos, -1):
            raise LlamaError(f"llama.cpp could not roll its cache back to position {pos}")

    def clear(self) -> None:
        C.llama_memory_clear(self.mem, True)

    def pos_max(self) -> int:
        return int(C.llama_memory_seq_pos_max(self.mem, 0))

    def close(self) -> None:
        if getattr(self, "batch", None):
            C.llama_batch_ext_free(self.batch)
            self.batch = None
        if getattr(self, "ptr", None):
            C.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


def llama_cpp_version() -> str | None:
    return getattr(llama_cpp, "__version__", None) if llama_cpp is not None else None


# ==================================================================================================
# Eval-callback capture: ggml tensors seen by ``llama_context_params.cb_eval``.
#
# For architectures whose graph does not register layer inputs (``t_layer_inp``), the hidden
# states are copied out of the graph while it runs: the scheduler asks the callback about every
# node (ask=True), computes up to a node the callback wants, then hands it over (ask=False).
# ==================================================================================================

GGML_TYPE_F32 = 0
_GGML_MAX_DIMS = 4
_GGML_MAX_SRC = 10
_GGML_MAX_OP_PARAMS = 64
_GGML_MAX_NAME = 64


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` of the pinned ggml (ggml/include/ggml.h); checked against libggml at first use."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * _GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * _GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (_GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * _GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * _GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


_NAME_OFFSET = GgmlTensor.name.offset

# typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor * t, bool ask, void * user_data);
EvalCallback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)

_ggml: ctypes.CDLL | None = None
_layout_checked = False


def _ggml_base() -> ctypes.CDLL:
    """libggml-base from the directory libllama was loaded from (already mapped into the process)."""
    global _ggml
    if _ggml is None:
        _require_llama()
        libdir = Path(C._lib._name).resolve().parent
        candidates = sorted(libdir.glob("libggml-base.so*")) + sorted(libdir.glob("libggml-base.dylib"))
        candidates += sorted(libdir.glob("ggml-base.dll"))
        if not candidates:
            raise LlamaError(f"libggml-base not found next to libllama in {libdir}")
        lib = ctypes.CDLL(str(candidates[0]))
        lib.ggml_get_name.argtypes = [ctypes.c_void_p]
        lib.ggml_get_name.restype = ctypes.c_void_p
        lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
        lib.ggml_nbytes.restype = ctypes.c_size_t
        lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        lib.ggml_backend_tensor_get.restype = None
        _ggml = lib
    return _ggml


def _check_name_offset(t: int) -> None:
    global _layout_checked
    if not _layout_checked:
        if _ggml_base().ggml_get_name(t) != t + _NAME_OFFSET:
            raise LlamaError(_layout_error())
        _layout_checked = True


def _layout_error() -> str:
    return (
        f"the ggml in llama-cpp-python {llama_cpp_version()} lays out struct ggml_tensor differently than "
        f"local-eagle expects (pinned {PINNED_VERSION}); cannot capture hidden states through cb_eval"
    )


def make_capture_callback(wanted: dict[bytes, int], on_tensor: Callable[[int, int, bool], bool]) -> EvalCallback:
    """A cb_eval that hands the graph nodes named in ``wanted`` to ``on_tensor(slot, tensor, ask)``.

    The scheduler asks about every node of every graph, so the common case (a node nobody wants)
    costs one 8-byte read of its name. The caller must keep the returned object alive while the
    context exists. An exception never unwinds into C (ctypes would print it and return False,
    stopping the scheduler halfway through a graph): the node is declined (ask) or the graph goes on.
    """
    import sys

    heads = {int.from_bytes(name[:8].ljust(8, b"\0"), sys.byteorder) for name in wanted}
    read_u64 = ctypes.c_uint64.from_address
    string_at = ctypes.string_at
    off = _NAME_OFFSET

    def _cb(t: int | None, ask: bool, user_data: int | None) -> bool:
        try:
            if read_u64(t + off).value not in heads:  # type: ignore[operator]
                return False
            slot = wanted.get(string_at(t + off))  # type: ignore[operator]
            if slot is None:
                return False
            return bool(on_tensor(slot, t, bool(ask)))  # type: ignore[arg-type]
        except BaseException:
            return not ask

    return EvalCallback(_cb)


def tensor_name(t: int) -> bytes:
    """The node's name (``ggml_get_name``), read straight from the struct: this runs for every graph node."""
    return ctypes.string_at(t + _NAME_OFFSET)


def f32_matrix_shape(t: int) -> tuple[int, int]:
    """(rows, width) of a contiguous 2-D f32 tensor, else LlamaError; also proves GgmlTensor matches ggml."""
    _check_name_offset(t)
    info = GgmlTensor.from_address(t)
    ne0, ne1, ne2, ne3 = info.ne
    if info.type != GGML_TYPE_F32:
        raise LlamaError(f"graph tensor {_name_str(t)} has ggml type {info.type}, not f32")
    if info.nb[0] != 4 or info.nb[1] != 4 * ne0 or ne2 != 1 or ne3 != 1:
        raise LlamaError(f"graph tensor {_name_str(t)} is not a contiguous matrix (ne={ne0},{ne1},{ne2},{ne3})")
    if _ggml_base().ggml_nbytes(t) != 4 * ne0 * ne1:
        raise LlamaError(_layout_error())
    return ne1, ne0


def tensor_get_into(t: int, out: np.ndarray) -> None:
    """Copy the first ``out.nbytes`` bytes of a computed tensor (any backend) into a C-contiguous array."""
    if not out.flags.c_contiguous:
        raise ValueError("tensor_get_into needs a C-contiguous destination")
    lib = _ggml_base()
    if out.nbytes > lib.ggml_nbytes(t):
        raise LlamaError(f"graph tensor {_name_str(t)} is smaller than the requested copy")
    lib.ggml_backend_tensor_get(t, out.ctypes.data, 0, out.nbytes)


def _name_str(t: int) -> str:
    return tensor_name(t).decode(errors="replace")


def layer_input_view(ctx: Context, layer: int, n_rows: int, width: int) -> np.ndarray:
    """llama.cpp's staged input of ``layer`` for the last decode, as a view valid until the next decode.

    The caller must know the staging buffer exists (layer enabled before a decode that ran), or
    llama.cpp aborts the process.
    """
    ptr = staging.get_embeddings_layer_inp(ctx.ptr, layer)
    if not ptr:
        raise LlamaError(f"llama.cpp captured no input for layer {layer}")
    return np.ctypeslib.as_array(ptr, shape=(n_rows, width))


def eval_callback_of(ctx: Context) -> object | None:
    """The cb_eval a Context was created with (None if none), so a capture can check it is the one it owns."""
    return ctx._cb_eval


def log_lines() -> list[str]:
    """The lines llama.cpp logged most recently (at most 50), oldest first."""
    with _log_lock:
        return [ln.rstrip("\n") for ln in _log_lines]


# ==================================================================================================
# ggml backend registry and log capture, for ``local-eagle doctor``.
#
# The registry says which backends this libllama was built with (CPU, CUDA, Metal, Vulkan, ...)
# and which devices they found; llama-cpp-python does not bind it, so it is bound here.
# ==================================================================================================

_DEV_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_ggml_main: ctypes.CDLL | None = None


@dataclass(frozen=True)
class BackendDevice:
    """One device of one registered ggml backend (memory in bytes, as the backend reports it)."""

    backend: str
    name: str
    description: str
    kind: str
    free: int
    total: int


def _sibling_lib(stem: str) -> ctypes.CDLL:
    _require_llama()
    libdir = Path(C._lib._name).resolve().parent
    candidates = sorted(libdir.glob(f"lib{stem}.so*")) + sorted(libdir.glob(f"lib{stem}.dylib"))
    candidates += sorted(libdir.glob(f"{stem}.dll"))
    if not candidates:
        raise LlamaError(f"lib{stem} not found next to libllama in {libdir}")
    return ctypes.CDLL(str(candidates[0]))


def _registry() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """(libggml with the registry, libggml-base with the device accessors), typed once."""
    global _ggml_main
    _install_logger()
    base = _ggml_base()
    if _ggml_main is None:
        lib = _sibling_lib("ggml")
        lib.ggml_backend_reg_count.argtypes = []
        lib.ggml_backend_reg_count.restype = ctypes.c_size_t
        lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
        lib.ggml_backend_reg_get.restype = ctypes.c_void_p
        for fn, restype in (
            ("ggml_backend_reg_name", ctypes.c_char_p),
            ("ggml_backend_reg_dev_count", ctypes.c_size_t),
            ("ggml_backend_dev_name", ctypes.c_char_p),
            ("ggml_backend_dev_description", ctypes.c_char_p),
            ("ggml_backend_dev_type", ctypes.c_int),
        ):
            f = getattr(base, fn)
            f.argtypes = [ctypes.c_void_p]
            f.restype = restype
        base.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        base.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
        base.ggml_backend_dev_memory.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        base.ggml_backend_dev_memory.restype = None
        _ggml_main = lib
    return _ggml_main, base


def backend_names() -> list[str]:
    """Every backend registered in this build, in registry order (a backend may have no device)."""
    lib, base = _registry()
    names = []
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        names.append((base.ggml_backend_reg_name(reg) or b"?").decode("utf-8", "replace"))
    return names


def backend_devices() -> list[BackendDevice]:
    """Every device the registered backends found, with the memory each reports."""
    lib, base = _registry()
    devices = []
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        backend = (base.ggml_backend_reg_name(reg) or b"?").decode("utf-8", "replace")
        for j in range(base.ggml_backend_reg_dev_count(reg)):
            dev = base.ggml_backend_reg_dev_get(reg, j)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            base.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            devices.append(
                BackendDevice(
                    backend=backend,
                    name=(base.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
                    description=(base.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                    kind=_DEV_KINDS.get(int(base.ggml_backend_dev_type(dev)), "unknown"),
                    free=int(free.value),
                    total=int(total.value),
                )
            )
    return devices


class LogCapture:
    """Every line llama.cpp logs inside a ``with`` block, unbounded (``log_lines`` keeps only 50).

    A model load logs one line per tensor and a row of progress dots, which pushes the few
    lines saying where the weights went out of the short buffer.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._saved: deque[str] | None = None

    def __enter__(self) -> LogCapture:
        global _log_lines
        _install_logger()
        with _log_lock:
            self._saved = _log_lines
            _log_lines = deque()
        return self

    def __exit__(self, *exc: object) -> None:
        global _log_lines
        with _log_lock:
            captured, _log_lines = _log_lines, self._saved or deque(maxlen=50)
            self.lines = [ln.rstrip("\n") for ln in captured]
            _log_lines.extend(captured)


_FTYPES = {"f16": 1, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str = "q4_k_m", threads: int = 0) -> Path:
    """Quantise a GGUF with llama.cpp's own recipe (``llama_model_quantize``, what ``llama-quantize`` runs).

    llama-cpp-python ships no ``llama-quantize`` binary, but its libllama has the function.
    """
    _install_logger()
    code = _FTYPES.get(ftype.lower())
    if code is None:
        raise LlamaError(f"unknown quantisation type {ftype!r}; expected one of {', '.join(_FTYPES)}")
    params = C.llama_model_quantize_default_params()
    params.ftype = code
    params.nthread = threads
    rc = C.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise LlamaError(f"{src}: llama.cpp could not quantise to {ftype} ({last_log_error()})")
    return Path(dst)

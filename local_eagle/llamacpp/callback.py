"""Graph tensors seen by ``llama_context_params.cb_eval``, for capturing hidden states.

For architectures whose graph does not register layer inputs (``t_layer_inp``), the hidden
states are copied out of the graph while it runs: the scheduler asks the callback about every
node (ask=True), computes up to a node the callback wants, then hands it over (ask=False).
The callback reads ``struct ggml_tensor`` directly, so its layout is checked against libggml
the first time a tensor is taken.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

import numpy as np

from local_eagle.errors import LlamaError
from local_eagle.llamacpp.lib import PINNED_VERSION, llama_cpp_version, sibling_library

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

_layout_checked = False


@functools.cache
def _ggml_base() -> ctypes.CDLL:
    """libggml-base with the tensor accessors the callback needs, typed once."""
    library = sibling_library("ggml-base")
    library.ggml_get_name.argtypes = [ctypes.c_void_p]
    library.ggml_get_name.restype = ctypes.c_void_p
    library.ggml_nbytes.argtypes = [ctypes.c_void_p]
    library.ggml_nbytes.restype = ctypes.c_size_t
    library.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    library.ggml_backend_tensor_get.restype = None
    return library


def _check_name_offset(tensor: int) -> None:
    global _layout_checked
    if not _layout_checked:
        if _ggml_base().ggml_get_name(tensor) != tensor + _NAME_OFFSET:
            raise LlamaError(_layout_error())
        _layout_checked = True


def _layout_error() -> str:
    return (
        f"the ggml in llama-cpp-python {llama_cpp_version()} lays out struct ggml_tensor differently than "
        f"local-eagle expects (pinned {PINNED_VERSION}); cannot capture hidden states through cb_eval"
    )


def make_capture_callback(
    wanted: dict[bytes, int], on_tensor: Callable[[int, int, bool], bool], idle: list[bool] | None = None
) -> EvalCallback:
    """A cb_eval that hands the graph nodes named in ``wanted`` to ``on_tensor(slot, tensor, ask)``.

    The scheduler asks about every node of every graph, so the common case (a node nobody wants)
    costs one 8-byte read of its name. While ``idle[0]`` is true (a paused capture) every node is
    declined before that read: the scheduler still asks, through ctypes (about 0.36 us a node), but
    the read cost more again (727 nodes a 1-row decode of Gemma 3 270M: 0.92 ms over the target
    alone's 22.6 with it, 0.35 without).
    The caller must keep the returned object alive while the context exists. An exception never
    unwinds into C (ctypes would print it and return False, stopping the scheduler halfway through a
    graph): the node is declined (ask) or the graph goes on.
    """
    heads = {int.from_bytes(name[:8].ljust(8, b"\0"), sys.byteorder) for name in wanted}
    read_u64 = ctypes.c_uint64.from_address
    string_at = ctypes.string_at
    offset = _NAME_OFFSET
    idle = [False] if idle is None else idle

    def _callback(tensor: int | None, ask: bool, user_data: int | None) -> bool:
        if idle[0]:
            return False
        try:
            if read_u64(tensor + offset).value not in heads:  # type: ignore[operator]
                return False
            slot = wanted.get(string_at(tensor + offset))  # type: ignore[operator]
            if slot is None:
                return False
            return bool(on_tensor(slot, tensor, bool(ask)))  # type: ignore[arg-type]
        except BaseException:
            return not ask

    return EvalCallback(_callback)


def tensor_name(tensor: int) -> bytes:
    """The node's name (``ggml_get_name``), read straight from the struct: this runs for every graph node."""
    return ctypes.string_at(tensor + _NAME_OFFSET)


def f32_matrix_shape(tensor: int) -> tuple[int, int]:
    """(rows, width) of a contiguous 2-D f32 tensor, else LlamaError; also proves GgmlTensor matches ggml."""
    _check_name_offset(tensor)
    info = GgmlTensor.from_address(tensor)
    ne0, ne1, ne2, ne3 = info.ne
    if info.type != GGML_TYPE_F32:
        raise LlamaError(f"graph tensor {_name_str(tensor)} has ggml type {info.type}, not f32")
    if info.nb[0] != 4 or info.nb[1] != 4 * ne0 or ne2 != 1 or ne3 != 1:
        raise LlamaError(f"graph tensor {_name_str(tensor)} is not a contiguous matrix (ne={ne0},{ne1},{ne2},{ne3})")
    if _ggml_base().ggml_nbytes(tensor) != 4 * ne0 * ne1:
        raise LlamaError(_layout_error())
    return ne1, ne0


def tensor_get_into(tensor: int, out: np.ndarray) -> None:
    """Copy the first ``out.nbytes`` bytes of a computed tensor (any backend) into a C-contiguous array."""
    if not out.flags.c_contiguous:
        raise ValueError("tensor_get_into needs a C-contiguous destination")
    library = _ggml_base()
    if out.nbytes > library.ggml_nbytes(tensor):
        raise LlamaError(f"graph tensor {_name_str(tensor)} is smaller than the requested copy")
    library.ggml_backend_tensor_get(tensor, out.ctypes.data, 0, out.nbytes)


def _name_str(tensor: int) -> str:
    return tensor_name(tensor).decode(errors="replace")

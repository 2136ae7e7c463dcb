"""What this libllama was built with, and llama.cpp's own quantiser, for ``doctor`` and ``bench``.

The ggml backend registry says which backends the build has (CPU, CUDA, Metal, Vulkan, ...)
and which devices they found; llama-cpp-python does not bind it, so it is bound here.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from local_eagle.errors import LlamaError
from local_eagle.llamacpp.lib import C, init_backend, last_log_error, require_llama, sibling_library

_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_FTYPES = {"f16": 1, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


@dataclass(frozen=True)
class BackendDevice:
    """One device of one registered ggml backend (memory in bytes, as the backend reports it)."""

    backend: str
    name: str
    description: str
    kind: str
    free: int
    total: int


def gpu_offload_supported() -> bool:
    require_llama()
    return bool(C.llama_supports_gpu_offload())


def system_info() -> str:
    require_llama()
    return C.llama_print_system_info().decode("utf-8", "replace")


@functools.cache
def _registry() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """(libggml with the registry, libggml-base with the device accessors), typed once."""
    init_backend()
    base = sibling_library("ggml-base")
    registry = sibling_library("ggml")
    registry.ggml_backend_reg_count.argtypes = []
    registry.ggml_backend_reg_count.restype = ctypes.c_size_t
    registry.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    registry.ggml_backend_reg_get.restype = ctypes.c_void_p
    for name, restype in (
        ("ggml_backend_reg_name", ctypes.c_char_p),
        ("ggml_backend_reg_dev_count", ctypes.c_size_t),
        ("ggml_backend_dev_name", ctypes.c_char_p),
        ("ggml_backend_dev_description", ctypes.c_char_p),
        ("ggml_backend_dev_type", ctypes.c_int),
    ):
        function = getattr(base, name)
        function.argtypes = [ctypes.c_void_p]
        function.restype = restype
    base.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    base.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    size_pointer = ctypes.POINTER(ctypes.c_size_t)
    base.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_pointer, size_pointer]
    base.ggml_backend_dev_memory.restype = None
    return registry, base


def _text(value: bytes | None, default: str) -> str:
    return (value or default.encode()).decode("utf-8", "replace")


def backend_names() -> list[str]:
    """Every backend registered in this build, in registry order (a backend may have no device)."""
    registry, base = _registry()
    return [
        _text(base.ggml_backend_reg_name(registry.ggml_backend_reg_get(i)), "?")
        for i in range(registry.ggml_backend_reg_count())
    ]


def backend_devices() -> list[BackendDevice]:
    """Every device the registered backends found, with the memory each reports."""
    registry, base = _registry()
    devices = []
    for i in range(registry.ggml_backend_reg_count()):
        reg = registry.ggml_backend_reg_get(i)
        backend = _text(base.ggml_backend_reg_name(reg), "?")
        for j in range(base.ggml_backend_reg_dev_count(reg)):
            device = base.ggml_backend_reg_dev_get(reg, j)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            base.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
            devices.append(
                BackendDevice(
                    backend=backend,
                    name=_text(base.ggml_backend_dev_name(device), ""),
                    description=_text(base.ggml_backend_dev_description(device), ""),
                    kind=_DEVICE_KINDS.get(int(base.ggml_backend_dev_type(device)), "unknown"),
                    free=int(free.value),
                    total=int(total.value),
                )
            )
    return devices


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str = "q4_k_m", threads: int = 0) -> Path:
    """Quantise a GGUF with llama.cpp's own recipe (``llama_model_quantize``, what ``llama-quantize`` runs).

    llama-cpp-python ships no ``llama-quantize`` binary, but its libllama has the function.
    """
    init_backend()
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

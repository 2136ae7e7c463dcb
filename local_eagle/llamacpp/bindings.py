"""The names of the former single ctypes module, re-exported from the modules that now hold them.

New code imports from ``lib``, ``staging``, ``model``, ``callback`` or ``backends`` directly.
"""

from __future__ import annotations

from local_eagle.errors import LlamaError
from local_eagle.llamacpp.backends import (
    BackendDevice,
    backend_devices,
    backend_names,
    gpu_offload_supported,
    quantize,
    system_info,
)
from local_eagle.llamacpp.callback import (
    GGML_TYPE_F32,
    EvalCallback,
    GgmlTensor,
    f32_matrix_shape,
    make_capture_callback,
    tensor_get_into,
    tensor_name,
)
from local_eagle.llamacpp.lib import (
    IMPORT_ERROR,
    PINNED_VERSION,
    C,
    LogCapture,
    init_backend,
    last_log_error,
    llama_cpp,
    llama_cpp_version,
    log_lines,
    require_llama,
)
from local_eagle.llamacpp.model import (
    DECODE,
    ENCODE,
    FLASH_ATTN_AUTO,
    FLASH_ATTN_DISABLED,
    FLASH_ATTN_ENABLED,
    GGML_TYPE_F16,
    Context,
    ContextOptions,
    Model,
    eval_callback_of,
    layer_input_view,
)
from local_eagle.llamacpp.staging import STAGING, staging

_IMPORT_ERROR = IMPORT_ERROR
_install_logger = init_backend
_require_llama = require_llama

__all__ = [
    "DECODE",
    "ENCODE",
    "FLASH_ATTN_AUTO",
    "FLASH_ATTN_DISABLED",
    "FLASH_ATTN_ENABLED",
    "GGML_TYPE_F16",
    "GGML_TYPE_F32",
    "PINNED_VERSION",
    "STAGING",
    "BackendDevice",
    "C",
    "Context",
    "ContextOptions",
    "EvalCallback",
    "GgmlTensor",
    "LlamaError",
    "LogCapture",
    "Model",
    "backend_devices",
    "backend_names",
    "eval_callback_of",
    "f32_matrix_shape",
    "gpu_offload_supported",
    "last_log_error",
    "layer_input_view",
    "llama_cpp",
    "llama_cpp_version",
    "log_lines",
    "make_capture_callback",
    "quantize",
    "staging",
    "system_info",
    "tensor_get_into",
    "tensor_name",
]

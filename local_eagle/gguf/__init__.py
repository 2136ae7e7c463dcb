"""GGUF files as local-eagle reads them: the header reader, model info and the drafter key schema.

Imported by the runtime, the planner and ``converters/`` alike, so that a key's name lives once.
"""

from local_eagle.gguf.info import ModelInfo, model_info, read_model_info
from local_eagle.gguf.keys import DRAFTER_ARCH
from local_eagle.gguf.reader import (
    ArrayInfo,
    GGUFHeader,
    Tensor,
    copy_fields,
    field_value,
    open_gguf,
    pad,
    read_header,
    tensor_f32,
)

__all__ = [
    "DRAFTER_ARCH",
    "ArrayInfo",
    "GGUFHeader",
    "ModelInfo",
    "Tensor",
    "copy_fields",
    "field_value",
    "model_info",
    "open_gguf",
    "pad",
    "read_header",
    "read_model_info",
    "tensor_f32",
]

"""GGUF files as local-eagle reads them: the header reader, model info, the drafter key schema and
the pair check.

Imported by the runtime, the planner and ``converters/`` alike, so that a key's name lives once.
"""

from local_eagle.gguf.info import ModelInfo, eagle_version, model_info, read_model_info
from local_eagle.gguf.keys import DRAFTER_ARCH
from local_eagle.gguf.pair import check_pair, require_drafter
from local_eagle.gguf.reader import (
    ArrayInfo,
    GGUFHeader,
    Tensor,
    copy_fields,
    field_value,
    open_gguf,
    pad,
    read_header,
    split_tensors,
    tensor_f32,
)

__all__ = [
    "DRAFTER_ARCH",
    "ArrayInfo",
    "GGUFHeader",
    "ModelInfo",
    "Tensor",
    "check_pair",
    "copy_fields",
    "eagle_version",
    "field_value",
    "model_info",
    "open_gguf",
    "pad",
    "read_header",
    "read_model_info",
    "require_drafter",
    "split_tensors",
    "tensor_f32",
]

"""Converters from EAGLE 3 / 3.1 drafter checkpoints to GGUF for llama.cpp's eagle3 architecture."""

from converters.eagle3_gguf import ConvertResult, convert
from converters.formats import Checkpoint, read_checkpoint, write_checkpoint

__all__ = ["Checkpoint", "ConvertResult", "convert", "read_checkpoint", "write_checkpoint"]

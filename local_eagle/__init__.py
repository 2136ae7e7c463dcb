"""local-eagle: EAGLE 3.1 speculative decoding for llama.cpp / GGUF on one consumer GPU."""

from local_eagle.errors import CheckpointError, GGUFError, LlamaError, LocalEagleError

__version__ = "0.1.0"

DEFAULT_CTX = 4096
"""The context length in tokens when nothing names one (``num_ctx``'s default). In the base package so that every
layer that opens or prices a context (llama.cpp's context, the engine, the planner, ``fit``, the settings) starts
from the same number."""

__all__ = ["DEFAULT_CTX", "CheckpointError", "GGUFError", "LlamaError", "LocalEagleError", "__version__"]

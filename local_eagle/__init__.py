"""local-eagle: EAGLE 3.1 speculative decoding for llama.cpp / GGUF on one consumer GPU."""

from local_eagle.errors import CheckpointError, GGUFError, LlamaError, LocalEagleError

__version__ = "0.1.0"

__all__ = ["CheckpointError", "GGUFError", "LlamaError", "LocalEagleError", "__version__"]

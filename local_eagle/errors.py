"""One exception type for every user-facing failure.

The CLI prints ``str(err)`` on one line and exits with status 2, so messages must name the
file or field at fault and what was expected; they never carry a traceback.
"""

from __future__ import annotations


class LocalEagleError(Exception):
    """A problem with the user's input or environment, reported as one line."""


class CheckpointError(LocalEagleError):
    """A drafter checkpoint cannot be read or does not describe a valid EAGLE drafter."""


class GGUFError(LocalEagleError):
    """A GGUF file is unreadable or lacks what local-eagle needs."""


class LlamaError(LocalEagleError):
    """llama.cpp refused a model, a context or a batch."""

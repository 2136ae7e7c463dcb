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


def too_long(e: BaseException) -> bool:
    """Whether ``e`` is the system refusing a path as too long (ENAMETOOLONG), which any ``stat`` or ``open``
    of a user's path can raise, ``Path.exists`` included, before a command's own checks can word it."""
    import errno

    return isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG


def path_too_long(path: object) -> str:
    """The one line for a path the system refuses as too long: the path cut to its two ends, and the limits."""
    import os

    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path or "a path")
    shown = text if len(text) <= 100 else f"{text[:60]}...{text[-30:]}"
    return (
        f"{shown}: the path is longer than this system allows ({len(text)} characters; at most "
        f"{_limit('PC_NAME_MAX', 255)} bytes a name, {_limit('PC_PATH_MAX', 4096)} a path)"
    )


def _limit(name: str, default: int) -> int:
    import os

    try:
        return os.pathconf("/", name)
    except (OSError, ValueError, AttributeError):
        return default

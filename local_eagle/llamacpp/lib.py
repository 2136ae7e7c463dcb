"""libllama as llama-cpp-python (pinned) loads it, its sibling ggml libraries, and its log.

Importing llama-cpp-python never raises here: a missing or broken install is reported by the
first call that needs it, so ``local-eagle doctor`` can still run and say how to fix it.
llama.cpp's log is kept, not printed, so that errors can quote the line that explains them.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections import deque
from pathlib import Path

from local_eagle.errors import LlamaError

try:
    import llama_cpp
    from llama_cpp import llama_cpp as C
except Exception as e:  # pragma: no cover - reported at use
    llama_cpp = None
    C = None
    IMPORT_ERROR: Exception | None = e
else:
    IMPORT_ERROR = None

PINNED_VERSION = "0.3.36"

_log_lines: deque[str] = deque(maxlen=50)
_log_lock = threading.Lock()
_log_callback = None
_backend_ready = False


def require_llama() -> None:
    if C is None:
        raise LlamaError(
            f"llama-cpp-python is not importable ({IMPORT_ERROR}); install llama-cpp-python=={PINNED_VERSION}"
        )


def llama_cpp_version() -> str | None:
    return getattr(llama_cpp, "__version__", None) if llama_cpp is not None else None


def library_dir() -> Path:
    """The directory libllama was loaded from; its ggml libraries sit next to it."""
    require_llama()
    return Path(C._lib._name).resolve().parent


@functools.cache
def sibling_library(stem: str) -> ctypes.CDLL:
    """``lib{stem}`` from libllama's directory (already mapped into the process by libllama).

    Loaded once, so that argtypes set by one caller hold for every caller.
    """
    directory = library_dir()
    candidates = sorted(directory.glob(f"lib{stem}.so*")) + sorted(directory.glob(f"lib{stem}.dylib"))
    candidates += sorted(directory.glob(f"{stem}.dll"))
    if not candidates:
        raise LlamaError(f"lib{stem} not found next to libllama in {directory}")
    return ctypes.CDLL(str(candidates[0]))


def init_backend() -> None:
    """Route llama.cpp's log into a buffer and initialise its backends, once per process."""
    global _log_callback, _backend_ready
    if _backend_ready:
        return
    require_llama()

    @C.llama_log_callback
    def _keep(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if os.environ.get("LOCAL_EAGLE_LLAMA_LOG"):
            print(text.decode("utf-8", "replace"), end="", flush=True)
        with _log_lock:
            _log_lines.append(text.decode("utf-8", "replace"))

    _log_callback = _keep  # must outlive every llama.cpp call
    C.llama_log_set(_log_callback, ctypes.c_void_p(0))
    C.llama_backend_init()
    _backend_ready = True


def last_log_error() -> str:
    """The last error-looking line llama.cpp logged, to make a failure message concrete."""
    with _log_lock:
        lines = [line.strip() for line in _log_lines if line.strip()]
    for line in reversed(lines):
        lower = line.lower()
        if "error" in lower or "failed" in lower or "wrong" in lower or "invalid" in lower:
            return line
    return lines[-1] if lines else ""


def log_lines() -> list[str]:
    """The lines llama.cpp logged most recently (at most 50), oldest first."""
    with _log_lock:
        return [line.rstrip("\n") for line in _log_lines]


class LogCapture:
    """Every line llama.cpp logs inside a ``with`` block, unbounded (``log_lines`` keeps only 50).

    A model load logs one line per tensor and a row of progress dots, which pushes the few
    lines saying where the weights went out of the short buffer.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._saved: deque[str] | None = None

    def __enter__(self) -> LogCapture:
        global _log_lines
        init_backend()
        with _log_lock:
            self._saved = _log_lines
            _log_lines = deque()
        return self

    def __exit__(self, *exc: object) -> None:
        global _log_lines
        with _log_lock:
            captured, _log_lines = _log_lines, self._saved or deque(maxlen=50)
            self.lines = [line.rstrip("\n") for line in captured]
            _log_lines.extend(captured)

"""Writing output files without losing data.

``convert`` and ``train`` write large files next to large inputs, so three things must hold: an
output path that names one of the inputs (the same file, a hard link, a symlink to it) is refused
before anything is read, since the atomic rename would replace the input with the output; a file
only ever appears under its final name complete; and the hidden temporary file it is written to
disappears on every way out, including SIGTERM and SIGHUP, whose default action kills the process
without running a single ``finally`` block. Every failure is one line (``LocalEagleError``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from local_eagle.errors import LocalEagleError

# Signals whose default action ends the process; SIGINT already raises KeyboardInterrupt.
CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP raised as an exception so that cleanup code runs.

    A ``KeyboardInterrupt`` so that every caller that already stops cleanly on Ctrl-C (the CLI
    prints one line and exits non-zero) treats a kill the same way.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM / SIGHUP into ``Terminated`` inside the block; put the old handlers back after.

    Only signals left at their default action are taken over: one a caller ignores (``nohup``)
    or handles itself (a server shutting down) keeps its meaning. Python lets only the main
    thread install handlers, so elsewhere this does nothing. A second signal while the first
    is being cleaned up is swallowed, so that cleanup cannot be cut short.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise Terminated(signum)

    previous = {}
    for sig in CLEANUP_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _same_file(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _writable(path: Path, start: Path, option: str) -> None:
    """The nearest existing one of ``start`` and its ancestors must be a directory we may write in."""
    parent = start.absolute()
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise LocalEagleError(f"{option}: cannot create {path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise LocalEagleError(f"{option}: cannot write {path}: directory {parent} is not writable")


def check_output_file(
    path: str | os.PathLike[str], option: str, inputs: Iterable[tuple[str, str | os.PathLike[str]]] = ()
) -> Path:
    """Refuse an output file path that cannot be written or that would replace one of ``inputs``.

    ``option`` names the command-line option for the message; ``inputs`` are (what, path) pairs,
    e.g. ("target GGUF", "model.gguf"). Checked up front, so nothing is read or computed for an
    output that would fail at the end.
    """
    text = os.fspath(path)
    out = Path(text)
    if text in ("", "."):
        raise LocalEagleError(f"{option}: empty path, expected a file name")
    if out.is_dir():
        raise LocalEagleError(f"{option}: {out} is a directory, expected a file path")
    _writable(out, out.parent, option)
    for what, inp in inputs:
        if _same_file(out, Path(inp)):
            raise LocalEagleError(
                f"{option}: {out} is the {what} ({inp}); writing there would destroy it, pick another path"
            )
    return out


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """Refuse an output directory path that is a file, or that cannot be created or written in."""
    text = os.fspath(path)
    out = Path(text)
    if text == "":
        raise LocalEagleError(f"{option}: empty path, expected a directory")
    if out.exists() and not out.is_dir():
        raise LocalEagleError(f"{option}: {out} is a file, expected a directory")
    _writable(out, out, option)
    return out


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only when the block succeeds.

    The temporary file is removed on any exception, Ctrl-C, SIGTERM or SIGHUP (see
    ``signals_raise``). An ``OSError`` while creating, writing or renaming (read-only directory,
    full disk, a path under a regular file) becomes one ``LocalEagleError`` naming the output.
    """
    out = Path(path)
    tmp: str | None = None
    with signals_raise():
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
            os.close(fd)
            yield Path(tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; an output file is not
            os.replace(tmp, out)
            tmp = None
        except OSError as e:
            raise LocalEagleError(f"{out}: cannot write the output file ({e.strerror or e})") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)


def read_input(path: str | os.PathLike[str], what: str, error: type[LocalEagleError] = LocalEagleError) -> bytes:
    """An input file's bytes, or one line saying why it cannot be read (``error`` lets a caller
    keep its own error type, e.g. ``ModelfileError``)."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: {what} not found") from None
    except IsADirectoryError:
        raise error(f"{p}: is a directory, expected a {what}") from None
    except OSError as e:
        raise error(f"{p}: cannot read {what} ({e.strerror})") from None


def read_text_input(path: str | os.PathLike[str], what: str, error: type[LocalEagleError] = LocalEagleError) -> str:
    """An input file as UTF-8 text (a byte-order mark dropped), or one line naming the file, the line
    and the first byte that is not UTF-8: a Latin-1 prompt file must not end in a traceback."""
    data = read_input(path, what, error)
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise error(f"{path}:{line}: the {what} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None


def jsonl_records(path: str | os.PathLike[str], text: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of a JSON Lines file's text; a line that is not JSON is
    one error naming the file and the line."""
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield i, json.loads(line)
        except ValueError as e:
            raise LocalEagleError(f"{path}:{i}: not valid JSON ({getattr(e, 'msg', e)})") from None


def sha256_file(path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None) -> str:
    """The hex SHA-256 of a file, read in 4 MiB chunks (a GGUF does not fit in memory); ``on_bytes``
    hears the bytes read so far after each chunk (hashing a large GGUF takes seconds)."""
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
            done += len(chunk)
            if on_bytes is not None:
                on_bytes(done)
    return h.hexdigest()

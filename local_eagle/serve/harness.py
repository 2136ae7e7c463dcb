"""The servers under uvicorn for tests: on a free loopback port, with the settings ``serve`` runs them with.

One place for what every server test did by hand (pick a port, start uvicorn in a thread, wait until it
listens, stop it), so the waits and their limits are the same everywhere.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

START_SECONDS = 30.0


def free_port() -> int:
    """A port nothing listens on now (the OS's pick), on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(app: Any, header_timeout: float | None = None) -> tuple[Any, threading.Thread, str]:
    """``app`` under uvicorn in a daemon thread, as ``serve`` configures it; ``(server, thread, base URL)`` once
    it listens. Stop it with ``server.should_exit = True`` and ``thread.join``."""
    import uvicorn

    from local_eagle.serve import runner

    port = free_port()
    extra = {} if header_timeout is None else {"header_timeout": header_timeout}
    uv = uvicorn.Server(runner.config(app, port=port, log_level="warning", **extra))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not uv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    return uv, thread, f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def running(app: Any, header_timeout: float | None = None) -> Iterator[str]:
    """:func:`start_server` for the length of a ``with``: its base URL, and the server stopped after."""
    uv, thread, base = start_server(app, header_timeout)
    try:
        yield base
    finally:
        uv.should_exit = True
        thread.join(timeout=30)


def serve_process(args: list[str], seconds: float = 60.0) -> tuple[subprocess.Popen, str]:
    """``local-eagle serve ARGS`` as a process of its own on a free port, once it answers: ``(process, base URL)``.
    Its output is piped; the caller stops it (a signal) and reads it with ``communicate``."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "local_eagle", "serve", *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(base + "/api/version")
            return proc, base
        except httpx.ConnectError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.communicate()[0]
                raise AssertionError(f"serve did not start: {out[-2000:]}") from None
            time.sleep(0.2)

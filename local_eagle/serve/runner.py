"""How both servers run under uvicorn: bounded waits for slow clients and for shutdown.

Uvicorn times out an idle keep-alive connection only after a response: a connection that opens and then sends
nothing, or half a request line and headers (slow-loris), stays open for good, and enough of them use up the
file descriptors. :class:`HeaderTimeoutProtocol` closes a connection whose request headers are not all in
within ``header_timeout`` seconds of its opening or of the previous response (h11 bounds their size, not
their time). And uvicorn's graceful shutdown waits for every running request without limit, so a long
generation kept SIGTERM waiting: here it waits :data:`GRACEFUL_SHUTDOWN_SECONDS`, then cancels them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from local_eagle.serve.runners import kill_all

HEADER_TIMEOUT = 10.0  # seconds a client has to send a request's line and headers
GRACEFUL_SHUTDOWN_SECONDS = 3  # what running requests get after SIGTERM or Ctrl-C, before they are cancelled
KEEP_ALIVE_SECONDS = 5  # uvicorn's default: an idle connection closes this long after its last response


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing with a 408 a connection that is too slow to send its request's headers."""

    header_timeout: float = HEADER_TIMEOUT
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        """Time the next request's headers: they are in once uvicorn has made a new request cycle."""
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.header_timeout, self._too_slow, self.cycle)

    def _too_slow(self, cycle: Any) -> None:
        self._header_timer = None
        idle = self.cycle is cycle and (cycle is None or cycle.response_complete)
        if idle and not self.transport.is_closing():
            body = json.dumps({"error": f"the request headers took longer than {self.header_timeout:g}s"}).encode()
            head = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n" % len(body))  # fmt: skip
            self.transport.write(head + body)
            self.transport.close()


def protocol(header_timeout: float = HEADER_TIMEOUT) -> type[HeaderTimeoutProtocol]:
    """The protocol class with its own header timeout (uvicorn's config has no field for it)."""
    if header_timeout == HEADER_TIMEOUT:
        return HeaderTimeoutProtocol
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout": header_timeout})


def config(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 11434,
    log_level: str = "info",
    header_timeout: float = HEADER_TIMEOUT,
) -> uvicorn.Config:
    """The uvicorn settings both servers run with (and the tests start them with)."""
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level.lower(), http=protocol(header_timeout),
        timeout_keep_alive=KEEP_ALIVE_SECONDS, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )  # fmt: skip


def run(app: Any, host: str = "127.0.0.1", port: int = 11434, log_level: str = "info") -> None:
    """Serve until SIGINT or SIGTERM; requests still running then get a few seconds. As ``uvicorn.run``: a
    second Ctrl-C ends it at once, and a server that could not start exits with uvicorn's status 3."""
    server = uvicorn.Server(config(app, host, port, log_level))
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if not server.started:
        raise SystemExit(3)


def _terminated(sig: int, frame: object) -> None:
    """SIGTERM, as uvicorn raises it again once its graceful shutdown is done: the process dies of it at once, so
    the models' runners are killed first (their groups: no runner, nor anything it started, keeps running)."""
    kill_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)

"""Who may call the server: the web pages (``Origin``) and the names it is reached by (``Host``), as Ollama has it.

A page the user opens in a browser can send requests to ``http://127.0.0.1:11434`` (a ``text/plain`` POST needs
no CORS preflight), and a page whose domain re-resolves to 127.0.0.1 (DNS rebinding) can even read the answers.
Ollama refuses both (``server/routes.go``: gin-contrib/cors over ``envconfig.AllowedOrigins``, then
``allowedHostsMiddleware``), and so does this: a request whose ``Origin`` is not allowed is a 403 whatever its
route, method or content type, and while the server listens on a loopback address a request whose ``Host`` is
not a local name or address is a 403 too. Allowed origins are localhost's on any port, the app, file, Tauri and
VS Code webview schemes and browser extensions, plus ``LOCAL_EAGLE_ORIGINS`` / ``OLLAMA_ORIGINS`` (or
``serve --origins``): comma-separated, ``*`` a wildcard.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from local_eagle.errors import LocalEagleError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# the variables ``serve --origins`` reads when it is not given, ours first
ORIGINS_ENV = ("LOCAL_EAGLE_ORIGINS", "OLLAMA_ORIGINS")

# envconfig.AllowedOrigins, and gin-contrib/cors's AllowBrowserExtensions
DEFAULT_ORIGINS: tuple[str, ...] = tuple(
    f"{scheme}://{host}{port}"
    for host in ("localhost", "127.0.0.1", "0.0.0.0")
    for scheme in ("http", "https")
    for port in ("", ":*")
) + ("app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*", "chrome-extension://*",
     "safari-extension://*", "moz-extension://*", "ms-browser-extension://*")  # fmt: skip

# gin-contrib/cors's defaults and Ollama's list of headers (its OpenAI client's included)
_ALLOW_METHODS = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
_ALLOW_HEADERS = ("Authorization, Content-Type, User-Agent, Accept, X-Requested-With, OpenAI-Beta, x-stainless-arch, "
                  "x-stainless-async, x-stainless-custom-poll-interval, x-stainless-helper-method, x-stainless-lang, "
                  "x-stainless-os, x-stainless-package-version, x-stainless-poll-helper, x-stainless-retry-count, "
                  "x-stainless-runtime, x-stainless-runtime-version, x-stainless-timeout")  # fmt: skip
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal")


def parse_origins(text: str | None, source: str = f"--origins (or {' or '.join(ORIGINS_ENV)})") -> tuple[str, ...]:
    """The origins of a comma-separated list; one that is neither ``*`` nor ``scheme://...`` is an error
    (gin-contrib/cors refuses it at start too)."""
    out = []
    for item in (text or "").split(","):
        origin = item.strip()
        if not origin:
            continue
        if origin != "*" and "://" not in origin:
            raise LocalEagleError(
                f"{source}: {origin!r} is not an origin such as http://example.com, https://*.example.com or *"
            )
        out.append(origin)
    return tuple(out)


def _pattern(origins: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(".*".join(map(re.escape, o.lower().split("*"))) for o in origins))


def listens_on_loopback(host: str) -> bool:
    """Whether ``Host`` is checked: unless the server listens on an address that is not a loopback one, as in
    Ollama (which checks for a name such as ``localhost`` too)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return True


@functools.cache
def _own_addresses() -> frozenset[str]:
    """The addresses this machine's name resolves to (Ollama asks the interfaces; these are the ones a browser
    could be sent to by name)."""
    try:
        return frozenset(str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None))
    except (OSError, UnicodeError):
        return frozenset()


def allowed_host(header: str) -> bool:
    """Ollama's ``allowedHostsMiddleware``: a loopback, private, unspecified or own address, ``localhost``, this
    machine's name, or a name under .localhost, .local or .internal."""
    try:
        host = urlsplit("//" + header).hostname or ""
    except ValueError:
        host = header.lower()
    if host in ("", "localhost") or host.endswith(_LOCAL_SUFFIXES):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host == socket.gethostname().lower()
    if ip.is_loopback or ip.is_private or ip.is_unspecified:
        return True
    return str(ip) in _own_addresses()  # asked only for a public address: a lookup may take a while


@dataclass(frozen=True)
class Access:
    """The origins allowed besides :data:`DEFAULT_ORIGINS`, and whether ``Host`` is checked."""

    origins: tuple[str, ...] = ()
    check_hosts: bool = True
    _allowed: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allowed", _pattern(DEFAULT_ORIGINS + self.origins))

    @classmethod
    def configured(cls, host: str, origins: str | None) -> Access:
        """The server's settings from ``--host`` and ``--origins`` (or the variables it defaults to)."""
        return cls(parse_origins(origins), listens_on_loopback(host))

    def allows_origin(self, origin: str, host: str) -> bool:
        """gin-contrib/cors's test: a request from the page's own origin is not a cross-origin one."""
        if origin in (f"http://{host}", f"https://{host}"):
            return True
        return self._allowed.fullmatch(origin.lower()) is not None


class AccessGuard:
    """ASGI middleware: foreign origins and, on loopback, foreign hosts get a 403 before any route runs;
    allowed origins get CORS headers, and their preflight requests a 204."""

    def __init__(self, app: ASGIApp, access: Callable[[], Access]) -> None:
        self.app = app
        self.access = access  # read at each request: a test or a running server may change it
        threading.Thread(target=_own_addresses, name="local-eagle-addresses", daemon=True).start()  # off the loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        access = self.access()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        host, origin = headers.get("host", ""), headers.get("origin")
        if origin is not None and not access.allows_origin(origin, host):
            hint = f"; to allow it, set {ORIGINS_ENV[0]} (or serve --origins)"
            await _refuse(scope, send, f"origin {origin!r} is not allowed{hint}")
            return
        if access.check_hosts and not allowed_host(host):
            await _refuse(scope, send, f"host {host!r} is not allowed: the server answers to local names only")
            return
        if origin is None or origin in (f"http://{host}", f"https://{host}"):
            await self.app(scope, receive, send)
            return
        cors = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            cors += [(b"access-control-allow-methods", _ALLOW_METHODS.encode()),
                     (b"access-control-allow-headers", _ALLOW_HEADERS.encode()),
                     (b"access-control-max-age", b"43200"), (b"content-length", b"0")]  # fmt: skip
            await send({"type": "http.response.start", "status": 204, "headers": cors})
            await send({"type": "http.response.body", "body": b""})
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, with_cors)


async def _refuse(scope: Scope, send: Send, message: str) -> None:
    """A 403 in the shape of the API the path belongs to (Ollama sends it without a body)."""
    if scope["type"] != "http":
        await send({"type": "websocket.close", "code": 1008})
        return
    if scope["path"].startswith("/v1"):
        payload: Any = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                  "code": "forbidden"}}  # fmt: skip
    else:
        payload = {"error": message}
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": data})

"""``local-eagle serve`` without ``-m``: every model of the store, each loaded when a request names it.

A request that runs a model (``/api/generate``, ``/api/chat``, ``/v1/chat/completions``,
``/v1/completions``, and the embeddings: ``/api/embed``, ``/api/embeddings``, ``/v1/embeddings``) is read up
to its size limit, its ``model`` looked up (local-eagle's store, then Ollama's when asked for), the model
loaded through :class:`~local_eagle.serve.registry.ModelRegistry`, and the request handed, byte for byte,
to that model's own single-model app: the very code that ``serve -m`` runs, so the answer is the one a lone
server gives. Everything else (listing, show, create, copy, delete) is :mod:`local_eagle.serve.store_api` on
the store itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.ollama.modelfile import Modelfile, resolve_model
from local_eagle.ollama.store import MAX_NAME_CHARS, Name, OllamaStore, StoreError, check_name
from local_eagle.serve import models
from local_eagle.serve.access import Access, AccessGuard
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import in_thread
from local_eagle.serve.models import decode_body
from local_eagle.serve.registry import ModelRegistry, ServerBusy, keep_alive_seconds
from local_eagle.serve.runners import RunnerEngine, RunnerError
from local_eagle.serve.server import MAX_REQUEST_BYTES, EagleServer, ServeConfig
from local_eagle.serve.store_api import create_store_api
from local_eagle.settings import DEFAULT_CTX, LoadOptions, Settings, resolve
from local_eagle.store import LocalStore, resolve_name

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_log = logging.getLogger("uvicorn.error")
RUN_PATHS = (
    "/api/generate",
    "/api/chat",
    "/v1/chat/completions",
    "/v1/completions",
    "/api/embed",
    "/api/embeddings",
    "/v1/embeddings",
)


class ModelNotFoundError(LocalEagleError):
    """No store has the model a request names (a 404)."""


class StoreServer(EagleServer):
    """A model of the store, answering to every spelling of its name (case, ``:latest``, namespace)."""

    key: Name

    def check_model(self, name: Any) -> None:
        try:
            if isinstance(name, str) and check_name(name).same(self.key):
                return
        except StoreError:
            pass
        super().check_model(name)


@dataclass
class StoreConfig:
    """What a store server serves and how it loads a model."""

    local: LocalStore
    ollama: OllamaStore | None = None  # Ollama's store too (``serve --ollama``)
    defaults: Settings = field(default_factory=Settings)
    """serve's flags as every model's defaults, under its Modelfile's parameters (as Ollama's server settings give way
    to a Modelfile's), with the draft mode, ``--parallel`` and ``--no-mtp`` (``local_eagle.settings``)."""
    queue_timeout: float | None = 300.0
    generation_timeout: float | None = None
    max_request_bytes: int = MAX_REQUEST_BYTES
    budget: int | None = None  # bytes the loaded models may hold; None: no limit
    size_of: Callable[[Path, Path | None, int], int] | None = None  # bytes a pair holds at a context
    access: Access = field(default_factory=Access)  # the web pages and host names it answers
    runner_env: dict[str, str] = field(default_factory=dict)  # added to each runner's environment (test hooks)
    parallel_of: Callable[[Path, Path | None, int, LoadOptions], int] | None = None
    """Where ``--parallel`` was not given: the requests a model serves at once, decided as it loads from its files,
    context and load options (``cli.loading.auto_parallel``: 4 where they fit the free memory, else 1)."""


def check_ref(ref: Any) -> None:
    """A model name as a request gives it: a string that is a valid name, short enough to be quoted in the 400."""
    if not isinstance(ref, str) or not ref:
        raise ApiError(400, "model is required")
    if len(ref) > MAX_NAME_CHARS:
        raise ApiError(400, f"the model name is {len(ref)} characters long, more than a name may have")
    check_name(ref)


def model_key(name: Name) -> str:
    return str(name).lower()


class StoreFront:
    """The ASGI app of a store server: routes run requests to their model's app, the rest to the store API."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.registry = ModelRegistry(self._load, config.budget, wait_timeout=config.queue_timeout)
        self.api = create_store_api(self)
        self._apps: dict[str, Any] = {}
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="keep-alive", daemon=True)
        self._reaper.start()
        self._guard = AccessGuard(self._route, lambda: self.config.access)

    # --- names and loading ---------------------------------------------------------------------

    def resolve(self, ref: str) -> tuple[Name, Modelfile]:
        """The canonical name and Modelfile of ``ref``: local-eagle's store, then Ollama's if served."""
        local = self.config.local
        entry = local.find(ref)
        if entry is not None:
            return entry.name, local.load(entry)
        if self.config.ollama is not None:
            m = resolve_name(ref, local, self.config.ollama)
            return check_name(ref), m
        raise ModelNotFoundError(f"model '{ref}' not found")

    def key_of(self, ref: str) -> str:
        local = self.config.local
        entry = local.find(ref)
        return model_key(entry.name if entry is not None else check_name(ref))

    def _load(self, ref: str) -> tuple[str, int, Callable[[], EagleServer]]:
        name, m = self.resolve(ref)
        model = resolve_model(m)
        c = self.config
        d = c.defaults
        # a drafter, or the model's own MTP head where it has one (the engine drafts with what it can); DRAFT none:
        # neither
        mtp = d.mtp and not m.draft_off
        settings = resolve(m.parameters, defaults=d.parameters, mode=d.mode, drafts=m.draft is not None or mtp,
                           parallel=d.parallel, mtp=mtp)  # fmt: skip
        n_ctx = int(settings.ctx or DEFAULT_CTX)
        if c.parallel_of is not None:  # no --parallel: as many as fit, as Ollama decides OLLAMA_NUM_PARALLEL
            settings = replace(settings, parallel=c.parallel_of(model, m.draft, n_ctx, settings.load()))
        config = ServeConfig(
            name=name.short.removesuffix(":latest"), model=model, draft=m.draft, modelfile=m, settings=settings,
            queue_timeout=c.queue_timeout, generation_timeout=c.generation_timeout,
            max_request_bytes=c.max_request_bytes,
        )  # fmt: skip
        options = settings.load().engine_options(n_ctx)
        # the caches grow with the requests at once: priced as one request of their whole context
        size = (c.size_of or _file_bytes)(model, m.draft, n_ctx * (settings.parallel if c.parallel_of else 1))

        def load() -> EagleServer:
            # in a runner process of its own: a crash in llama.cpp fails this model's requests, not the server
            server = StoreServer(RunnerEngine(config.name, model, m.draft, options, c.runner_env), config)
            server.key = name
            return server

        return model_key(name), size, load

    def _reap(self) -> None:
        while not self._stop.wait(0.2):
            self.registry.reap()

    def close(self) -> None:
        self._stop.set()
        self.registry.close()

    # --- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._guard(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in RUN_PATHS:
            await self.api(scope, receive, send)
            return
        try:
            async with asyncio.timeout(models.BODY_SECONDS):
                body = await _read_body(receive, self.config.max_request_bytes)
        except TimeoutError:
            e = models.body_too_slow()
            await _error(send, scope, e.status, e.message)
            return
        if body is None:
            await _error(send, scope, 413, "request body too large")
            return
        try:
            request = await decode_body(body or b"{}")
            ref = request.get("model")
            keep = keep_alive_seconds(request.get("keep_alive"))
            check_ref(ref)
        except ApiError as e:
            await _error(send, scope, e.status, e.message)
            return
        except LocalEagleError as e:
            await _error(send, scope, 400, f"invalid request: {e}")
            return
        if scope["path"] in ("/api/generate", "/api/chat") and keep == 0 and not request.get("prompt") \
                and not request.get("messages"):  # fmt: skip
            await self._unload(scope, send, ref, chat=scope["path"] == "/api/chat")
            return
        asked = time.perf_counter()
        try:
            key = await asyncio.wait_for(in_thread(lambda: self.key_of(ref)), self.config.queue_timeout)
            got = await self.registry.acquire(ref, key)
        except Exception as e:
            await _error(send, scope, *self._load_failure(ref, e))
            return
        scope = {**scope, models.LOAD_SECONDS: time.perf_counter() - asked}  # Ollama's load_duration includes it
        try:
            await self._app(got.key, got.server)(scope, _replay(body, receive), send)
        finally:
            self.registry.release(got, keep)

    async def _unload(self, scope: Scope, send: Send, ref: str, chat: bool) -> None:
        """A request with no prompt and ``keep_alive`` 0: unload the model if it is loaded, without loading it
        first, and answer ``done_reason: "unload"`` as Ollama does; 404 for a model no store has."""
        from local_eagle.serve.ollama_api import OllamaReply

        def expire() -> None:
            self.resolve(ref)  # a model no store has is a 404, as it is for a load
            self.registry.expire(self.key_of(ref))

        try:
            await asyncio.wait_for(in_thread(expire), self.config.queue_timeout)
        except (TimeoutError, LocalEagleError) as e:
            await _error(send, scope, *self._load_failure(ref, e))
            return
        await _json(send, 200, OllamaReply(ref, chat=chat).loaded("unload"))

    def _load_failure(self, ref: str, e: Exception) -> tuple[int, str]:
        """The status and message that answer what looking ``ref`` up in the store (and loading it) raised."""
        if isinstance(e, TimeoutError):
            return 503, f"the server is busy: the store did not answer within {self.config.queue_timeout:g}s"
        if isinstance(e, ModelNotFoundError):
            return 404, str(e)
        if isinstance(e, ServerBusy):
            return 503, str(e)
        if isinstance(e, (LlamaError, RunnerError)):
            return 500, str(e)
        if isinstance(e, LocalEagleError):  # a store entry or Modelfile that cannot be used
            return 404 if "not found" in str(e) else 400, str(e)
        if isinstance(e, OSError):  # a file of the model gone or unreadable since the entry was written
            return 400, f"model '{ref}' cannot be loaded: {e}"
        # a bug: still an answer in the API's shape, not uvicorn's plain text
        _log.error("loading %s failed", ref, exc_info=e)
        return 500, f"internal error: {type(e).__name__}: {e}"

    def _app(self, key: str, server: EagleServer) -> Any:
        from local_eagle.serve.app import create_app

        app = self._apps.get(key)
        if app is None or app.state.eagle is not server:
            app = self._apps[key] = create_app(server, guarded=False)  # the front checked the request
        return app


def _file_bytes(model: Path, draft: Path | None, n_ctx: int) -> int:
    """What a pair holds when nothing better is known: its weights."""
    return model.stat().st_size + (draft.stat().st_size if draft is not None else 0)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body already read, then the real one's messages (a client's
    disconnect, which cancels its generation)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _error(send: Send, scope: Scope, status: int, message: str) -> None:
    """An error in the shape of the API the path belongs to."""
    if scope["path"].startswith("/v1/"):
        kind = "not_found_error" if status == 404 else "invalid_request_error" if status < 500 else "server_error"
        payload: dict[str, Any] = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    else:
        payload = {"error": message}
    await _json(send, status, payload)


async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})

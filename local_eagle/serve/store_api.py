"""The store server's own routes: listing, ``/api/ps``, ``/api/show``, ``/api/create``, ``/api/copy`` and
``/api/delete``, with Ollama's request and response shapes (``api/types.go``), on local-eagle's store.

``/api/create`` takes Ollama's current request (``model``, ``from``, ``template``, ``system``,
``parameters``, ``messages``, ``license``) where ``from`` is a GGUF path, a model of this store or
one Ollama has pulled, as a Modelfile's FROM is; the older ``modelfile`` text; and, as our extension,
``draft`` (a drafter GGUF or checkpoint directory). Ollama's ``files`` (uploaded blobs), ``adapters``
and ``quantize`` are refused: the GGUFs stay where they are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from gguf import Keys

from local_eagle import __version__
from local_eagle.errors import LocalEagleError, path_too_long, too_long
from local_eagle.files import sha256_file
from local_eagle.gguf.keys import KEY_PARAMETER_COUNT
from local_eagle.ollama.modelfile import Modelfile, encode_value, format_modelfile, format_parameter, parse
from local_eagle.ollama.modelfile_syntax import MAX_MODELFILE
from local_eagle.ollama.store import MAX_NAME_CHARS, StoreError, read_manifest
from local_eagle.serve.chatoutput import capabilities
from local_eagle.serve.errors import ApiError, install_error_handlers
from local_eagle.serve.jobs import in_thread, off_loop
from local_eagle.serve.models import check_fields, json_body
from local_eagle.store import NamedStores

if TYPE_CHECKING:
    from local_eagle.ollama.store import Name, OllamaStore
    from local_eagle.serve.registry import ModelRegistry
    from local_eagle.store import LocalStore
    from local_eagle.store.models import Entry


class StoreSources(Protocol):
    """What the store API reads of the store server's configuration (``store_app.StoreConfig``)."""

    local: LocalStore
    ollama: OllamaStore | None
    max_request_bytes: int


class StoreFront(Protocol):
    """The store server as its API sees it (``store_app.StoreFront``, which builds the API): declared here so that
    the API does not import the app that imports it."""

    config: StoreSources
    registry: ModelRegistry

    def resolve(self, ref: str) -> tuple[Name, Modelfile]: ...

_CREATE = {"model": str, "name": str, "from": str, "modelfile": str, "draft": str, "template": str, "system": str,
           "parameters": dict, "messages": list, "license": (str, list), "stream": bool}  # fmt: skip
_SHOW = {"model": str, "name": str, "verbose": bool}
_PULL = {"model": str, "name": str, "insecure": bool, "stream": bool}
_log = logging.getLogger("uvicorn.error")  # a line in the server's log, in its format


def _iso(ts: float | str) -> str:
    if isinstance(ts, str):
        return ts
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


BLANK_DETAILS = {"format": "gguf", "family": "", "families": [], "parameter_size": "", "quantization_level": ""}


def _details(front: StoreFront, model: Path, draft: Path | None) -> dict[str, Any]:
    """Ollama's ``details`` of a model from its GGUF headers; raises a one-line error for a header it cannot read."""
    from local_eagle.store.summary import summarize

    s = summarize(model, draft)
    return {"parent_model": "", "format": "gguf", "family": s.architecture, "families": [s.architecture],
            "parameter_size": s.parameter_size, "quantization_level": s.quantization}  # fmt: skip


def _details_or_blank(front: StoreFront, model: Path, draft: Path | None) -> dict[str, Any]:
    """``details`` for an answer about one model already chosen (``/api/show``, ``/api/ps``): blank if unreadable."""
    try:
        return _details(front, model, draft)
    except (LocalEagleError, OSError, ValueError):
        return dict(BLANK_DETAILS)


def _entry_json(front: StoreFront, e: Entry) -> dict[str, Any]:
    model, draft = e.file("model"), e.file("draft")
    if model is None:
        raise StoreError(f"{e.path}: the entry names no model file")
    details = _details(front, Path(model.path), Path(draft.path) if draft else None)
    return {"name": e.name.short, "model": e.name.short, "modified_at": e.created_at, "size": e.size,
            "digest": e.digest, "details": details}  # fmt: skip


def _one_line(err: BaseException) -> str:
    """An error as one line: ours as they are, anything else (a bug met on one entry) with its type."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, LocalEagleError) and text:
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _tags(front: StoreFront) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every model of the stores, and one ``{"model", "error"}`` per model left out.

    One model that cannot be read or described, whatever it raises (a GGUF with integer tokens, an
    entry gone bad), is left out with a line in the log and in the errors the listings return, so it
    never turns the listing of every other model into a 500.
    """
    out: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []

    def skip(name: str | None, err: BaseException | str, whose: str = "model") -> None:
        line = err if isinstance(err, str) else _one_line(err)
        _log.warning("skipping %s%s: %s", whose, f" {name}" if name else "", line)
        errors.append({"model": name, "error": line} if name else {"error": line})

    entries, problems = front.config.local.scan()
    for problem in problems:
        skip(None, problem, "a store entry")
    for e in entries:
        try:
            out.append(_entry_json(front, e))
        except Exception as err:  # noqa: BLE001 - whatever one entry raises, the others are listed
            skip(e.name.short, err)
    ollama = front.config.ollama
    if ollama is not None:
        have = {x["name"].lower() for x in out} | {x.get("model", "").lower() for x in errors if x.get("model")}
        try:
            names = ollama.names()
        except (LocalEagleError, OSError) as err:
            skip(None, err, "Ollama's models")
            names = []
        for name in names:
            if name.short.lower() in have:
                continue
            try:
                path = ollama.manifest_path(name)
                mtime = path.stat().st_mtime if path is not None else 0
                size, digest = _manifest_size_digest(path)
            except Exception as err:  # noqa: BLE001 - as above, for one of Ollama's models
                skip(name.short, err, "Ollama's model")
                continue
            out.append({"name": name.short, "model": name.short, "modified_at": _iso(mtime), "size": size,
                        "digest": digest, "details": {"format": "gguf"}})  # fmt: skip
    return out, errors


def _with_errors(answer: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A listing with an ``errors`` field when models were left out (clients ignore fields they do not know)."""
    return answer | {"errors": errors} if errors else answer


async def _progress(run: Callable[[Callable[[dict], None]], None]) -> AsyncIterator[str]:
    """``run``'s statuses as NDJSON lines while it works in a thread; an error is the last line, as
    Ollama's streamed errors are (its client raises it)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[dict | None] = asyncio.Queue()
    last: dict[str, float] = {}

    def tell(status: dict) -> None:
        now = time.monotonic()
        if "completed" in status and status["completed"] < status["total"]:
            if now - last.get(status["status"], 0.0) < 0.1:
                return  # a GGUF hashes at GB/s: a line every 100 ms is enough
            last[status["status"]] = now
        loop.call_soon_threadsafe(lines.put_nowait, status)

    async def work() -> None:
        try:
            await in_thread(lambda: run(tell))  # a daemon thread: a create still hashing does not hold up exit
        except (LocalEagleError, OSError) as e:
            lines.put_nowait({"error": _os_error_line(e) if isinstance(e, OSError) else str(e)})
        except Exception as e:  # a bug: still the stream's last line, not a cut stream
            _log.exception("create failed")
            lines.put_nowait({"error": f"internal error: {type(e).__name__}: {e}"})
        finally:
            lines.put_nowait(None)

    task = asyncio.create_task(work())
    while (status := await lines.get()) is not None:
        yield json.dumps(status) + "\n"
    await task


async def _run_answer(request: Request, run: Callable[..., None], stream: bool) -> Response:
    """A create's or a pull's answer: ``run``'s statuses streamed (:func:`_progress`), or, ``stream`` false, one
    ``{"status": "success"}`` once it is done (``run()`` without statuses; what it raises, a 400)."""
    if stream:
        return StreamingResponse(_progress(run), media_type="application/x-ndjson")
    try:
        await off_loop(request, run)
    except (LocalEagleError, OSError) as e:
        raise ApiError(400, _os_error_line(e) if isinstance(e, OSError) else str(e)) from None
    return JSONResponse({"status": "success"})


def _os_error_line(e: OSError) -> str:
    """An OSError about a request's path as one line; a path too long for the system is shortened in it."""
    return path_too_long(e.filename) if too_long(e) else str(e)


def _manifest_size_digest(path: Path | None) -> tuple[int, str]:
    """What Ollama lists for a model of its store (``Manifest.Size`` and ``Digest``): the bytes of its layers
    and config, and the sha256 of the manifest file; 0 and "" for a manifest that cannot be read."""
    if path is None:
        return 0, ""
    try:
        m = read_manifest(path)
        digest = sha256_file(path)
    except (StoreError, OSError):
        return 0, ""
    return sum(x.size for x in m.layers) + (m.config.size if m.config is not None else 0), digest


def _model_ref(body: dict[str, Any]) -> str:
    ref = body.get("model") or body.get("name")
    if not isinstance(ref, str) or not ref:
        raise ApiError(400, "model is required")
    if len(ref) > MAX_NAME_CHARS:
        raise ApiError(400, f"the model name is {len(ref)} characters long, more than a name may have")
    return ref


def create_store_api(front: StoreFront) -> FastAPI:
    """The FastAPI app of the routes that work on the store rather than on one model."""
    app = FastAPI(title="local-eagle", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    limit = front.config.max_request_bytes

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("Ollama is running")

    @app.get("/api/version")
    async def version() -> dict[str, Any]:
        return {"version": __version__}

    @app.get("/api/tags")
    async def tags() -> dict[str, Any]:
        listed, errors = await in_thread(lambda: _tags(front))
        return _with_errors({"models": listed}, errors)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        listed, errors = await in_thread(lambda: _tags(front))
        data = [{"id": m["name"], "object": "model", "created": int(time.time()), "owned_by": "local-eagle"}
                for m in listed]  # fmt: skip
        return _with_errors({"object": "list", "data": data}, errors)

    @app.get("/v1/models/{ref:path}")
    async def model(ref: str) -> dict[str, Any]:
        name = (await in_thread(lambda: _resolve(front, ref)))[0]
        return {"id": name.short, "object": "model", "created": int(time.time()), "owned_by": "local-eagle"}

    @app.get("/api/ps")
    async def ps() -> dict[str, Any]:
        return await in_thread(lambda: _ps(front))

    @app.post("/api/show")
    async def show(request: Request) -> dict[str, Any]:
        body = await json_body(request, limit)
        check_fields(body, _SHOW)
        ref = _model_ref(body)

        def answer() -> dict[str, Any]:
            m = _resolve(front, ref)[1]
            try:
                return _show(front, ref, m)
            except (LocalEagleError, OSError) as e:  # a file of the entry gone or unreadable
                raise ApiError(400, f"model '{ref}' cannot be shown: {e}") from None

        return await off_loop(request, answer)

    @app.post("/api/create")
    async def create(request: Request) -> Response:
        body = await json_body(request, limit)
        check_fields(body, _CREATE)
        ref = _model_ref(body)
        try:
            m, name = await off_loop(request, lambda: (_create_modelfile(front, body), _name(ref)))
        except OSError as e:  # a path in from/draft the system refuses (too long, no permission): the client's
            raise ApiError(400, _os_error_line(e)) from None

        def run(on_status: Callable[[dict], None] | None = None) -> None:
            entry = front.config.local.create_from(name, m, on_status=on_status)
            front.registry.unload(str(entry.name).lower())  # the next request loads the new one

        return await _run_answer(request, run, body.get("stream") is not False)

    @app.post("/api/pull")
    async def pull(request: Request) -> Response:
        body = await json_body(request, limit)
        check_fields(body, _PULL)
        return await _pull(request, _model_ref(body), body.get("stream") is not False)

    @app.post("/api/copy")
    async def copy(request: Request) -> Response:
        body = await json_body(request, limit)
        src, dst = body.get("source"), body.get("destination")
        if not isinstance(src, str) or not isinstance(dst, str) or not src or not dst:
            raise ApiError(400, "source and destination are required")
        try:
            await in_thread(lambda: front.config.local.copy(src, dst))
        except LocalEagleError as e:
            raise ApiError(404 if "not found" in str(e) else 400, str(e)) from None
        return Response(status_code=200)

    @app.delete("/api/delete")
    async def delete(request: Request) -> Response:
        body = await json_body(request, limit)
        ref = _model_ref(body)

        def remove() -> None:
            entry = front.config.local.remove(ref)
            front.registry.unload(str(entry.name).lower())

        try:
            await in_thread(remove)
        except LocalEagleError as e:
            raise ApiError(404 if "not found" in str(e) else 400, str(e)) from None
        return Response(status_code=200)

    return app


async def _pull(request: Request, ref: str, stream: bool) -> Response:
    """``/api/pull`` for the names ``local-eagle pull`` takes (``hf.co/USER/REPO[:QUANT][@REV]``): fetched into the
    Hub's cache with Ollama's streamed progress ("pulling manifest", a "pulling FILE" line per file with ``total``
    and ``completed``, "success"), or one object with ``stream`` false; an error is a 400, or a stream's last line."""
    from local_eagle.hub import is_hub_name
    from local_eagle.hub.fetch import pull as fetch

    if not is_hub_name(ref):
        raise ApiError(400, f"pull takes a Hugging Face name such as hf.co/USER/REPO:Q4_K_M, got {ref!r}; models of "
                            "Ollama's registry come with `ollama pull`, and `serve --ollama` serves them")  # fmt: skip

    def run(on_status: Callable[[dict], None] | None = None) -> None:
        got = fetch(ref, on_status=on_status)
        _log.info("pulled %s into %s", ref, got.path)
        if on_status is not None:
            on_status({"status": "success"})

    return await _run_answer(request, run, stream)


def _ps(front: StoreFront) -> dict[str, Any]:
    """``/api/ps``'s answer: the loaded models, the most recently used first."""
    now = front.registry.clock()
    out = []
    for x in front.registry.snapshot():
        c = x.server.config
        expires = "2318-01-01T00:00:00Z" if x.expires_at is None and x.users == 0 else _iso(
            time.time() + ((x.expires_at - now) if x.expires_at is not None else 300.0))  # fmt: skip
        key = getattr(x.server, "key", None)  # the store's name of the model: listed as /api/tags lists it
        name = key.short if key is not None else x.name
        out.append({"name": name, "model": name, "size": x.size, "digest": "",
                    "details": _details_or_blank(front, c.model, c.draft), "expires_at": expires,
                    "size_vram": x.server.size_vram(x.size),
                    "context_length": x.server.engine.n_ctx})  # fmt: skip
    return {"models": out}


def _name(ref: str) -> Any:
    from local_eagle.store.models import checked_name

    try:
        return checked_name(ref)
    except LocalEagleError as e:
        raise ApiError(400, str(e)) from None


def _resolve(front: StoreFront, ref: str) -> tuple[Name, Modelfile]:
    try:
        return front.resolve(ref)
    except LocalEagleError as e:
        raise ApiError(404 if "not found" in str(e) else 400, str(e)) from None


def _show(front: StoreFront, ref: str, m: Modelfile) -> dict[str, Any]:
    """``/api/show``'s answer (``api.ShowResponse``)."""
    from local_eagle.store.summary import summarize

    params = "\n".join(
        f"{k:<30} {json.dumps(v) if isinstance(v, str) else format_parameter(v)}"
        for k, vs in sorted(m.parameters.items())
        for v in (vs if isinstance(vs, list) else [vs])
    )
    try:
        s = summarize(m.model, m.draft)
        arch = s.architecture
        info: dict[str, Any] = {Keys.General.ARCHITECTURE: arch, KEY_PARAMETER_COUNT: s.parameters,
                                Keys.LLM.CONTEXT_LENGTH.format(arch=arch): s.context_length,
                                Keys.LLM.EMBEDDING_LENGTH.format(arch=arch): s.embedding_length}  # fmt: skip
        if m.draft is not None:
            info |= {"local_eagle.draft": str(m.draft), "local_eagle.draft_family": s.family_name,
                     "local_eagle.eagle_version": s.eagle_version, "local_eagle.target_layers": s.target_layers,
                     "local_eagle.draft_num_predict": m.draft_num_predict}  # fmt: skip
            if s.block_size is not None:  # a block drafter (DFlash, DSpark and DFlash2 draft)
                info |= {"local_eagle.block_size": s.block_size, "local_eagle.drafts": s.drafts}
        elif m.draft_off:  # DRAFT none: no drafter and not the model's own MTP head
            info |= {"local_eagle.draft": "none", "local_eagle.draft_num_predict": 0}
        elif s.mtp_heads:  # no DRAFT: the model drafts with its own MTP head
            info |= {"local_eagle.draft_family": s.family_name, "local_eagle.mtp_heads": s.mtp_heads}
    except LocalEagleError:
        info = {}
    head = (
        "# Modelfile generated by local-eagle serve\n"
        f"# To build a new Modelfile based on this, replace FROM with:\n# FROM {ref}\n\n"
    )
    return {
        "modelfile": head + format_modelfile(m), "parameters": params, "template": m.template or "",
        "system": m.system or "", "license": "\n".join(m.license),
        "details": _details_or_blank(front, m.model, m.draft),
        "model_info": info, "capabilities": capabilities(m.model, m.template),
        "modified_at": _iso(m.model.stat().st_mtime),
    }  # fmt: skip


class _CappedLines(list):
    """Modelfile lines that together stay under the size a Modelfile may have, checked as each is added, so a
    request of many large values is refused before the rest are encoded."""

    size = 0

    def append(self, line: str) -> None:
        self.size += len(line) + 1
        if self.size > MAX_MODELFILE:
            raise ApiError(400, f"the request's values add up to more than the {MAX_MODELFILE} characters a "
                                "Modelfile may have")  # fmt: skip
        super().append(line)


def _create_modelfile(front: StoreFront, body: dict[str, Any]) -> Modelfile:
    """The Modelfile an ``/api/create`` request describes: ``modelfile`` text, or ``from`` plus overrides."""
    for key in ("files", "adapters", "quantize"):
        if body.get(key):
            raise ApiError(400, f"'{key}' is not supported: local-eagle references GGUFs where they are; give 'from'")
    try:
        if body.get("modelfile"):
            stores = NamedStores(front.config.local, front.config.ollama)  # FROM a name of either store
            return parse(body["modelfile"], base_dir=Path.cwd(), source="modelfile", store=stores)
        base = body.get("from")
        if not isinstance(base, str) or not base:
            raise ApiError(400, "'from' is required: a GGUF path or a model name")
        lines = _override_lines(body)
        local = front.config.local.find(base) if not Path(base).exists() else None
        if local is not None:  # FROM a model of this store: its Modelfile, less what the request replaces
            drop = tuple(p for p, key in (("MESSAGE ", "messages"), ("DRAFT ", "draft")) if body.get(key))
            text = format_modelfile(front.config.local.load(local))
            text = "".join(x + "\n" for x in text.splitlines() if not (drop and x.startswith(drop)))
            return parse(text + lines, base_dir=Path.cwd(), source=f"from {base}")
        return parse(f"FROM {encode_value(base, 'from')}\n" + lines, base_dir=Path.cwd(), source="request")
    except ApiError:
        raise
    except LocalEagleError as e:
        raise ApiError(400, str(e)) from None


def _override_lines(body: dict[str, Any]) -> str:
    out = _CappedLines()
    if body.get("draft"):
        out.append(f"DRAFT {encode_value(body['draft'], 'draft')}")
    for key in ("template", "system"):
        if body.get(key):
            out.append(f"{key.upper()} {encode_value(body[key], key)}")
    for name, value in (body.get("parameters") or {}).items():
        for v in value if isinstance(value, list) else [value]:
            text = v if isinstance(v, str) else json.dumps(v)
            out.append(f"PARAMETER {name} {encode_value(text, f'parameter {name}')}")
    lic = body.get("license")
    for text in [lic] if isinstance(lic, str) else lic or []:
        if not isinstance(text, str):
            raise ApiError(400, f"license must be a string or a list of strings, got {json.dumps(text)[:40]}")
        out.append(f"LICENSE {encode_value(text, 'license')}")
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            raise ApiError(400, "messages must be objects with role and content")
        out.append(f"MESSAGE {msg.get('role', '')} {encode_value(str(msg.get('content', '')), 'message')}")
    return "".join(x + "\n" for x in out)

"""Ollama's native API: /api/generate, /api/chat and the listing endpoints its clients call first.

Streams are NDJSON, one object a piece and a final one with the counts and durations Ollama reports, plus
``speculative``: the drafter's statistics, which Ollama's own clients ignore and ours read raw.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from gguf import Keys

from local_eagle import __version__
from local_eagle.serve.chatoutput import (
    ChatOutput,
    Part,
    capabilities,
    chat_output,
    check_tools,
    ollama_fields,
    template_source,
)
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import Job, Outcome, done_reason, off_loop, stream_response
from local_eagle.serve.logprobs import ollama_logprobs, top_count
from local_eagle.serve.models import (
    Kind,
    check_fields,
    check_keep_alive,
    fit_chat,
    json_body,
    load_seconds,
    parse_tools,
    prompt_tokens,
    render,
    request_format,
    request_messages,
    settings,
    stream_flag,
    unloads,
)
from local_eagle.serve.server import EagleServer, Server
from local_eagle.serve.thinking import think_value
from local_eagle.serve.toolchoice import tool_settings

router = APIRouter()

# the JSON types of the request fields, as Ollama's api.GenerateRequest / ChatRequest / ShowRequest declare them
_COMMON: dict[str, Kind] = {"model": str, "stream": bool, "options": dict, "keep_alive": (str, int, float),
                            "think": (bool, str), "logprobs": bool, "top_logprobs": int}  # fmt: skip
_GENERATE = _COMMON | {"prompt": str, "suffix": str, "system": str, "template": str, "context": list, "raw": bool,
                       "images": list, "tools": list}  # fmt: skip
_CHAT = _COMMON | {"messages": list, "tools": list}
_SHOW: dict[str, Kind] = {"model": str, "name": str, "verbose": bool}


def ollama_logprobs_request(body: dict[str, Any]) -> int | None:
    """Ollama's ``logprobs: true`` and ``top_logprobs: n`` (0..20, checked whether or not logprobs is on, as
    Ollama checks it): the alternatives a token gets; None: off."""
    top = 0 if body.get("top_logprobs") is None else top_count(body["top_logprobs"], "top_logprobs")
    return top if body.get("logprobs") else None


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _ndjson(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


@dataclass
class OllamaReply:
    """A /api/generate or /api/chat answer: the same messages but for where the text goes."""

    model: str
    chat: bool
    output: ChatOutput | None = None  # the thinking and tool-call parsers, where the request needs them
    load: float = 0.0  # seconds the store front spent loading the model for this request (models.load_seconds)
    dropped: int = 0  # the oldest messages dropped to fit the context (models.fit_chat), said in the answer
    media_type = "application/x-ndjson"

    def _text(self, text: str | Part) -> dict[str, Any]:
        return ollama_fields(text if isinstance(text, Part) else Part(text), self.chat)

    def loaded(self, reason: str = "load") -> dict[str, Any]:
        """What Ollama answers a request without a prompt: it only loads the model, or with ``keep_alive`` 0
        unloads it (``reason`` "unload")."""
        return {"model": self.model, "created_at": _now_iso(), **self._text(""), "done": True, "done_reason": reason}

    def piece(self, text: str | Part) -> dict[str, Any]:
        return {"model": self.model, "created_at": _now_iso(), **self._text(text), "done": False}

    def final(self, out: Outcome, text: str | Part) -> dict[str, Any]:
        """The last message; a stream's carries no text, since its pieces did."""
        return {
            "model": self.model,
            "created_at": _now_iso(),
            "done": True,
            "done_reason": done_reason(out.stop_reason),
            "total_duration": _ns(self.load + out.total_seconds),
            "load_duration": _ns(self.load + out.queue_seconds),
            "prompt_eval_count": out.prompt_tokens,
            "prompt_eval_duration": _ns(out.prefill_seconds),
            "eval_count": out.generated_tokens,
            "eval_duration": _ns(out.decode_seconds),
            "speculative": out.stats,
            **self._text(text),
            **({"logprobs": ollama_logprobs(out.logprobs)} if out.logprobs is not None else {}),
            **({"dropped_messages": self.dropped} if self.dropped else {}),
        }

    def event(self, event: tuple) -> Iterator[bytes]:
        if event[0] == "piece":
            part = self.output.add(event[1]) if self.output else Part(event[1])
            if part:  # a piece held back as a possible tag or call sends nothing yet
                yield _ndjson(self.piece(part))
        elif event[0] == "end":
            yield _ndjson(self.final(event[1], self.output.finish() if self.output else ""))

    def error(self, e: ApiError) -> bytes:
        return _ndjson({"error": e.message})

    async def respond(self, server: EagleServer, job: Job, request: Request, stream: Any) -> Response:
        if not stream_flag(stream, True):
            out = await server.complete(job, request)
            return JSONResponse(self.final(out, self.output.whole(out.text) if self.output else out.text))
        return await stream_response(server, job, request, self)


@router.get("/")
async def root() -> PlainTextResponse:
    return PlainTextResponse("Ollama is running")  # what Ollama's clients probe for


@router.get("/api/version")
async def version() -> dict[str, Any]:
    return {"version": __version__}


@router.get("/api/tags")
async def tags(server: Server) -> dict[str, Any]:
    return {"models": [server.model_entry()]}


@router.get("/api/ps")
async def ps(server: Server) -> dict[str, Any]:
    entry = server.model_entry()
    entry.update(
        expires_at="2099-01-01T00:00:00Z",
        size_vram=server.size_vram(entry["size"]),
        context_length=server.engine.n_ctx,
    )
    return {"models": [entry]}


@router.post("/api/show")
async def show(request: Request, server: Server) -> dict[str, Any]:
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _SHOW)
    server.check_model(body.get("model") or body.get("name"))
    return await off_loop(request, lambda: _show(server))  # writing a long Modelfile out takes a while


def _show(server: EagleServer) -> dict[str, Any]:
    """``/api/show``'s answer (``api.ShowResponse``)."""
    from local_eagle.ollama.modelfile import Modelfile, format_modelfile, format_parameter

    mf = server.config.modelfile or Modelfile(model=server.config.model, draft=server.config.draft)
    params = "\n".join(
        f"{k:<30} {json.dumps(v) if isinstance(v, str) else format_parameter(v)}"
        for k, vs in sorted(mf.parameters.items())
        for v in (vs if isinstance(vs, list) else [vs])
    )
    info = server.info
    model_info = {
        Keys.General.ARCHITECTURE: info["arch"],
        Keys.LLM.CONTEXT_LENGTH.format(arch=info["arch"]): server.engine.n_ctx,
        "local_eagle.draft": str(server.config.draft) if server.config.draft else None,
        "local_eagle.draft_num_predict": server.config.draft_max if server.config.draft else 0,
    }
    return {
        "modelfile": f"# Modelfile generated by local-eagle serve\n\n{format_modelfile(mf)}",
        "parameters": params,
        "template": mf.template or "",
        "system": mf.system or "",
        "license": "\n".join(mf.license),
        "details": server.details(),
        "model_info": model_info,
        "capabilities": capabilities(server.config.model, mf.template),
        "modified_at": server.model_entry()["modified_at"],
    }


@router.post("/api/generate")
async def generate(request: Request, server: Server) -> Response:
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _GENERATE)
    check_keep_alive(body.get("keep_alive"))
    model = body.get("model")
    server.check_model(model)
    prompt = body.get("prompt") or ""
    for key in ("images", "suffix", "context"):
        if body.get(key):
            raise ApiError(400, f"'{key}' is not supported by local-eagle serve")
    grammar = await request_format(request, body.get("format"), "format")
    logprobs = ollama_logprobs_request(body)
    s = settings(server, body.get("options") or {}, "options.")
    reply = OllamaReply(model, chat=False, load=load_seconds(request))
    if not prompt:  # Ollama: an empty prompt only loads the model (unloads it with keep_alive 0)
        return JSONResponse(reply.loaded("unload" if unloads(body) else "load"))
    system, template = body.get("system"), body.get("template")
    reply.output = chat_output(server, think_value(body.get("think")), None, template or None)
    if body.get("tools"):  # Ollama's generate takes no tools; a model whose template cannot is refused all the same
        check_tools(server, template_source(server, template or None))
    if body.get("raw"):
        tokens = await prompt_tokens(server, request, prompt)
    else:
        user = [{"role": "user", "content": prompt}]
        render_it = partial(render, server, user, system, template or None, None, reply.output.think)
        tokens = await prompt_tokens(server, request, reply.output.watch(render_it))
    job = s.job(tokens, grammar)
    job.logprobs = logprobs
    return await reply.respond(server, job, request, body.get("stream"))


@router.post("/api/chat")
async def chat(request: Request, server: Server) -> Response:
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _CHAT)
    check_keep_alive(body.get("keep_alive"))
    model = body.get("model")
    server.check_model(model)
    grammar = await request_format(request, body.get("format"), "format")
    logprobs = ollama_logprobs_request(body)
    s = settings(server, body.get("options") or {}, "options.")
    reply = OllamaReply(model, chat=True, load=load_seconds(request))
    if unloads(body):  # Ollama: no messages and keep_alive 0 unload the model (serve -m keeps its one)
        return JSONResponse(reply.loaded("unload"))
    if body.get("messages") == []:  # Ollama: no messages only loads the model
        return JSONResponse(reply.loaded())
    messages = await request_messages(request, body.get("messages"))
    tools = parse_tools(body.get("tools"))
    reply.output = chat_output(server, think_value(body.get("think")), tools)
    special, _ = await off_loop(request, partial(tool_settings, server, reply.output, tools, None))
    fitted = await off_loop(request, partial(fit_chat, server, messages, tools, reply.output.think))
    reply.output.watch(lambda: fitted.text)()  # a prompt that ends inside the thinking starts the answer there
    reply.dropped = fitted.dropped
    job = s.job(fitted.tokens, grammar)
    job.logprobs, job.special = logprobs, special
    return await reply.respond(server, job, request, body.get("stream"))

"""``local-eagle serve``: one target (+ EAGLE drafter) behind Ollama's and OpenAI's HTTP APIs.

The model slot the requests queue for is in ``jobs``; this module parses requests and writes the answers.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from local_eagle import __version__
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.serve.errors import ApiError, install_error_handlers
from local_eagle.serve.jobs import Job, JobSlot, Outcome, done_reason


@dataclass
class ServeConfig:
    """What one server runs: the model pair, its public name and the per-server settings."""

    name: str
    model: Path
    draft: Path | None = None
    modelfile: Any = None  # a parsed local_eagle.ollama.modelfile.Modelfile, or None
    parameters: dict[str, Any] = field(default_factory=dict)
    draft_max: int = 4
    queue_timeout: float | None = 300.0
    generation_timeout: float | None = None


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class EagleServer(JobSlot):
    """The engine, its lock and the model's public description, shared by both APIs."""

    config: ServeConfig

    def __init__(self, engine: Engine, config: ServeConfig) -> None:
        super().__init__(engine, config)
        self.created = int(time.time())
        self.info = _model_info(config.model)

    # -- names -----------------------------------------------------------------------------------

    @property
    def tag(self) -> str:
        return f"{self.config.name}:latest"

    def check_model(self, name: Any) -> None:
        """Accept the server's name with or without the ``:latest`` tag, as Ollama does."""
        if not isinstance(name, str) or not name:
            raise ApiError(400, "model is required")
        if name not in (self.config.name, self.tag):
            raise ApiError(404, f"model '{name}' not found; this server runs '{self.config.name}'", "model_not_found")

    def details(self) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.info["arch"],
            "families": [self.info["arch"]],
            "parameter_size": self.info["parameter_size"],
            "quantization_level": self.info["quantization"],
        }

    def model_entry(self) -> dict[str, Any]:
        st = self.config.model.stat()
        return {
            "name": self.tag,
            "model": self.tag,
            "modified_at": datetime.fromtimestamp(st.st_mtime, UTC).isoformat().replace("+00:00", "Z"),
            "size": st.st_size + (self.config.draft.stat().st_size if self.config.draft else 0),
            "digest": f"{st.st_size:x}{int(st.st_mtime):x}",
            "details": self.details(),
        }


# ------------------------------------------------------------------------------------------------
# request parsing


def _model_info(path: Path) -> dict[str, Any]:
    from local_eagle.gguf import read_model_info

    try:
        info = read_model_info(path)
    except Exception:  # a description must not stop the server from starting
        return {"arch": "unknown", "parameter_size": "", "quantization": "", "context_length": None}
    n = 0
    for shape in info.tensor_shapes.values():
        k = 1
        for d in shape:
            k *= int(d)
        n += k
    size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"
    quant = max(info.tensor_bytes, key=lambda t: info.tensor_bytes[t]).upper() if info.tensor_bytes else ""
    return {"arch": info.arch, "parameter_size": size, "quantization": quant, "n_layer": info.n_layer,
            "n_embd": info.n_embd, "n_vocab": info.n_vocab}  # fmt: skip


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _typed(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    if isinstance(value, bool) and kind is not bool and not (isinstance(kind, tuple) and bool in kind):
        raise ApiError(400, f"{name} must be a number, got {json.dumps(value)}")
    if not isinstance(value, kind):
        raise ApiError(400, f"{name} has the wrong type: {json.dumps(value)[:80]}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ApiError(400, f"{name} must be a finite number")
    return value


_OPTION_TYPES: dict[str, type | tuple[type, ...]] = {
    "temperature": (int, float),
    "top_k": int,
    "top_p": (int, float),
    "min_p": (int, float),
    "seed": int,
    "num_predict": int,
    "repeat_penalty": (int, float),
    "repeat_last_n": int,
    "draft_num_predict": int,
    "num_ctx": int,
    "stop": list,
}


def _settings(server: EagleServer, options: dict[str, Any], where: str) -> tuple[SamplingParams, int, int, list[str]]:
    """Sampling, max tokens, draft max and stop strings: request options over the Modelfile's
    parameters over local-eagle's defaults. ``num_ctx`` is the server's and cannot change per request."""
    params = dict(server.config.parameters)
    for key, value in options.items():
        if value is None or key not in _OPTION_TYPES:
            continue  # Ollama ignores options it does not know (or that only a reload could change)
        _typed(value, _OPTION_TYPES[key], f"{where}.{key}")
        params[key] = value
    stop = params.get("stop", [])
    if not all(isinstance(s, str) for s in stop):
        raise ApiError(400, f"{where}.stop must be a list of strings")
    n_ctx = server.engine.n_ctx
    n_predict = int(params.get("num_predict", -1))
    if n_predict < 0 or n_predict > n_ctx:  # Ollama: -1 = until the context is full
        n_predict = n_ctx
    if n_predict == 0:
        raise ApiError(400, f"{where}.num_predict must be positive or -1")
    draft_max = int(params.get("draft_num_predict", server.config.draft_max))
    if draft_max < 0:
        raise ApiError(400, f"{where}.draft_num_predict must be 0 or more")
    d = SamplingParams()
    try:
        sp = SamplingParams(
            temperature=float(params.get("temperature", d.temperature)),
            top_k=int(params.get("top_k", d.top_k)),
            top_p=float(params.get("top_p", d.top_p)),
            min_p=float(params.get("min_p", d.min_p)),
            repeat_penalty=float(params.get("repeat_penalty", d.repeat_penalty)),
            repeat_last_n=int(params.get("repeat_last_n", d.repeat_last_n)),
            seed=None if params.get("seed") is None or params["seed"] < 0 else params["seed"],  # Ollama: -1 = random
        )
    except (TypeError, ValueError) as e:
        raise ApiError(400, f"bad sampling options: {e}") from None
    if not 0.0 <= sp.top_p <= 1.0 or not 0.0 <= sp.min_p <= 1.0:
        raise ApiError(400, f"{where}.top_p and min_p must be between 0 and 1")
    if sp.repeat_penalty <= 0.0:
        raise ApiError(400, f"{where}.repeat_penalty must be positive (1 is off)")
    return sp, n_predict, draft_max, list(stop)


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty list")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a role")
        content = m.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            parts = []
            for p in content:
                if not isinstance(p, dict) or p.get("type") != "text":
                    raise ApiError(400, f"messages[{i}]: only text content is supported")
                parts.append(str(p.get("text", "")))
            content = "".join(parts)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string")
        if m.get("images"):
            raise ApiError(400, "images are not supported: local-eagle runs text models")
        out.append({"role": m["role"], "content": content})
    return out


def _render(
    server: EagleServer,
    messages: list[dict[str, Any]],
    system: str | None,
    template: str | None,
    tools: list[Any] | None = None,
) -> str:
    """The prompt as Ollama builds it: the request's system/template over the Modelfile's."""
    from local_eagle.ollama.prompt import render_prompt

    mf = server.config.modelfile
    try:
        return render_prompt(
            messages,
            system=system if system is not None else (mf.system if mf else None),
            template=template if template is not None else (mf.template if mf else None),
            gguf_path=server.config.model,
            history=[m.to_dict() for m in mf.messages] if mf else (),
            tools=tools,
        )
    except LocalEagleError as e:
        raise ApiError(400, str(e)) from None


# ------------------------------------------------------------------------------------------------
# the app


def create_app(server: EagleServer) -> FastAPI:
    """The FastAPI app: Ollama's API under /api, OpenAI's under /v1; errors in each one's shape."""
    app = FastAPI(title="local-eagle", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.eagle = server

    install_error_handlers(app)

    def ollama_final(model: str, out: Outcome) -> dict[str, Any]:
        return {
            "model": model,
            "created_at": _now_iso(),
            "done": True,
            "done_reason": done_reason(out.stop_reason),
            "total_duration": _ns(out.total_seconds),
            "load_duration": _ns(out.queue_seconds),
            "prompt_eval_count": out.prompt_tokens,
            "prompt_eval_duration": _ns(out.prefill_seconds),
            "eval_count": out.generated_tokens,
            "eval_duration": _ns(out.decode_seconds),
            "speculative": out.stats,
        }

    def ndjson(obj: dict[str, Any]) -> bytes:
        return (json.dumps(obj) + "\n").encode()

    async def ollama_respond(request: Request, model: str, job: Job, chat: bool, stream: Any) -> Any:
        def piece(text: str) -> dict[str, Any]:
            if chat:
                return {"model": model, "created_at": _now_iso(), "message": {"role": "assistant", "content": text},
                        "done": False}  # fmt: skip
            return {"model": model, "created_at": _now_iso(), "response": text, "done": False}

        def final(out: Outcome, text: str) -> dict[str, Any]:
            body = ollama_final(model, out)
            if chat:
                body["message"] = {"role": "assistant", "content": text}
            else:
                body["response"] = text
            return body

        if stream is not None and not _typed(stream, bool, "stream"):
            out = await server.complete(job, request)
            return JSONResponse(final(out, out.text))
        events, _first = await server.started(job, request)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for ev in events:
                    if ev[0] == "piece":
                        yield ndjson(piece(ev[1]))
                    elif ev[0] == "end":
                        yield ndjson(final(ev[1], ""))
            except ApiError as e:
                yield ndjson({"error": e.message})
            finally:
                await events.aclose()

        return StreamingResponse(body(), media_type="application/x-ndjson")

    # -- Ollama --------------------------------------------------------------------------------

    @app.get("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("Ollama is running")  # what Ollama's clients probe for

    @app.get("/api/version")
    async def version() -> dict[str, Any]:
        return {"version": __version__}

    @app.get("/api/tags")
    async def tags() -> dict[str, Any]:
        return {"models": [server.model_entry()]}

    @app.get("/api/ps")
    async def ps() -> dict[str, Any]:
        entry = server.model_entry()
        entry.update(
            expires_at="2099-01-01T00:00:00Z",
            size_vram=entry["size"] if server.engine.options.n_gpu_layers != 0 else 0,
            context_length=server.engine.n_ctx,
        )
        return {"models": [entry]}

    @app.post("/api/show")
    async def show(request: Request) -> dict[str, Any]:
        from local_eagle.ollama.modelfile import Modelfile, format_modelfile, format_parameter

        body = await _json_body(request)
        server.check_model(body.get("model") or body.get("name"))
        mf = server.config.modelfile or Modelfile(model=server.config.model, draft=server.config.draft)
        params = "\n".join(
            f"{k:<30} {json.dumps(v) if isinstance(v, str) else format_parameter(v)}"
            for k, vs in sorted(mf.parameters.items())
            for v in (vs if isinstance(vs, list) else [vs])
        )
        info = server.info
        model_info = {
            "general.architecture": info["arch"],
            f"{info['arch']}.context_length": server.engine.n_ctx,
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
            "capabilities": ["completion"],
            "modified_at": server.model_entry()["modified_at"],
        }

    @app.post("/api/generate")
    async def generate(request: Request) -> Any:
        body = await _json_body(request)
        model = body.get("model")
        server.check_model(model)
        prompt = body.get("prompt") or ""
        _typed(prompt, str, "prompt")
        for key in ("images", "format", "suffix", "context"):
            if body.get(key):
                raise ApiError(400, f"'{key}' is not supported by local-eagle serve")
        options = body.get("options") or {}
        _typed(options, dict, "options")
        sp, n, k, stop = _settings(server, options, "options")
        if not prompt:  # Ollama: an empty prompt only loads the model
            return JSONResponse({"model": model, "created_at": _now_iso(), "response": "", "done": True,
                                 "done_reason": "load"})  # fmt: skip
        if body.get("raw"):
            text = prompt
        else:
            system, template = body.get("system"), body.get("template")
            for key, v in (("system", system), ("template", template)):
                if v is not None:
                    _typed(v, str, key)
            text = _render(server, [{"role": "user", "content": prompt}], system, template or None)
        return await ollama_respond(request, model, Job(text, n, sp, k, stop), False, body.get("stream"))

    @app.post("/api/chat")
    async def chat(request: Request) -> Any:
        body = await _json_body(request)
        model = body.get("model")
        server.check_model(model)
        if body.get("format"):
            raise ApiError(400, "'format' is not supported by local-eagle serve")
        options = body.get("options") or {}
        _typed(options, dict, "options")
        sp, n, k, stop = _settings(server, options, "options")
        if body.get("messages") == []:  # Ollama: no messages only loads the model
            return JSONResponse({"model": model, "created_at": _now_iso(), "message": {"role": "assistant",
                                 "content": ""}, "done": True, "done_reason": "load"})  # fmt: skip
        messages = _messages(body.get("messages"))
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise ApiError(400, "tools must be a list")
        text = _render(server, messages, None, None, tools)
        return await ollama_respond(request, model, Job(text, n, sp, k, stop), True, body.get("stream"))

    # -- OpenAI --------------------------------------------------------------------------------

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.config.name, "object": "model", "created": server.created,
                                            "owned_by": "local-eagle"}]}  # fmt: skip

    @app.get("/v1/models/{name}")
    async def model(name: str) -> dict[str, Any]:
        server.check_model(name)
        return {"id": server.config.name, "object": "model", "created": server.created, "owned_by": "local-eagle"}

    def openai_options(body: dict[str, Any]) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed"),
                             ("top_k", "top_k"), ("min_p", "min_p"), ("repeat_penalty", "repeat_penalty"),
                             ("draft_num_predict", "draft_num_predict")):  # fmt: skip
            if body.get(theirs) is not None:
                opts[ours] = body[theirs]
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None:
            if _typed(limit, int, "max_tokens") < 1:
                raise ApiError(400, "max_tokens must be at least 1")
            opts["num_predict"] = limit
        stop = body.get("stop")
        if stop is not None:
            opts["stop"] = [stop] if isinstance(stop, str) else stop
        if body.get("n", 1) != 1:
            raise ApiError(400, "only n=1 is supported")
        return opts

    def usage(out: Outcome) -> dict[str, int]:
        return {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.generated_tokens,
                "total_tokens": out.prompt_tokens + out.generated_tokens}  # fmt: skip

    def sse(obj: Any) -> bytes:
        return f"data: {json.dumps(obj)}\n\n".encode()

    async def openai_respond(request: Request, body: dict[str, Any], job: Job, chat: bool) -> Any:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        name = server.config.name

        def choice(text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {} if text is None else {"content": text}
                if first:
                    delta["role"] = "assistant"
                return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}

        stream = body.get("stream")
        if not (False if stream is None else _typed(stream, bool, "stream")):
            out = await server.complete(job, request)
            finish = done_reason(out.stop_reason)
            if chat:
                ch = {"index": 0, "message": {"role": "assistant", "content": out.text}, "finish_reason": finish,
                      "logprobs": None}  # fmt: skip
            else:
                ch = {"index": 0, "text": out.text, "finish_reason": finish, "logprobs": None}
            return {"id": rid, "object": obj, "created": created, "model": name, "choices": [ch], "usage": usage(out),
                    "speculative": out.stats}  # fmt: skip
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events, _first = await server.started(job, request)
        chunk_obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(ch: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
            d = {"id": rid, "object": chunk_obj, "created": created, "model": name, "choices": [ch] if ch else []}
            d.update(extra)
            return d

        async def gen() -> AsyncIterator[bytes]:
            first = True
            try:
                async for ev in events:
                    if ev[0] == "piece":
                        yield sse(chunk(choice(ev[1], None, first)))
                        first = False
                    elif ev[0] == "end":
                        out: Outcome = ev[1]
                        yield sse(chunk(choice(None, done_reason(out.stop_reason), first), speculative=out.stats))
                        if include_usage:
                            yield sse(chunk(None, usage=usage(out)))
                yield b"data: [DONE]\n\n"
            except ApiError as e:
                yield sse({"error": {"message": e.message, "type": "server_error", "param": None, "code": None}})
            finally:
                await events.aclose()

        return StreamingResponse(gen(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        body = await _json_body(request)
        server.check_model(body.get("model"))
        fmt = body.get("response_format")
        if body.get("logprobs") or (fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text")):
            raise ApiError(400, "logprobs and response_format other than text are not supported by local-eagle serve")
        sp, n, k, stop = _settings(server, openai_options(body), "request")
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise ApiError(400, "tools must be a list")
        text = _render(server, _messages(body.get("messages")), None, None, tools)
        return await openai_respond(request, body, Job(text, n, sp, k, stop), chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await _json_body(request)
        server.check_model(body.get("model"))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise ApiError(400, "prompt must be a non-empty string")
        if body.get("suffix") or body.get("echo") or body.get("logprobs"):
            raise ApiError(400, "suffix, echo and logprobs are not supported by local-eagle serve")
        sp, n, k, stop = _settings(server, openai_options(body), "request")
        return await openai_respond(request, body, Job(prompt, n, sp, k, stop), chat=False)

    return app


# ------------------------------------------------------------------------------------------------
# running it


def model_name(model: Path, modelfile: Path | None = None) -> str:
    """The name clients use: the Modelfile's (``llama3.Modelfile`` -> ``llama3``), else the GGUF's stem."""
    if modelfile is not None:
        stem = modelfile.name.removesuffix(".Modelfile").removesuffix(".modelfile")
        if stem and stem.lower() != "modelfile":
            return stem
    return model.stem


def load(config: ServeConfig, options: Any) -> EagleServer:
    """Load the pair once; every request reuses it."""
    return EagleServer(Engine(config.model, config.draft, options), config)


def serve(server: EagleServer, host: str = "127.0.0.1", port: int = 11434, log_level: str = "info") -> None:
    """Run until interrupted, then free the model."""
    import uvicorn

    try:
        uvicorn.run(create_app(server), host=host, port=port, log_level=log_level)
    finally:
        server.engine.close()

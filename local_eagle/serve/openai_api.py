"""OpenAI's API as a translation onto the Ollama one: /v1/chat/completions, /v1/completions, /v1/models.

As Ollama's own ``openai`` middleware does, a request's OpenAI fields become Ollama ``options`` (checked by the
same code, so a parameter means the same in both), its messages or prompt become the same Job, that job runs on
the same slot, and its events are written back as OpenAI objects and SSE chunks.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from local_eagle.serve.chatoutput import ChatOutput, Part, chat_output, finish_reason, openai_fields
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import Job, Outcome, done_reason, off_loop, stream_response
from local_eagle.serve.logprobs import openai_chat_logprobs, openai_legacy_logprobs, top_count
from local_eagle.serve.models import (
    Kind,
    check_fields,
    fit_chat,
    json_body,
    parse_tools,
    prompt_tokens,
    request_format,
    request_messages,
    settings,
    stream_flag,
    typed,
)
from local_eagle.serve.server import EagleServer, Server
from local_eagle.serve.thinking import openai_think
from local_eagle.serve.toolchoice import forced_tools, tool_settings

router = APIRouter(prefix="/v1")

# request fields that are Ollama options by the same name: OpenAI's temperature, top_p and seed, and extensions
# that llama.cpp's and Ollama's servers accept too (the openai client sends them through ``extra_body``)
_SAME_NAME = ("temperature", "top_p", "seed", "top_k", "min_p", "repeat_penalty", "draft_num_predict")
_SAME_NAME += ("frequency_penalty", "presence_penalty")  # checked, as Ollama's, and unused

# the JSON types of the other request fields, as Ollama's openai middleware declares them
_COMMON: dict[str, Kind] = {"model": str, "stream": bool, "stream_options": dict, "max_tokens": int, "n": int,
                            "stop": (str, list), "user": str}  # fmt: skip
_CHAT = _COMMON | {"messages": list, "tools": list, "response_format": dict, "logprobs": bool,
                   "top_logprobs": int, "max_completion_tokens": int, "tool_choice": (str, dict),
                   "think": (bool, str)}  # fmt: skip
_COMPLETIONS = _COMMON | {"prompt": (str, list), "suffix": str, "echo": bool, "logprobs": int}


def openai_options(body: dict[str, Any]) -> dict[str, Any]:
    """The request's fields as the Ollama ``options`` they stand for."""
    opts: dict[str, Any] = {}
    for key in _SAME_NAME:
        if body.get(key) is not None:
            opts[key] = body[key]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        if typed(limit, int, "max_tokens") < 1:
            raise ApiError(400, "max_tokens must be at least 1")
        opts["num_predict"] = limit
    stop = body.get("stop")
    if stop is not None:
        opts["stop"] = [stop] if isinstance(stop, str) else stop
    if body.get("n", 1) != 1:
        raise ApiError(400, "only n=1 is supported")
    return opts


def chat_logprobs(body: dict[str, Any]) -> int | None:
    """``logprobs: true`` with ``top_logprobs: n`` (0..20): how many alternatives each token gets; None: off."""
    top = body.get("top_logprobs")
    if not body.get("logprobs"):
        if top is not None:
            raise ApiError(400, "top_logprobs requires logprobs: true")
        return None
    return 0 if top is None else top_count(top, "top_logprobs")


def _usage(out: Outcome) -> dict[str, int]:
    return {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.generated_tokens,
            "total_tokens": out.prompt_tokens + out.generated_tokens}  # fmt: skip


def _sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


@dataclass
class OpenAIReply:
    """One /v1 answer, whole or as chunks; its id and time are fixed when the request arrives, and every chunk
    of a stream repeats them, as OpenAI's do."""

    chat: bool
    model: str
    include_usage: bool = False
    id: str = field(init=False)
    created: int = field(init=False)
    first: bool = field(init=False, default=True)  # a chat stream names the role in its first delta only
    output: ChatOutput | None = None  # the thinking and tool-call parsers, where the request needs them
    dropped: int = 0  # the oldest messages dropped to fit the context (models.fit_chat), said in the answer
    media_type = "text/event-stream"

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def whole(self, out: Outcome) -> dict[str, Any]:
        finish = done_reason(out.stop_reason)
        if self.chat:
            part = self.output.whole(out.text) if self.output else Part(out.text)
            msg = {"role": "assistant", "content": part.content or (None if part.calls else ""), **openai_fields(part)}
            finish = finish_reason(finish, self.output)
            ch = {"index": 0, "message": msg, "finish_reason": finish, "logprobs": self._logprobs(out)}
        else:
            ch = {"index": 0, "text": out.text, "finish_reason": finish, "logprobs": self._logprobs(out)}
        obj = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [ch],
                "usage": _usage(out), "speculative": out.stats, **self._dropped()}  # fmt: skip

    def _dropped(self) -> dict[str, int]:
        """``dropped_messages``, where the oldest messages were left out to fit the context."""
        return {"dropped_messages": self.dropped} if self.dropped else {}

    def _logprobs(self, out: Outcome) -> dict[str, Any] | None:
        """The choice's ``logprobs`` (None unless asked for): a stream sends them all with its last choice."""
        if out.logprobs is None:
            return None
        return openai_chat_logprobs(out.logprobs) if self.chat else openai_legacy_logprobs(out.logprobs)

    def _choice(self, text: str | Part | None, finish: str | None) -> dict[str, Any]:
        if self.chat:
            part = Part(text) if isinstance(text, str) else text
            delta: dict[str, Any] = {}
            if part is not None:  # a piece with only thinking or calls has no content, as Ollama's
                delta = ({"content": part.content} if part.content or not part else {}) | openai_fields(part)
            if self.first:
                delta["role"] = "assistant"
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {"index": 0, "text": text if isinstance(text, str) else "", "finish_reason": finish, "logprobs": None}

    def _chunk(self, ch: dict[str, Any] | None, **extra: Any) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        d = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [ch] if ch else []}
        d.update(extra)
        return _sse(d)

    def event(self, event: tuple) -> Iterator[bytes]:
        if event[0] == "piece":
            part = self.output.add(event[1]) if self.output else event[1]
            if part:  # a piece held back as a possible tag or call sends nothing yet
                yield self._chunk(self._choice(part, None))
                self.first = False
        elif event[0] == "end":
            out: Outcome = event[1]
            if self.output and (rest := self.output.finish()):
                yield self._chunk(self._choice(rest, None))
                self.first = False
            finish = finish_reason(done_reason(out.stop_reason), self.output)
            last = self._choice(None, finish)
            last["logprobs"] = self._logprobs(out)
            yield self._chunk(last, speculative=out.stats, **self._dropped())
            if self.include_usage:
                yield self._chunk(None, usage=_usage(out))
            yield b"data: [DONE]\n\n"

    def error(self, e: ApiError) -> bytes:
        return _sse({"error": {"message": e.message, "type": "server_error", "param": None, "code": None}})


def _reply(body: dict[str, Any], server: EagleServer, chat: bool) -> OpenAIReply:
    """The reply, made when the request is checked: ``stream_options`` is read before any work starts."""
    usage = (body.get("stream_options") or {}).get("include_usage")
    return OpenAIReply(chat, server.config.name, usage is not None and typed(usage, bool, "include_usage"))


async def _respond(request: Request, body: dict[str, Any], server: EagleServer, job: Job, reply: OpenAIReply) -> Any:
    if not stream_flag(body.get("stream"), False):
        return reply.whole(await server.complete(job, request))
    return await stream_response(server, job, request, reply)


def _model_object(server: EagleServer) -> dict[str, Any]:
    return {"id": server.config.name, "object": "model", "created": server.created, "owned_by": "local-eagle"}


@router.get("/models")
async def models(server: Server) -> dict[str, Any]:
    return {"object": "list", "data": [_model_object(server)]}


@router.get("/models/{name:path}")
async def model(name: str, server: Server) -> dict[str, Any]:
    server.check_model(name)
    return _model_object(server)


@router.post("/chat/completions")
async def chat_completions(request: Request, server: Server) -> Any:
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _CHAT)
    server.check_model(body.get("model"))
    logprobs = chat_logprobs(body)
    grammar = await request_format(request, body.get("response_format"), "response_format", openai=True)
    s = settings(server, openai_options(body))
    reply = _reply(body, server, chat=True)
    tools = parse_tools(body.get("tools"))
    forced = forced_tools(body.get("tool_choice"), tools)
    if forced is not None and grammar is not None:
        raise ApiError(400, "tool_choice forces a tool call, which response_format cannot constrain as well")
    messages = await request_messages(request, body.get("messages"))
    think = openai_think(body)
    reply.output = chat_output(server, False if forced is not None and think is None else think, tools)
    if forced is not None and reply.output.thinking is not None:
        raise ApiError(400, "tool_choice forces a tool call, which leaves no room for thinking: ask with think off")
    special, call_grammar = await off_loop(request, partial(tool_settings, server, reply.output, tools, forced))
    fitted = await off_loop(request, partial(fit_chat, server, messages, tools, reply.output.think))
    reply.output.watch(lambda: fitted.text)()  # a prompt that ends inside the thinking starts the answer there
    reply.dropped = fitted.dropped
    job = s.job(fitted.tokens, grammar or call_grammar, "response_format" if grammar is not None else "tool_choice")
    job.logprobs, job.special = logprobs, special
    return await _respond(request, body, server, job, reply)


@router.post("/completions")
async def completions(request: Request, server: Server) -> Any:
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _COMPLETIONS)
    server.check_model(body.get("model"))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "prompt must be a non-empty string")
    if body.get("suffix") or body.get("echo"):
        raise ApiError(400, "suffix and echo are not supported by local-eagle serve")
    logprobs = None if body.get("logprobs") is None else top_count(body["logprobs"], "logprobs")
    s = settings(server, openai_options(body))
    reply = _reply(body, server, chat=False)
    tokens = await prompt_tokens(server, request, prompt)  # a completion's prompt is raw
    job = s.job(tokens)
    job.logprobs = logprobs
    return await _respond(request, body, server, job, reply)

"""Request models: a request body's fields checked and turned into what a job runs.

Ollama's ``options`` map onto the engine's sampling, length, draft and stop settings; the OpenAI API maps its
own fields onto the same ``options`` first, so that both APIs check and default a parameter the same way.
Errors are ApiErrors (400), written in the calling API's shape.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import numpy as np
from fastapi import Request

from local_eagle.errors import LocalEagleError
from local_eagle.ollama import parameters
from local_eagle.ollama.parameters import ParameterError
from local_eagle.runtime import jsontext
from local_eagle.runtime.grammar import GrammarSpec
from local_eagle.runtime.jsontext import JSONTextError
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import Job, in_thread, off_loop
from local_eagle.serve.server import EagleServer
from local_eagle.serve.toolcalls import message_extras

LOAD_SECONDS = "local_eagle.load_seconds"
"""The ASGI scope's key under which the store front leaves how long it took to have the request's model loaded
(a load the request caused, or one it waited for), so that Ollama's ``load_duration`` and ``total_duration`` include
it as Ollama's do."""


def load_seconds(request: Request) -> float:
    """The seconds the store front spent having the request's model loaded (0 where it was loaded already, and on a
    server of one model)."""
    return float(request.scope.get(LOAD_SECONDS, 0.0))


async def json_body(request: Request, limit: int) -> dict[str, Any]:
    """Read by hand, not by FastAPI's models: a bad body must be a 400 in the calling API's shape, and one over
    ``limit`` bytes a 413 before it is all in memory (a declared length is refused before anything is read)."""
    declared = request.headers.get("content-length", "")
    too_big = ApiError(413, f"the request body is larger than the server's limit of {limit} bytes")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    try:
        async with asyncio.timeout(BODY_SECONDS):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_big
                chunks.append(chunk)
    except TimeoutError:
        raise body_too_slow() from None
    return await decode_body(b"".join(chunks))


async def decode_body(data: bytes) -> dict[str, Any]:
    """:func:`parse_body`, off the event loop for a body of :data:`PARSE_IN_THREAD_BYTES` or more (megabytes of
    JSON take a while to decode and check), one such body at a time."""
    if len(data) < PARSE_IN_THREAD_BYTES:
        return parse_body(data)
    return await in_thread(partial(_parse_big_body, data))


BODY_SECONDS = 60.0  # a body must be in by then: one sent a byte at a time would hold its connection for good


def body_too_slow() -> ApiError:
    return ApiError(408, f"the request body took longer than {BODY_SECONDS:g}s to arrive")


PARSE_IN_THREAD_BYTES = 64 << 10  # a body this long is decoded and checked off the event loop


_BIG_BODIES = threading.Semaphore(1)
TRIM_AFTER_SECONDS = 5.0


def _parse_big_body(data: bytes) -> dict[str, Any]:
    """:func:`parse_body` for a body over :data:`PARSE_IN_THREAD_BYTES`, one at a time: ``json.loads`` holds the GIL
    throughout (50 ms for 6.6 MB), and several in a row would keep the event loop from it for as long. The memory a
    big body took is handed back to the system a few seconds after the last one (:func:`_trim_later`)."""
    _trim_later()
    with _BIG_BODIES:
        return parse_body(data)


_trim_timer: threading.Timer | None = None
_trim_lock = threading.Lock()


def _trim_later() -> None:
    """glibc keeps the pages of freed small objects (a parsed body is millions of them) for the process: four
    6.6 MB bodies left the server 150 MB bigger for good. ``malloc_trim`` gives them back, once bodies stop coming."""
    global _trim_timer
    with _trim_lock:
        if _trim_timer is not None:
            _trim_timer.cancel()
        _trim_timer = threading.Timer(TRIM_AFTER_SECONDS, _trim)
        _trim_timer.daemon = True
        _trim_timer.start()


def _trim() -> None:
    import ctypes
    import ctypes.util
    import gc

    gc.collect()  # a refused request's traceback holds its frames, and so its body, in a cycle
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc: its allocator is left as it is
        pass


def parse_body(data: bytes) -> dict[str, Any]:
    """A request body as a JSON object, or a 400 (:func:`local_eagle.runtime.jsontext.loads`: nesting bounded, as Go's
    decoder, Ollama's, stops at 10000; no number Python cannot read; no lone surrogate in any string)."""
    try:
        body = jsontext.loads(data, "the request body")
    except JSONTextError as e:
        raise ApiError(400, str(e)) from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


Kind = type | tuple[type, ...]


def typed(value: Any, kind: Kind, name: str) -> Any:
    """``value`` if it is a ``kind``; JSON's ``true`` (a Python int) and ``NaN`` (Python's json reads it) are not
    numbers here, since llama.cpp would take them without complaint."""
    if isinstance(value, bool) and kind is not bool and not (isinstance(kind, tuple) and bool in kind):
        raise ApiError(400, f"{name} must be a number, got {json.dumps(value)}")
    if not isinstance(value, kind):
        raise ApiError(400, f"{name} has the wrong type: {json.dumps(value)[:80]}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ApiError(400, f"{name} must be a finite number")
    return value


def check_fields(body: dict[str, Any], kinds: dict[str, Kind], prefix: str = "") -> None:
    """Each field's JSON type, checked up front as Go's decoder checks Ollama's: a wrong one is a 400 that names
    it (after ``prefix``, where the object sits in the body), not a 500 or a silent default further on. Null is any
    field's zero value; unknown fields are ignored."""
    for name, kind in kinds.items():
        if body.get(name) is not None:
            typed(body[name], kind, prefix + name)


def check_keep_alive(value: Any) -> float | None:
    """The store server keeps a model by it; a one-model server has only its one, but refuses the same values,
    so that a request means the same to both. The seconds it says (None: for good)."""
    from local_eagle.serve.registry import keep_alive_seconds

    try:
        return keep_alive_seconds(value)
    except LocalEagleError as e:
        raise ApiError(400, str(e)) from None


def unloads(body: dict[str, Any]) -> bool:
    """A request that only unloads its model, as Ollama reads one: no prompt (generate) or no messages (chat),
    with ``keep_alive`` 0. Ollama answers it ``done_reason: "unload"`` without loading the model first."""
    if body.get("keep_alive") is None or body.get("prompt") or body.get("messages"):
        return False
    return check_keep_alive(body["keep_alive"]) == 0


def stream_flag(value: Any, default: bool) -> bool:
    """Ollama streams unless told not to, OpenAI only when asked: the same check, another default."""
    return default if value is None else typed(value, bool, "stream")


class RequestSettings(NamedTuple):
    """A request's generation settings, checked before its prompt is rendered (the order errors come in)."""

    sampling: SamplingParams
    max_tokens: int
    draft_max: int
    stop: list[str]

    def job(self, prompt: np.ndarray, grammar: GrammarSpec | None = None, grammar_field: str = "format") -> Job:
        """The job; ``grammar_field`` is the request field the grammar came from, for an error it meets running."""
        return Job(prompt, self.max_tokens, self.sampling, self.draft_max, self.stop, grammar, grammar_field)


async def request_format(request: Request, value: Any, field: str, openai: bool = False) -> GrammarSpec | None:
    """:func:`output_format` off the event loop: a schema's checks (llguidance's validation, the dry run) take up
    to a second on a large one, and the server must go on answering meanwhile. Gives up (499) if the client
    leaves."""
    if value is None or value == "" or value == "json" or value == {"type": "text"}:
        return output_format(value, field, openai)  # nothing to compile: no thread
    return await off_loop(request, partial(output_format, value, field, openai))


def output_format(value: Any, field: str, openai: bool = False) -> GrammarSpec | None:
    """Ollama's ``format`` or OpenAI's ``response_format`` as the constraint the engine applies (None: free text);
    a value either API refuses, or a schema llguidance cannot compile, is a 400 naming the field."""
    try:
        if openai:
            return GrammarSpec.from_openai_response_format(value, field)
        return GrammarSpec.from_ollama_format(value, field)
    except LocalEagleError as e:
        raise ApiError(400, str(e)) from None


def option(name: str, value: Any, prefix: str = "") -> Any:
    """One option checked by the table the Modelfile, the CLI and chat's ``/set`` use, so that a value means
    the same everywhere; Python's json reads ``NaN`` and ``Infinity``, which no parameter takes."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ApiError(400, f"{prefix}{name} must be a finite number, got {json.dumps(value)}")
    try:
        return parameters.check(name, value)
    except ParameterError as e:
        raise ApiError(400, f"{prefix}{e}") from None


def settings(server: EagleServer, options: dict[str, Any], prefix: str = "") -> RequestSettings:
    """Sampling, max tokens, draft max and stop strings: the request's options over the server's settings (the
    Modelfile's parameters and serve's flags, ``local_eagle.settings``). Every known option is checked, even one
    that only a reload could apply (``num_ctx``, ``num_thread``: the server's are fixed) or that local-eagle does
    not use; unknown ones are ignored, as Ollama does."""
    checked = {key: option(key, value, prefix) for key, value in options.items()
               if value is not None and key in parameters.PARAMETERS}  # fmt: skip
    s = server.config.settings.over(checked)
    return RequestSettings(s.sampling(), s.max_tokens(server.engine.n_ctx), s.draft_max, s.stop())


async def request_messages(request: Request, raw: Any) -> list[dict[str, Any]]:
    """:func:`parse_messages`, off the event loop for a long list: 200,000 messages took 0.3 s of it, 50,000 with
    tool calls 0.44 s."""
    if not isinstance(raw, list) or len(raw) <= 256:
        return parse_messages(raw)
    return await off_loop(request, partial(parse_messages, raw))


def parse_messages(raw: Any) -> list[dict[str, Any]]:
    """Both APIs' messages as the plain role/content pairs the chat templates read."""
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty list")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a role")
        content = "" if m.get("content") is None else m["content"]
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            parts = []
            for p in content:
                if not isinstance(p, dict) or p.get("type") != "text":
                    raise ApiError(400, f"messages[{i}]: only text content is supported")
                parts.append(typed(p.get("text", ""), str, f"messages[{i}].content[].text"))
            content = "".join(parts)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string")
        check_fields(m, {"images": list, "tool_calls": list})
        if m.get("images"):
            raise ApiError(400, "images are not supported: local-eagle runs text models")
        out.append({"role": m["role"], "content": content, **message_extras(m, i)})
    return out


_TOOL_FUNCTION: dict[str, Kind] = {"name": str, "description": str, "parameters": dict}


def parse_tools(raw: Any) -> list[Any] | None:
    """Tools reach the chat template as given (an empty list is no tools, as in Ollama), once their shape is known
    good: each an object whose ``function`` is an object (Ollama's ``api.ToolFunction``: ``name`` and
    ``description`` strings, ``parameters`` an object), since the template, the tool-call parser and a forced call's
    grammar all read them."""
    tools = raw or None
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list of objects")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ApiError(400, f"tools[{i}] must be an object, got {json.dumps(tool)[:60]}")
        check_fields(tool, {"type": str}, f"tools[{i}].")
        fn = tool.get("function")
        if fn is not None and not isinstance(fn, dict):
            raise ApiError(400, f"tools[{i}].function must be an object with a name (and a description and "
                                f"parameters), got {json.dumps(fn)[:60]}")  # fmt: skip
        check_fields(fn or {}, _TOOL_FUNCTION, f"tools[{i}].function.")
    return tools


def render(
    server: EagleServer,
    messages: list[dict[str, Any]],
    system: str | None,
    template: str | None,
    tools: list[Any] | None = None,
    think: bool | str | None = None,
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
            think=think,
        )
    except LocalEagleError as e:
        raise ApiError(400, str(e)) from None
    except Exception as e:  # a template the request or Modelfile gave that our engine or jinja2 choked on
        raise ApiError(400, f"the prompt template failed: {type(e).__name__}: {e}") from None


async def prompt_tokens(server: EagleServer, request: Request, prompt: str | Callable[[], str]) -> np.ndarray:
    """The prompt's tokens, made off the event loop (``prompt`` may be the rendering still to do): a slow
    template or a long prompt must not stall the other requests, nor hold the model slot."""
    return await off_loop(request, lambda: server.tokens(prompt() if callable(prompt) else prompt))


class FittedChat(NamedTuple):
    """A chat's prompt as it fits the context: its text, its tokens, and how many of the request's messages were
    dropped from the start of the conversation to fit (0: none)."""

    text: str
    tokens: np.ndarray
    dropped: int


def fit_chat(
    server: EagleServer,
    messages: list[dict[str, Any]],
    tools: list[Any] | None = None,
    think: bool | str | None = None,
) -> FittedChat:
    """The chat's prompt, the oldest messages dropped until it fits the context, as Ollama's ``chatPrompt`` does:
    the latest message is always kept, and so is every system message before the ones kept; from the newest back,
    messages are added while the prompt still fits. Open WebUI's title and tag requests carry a whole long reply,
    which Ollama answers this way rather than refusing. A prompt whose latest message alone cannot fit is a 400
    (``JobSlot.tokens``). Runs off the event loop: it renders and tokenizes up to once a message."""
    text = render(server, messages, None, None, tools, think)
    tokens, why = server.fitting_tokens(text)
    if why is None or len(messages) < 2:
        return FittedChat(text, server.tokens(text) if why is not None else tokens, 0)
    last = len(messages) - 1
    best: tuple[str, np.ndarray, int] | None = None
    for i in range(last, 0, -1):  # i: the first message kept besides the earlier system messages
        kept = [m for m in messages[:i] if m.get("role") == "system"] + messages[i:]
        text = render(server, kept, None, None, tools, think)
        tokens, why = server.fitting_tokens(text)
        if why is not None:
            if best is None:  # the latest message (and the system messages) alone do not fit
                raise ApiError(400, why)
            break
        best = (text, tokens, sum(1 for m in messages[:i] if m.get("role") != "system"))
    assert best is not None
    return FittedChat(*best)


async def chat_tokens(
    server: EagleServer,
    request: Request,
    messages: list[dict[str, Any]],
    system: str | None = None,
    template: str | None = None,
    tools: list[Any] | None = None,
) -> np.ndarray:
    """A conversation's tokens: rendered as Ollama builds the prompt, then tokenized, both off the event loop."""
    return await prompt_tokens(server, request, partial(render, server, messages, system, template, tools))

"""Request models: a request body's fields checked and turned into what a job runs.

Ollama's ``options`` map onto the engine's sampling, length, draft and stop settings; the OpenAI API maps its
own fields onto the same ``options`` first, so that both APIs check and default a parameter the same way.
Errors are ApiErrors (400), written in the calling API's shape.
"""

from __future__ import annotations

import json
import math
from typing import Any, NamedTuple

from fastapi import Request

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import Job
from local_eagle.serve.server import EagleServer


async def json_body(request: Request) -> dict[str, Any]:
    """Read by hand, not by FastAPI's models: a bad body must be a 400 in the calling API's shape."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def typed(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    """``value`` if it is a ``kind``; JSON's ``true`` (a Python int) and ``NaN`` (Python's json reads it) are not
    numbers here, since llama.cpp would take them without complaint."""
    if isinstance(value, bool) and kind is not bool and not (isinstance(kind, tuple) and bool in kind):
        raise ApiError(400, f"{name} must be a number, got {json.dumps(value)}")
    if not isinstance(value, kind):
        raise ApiError(400, f"{name} has the wrong type: {json.dumps(value)[:80]}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ApiError(400, f"{name} must be a finite number")
    return value


def stream_flag(value: Any, default: bool) -> bool:
    """Ollama streams unless told not to, OpenAI only when asked: the same check, another default."""
    return default if value is None else typed(value, bool, "stream")


OPTION_TYPES: dict[str, type | tuple[type, ...]] = {
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


class Settings(NamedTuple):
    """A request's generation settings, checked before its prompt is rendered (the order errors come in)."""

    sampling: SamplingParams
    max_tokens: int
    draft_max: int
    stop: list[str]

    def job(self, prompt: str) -> Job:
        return Job(prompt, self.max_tokens, self.sampling, self.draft_max, self.stop)


def settings(server: EagleServer, options: dict[str, Any], where: str) -> Settings:
    """Sampling, max tokens, draft max and stop strings: request options over the Modelfile's
    parameters over local-eagle's defaults. ``num_ctx`` is the server's and cannot change per request."""
    params = dict(server.config.parameters)
    for key, value in options.items():
        if value is None or key not in OPTION_TYPES:
            continue  # Ollama ignores options it does not know (or that only a reload could change)
        typed(value, OPTION_TYPES[key], f"{where}.{key}")
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
    return Settings(_sampling(params, where), n_predict, draft_max, list(stop))


def _sampling(params: dict[str, Any], where: str) -> SamplingParams:
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
    return sp


def parse_messages(raw: Any) -> list[dict[str, Any]]:
    """Both APIs' messages as the plain role/content pairs the chat templates read."""
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


def parse_tools(raw: Any) -> list[Any] | None:
    """Tools reach the chat template as given; an empty list is no tools, as in Ollama."""
    tools = raw or None
    if tools is not None and not isinstance(tools, list):
        raise ApiError(400, "tools must be a list")
    return tools


def render(
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

"""A chat answer split as Ollama's chat handler splits it: thinking, content and tool calls.

The model's text goes through the thinking parser (when the request thinks and the template has thinking tags),
then what is content through the tool parser (when the request gave tools), a piece at a time, so that a stream
sends each part as soon as it is known and holds back only what may still turn out to be a tag or a call.
:func:`chat_output` reads the model's template for both and settles ``think`` as Ollama does: on by default for a
model that thinks, a 400 when asked of one that does not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from local_eagle.serve.errors import ApiError
from local_eagle.serve.thinking import ThinkingParser, template_thinking_tags
from local_eagle.serve.toolcalls import (
    ToolParser,
    call_id,
    ollama_calls,
    openai_calls,
    template_tool_tag,
    tool_names,
)


@dataclass
class Part:
    """What a piece of output (or the whole of it) turned out to be."""

    content: str = ""
    thinking: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.thinking or self.calls)

    def then(self, other: Part) -> Part:
        return Part(self.content + other.content, self.thinking + other.thinking, self.calls + other.calls)


class ChatOutput:
    """The parsers of one answer. ``think`` is what the template sees (None: not set)."""

    def __init__(self, think: bool | str | None, tags: tuple[str, str], tool_tag: str, names: Sequence[str]) -> None:
        self.think = think
        self.opening = tags[0]
        self.thinking = ThinkingParser(*tags) if think and tags[0] and tags[1] else None
        self.tools = ToolParser(tool_tag, names) if names else None
        self.any_calls = False

    @property
    def active(self) -> bool:
        return self.thinking is not None or self.tools is not None

    def watch(self, render: Callable[[], str]) -> Callable[[], str]:
        """``render`` made to note whether its prompt ends inside the thinking (with the opening tag)."""

        def run() -> str:
            prompt = render()
            if self.thinking is not None and prompt.rstrip().endswith(self.opening):
                self.thinking.add(self.opening)
            return prompt

        return run

    def add(self, text: str) -> Part:
        thinking, content = self.thinking.add(text) if self.thinking is not None else ("", text)
        return self._calls(Part(content, thinking))

    def finish(self) -> Part:
        """What was held back, once the output has ended."""
        thinking, content = self.thinking.finish() if self.thinking is not None else ("", "")
        part = self._calls(Part(content, thinking))
        if self.tools is not None:
            part.content += self.tools.finish()
        return part

    def whole(self, text: str) -> Part:
        return self.add(text).then(self.finish())

    def _calls(self, part: Part) -> Part:
        if self.tools is not None and part.content:
            calls, part.content = self.tools.add(part.content)
            for c in calls:
                c["id"] = call_id()
            part.calls = calls
            self.any_calls = self.any_calls or bool(calls)
        return part


@lru_cache(maxsize=16)
def _jinja_source(path: str, mtime_ns: int) -> str | None:
    from local_eagle.ollama.prompt import read_chat_template

    return read_chat_template(path).template


def template_source(server: Any, template: str | None = None) -> tuple[str, str] | None:
    """The template a request renders with, as ``("go", TEMPLATE)`` or ``("jinja", chat_template)``: the request's
    own, the Modelfile's TEMPLATE, else the GGUF's chat template (read once per file); None for neither."""
    mf = server.config.modelfile
    if template is None and mf is not None:
        template = mf.template
    if template is not None:
        return "go", template
    path = Path(server.config.model)
    try:
        source = _jinja_source(str(path), os.stat(path).st_mtime_ns)
    except Exception:  # an unreadable GGUF fails the render with its own error
        return None
    return ("jinja", source) if source else None


def chat_output(
    server: Any, think: bool | str | None, tools: Sequence[Mapping[str, Any]] | None, template: str | None = None
) -> ChatOutput:
    """The parsers for a request, as Ollama's chat handler sets them up."""
    src = template_source(server, template)
    tags = template_thinking_tags(*src) if src else ("", "")
    if tags[0] and tags[1]:
        think = True if think is None else think
    elif think:
        raise ApiError(400, f'"{server.config.name}" does not support thinking')
    names = tool_names(tools)
    if names:
        check_tools(server, src)
    return ChatOutput(think, tags, template_tool_tag(*src) if src and names else "{", names)


def takes_tools(src: tuple[str, str] | None) -> bool:
    """Whether a template (``("go", TEMPLATE)`` or ``("jinja", chat_template)``) can take tools, as Ollama decides
    the ``tools`` capability: a Go template that reads ``.Tools``, a Jinja template that names ``tools``. One that
    cannot drops the tool definitions and the ``role: tool`` results, so a round trip's answer never sees them."""
    if src is None:
        return False
    kind, source = src
    if kind == "go":
        from local_eagle.ollama.template import parse_ollama

        try:
            return "tools" in parse_ollama(source).identifiers()
        except Exception:  # a template that does not parse fails its render with a 400 of its own
            return False
    return "tools" in source


def check_tools(server: Any, src: tuple[str, str] | None) -> None:
    """Ollama's 400 for tools sent to a model whose template cannot take them: ``"NAME" does not support tools``."""
    if not takes_tools(src):
        raise ApiError(400, f'"{server.config.name}" does not support tools')


def ollama_fields(part: Part, chat: bool) -> dict[str, Any]:
    """A /api/chat ``message`` (or /api/generate's ``response`` and ``thinking``) for ``part``."""
    if not chat:
        return {"response": part.content, **({"thinking": part.thinking} if part.thinking else {})}
    msg: dict[str, Any] = {"role": "assistant", "content": part.content}
    if part.thinking:
        msg["thinking"] = part.thinking
    if part.calls:
        msg["tool_calls"] = ollama_calls(part.calls)
    return {"message": msg}


def openai_fields(part: Part) -> dict[str, Any]:
    """An OpenAI message or delta's fields for ``part``: ``reasoning_content`` (and Ollama's ``reasoning``) for
    the thinking, ``tool_calls`` with their ids and arguments as JSON text."""
    out: dict[str, Any] = {}
    if part.thinking:
        out["reasoning_content"] = out["reasoning"] = part.thinking
    if part.calls:
        out["tool_calls"] = openai_calls(part.calls)
    return out


def finish_reason(reason: str, output: ChatOutput | None) -> str:
    """OpenAI's ``tool_calls`` where the answer stopped on its own after calling a tool."""
    return "tool_calls" if reason == "stop" and output is not None and output.any_calls else reason


@lru_cache(maxsize=64)
def _pools(path: str, mtime_ns: int) -> bool:
    from gguf import Keys

    from local_eagle.gguf.reader import read_header

    kv = read_header(path).kv
    return Keys.LLM.POOLING_TYPE.format(arch=kv.get(Keys.General.ARCHITECTURE)) in kv


def capabilities(model: os.PathLike[str] | str, template: str | None) -> list[str]:
    """``/api/show``'s ``capabilities`` as Ollama's ``Model.Capabilities`` works them out: ``embedding`` for a GGUF
    that names a pooling, else ``completion``; ``tools`` where the template reads ``.Tools`` (a Jinja template:
    ``tools``); ``thinking`` where it has thinking tags. ``template`` is the Modelfile's TEMPLATE (None: the GGUF's
    own). Not ``insert``: /api/generate refuses ``suffix``."""
    path = Path(model)
    try:
        embedding = _pools(str(path), os.stat(path).st_mtime_ns)
    except Exception:  # an unreadable GGUF: what its loading would say is said there
        embedding = False
    caps = ["embedding" if embedding else "completion"]
    if template is not None:
        src: tuple[str, str] | None = ("go", template)
    else:
        try:
            jinja = _jinja_source(str(path), os.stat(path).st_mtime_ns)
        except Exception:
            jinja = None
        src = ("jinja", jinja) if jinja else None
    if src is None:
        return caps
    if takes_tools(src):
        caps.append("tools")
    kind, source = src
    opening, closing = template_thinking_tags(kind, source)
    if opening and closing:
        caps.append("thinking")
    return caps

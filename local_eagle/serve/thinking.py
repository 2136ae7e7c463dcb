"""A thinking model's reasoning read out of its output, as Ollama's ``thinking`` package reads it.

A model thinks where its chat template says so: for an Ollama (Go) TEMPLATE, the text around ``{{ .Thinking }}``
inside the range over ``.Messages`` gives the opening and closing tags (``thinking.InferTags``); for a GGUF's
Jinja template, one that writes ``<think>`` and ``</think>`` (Qwen 3, DeepSeek R1) does. The output is read as
``thinking.Parser`` reads it: leading whitespace and an opening tag start the thinking, whatever follows up to
the closing tag is ``thinking``, the rest content; an output that does not start with the tag has no thinking.
A prompt that already ends with the opening tag (DeepSeek R1's templates write it) starts the parser inside it.

At the end of the output, text held back as a possible closing tag goes to the thinking, and whitespace or a
partial opening tag held back at the start goes to the content (Ollama's parser keeps them and drops them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from local_eagle.serve.errors import ApiError

_LOOKING, _STARTED, _THINKING, _DONE_EATING, _DONE = range(5)

# OpenAI's reasoning efforts as Ollama's think values (openai.thinkFromReasoningEffort); "" leaves the default
_EFFORTS: dict[str, bool | str] = {"none": False, "minimal": "low", "low": "low", "medium": "medium",
                                   "high": "high", "max": "max", "xhigh": "max", "ultra": "max"}  # fmt: skip


def _overlap(s: str, delim: str) -> int:
    """The longest suffix of ``s`` that is a prefix of ``delim``."""
    for i in range(min(len(delim), len(s)), 0, -1):
        if s.endswith(delim[:i]):
            return i
    return 0


class ThinkingParser:
    """Ollama's ``thinking.Parser``: :meth:`add` answers ``(thinking, content)`` that are surely so."""

    def __init__(self, opening: str, closing: str) -> None:
        self.opening, self.closing = opening, closing
        self.state = _LOOKING
        self.acc = ""

    def add(self, text: str) -> tuple[str, str]:
        self.acc += text
        thinking, content = [], []
        again = True
        while again:
            t, c, again = self._eat()
            thinking.append(t)
            content.append(c)
        return "".join(thinking), "".join(content)

    def finish(self) -> tuple[str, str]:
        """What is still held when the output ends."""
        rest, self.acc = self.acc, ""
        if self.state == _THINKING:
            return rest, ""
        return "", rest if self.state != _LOOKING or rest.strip() else ""

    def _eat(self) -> tuple[str, str, bool]:
        acc = self.acc
        if self.state == _LOOKING:
            trimmed = acc.lstrip()
            if trimmed.startswith(self.opening):
                after = trimmed[len(self.opening) :].lstrip()
                self.acc = after
                self.state = _THINKING if after else _STARTED
                return "", "", True
            if self.opening.startswith(trimmed):  # a partial opening tag, or whitespace only
                return "", "", False
            self.state, self.acc = _DONE, ""  # no opening tag: no thinking; the content keeps its whitespace
            return "", acc, False
        if self.state == _STARTED:
            trimmed, self.acc = acc.lstrip(), ""
            if not trimmed:
                return "", "", False
            self.state, self.acc = _THINKING, trimmed
            return "", "", True
        if self.state == _THINKING:
            if self.closing in acc:
                thinking, remaining = acc.split(self.closing, 1)
                remaining = remaining.lstrip()
                self.acc = ""
                self.state = _DONE if remaining else _DONE_EATING
                return thinking, remaining, False
            if k := _overlap(acc, self.closing):
                self.acc = acc[-k:]
                return acc[:-k], "", False
            self.acc = ""
            return acc, "", False
        if self.state == _DONE_EATING:
            trimmed, self.acc = acc.lstrip(), ""
            if trimmed:
                self.state = _DONE
            return "", trimmed, False
        self.acc = ""
        return "", acc, False


def go_thinking_tags(template: Any) -> tuple[str, str]:
    """Ollama's ``thinking.InferTags`` on a parsed Go template: for each ``.Thinking`` inside a range over
    ``.Messages``, the first and last text of the nearest enclosing list, trimmed; the last such wins."""
    from local_eagle.ollama.template.nodes import Action, Command, Field, If, Pipe, Range, TemplateCall, TextNode, With

    tags = ["", ""]
    ancestors: list[Any] = []

    def uses(node: Any, name: str) -> bool:
        found = False

        def look(n: Any) -> None:
            nonlocal found
            if isinstance(n, Field) and n.idents and n.idents[0] == name:
                found = True
            elif isinstance(n, Pipe):
                for c in n.cmds:
                    look(c)
            elif isinstance(n, Command):
                for a in n.args:
                    look(a)

        look(node)
        return found

    def visit(n: Any) -> None:
        if n is None:
            return
        ancestors.append(n)
        if isinstance(n, Field) and n.idents and n.idents[0] == "Thinking":
            ranges = [a for a in ancestors if isinstance(a, Range)]
            if ranges and uses(ranges[-1].pipe, "Messages"):
                for a in reversed(ancestors):
                    if isinstance(a, list):
                        if a and isinstance(a[0], TextNode):
                            tags[0] = a[0].text.strip()
                        if a and isinstance(a[-1], TextNode):
                            tags[1] = a[-1].text.strip()
                        break
        if isinstance(n, list):
            for c in n:
                visit(c)
        elif isinstance(n, If | Range | With):
            visit(n.pipe)
            visit(n.body)
            if n.else_ is not None:
                visit(n.else_)
        elif isinstance(n, Action):
            visit(n.pipe)
        elif isinstance(n, TemplateCall):
            visit(n.pipe)
        elif isinstance(n, Pipe):
            for c in n.cmds:
                visit(c)
        elif isinstance(n, Command):
            for a in n.args:
                visit(a)
        ancestors.pop()

    visit(template.root)
    return tags[0], tags[1]


def jinja_thinking_tags(source: str) -> tuple[str, str]:
    return ("<think>", "</think>") if "<think>" in source and "</think>" in source else ("", "")


@lru_cache(maxsize=64)
def template_thinking_tags(kind: str, source: str) -> tuple[str, str]:
    """The tags of a template ``kind`` ``"go"`` or ``"jinja"``; ``("", "")`` for a model that does not think."""
    if kind == "go":
        from local_eagle.ollama.template import parse_ollama

        try:
            return go_thinking_tags(parse_ollama(source))
        except Exception:  # a template that does not parse fails its render with a 400 of its own
            return "", ""
    return jinja_thinking_tags(source)


def think_value(raw: Any, name: str = "think") -> bool | str | None:
    """A request's ``think``: true, false, a level ("low", "medium", "high", "max") or None (not given)."""
    if raw is None or isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw in ("low", "medium", "high", "max"):
        return raw
    raise ApiError(400, f'invalid {name} value: {raw!r} (must be true, false, "low", "medium", "high" or "max")')


def openai_think(body: dict[str, Any]) -> bool | str | None:
    """OpenAI's ``reasoning_effort`` or ``reasoning.effort`` as a think value, as Ollama's middleware reads them;
    without either, Ollama's own ``think`` (true, false or a level), which clients written for Ollama send to
    ``/v1`` as well (``extra_body``): ``think: false`` turns a thinking model's thinking off there too."""
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is None:
        effort = body.get("reasoning_effort")
    if effort is None or effort == "":
        return think_value(body.get("think"))
    if not isinstance(effort, str) or effort not in _EFFORTS:
        raise ApiError(400, f"invalid reasoning value: {effort!r} (must be one of {', '.join(_EFFORTS)})")
    return _EFFORTS[effort]

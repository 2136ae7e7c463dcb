"""Tool calls read out of a model's output, as Ollama's ``tools`` package reads them.

The call's prefix (its *tag*) comes from the chat template: for an Ollama (Go) TEMPLATE, the first text written
inside its ``{{ if .ToolCalls }}`` block, cut before any ``{`` (``<tool_call>`` for Qwen, ``[TOOL_CALLS]`` for
Mistral; ``{`` for Llama 3.1, which writes bare JSON), as ``tools.parseTag`` finds it; for a GGUF's Jinja
template, the first of the tags known to be written by such templates that it contains, else ``{``. The output is
then read as ``tools.Parser`` reads it: text before the tag is content, text that may be the start of the tag is
held back until it is known, and after the tag each JSON object that names one of the request's tools and carries
its ``arguments`` (or ``parameters``) is a call. With the tag ``{`` or ``[`` only an output that *starts* with a
JSON object (after whitespace) is read for calls; any other is plain content.

Where this differs from Ollama: a chunk that brings both the text before the tag and a call keeps both (Ollama's
chat handler drops the call then), and an output that ends on a held-back partial tag, or on a tag followed by
no call, gives that text back as content instead of dropping it.
"""

from __future__ import annotations

import bisect
import json
import secrets
import string
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from local_eagle.runtime import jsontext
from local_eagle.runtime.jsontext import JSONTextError
from local_eagle.serve.errors import ApiError

# tags that chat templates write before a call, in the order they are looked for in a Jinja template
JINJA_TAGS = ("<tool_call>", "[TOOL_CALLS]", "<|tool_call|>", "<|tool_call_start|>", "<tool_calls>", "<function_call>")

_LOOKING, _CALLING, _DONE = range(3)


class ToolParser:
    """Ollama's ``tools.Parser``: feed it the output a piece at a time; each :meth:`add` answers the calls
    completed and the content that is surely not part of a call."""

    def __init__(self, tag: str, tool_names: Sequence[str]) -> None:
        self.tag = tag
        self.names = [n for n in tool_names if n]
        self._names = _Names(self.names)  # the search for a tool's name in the buffer
        self.state = _LOOKING
        self.n = 0  # calls found so far: each call's index
        self._set_buffer("")

    def _set_buffer(self, text: str) -> None:
        """The buffer, replaced (not added to): what was read of the old one counts no more."""
        self.buffer = text
        self._objects = _Objects()  # where the search for a call's object stands in the buffer
        self._names.reset()
        self._closing = _Closing(*_PAIRS.get(self.tag, ("{", "}")))  # where _done's count stands

    def add(self, s: str) -> tuple[list[dict[str, Any]], str]:
        if self.state == _DONE:
            return [], s
        self.buffer += s
        content = ""
        if self.state == _LOOKING:
            i, found = self._find_tag()
            if i == -1:
                content, rest = self.buffer, ""
            else:
                content, rest = self.buffer[:i], self.buffer[i:]
            self._set_buffer(rest)
            if self.tag in ("{", "[") and content.strip():  # bare JSON calls only at the very start
                self.state = _DONE
                rest = content + self.buffer
                self._set_buffer("")
                return [], rest
            if not found:
                return [], content
            self.state = _CALLING
        calls = []
        while (call := self._parse_call()) is not None:
            calls.append(call)
        if self._done():
            self.state = _DONE
            content += self.buffer
            self._set_buffer("")
        return calls, content

    def finish(self) -> str:
        """What is left to show once the output ends: a bare-JSON output that held no call, or text that was
        held back as a possible call and turned out not to be one."""
        if self.n > 0:
            return ""
        rest = self.buffer
        self._set_buffer("")
        return rest

    def _find_tag(self) -> tuple[int, bool]:
        i = self.buffer.find(self.tag)
        if i > -1:
            return i, True
        for k in range(min(len(self.buffer), len(self.tag)), 0, -1):  # the buffer ends with the tag's start
            if self.buffer.endswith(self.tag[:k]):
                return len(self.buffer) - k, False
        return -1, False

    def _parse_call(self) -> dict[str, Any] | None:
        """:func:`find_arguments` on the buffer, read on from where the last piece's search stopped: a stream's
        search must not read its whole buffer again at every piece (a long unclosed call took seconds of the
        event loop, growing with the square of its length)."""
        name, end = self._names.find(self.buffer)
        if name is None:
            return None
        found = self._objects.arguments(name, self.buffer)
        if found is None:
            return None
        args, i = found
        call = {"function": {"index": self.n, "name": name, "arguments": args}}
        self.n += 1
        self._set_buffer(self.buffer[max(end, i) :])
        return call

    def _done(self) -> bool:
        """Ollama's ``done``: with a ``{`` or ``[`` tag, the first object or list has closed."""
        return self.tag in _PAIRS and self._closing.closed(self.buffer)


_PAIRS = {"{": ("{", "}"), "[": ("[", "]")}


class _Quoted:
    """Where a JSON text read a character at a time stands: inside a string, or just after a backslash in one."""

    def __init__(self) -> None:
        self.in_string, self.escaped = False, False

    def structural(self, c: str) -> bool:
        """Read ``c``: whether it stands outside every string (a bracket there counts)."""
        if self.escaped:
            self.escaped = False
        elif c == "\\":
            self.escaped = True
        elif c == '"':
            self.in_string = not self.in_string
        else:
            return not self.in_string
        return False


class _Objects(_Quoted):
    """:func:`find_arguments`'s reading of a text that keeps its place: each character is read once however often
    the text grows and is asked again (the top-level objects' braces, outside strings, as Ollama counts them)."""

    def __init__(self) -> None:
        super().__init__()
        self.pos, self.start, self.braces = 0, -1, 0

    def arguments(self, tool: str, buf: str) -> tuple[dict[str, Any], int] | None:
        """The first object of ``buf`` (from where the last call stopped) that parses, read for ``tool``'s
        arguments, and where it ends; None while none has closed, or where one names the call without arguments
        (read again next time, as it would be from the start)."""
        while self.pos < len(buf):
            i, c = self.pos, buf[self.pos]
            self.pos += 1
            if not self.structural(c):
                continue
            if c == "{":
                if self.braces == 0:
                    self.start = i
                self.braces += 1
            elif c == "}":
                self.braces -= 1
                if self.braces == 0 and self.start != -1:
                    start, self.start = self.start, -1
                    data = _object(buf[start : i + 1])
                    if data is None:
                        continue
                    found = _find_object(tool, data)
                    if found is _NO_ARGS:
                        self.pos = start  # at top level, outside any string: the same place as before it
                        return None
                    return (found if found is not None else data), i
                self.braces = max(self.braces, 0)
        return None


class _Closing(_Quoted):
    """Ollama's ``done`` count (``open_`` up, ``close`` down, outside strings) kept between calls."""

    def __init__(self, open_: str, close: str) -> None:
        super().__init__()
        self.open, self.close = open_, close
        self.pos, self.count = 0, 0

    def closed(self, buf: str) -> bool:
        """Whether the count has come back to 0 on a closing bracket in ``buf`` (read from where it stopped)."""
        while self.pos < len(buf):
            c = buf[self.pos]
            self.pos += 1
            if not self.structural(c):
                continue
            if c == self.open:
                self.count += 1
            elif c == self.close:
                self.count -= 1
                if self.count == 0:
                    return True
        return False


def _object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object, or None (not JSON, not an object, nested past what Python's json takes)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def find_tool(names: Sequence[str], buf: str) -> tuple[str | None, int]:
    """The tool whose name occurs first in ``buf`` (the longest at one place) and where its name ends; none
    while ``buf`` ends with what may be the start of a longer name (``get`` of ``get_weather``)."""
    return _Names(names).find(buf)


class _Names:
    """:func:`find_tool` over a buffer that grows, keeping what it found: the earliest name is looked for again
    only where new text can hold one, and the tail's check is a binary search in the sorted names, so that a piece
    costs what it adds, not the buffer's length times the number of tools (a request may bring thousands)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.sorted = sorted(set(self.names))
        self.longest = max((len(n) for n in self.names), default=0)
        self.reset()

    def reset(self) -> None:
        """For a new buffer: nothing of it looked through yet."""
        self.searched = 0  # how much of the buffer has been looked through
        self.found: str | None = None
        self.start = self.end = -1

    def find(self, buf: str) -> tuple[str | None, int]:
        if not buf:
            return None, 0
        for i in range(1, min(len(buf), self.longest) + 1):
            if self._starts_a_longer_name(buf[-i:]):
                return None, 0
        window = max(0, self.searched - self.longest + 1)  # a match in new text starts here at the earliest
        if self.found is None or self.start >= window:
            for n in self.names:
                pos = buf.find(n, window)
                if pos == -1:
                    continue
                if self.start != -1 and (pos > self.start or (pos == self.start and len(n) <= len(self.found or ""))):
                    continue
                self.found, self.start, self.end = n, pos, pos + len(n)
        self.searched = len(buf)
        return (self.found, self.end) if self.found is not None else (None, 0)

    def _starts_a_longer_name(self, tail: str) -> bool:
        """Whether some name begins with ``tail`` and goes on after it: the names from ``tail`` on, sorted, start
        with those that begin with it."""
        i = bisect.bisect_left(self.sorted, tail)
        while i < len(self.sorted) and self.sorted[i].startswith(tail):
            if len(self.sorted[i]) > len(tail):
                return True
            i += 1
        return False


def _find_map(name: str, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    v = obj.get(name)
    if isinstance(v, dict):
        return v
    if isinstance(v, str):
        try:
            parsed = json.loads(v)
        except (ValueError, RecursionError):  # the model's own text: not arguments
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


_NO_ARGS = object()  # an object that names a call but carries no arguments


def _find_object(tool: str, obj: dict[str, Any]) -> Any:
    """Ollama's ``findObject``: the arguments in ``obj``, or nested in it; None where there are none."""
    if "name" in obj:
        for key in ("arguments", "parameters"):
            if (args := _find_map(key, obj)) is not None:
                return args
        return _NO_ARGS
    if (args := _find_map(tool, obj)) is not None:
        return args
    for v in obj.values():
        for child in v if isinstance(v, list) else [v]:
            if isinstance(child, dict) and (r := _find_object(tool, child)) is not None:
                return r
    return None


def find_arguments(tool: str, buf: str) -> tuple[dict[str, Any], int] | None:
    """Ollama's ``findArguments``: the first JSON object in ``buf`` that parses, read for ``tool``'s arguments
    (``{"name": ..., "arguments": {...}}``, ``"parameters"``, ``{tool: {...}}``, or nested), else the object
    itself; with where it ends (its closing brace). None while no object is complete."""
    return _Objects().arguments(tool, buf)


def go_tool_tag(template: Any) -> str:
    """Ollama's ``parseTag`` on a parsed Go template (``ollama.template.Template``)."""
    from local_eagle.ollama.template.nodes import Field, If

    def is_tool_calls(n: If) -> bool:
        return any(isinstance(a, Field) and "ToolCalls" in a.idents for c in n.pipe.cmds for a in c.args)

    node = _find_tool_call_node(template.root, is_tool_calls)
    if node is None:
        return "{"
    text = _find_text(node.body)
    if text is None:
        return "{"
    tag = text.replace("\r\n", "\n").split("{", 1)[0].strip()
    return tag or "{"


def _find_tool_call_node(nodes: list[Any], is_tool_calls: Any) -> Any:
    from local_eagle.ollama.template.nodes import If, Range, With

    for n in nodes:
        if isinstance(n, If) and is_tool_calls(n):
            return n
        if isinstance(n, If | Range | With):
            for body in (n.body, n.else_ or []):
                if (r := _find_tool_call_node(body, is_tool_calls)) is not None:
                    return r
    return None


def _find_text(nodes: list[Any]) -> str | None:
    """Ollama's ``findTextNode``: the first text that is not only whitespace, not looking past an action."""
    from local_eagle.ollama.template.nodes import Action, If, Range, TextNode, With

    for n in nodes:
        if isinstance(n, TextNode):
            if n.text.strip():
                return n.text
        elif isinstance(n, If | Range | With):
            for body in (n.body, n.else_ or []):
                if (t := _find_text(body)) is not None:
                    return t
            return None
        elif isinstance(n, Action):
            return None
    return None


def jinja_tool_tag(source: str) -> str:
    """A Jinja chat template's call tag: the known tag it writes first, else ``{`` (Llama 3.1's bare JSON)."""
    hits = [(source.find(t), t) for t in JINJA_TAGS if t in source]
    return min(hits)[1] if hits else "{"


@lru_cache(maxsize=64)
def template_tool_tag(kind: str, source: str) -> str:
    """The tag for a template: ``kind`` is ``"go"`` (an Ollama TEMPLATE) or ``"jinja"`` (a GGUF's)."""
    if kind == "go":
        from local_eagle.ollama.template import parse_ollama

        try:
            return go_tool_tag(parse_ollama(source))
        except Exception:  # a template that does not parse fails its render with a 400 of its own
            return "{"
    return jinja_tool_tag(source)


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> list[str]:
    return [str((t.get("function") or {}).get("name") or "") for t in tools or []]


def call_id() -> str:
    """Ollama's ``toolCallId``: ``call_`` and eight lower-case letters or digits."""
    alphabet = string.ascii_lowercase + string.digits
    return "call_" + "".join(secrets.choice(alphabet) for _ in range(8))


def ollama_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """/api/chat's ``message.tool_calls`` (``api.ToolCall``: id, function with index, name and arguments)."""
    return [{"id": c["id"], "function": dict(c["function"])} for c in calls]


def openai_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI's ``tool_calls``: arguments as a JSON string, as Ollama's ``openai.ToToolCalls`` writes them."""
    return [
        {
            "id": c["id"],
            "index": c["function"]["index"],
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])},
        }
        for c in calls
    ]


def _call_arguments(raw: Any, where: str) -> dict[str, Any]:
    """A history call's arguments: an object, or OpenAI's JSON text of one, read with the request body's bounds
    (the body's depth check cannot see inside a string)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        if not raw.lstrip().startswith("{"):
            raise ApiError(400, f"{where}.arguments is not a JSON object: {raw[:80]!r}")
        try:
            raw = jsontext.loads(raw, f"{where}.arguments")
        except JSONTextError as e:
            raise ApiError(400, str(e)) from None
    if not isinstance(raw, dict):
        raise ApiError(400, f"{where}.arguments must be a JSON object")
    return raw


def message_extras(m: Mapping[str, Any], i: int) -> dict[str, Any]:
    """What a request's message carries besides role and content that the chat template reads: an assistant's
    ``tool_calls`` (arguments as an object, as templates print them, whether the client sent an object or
    OpenAI's JSON string) and ``thinking`` (OpenAI's ``reasoning`` / ``reasoning_content``), a tool result's
    ``tool_call_id`` and ``tool_name`` (OpenAI's ``name``)."""
    out: dict[str, Any] = {}
    raw_calls = m.get("tool_calls")
    if raw_calls:
        if not isinstance(raw_calls, list):
            raise ApiError(400, f"messages[{i}].tool_calls must be a list")
        calls = []
        for j, tc in enumerate(raw_calls):
            where = f"messages[{i}].tool_calls[{j}]"
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ApiError(400, f"{where} must be an object with a function and its name")
            call: dict[str, Any] = {"type": "function", "function": {"name": fn["name"]}}
            call["function"]["arguments"] = _call_arguments(fn.get("arguments"), where)
            if isinstance(fn.get("index"), int):
                call["function"]["index"] = fn["index"]
            if isinstance(tc.get("id"), str):
                call["id"] = tc["id"]
            calls.append(call)
        out["tool_calls"] = calls
    fields = {"thinking": ("thinking", "reasoning_content", "reasoning"), "tool_call_id": ("tool_call_id",),
              "tool_name": ("tool_name", "name")}  # fmt: skip
    for key, names in fields.items():
        for name in names:
            if isinstance(m.get(name), str) and m[name]:
                out[key] = m[name]
                break
    return out

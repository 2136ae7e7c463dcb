"""The Modelfile's syntax: Ollama's ``parser.ParseFile`` state machine, which splits text into commands.

Kept apart from :mod:`local_eagle.ollama.modelfile` (which gives the commands their meaning and
types) because where a value ends is the part that must match Ollama character for character.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from local_eagle.errors import LocalEagleError

INSTRUCTIONS = ("from", "parameter", "template", "system", "message", "license", "draft", "adapter")
INSTRUCTIONS += ("requires", "renderer", "parser")
ROLES = ("system", "user", "assistant")

MAX_MODELFILE = 1024 * 1024
"""Characters a Modelfile may have. Reading costs at most about half a microsecond a character (a value
of one-character lines), so this bounds a read to about half a second. Real Modelfiles are a few KiB:
a TEMPLATE may have at most 256 KiB (``template.limits.MAX_SOURCE``), the longest licenses tens of KiB."""


class ModelfileError(LocalEagleError):
    """A Modelfile that Ollama or local-eagle would refuse; the message starts with ``file:line:``."""


# ----------------------------------------------------------------------------------------------
# lexing: Ollama's parser.ParseFile state machine


@dataclass(frozen=True)
class Command:
    name: str  # "model" for FROM, a lower-case instruction, or the parameter name
    args: str
    line: int
    parameter: bool = False
    role: str = ""


_NIL, _NAME, _VALUE, _PARAM, _MESSAGE, _COMMENT = range(6)


def _is_newline(c: str) -> bool:
    return c in "\r\n"


def _is_space(c: str) -> bool:
    return c in " \t"


def _unquote(s: str) -> tuple[str, bool]:
    if s.startswith('"""'):
        if len(s) >= 6 and s.endswith('"""'):
            return s[3:-3], True
        return "", False
    if s.startswith('"'):
        if len(s) >= 2 and s.endswith('"'):
            return s[1:-1], True
        return "", False
    return s, True


_TRIM = " \t\n\r\v\f\x85\xa0"  # Go's strings.TrimSpace, as far as a value can hold it
_WORD = re.compile(r"\S*")
_RUN = re.compile(r"[^ \t\r\n]+")
_COMMENT_RUN = re.compile(r"[^\r\n]*")


class _Value:
    """The text of one value as it is read, with where its trimmed part starts and ends, so that asking
    at each newline whether the value is complete costs O(1) rather than a join of all read so far:
    Ollama asks at every newline, and a TEMPLATE of 100,000 lines would otherwise cost minutes."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.first = -1  # index of the first character not in _TRIM, -1 while there is none
        self.last = -1  # index of the last such character

    def add_space(self, c: str) -> None:
        self.chars.append(c)

    def add_text(self, run: str) -> None:
        """Append characters none of which is in ``_TRIM``."""
        if not run:
            return
        if self.first < 0:
            self.first = len(self.chars)
        self.chars.extend(run)
        self.last = len(self.chars) - 1

    def complete(self) -> bool:
        """Whether the trimmed text reads as a whole value (Ollama's ``unquote`` succeeds on it)."""
        if self.first < 0:
            return True
        c, first, last = self.chars, self.first, self.last
        size = last - first + 1
        if size >= 3 and c[first] == c[first + 1] == c[first + 2] == '"':
            return size >= 6 and c[last] == c[last - 1] == c[last - 2] == '"'
        if c[first] == '"':
            return size >= 2 and c[last] == '"'
        return True

    def trimmed(self) -> str:
        return "".join(self.chars[self.first : self.last + 1]) if self.first >= 0 else ""


def check_size(text: str, where: str) -> None:
    """Refuse a Modelfile over :data:`MAX_MODELFILE` before reading any of it: one line, at once."""
    if len(text) > MAX_MODELFILE:
        raise ModelfileError(
            f"{where}: size limit exceeded: {len(text)} characters, more than the {MAX_MODELFILE} a Modelfile may have"
        )


def commands(text: str, where: str) -> Iterator[Command]:
    """Split Modelfile text into commands exactly where Ollama does, in time linear in the text.

    A value ends at the first newline after which its trimmed text is balanced: bare, ``"..."``
    or ``\"\"\"...\"\"\"``. Spaces never end a value; ``#`` starts a comment only where an
    instruction could start. Characters Go does not consider printable are dropped.
    """
    check_size(text, where)
    state = _NIL
    buf: list[str] = []
    value = _Value()
    line = 1
    start_line = 1
    name = ""
    param = False
    role = ""
    i, n = 0, len(text)

    def err(msg: str, at: int) -> ModelfileError:
        return ModelfileError(f"{where}:{at}: {msg}")

    while i < n:
        c = text[i]
        i += 1
        if c == "\n" or (c == "\r" and not text.startswith("\n", i)):
            line_after = line + 1
        else:
            line_after = line
        if state == _NIL:
            if c == "#":
                state = _COMMENT
            elif not (_is_space(c) or _is_newline(c)):
                state, buf, start_line = _NAME, [c], line
        elif state == _COMMENT:
            if _is_newline(c):
                state = _NIL
            else:  # the rest of the line at once: it holds no newline, so the line count stands
                m = _COMMENT_RUN.match(text, i)
                assert m is not None
                i = m.end()
        elif state == _NAME:
            if c.isascii() and c.isalpha():
                buf.append(c)
            elif _is_space(c):
                word = "".join(buf)
                low = word.lower()
                if low not in INSTRUCTIONS:
                    raise err(_unknown_instruction(word), line)
                buf, role = [], ""
                if low == "parameter":
                    state = _PARAM
                elif low == "message":
                    state, name, param = _MESSAGE, "message", False
                else:
                    state, name, param = _VALUE, "model" if low == "from" else low, False
                value = _Value()
            else:
                word = "".join(buf)
                if _is_newline(c) and word.lower() in INSTRUCTIONS:
                    raise err(f"{word.upper()} needs a value on the same line", line)
                rest = _WORD.match(text, i)
                raise err(_unknown_instruction(word + c + (rest.group(0) if rest else "")), line)
        elif state == _PARAM:
            if c.isascii() and (c.isalnum() or c == "_"):
                buf.append(c)
            elif _is_space(c):
                if not buf:
                    raise err("PARAMETER needs a name, e.g. PARAMETER temperature 0.7", line)
                state, name, param, buf = _VALUE, "".join(buf), True, []
                value = _Value()
            elif _is_newline(c):
                raise err(f"PARAMETER {''.join(buf)} needs a value on the same line", line)
            else:
                raise err(f"invalid character {c!r} in parameter name {''.join(buf) + c!r}", line)
        elif state == _MESSAGE:
            if c.isascii() and c.isalpha():
                buf.append(c)
            elif _is_space(c):
                word = "".join(buf)
                if word not in ROLES:
                    raise err(f"MESSAGE role must be system, user or assistant, got {word!r}", line)
                state, role, buf = _VALUE, word, []
                value = _Value()
            else:
                raise err("MESSAGE needs a role (system, user or assistant) and then the message", line)
        else:  # _VALUE
            if _is_space(c):
                value.add_space(c)
            elif _is_newline(c):
                if value.complete():
                    got, _ = _unquote(value.trimmed())
                    yield Command(name, got, start_line, param, role)
                    state = _NIL
                else:
                    value.add_space(c)
            else:  # up to the next space or newline at once: the run holds no newline
                m = _RUN.match(text, i - 1)
                assert m is not None
                run = m.group(0)
                i = m.end()
                value.add_text(run if run.isprintable() else "".join(x for x in run if x.isprintable()))
        line = line_after

    if state == _VALUE:
        raw = value.trimmed()
        got, ok = _unquote(raw)
        if not ok:
            quote = '"""' if raw.startswith('"""') else '"'
            what = _display(name, param)
            raise err(f"unterminated {quote} in the {what} value that starts here", start_line)
        yield Command(name, got, start_line, param, role)
    elif state in (_NAME, _PARAM, _MESSAGE):
        word = "".join(buf)
        if state == _NAME and word.lower() not in INSTRUCTIONS:
            raise err(_unknown_instruction(word), start_line)
        raise err(f"unexpected end of file: the {_display(name or word, state == _PARAM)} has no value", start_line)


def _display(name: str, param: bool) -> str:
    if param:
        return f"PARAMETER {name}"
    return "FROM" if name == "model" else name.upper()


def _unknown_instruction(word: str) -> str:
    known = ", ".join(x.upper() for x in INSTRUCTIONS)
    return f"unknown instruction {word!r}; expected one of {known}"

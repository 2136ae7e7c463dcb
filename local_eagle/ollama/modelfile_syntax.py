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


def _go_trim_space(s: str) -> str:
    return s.strip(" \t\n\r\v\f\x85\xa0")


def commands(text: str, where: str) -> Iterator[Command]:
    """Split Modelfile text into commands exactly where Ollama does.

    A value ends at the first newline after which its trimmed text is balanced: bare, ``"..."``
    or ``\"\"\"...\"\"\"``. Spaces never end a value; ``#`` starts a comment only where an
    instruction could start. Characters Go does not consider printable are dropped.
    """
    state = _NIL
    buf: list[str] = []
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
            else:
                word = "".join(buf)
                if _is_newline(c) and word.lower() in INSTRUCTIONS:
                    raise err(f"{word.upper()} needs a value on the same line", line)
                rest = re.match(r"\S*", text[i:])
                raise err(_unknown_instruction(word + c + (rest.group(0) if rest else "")), line)
        elif state == _PARAM:
            if c.isascii() and (c.isalnum() or c == "_"):
                buf.append(c)
            elif _is_space(c):
                if not buf:
                    raise err("PARAMETER needs a name, e.g. PARAMETER temperature 0.7", line)
                state, name, param, buf = _VALUE, "".join(buf), True, []
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
            else:
                raise err("MESSAGE needs a role (system, user or assistant) and then the message", line)
        else:  # _VALUE
            if _is_newline(c) or _is_space(c):
                value, ok = _unquote(_go_trim_space("".join(buf)))
                if not ok or _is_space(c):
                    buf.append(c)
                else:
                    yield Command(name, value, start_line, param, role)
                    state, buf = _NIL, []
            elif c.isprintable():
                buf.append(c)
        line = line_after

    if state == _VALUE:
        raw = _go_trim_space("".join(buf))
        value, ok = _unquote(raw)
        if not ok:
            quote = '"""' if raw.startswith('"""') else '"'
            what = _display(name, param)
            raise err(f"unterminated {quote} in the {what} value that starts here", start_line)
        yield Command(name, value, start_line, param, role)
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

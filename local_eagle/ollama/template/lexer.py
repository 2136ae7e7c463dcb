"""The lexer: template text to text items and the tokens of each action, with Go's trim markers applied.

Trimming is done here, as Go's lexer does it, because ``{{-`` and ``-}}`` eat *all* adjacent
white space including newlines, and a prompt that differs by one newline is a different token
sequence for the target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from local_eagle.ollama.template.values import GoTemplateError

_SPACE = " \t\r\n"
_KEYWORDS = {"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"}


@dataclass(frozen=True)
class Tok:
    """One token of an action; spaces are tokens because Go separates a command's arguments by them."""

    kind: str  # space field var dot ident keyword bool nil number string lparen rparen pipe declare assign comma
    val: str
    line: int


@dataclass
class TextItem:
    """Text outside actions, already trimmed by the neighbouring ``{{-``/``-}}`` markers."""

    text: str
    line: int


@dataclass
class ActionItem:
    """The tokens between ``{{`` and ``}}``; a comment is kept (empty) only to end the text before it."""

    toks: list[Tok]
    line: int
    comment: bool = False
    col: int = 0  # of the "{{", from 1; for errors that must say which action on a long line


def lex(src: str) -> list[TextItem | ActionItem]:
    """Split ``src`` into text and actions, applying trim markers; raises :class:`GoTemplateError` with the line."""
    items: list[TextItem | ActionItem] = []
    ltrims: list[bool] = []
    rtrims: list[bool] = []
    i, n, line = 0, len(src), 1
    line_start = 0  # index of the first character of the current line, for columns
    while i < n:
        j = src.find("{{", i)
        if j < 0:
            items.append(TextItem(src[i:], line))
            ltrims.append(False)
            rtrims.append(False)
            break
        if j > i:
            items.append(TextItem(src[i:j], line))
            ltrims.append(False)
            rtrims.append(False)
            line += src.count("\n", i, j)
            line_start = src.rfind("\n", i, j) + 1 or line_start
        start_line, start_col = line, j - line_start + 1
        k = j + 2
        ltrim = k + 1 < n and src[k] == "-" and src[k + 1] in _SPACE
        if ltrim:
            line += src[k + 1] == "\n"
            k += 2
        if src.startswith("/*", k):
            end = src.find("*/", k + 2)
            if end < 0:
                raise GoTemplateError("unclosed comment", start_line)
            line += src.count("\n", k, end)
            k = end + 2
            rtrim = k < n and src[k] in _SPACE and src.startswith("-}}", k + 1)
            if rtrim:
                line += src[k] == "\n"
                k += 4
            elif src.startswith("}}", k):
                k += 2
            else:
                raise GoTemplateError("comment ends before closing delimiter", line)
            items.append(ActionItem([], start_line, comment=True, col=start_col))
        else:
            toks, k, line, rtrim = _lex_action(src, k, line)
            items.append(ActionItem(toks, start_line, col=start_col))
        line_start = src.rfind("\n", j, k) + 1 or line_start
        ltrims.append(ltrim)
        rtrims.append(rtrim)
        i = k
    for idx, it in enumerate(items):
        if not isinstance(it, ActionItem):
            continue
        if ltrims[idx] and idx > 0 and isinstance(items[idx - 1], TextItem):
            prev = items[idx - 1]
            assert isinstance(prev, TextItem)
            prev.text = prev.text.rstrip(_SPACE)
        if rtrims[idx] and idx + 1 < len(items) and isinstance(items[idx + 1], TextItem):
            nxt = items[idx + 1]
            assert isinstance(nxt, TextItem)
            nxt.text = nxt.text.lstrip(_SPACE)
    return [it for it in items if not (isinstance(it, TextItem) and it.text == "")]


_IDENT_RE = re.compile(r"[A-Za-z0-9_]*")
_NUMBER_RE = re.compile(
    r"[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][+-]?\d+)?)i?"
)


def _lex_action(src: str, k: int, line: int) -> tuple[list[Tok], int, int, bool]:
    """Tokens of one action starting at ``k``; returns (tokens, index after '}}', line, right trim)."""
    toks: list[Tok] = []
    n = len(src)
    depth = 0
    while True:
        if k >= n:
            raise GoTemplateError("unclosed action", line)
        c = src[k]
        if c in _SPACE and src.startswith("-}}", k + 1):
            line += c == "\n"
            if depth:
                raise GoTemplateError("unclosed left paren", line)
            return toks, k + 4, line, True
        if src.startswith("}}", k):
            if depth:
                raise GoTemplateError("unclosed left paren", line)
            return toks, k + 2, line, False
        if c in _SPACE:
            e = k + 1
            while e < n and src[e] in _SPACE and not src.startswith("-}}", e + 1):
                e += 1
            toks.append(Tok("space", src[k:e], line))
            line += src.count("\n", k, e)
            k = e
            continue
        if c == "=":
            toks.append(Tok("assign", "=", line))
            k += 1
        elif c == ":":
            if not src.startswith(":=", k):
                raise GoTemplateError("expected :=", line)
            toks.append(Tok("declare", ":=", line))
            k += 2
        elif c == "|":
            toks.append(Tok("pipe", "|", line))
            k += 1
        elif c == ",":
            toks.append(Tok("comma", ",", line))
            k += 1
        elif c == "(":
            depth += 1
            toks.append(Tok("lparen", "(", line))
            k += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise GoTemplateError("unexpected right paren", line)
            toks.append(Tok("rparen", ")", line))
            k += 1
        elif c == '"':
            e = k + 1
            while e < n and src[e] != '"':
                if src[e] == "\\":
                    e += 1
                if e < n and src[e] == "\n":
                    raise GoTemplateError("unterminated quoted string", line)
                e += 1
            if e >= n:
                raise GoTemplateError("unterminated quoted string", line)
            toks.append(Tok("string", _unquote(src[k : e + 1], line), line))
            k = e + 1
        elif c == "`":
            e = src.find("`", k + 1)
            if e < 0:
                raise GoTemplateError("unterminated raw quoted string", line)
            toks.append(Tok("string", src[k + 1 : e].replace("\r", ""), line))
            line += src.count("\n", k, e)
            k = e + 1
        elif c == "'":
            m = re.compile(r"'(\\.[^']*|[^'\\])'").match(src, k)
            if not m:
                raise GoTemplateError("unterminated character constant", line)
            ch = _unquote('"' + m.group(1) + '"', line) if m.group(1) != '"' else '"'
            toks.append(Tok("number", str(ord(ch)), line))
            k = m.end()
        elif c == "$":
            m = _IDENT_RE.match(src, k + 1)
            assert m is not None
            toks.append(Tok("var", "$" + m.group(0), line))
            k = m.end()
        elif c == "." and not (k + 1 < n and src[k + 1].isdigit()):
            m = _IDENT_RE.match(src, k + 1)
            assert m is not None
            if m.group(0):
                toks.append(Tok("field", m.group(0), line))
            else:
                toks.append(Tok("dot", ".", line))
            k = m.end()
        elif c.isdigit() or c in "+-." and k + 1 < n and (src[k + 1].isdigit() or src[k + 1] == "."):
            m = _NUMBER_RE.match(src, k)
            if not m or m.end() == k:
                raise GoTemplateError(f"bad number syntax: {src[k : k + 10]!r}", line)
            toks.append(Tok("number", m.group(0), line))
            k = m.end()
        elif c.isalpha() or c == "_":
            m = _IDENT_RE.match(src, k)
            assert m is not None
            word = m.group(0)
            k = m.end()
            if k < n and not (src[k] in _SPACE or src[k] in ".,|:)(" or src.startswith("}}", k)):
                raise GoTemplateError(f"bad character {src[k]!r}", line)
            if word in ("true", "false"):
                toks.append(Tok("bool", word, line))
            elif word == "nil":
                toks.append(Tok("nil", word, line))
            elif word in _KEYWORDS:
                toks.append(Tok("keyword", word, line))
            else:
                toks.append(Tok("ident", word, line))
        else:
            raise GoTemplateError(f"unrecognized character in action: {c!r}", line)


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def _unquote(s: str, line: int) -> str:
    body, out, i = s[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(body):
            raise GoTemplateError(f"invalid syntax in string {s}", line)
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise GoTemplateError(f"invalid syntax in string {s}", line)
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif e in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or not all(d in "01234567" for d in digits):
                raise GoTemplateError(f"invalid syntax in string {s}", line)
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            raise GoTemplateError(f"invalid syntax in string {s}", line)
    return "".join(out)

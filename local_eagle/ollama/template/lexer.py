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

    kind: str  # space field var dot ident keyword bool nil number complex char string lparen rparen pipe ...
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
            toks, k, line, rtrim = _lex_action(src, k, line, start_line)
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
_DECIMAL = "0123456789_"
_HEX = "0123456789abcdefABCDEF_"


def _run(src: str, k: int, chars: str) -> int:
    while k < len(src) and src[k] in chars:
        k += 1
    return k


def scan_number(src: str, k: int) -> tuple[int, bool]:
    """Go's ``lexer.scanNumber``: where the number starting at ``k`` ends, and whether what follows
    it may (not a letter, digit or ``_``)."""
    n = len(src)
    if k < n and src[k] in "+-":
        k += 1
    digits = _DECIMAL
    if k < n and src[k] == "0":
        k += 1
        if k < n and src[k] in "xX":
            digits, k = _HEX, k + 1
        elif k < n and src[k] in "oO":
            digits, k = "01234567_", k + 1
        elif k < n and src[k] in "bB":
            digits, k = "01_", k + 1
    k = _run(src, k, digits)
    if k < n and src[k] == ".":
        k = _run(src, k + 1, digits)
    if digits is _DECIMAL and k < n and src[k] in "eE" or digits is _HEX and k < n and src[k] in "pP":
        k += 1
        if k < n and src[k] in "+-":
            k += 1
        k = _run(src, k, _DECIMAL)
    if k < n and src[k] == "i":
        k += 1
    return k, not (k < n and (src[k].isalnum() or src[k] == "_"))


def _lex_number(src: str, k: int, line: int) -> tuple[Tok, int]:
    """Go's ``lexNumber``: a number, or a complex constant such as ``1+2i`` (two numbers, no space)."""
    e, ok = scan_number(src, k)
    if ok and e < len(src) and src[e] in "+-":
        e, ok = scan_number(src, e)
        if not ok or src[e - 1] != "i":
            raise GoTemplateError(f"bad number syntax: {src[k : e + 1]!r}", line)
        return Tok("complex", src[k:e], line), e
    if not ok:
        raise GoTemplateError(f"bad number syntax: {src[k : e + 1]!r}", line)
    return Tok("number", src[k:e], line), e


def _lex_char(src: str, k: int, line: int) -> tuple[Tok, int]:
    """Go's ``lexChar`` then ``strconv.UnquoteChar``: one character or escape between single quotes."""
    e = k + 1
    while True:
        c = src[e] if e < len(src) else ""
        e += 1
        if c == "\\":
            c = src[e] if e < len(src) else ""
            e += 1
            if c and c != "\n":
                continue
        if c in ("", "\n"):
            raise GoTemplateError("unterminated character constant", line)
        if c == "'":
            break
    text = src[k:e]
    ch, rest = unquote_char(text, 1, "'", line)
    if rest != len(text) - 1:
        raise GoTemplateError(f"malformed character constant: {text}", line)
    return Tok("char", str(ord(ch)), line), e


def _lex_action(src: str, k: int, line: int, start: int) -> tuple[list[Tok], int, int, bool]:
    """Tokens of one action starting at ``k``; returns (tokens, index after '}}', line, right trim)."""
    toks: list[Tok] = []
    n = len(src)
    depth = 0
    while True:
        if k >= n:
            raise GoTemplateError("unclosed action" + (f" started at line {start}" if start != line else ""), line)
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
            tok, k = _lex_char(src, k, line)
            toks.append(tok)
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
        elif c in "0123456789+-.":  # a '.' not followed by a digit was a field above
            tok, k = _lex_number(src, k, line)
            toks.append(tok)
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


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _shown(s: str) -> str:
    return s if len(s) <= 80 else s[:80] + "..."


def unquote_char(s: str, i: int, quote: str, line: int) -> tuple[str, int]:
    """Go's ``strconv.UnquoteChar``: the character or escape at ``s[i]`` inside ``quote`` quotes, and the
    index after it. ``\\'`` is an escape only in a character constant, ``\\"`` only in a string."""
    if i >= len(s) or s[i] == quote:
        raise GoTemplateError(f"invalid syntax in {_shown(s)}", line)
    c = s[i]
    if c != "\\":
        return c, i + 1
    e = s[i + 1] if i + 1 < len(s) else ""
    if e in _ESCAPES:
        return _ESCAPES[e], i + 2
    if e in ("'", '"'):
        if e != quote:
            raise GoTemplateError(f"invalid syntax in {_shown(s)}", line)
        return e, i + 2
    if e and e in "xuU":
        width = {"x": 2, "u": 4, "U": 8}[e]
        digits = s[i + 2 : i + 2 + width]
        if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise GoTemplateError(f"invalid syntax in {_shown(s)}", line)
        v = int(digits, 16)
        if e != "x" and (v > 0x10FFFF or 0xD800 <= v <= 0xDFFF):
            raise GoTemplateError(f"invalid syntax in {_shown(s)}", line)
        return chr(v), i + 2 + width
    if e and e in "01234567":
        digits = s[i + 1 : i + 4]
        if len(digits) != 3 or not all(d in "01234567" for d in digits) or int(digits, 8) > 255:
            raise GoTemplateError(f"invalid syntax in {_shown(s)}", line)
        return chr(int(digits, 8)), i + 4
    raise GoTemplateError(f"invalid syntax in {_shown(s)}", line)


def _unquote(s: str, line: int) -> str:
    """Go's ``strconv.Unquote`` of a double-quoted string."""
    out, i, end = [], 1, len(s) - 1
    while i < end:
        c, i = unquote_char(s, i, '"', line) if s[i] == "\\" else (s[i], i + 1)
        out.append(c)
    return "".join(out)

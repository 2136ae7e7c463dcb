"""Number constants as Go's template parser reads them (``parse.newNumber``) and its executor types them
(``state.idealConstant``): which text is an ``int``, a ``float64`` or a ``complex128``, or an error.

Go's rules are those of ``strconv``: ``0x``/``0o``/``0b`` prefixes and a leading ``0`` for octal,
``_`` between digits (also after a prefix and in exponents), hexadecimal floats with a ``p``
exponent, and ``1+2i``/``1.5i`` complex constants; a constant that fits ``uint64`` but not ``int``
parses and fails only when executed, as in Go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from local_eagle.ollama.template.lexer import scan_number
from local_eagle.ollama.template.values import GoTemplateError


@dataclass(frozen=True)
class IntOverflow:
    """A constant such as ``0x8000000000000000``: Go parses it (it fits a ``uint64``) and the executor
    refuses it ("overflows int") when it is evaluated."""

    text: str


_DECIMAL_FLOAT = re.compile(r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_HEX_FLOAT = re.compile(r"0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+")


def _underscore_ok(s: str) -> bool:
    """Go's ``strconv.underscoreOK``: each ``_`` stands between digits, or between a base prefix and a digit."""
    s = s[1:] if s[:1] in ("+", "-") else s
    saw, i, hexa = "^", 0, False
    if len(s) >= 2 and s[0] == "0" and s[1] in "bBoOxX":
        saw, i, hexa = "0", 2, s[1] in "xX"
    for c in s[i:]:
        if c.isdigit() and c.isascii() or hexa and c in "abcdefABCDEF":
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def _parse_int(text: str, signed: bool) -> int | None:
    """``strconv.ParseInt(text, 0, 64)`` (``signed``) or ``ParseUint(text, 0, 64)``; ``None`` where Go errs."""
    s, sign = text, 1
    if s[:1] in ("+", "-"):
        if not signed:
            return None
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    if not s or not _underscore_ok(s):
        return None
    body = s.replace("_", "")
    base = 10
    if len(body) >= 2 and body[0] == "0" and body[1] in "xXoObB":
        base, body = {"x": 16, "o": 8, "b": 2}[body[1].lower()], body[2:]
    elif len(body) > 1 and body[0] == "0":
        base, body = 8, body[1:]
    if not body or not all(c in "0123456789abcdef"[:base] for c in body.lower()):
        return None
    value = sign * int(body, base)
    lo, hi = (-(2**63), 2**63) if signed else (0, 2**64)
    return value if lo <= value < hi else None


def _parse_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)`` for the texts the lexer makes; ``None`` where Go errs (also on overflow)."""
    s = text[1:] if text[:1] in ("+", "-") else text
    if not s or not _underscore_ok(s):
        return None
    body = s.replace("_", "")
    if _HEX_FLOAT.fullmatch(body):
        value = float.fromhex(body)
    elif _DECIMAL_FLOAT.fullmatch(body):
        value = float(body)
    else:
        return None
    if value in (float("inf"), float("-inf")):
        return None
    return -value if text[0] == "-" else value


def _float_is_int(f: float) -> bool:
    return f.is_integer() and -(2**63) <= f < 2**63


def constant(text: str, kind: str, line: int) -> int | float | complex | IntOverflow:
    """The value of a number token (``kind`` is ``number``, ``complex`` or ``char``, whose text is the
    character's code), typed as Go's executor types an untyped constant."""
    if kind == "char":
        return int(text)
    if kind == "complex":
        k, _ = scan_number(text, 0)  # where the lexer found the imaginary part's sign
        real, imag = _parse_float(text[:k]), _parse_float(text[k:-1])
        if real is None or imag is None:
            raise GoTemplateError(f"illegal number syntax: {text!r}", line)
        return complex(real, imag)
    if text.endswith("i"):
        imag = _parse_float(text[:-1])
        if imag is not None:
            return complex(0, imag)
    i, u = _parse_int(text, True), _parse_int(text, False)
    is_float = False
    f = 0.0
    if i is None and u is None:
        parsed = _parse_float(text)
        if parsed is None:
            raise GoTemplateError(f"illegal number syntax: {text!r}", line)
        if not any(c in text for c in ".eEpP"):
            raise GoTemplateError(f"integer overflow: {text!r}", line)
        is_float, f = True, parsed
        if _float_is_int(f):
            i = int(f)
    is_hex_int = len(text) > 2 and text[0] == "0" and text[1] in "xX" and not any(c in text for c in "pP")
    if is_float and not is_hex_int and any(c in text for c in ".eEpP"):
        return f
    if i is not None:
        return i
    return IntOverflow(text)

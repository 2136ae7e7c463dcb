"""Go's ``fmt.Sprintf`` for ``printf`` in templates: verbs, flags, width and precision as ``fmt`` applies them.

Templates format ids, counters and dates with ``printf`` (``%04x``, ``%-10s``, ``%.2f``), and the
result is prompt text, so the padding rules follow Go's ``fmt/format.go``: the ``0`` flag pads
numbers after their sign and strings on the left, a precision on an integer cancels the ``0``
flag, ``-`` pads on the right and wins over ``0``. A verb that does not fit its operand prints
Go's ``%!verb(type=value)`` rather than guessing, as ``printf "%f" 3`` (an int) does in Go.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from local_eagle.ollama.template.limits import Budget, LimitExceeded
from local_eagle.ollama.template.printing import go_float, go_format
from local_eagle.ollama.template.values import MISSING, GoJSON, GoStringer, GoStruct, go_type, sort_key

_VERB_RE = re.compile(r"%([-+# 0]*)(\d+|\*)?(?:\.(\d*|\*))?(.?)", re.DOTALL)


@dataclass
class _Spec:
    """One verb's flags, width and precision (``None`` when absent), as Go's ``fmtFlags``."""

    minus: bool = False
    plus: bool = False
    sharp: bool = False
    space: bool = False
    zero: bool = False
    width: int | None = None
    prec: int | None = None


def go_sprintf(fmt: str, args: Sequence[Any], budget: Budget | None = None) -> str:
    """Go's ``fmt.Sprintf``: ``%v %s %q %d %b %o %O %x %X %c %U %t %e %E %f %F %g %G %T %%``, flags ``-+# 0``,
    width and precision (also as ``*``), and Go's ``%!d(MISSING)``/``%!(EXTRA ...)``/``%!(NOVERB)`` markers.

    With a ``budget``, raises :class:`.LimitExceeded` as soon as the text would not fit in what is
    left of its output, and before a width such as ``%999999999d`` is padded out.
    """
    out: list[str] = []
    room = budget.output if budget is not None else math.inf

    def add(text: str) -> None:
        nonlocal room
        room -= len(text)
        if room < 0 and budget is not None:
            raise LimitExceeded(budget.output_message())
        out.append(text)

    pos, ai = 0, 0
    for m in _VERB_RE.finditer(fmt):
        add(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        spec = _Spec(minus="-" in flags, plus="+" in flags, sharp="#" in flags, space=" " in flags)
        spec.zero = "0" in flags and not spec.minus  # Go: only zero padding to the left
        for which, text in (("width", width), ("prec", prec)):
            if text == "*":
                star = args[ai] if ai < len(args) else None
                ai += 1
                if not isinstance(star, int) or isinstance(star, bool) or abs(star) > 1_000_000:
                    add("%!(BADWIDTH)" if which == "width" else "%!(BADPREC)")
                    continue
                if which == "width" and star < 0:
                    spec.minus, spec.zero, star = True, False, -star
                setattr(spec, which, star if star >= 0 else None)
            elif text is not None:
                setattr(spec, which, int(text) if text else 0)
        if not verb:
            add("%!(NOVERB)")
            continue
        if verb == "%":
            add("%")
            continue
        if ai >= len(args):
            add(f"%!{verb}(MISSING)")
            continue
        x = args[ai]
        ai += 1
        if budget is not None and max(spec.width or 0, spec.prec or 0) > room:
            raise LimitExceeded(budget.output_message())
        add(_format(verb, None if x is MISSING else x, spec))
    add(fmt[pos:])
    if ai < len(args):
        extra = ", ".join("<nil>" if x is None or x is MISSING else f"{go_type(x)}={go_format(x)}" for x in args[ai:])
        add(f"%!(EXTRA {extra})")
    return "".join(out)


def _bad(verb: str, x: Any) -> str:
    return f"%!{verb}(<nil>)" if x is None else f"%!{verb}({go_type(x)}={go_format(x)})"


def _pad(s: str, spec: _Spec, zero: bool | None = None) -> str:
    """Go's ``fmt.pad``: to ``width`` runes, on the right with ``-``, else on the left with ``0`` or spaces."""
    if not spec.width or len(s) >= spec.width:
        return s
    fill = spec.width - len(s)
    if spec.minus:
        return s + " " * fill
    return ("0" if (spec.zero if zero is None else zero) else " ") * fill + s


def _type_name(x: Any) -> str:
    """``%T``: the Go type of a value as templates hold it (JSON-like data is ``map[string]interface {}``)."""
    if x is None:
        return "<nil>"
    if isinstance(x, GoStruct):
        return x.type_name or "struct"
    if isinstance(x, GoJSON):
        return _type_name(x.value)
    if isinstance(x, dict):
        return "map[string]interface {}"
    if isinstance(x, list | tuple):
        return "[]interface {}"
    return go_type(x)


def _format(verb: str, x: Any, spec: _Spec) -> str:
    """One operand under one verb, as Go's ``printArg``/``printValue`` dispatch it by type."""
    if verb == "T":
        return _pad(_type_name(x), spec)
    if isinstance(x, GoStringer) and verb in "vsqxX":
        return _string(verb, x.text, spec)
    if isinstance(x, GoJSON) and verb in "vsqxX":
        return _string(verb, go_format(x), spec)
    if isinstance(x, GoJSON):
        x = x.value
    if isinstance(x, bool):
        return _pad(go_format(x), spec) if verb in "vt" else _bad(verb, x)
    if isinstance(x, int):
        return _integer(verb, x, spec)
    if isinstance(x, float):
        return _float(verb, x, spec)
    if isinstance(x, complex):
        return _complex(verb, x, spec)
    if isinstance(x, str):
        return _string(verb, x, spec) if verb in "vsqxX" else _bad(verb, x)
    if x is None:
        return _pad("<nil>", spec) if verb == "v" else _bad(verb, x)
    if isinstance(x, GoStruct):
        return _pad("{" + " ".join(_format(verb, v, _Spec()) for v in x.values()) + "}", spec)
    if isinstance(x, dict):
        items = sorted(x.items(), key=lambda kv: sort_key(kv[0]))
        body = " ".join(f"{_format(verb, k, _Spec())}:{_format(verb, v, _Spec())}" for k, v in items)
        return _pad(f"map[{body}]", spec)
    if isinstance(x, list | tuple):
        return _pad("[" + " ".join(_format(verb, v, _Spec()) for v in x) + "]", spec)
    return _pad(go_format(x), spec) if verb in "vs" else _bad(verb, x)


def _integer(verb: str, x: int, spec: _Spec) -> str:
    """Go's ``fmtInteger``: a precision or the ``0`` flag with a width gives leading zeros after the sign."""
    if verb == "c":
        return _pad(chr(x) if 0 <= x <= 0x10FFFF and not 0xD800 <= x <= 0xDFFF else "\ufffd", spec)
    if verb == "q":
        if not 0 <= x <= 0x10FFFF:
            return _bad(verb, x)
        c = "\ufffd" if 0xD800 <= x <= 0xDFFF else chr(x)
        return _pad(go_quote(c, "'", ascii_only=spec.plus), spec)
    if verb == "U":
        u = x & (2**64 - 1)  # Go formats the rune as a uint64
        text = f"U+{u:0{max(4, spec.prec or 0)}X}"
        if spec.sharp and u <= 0x10FFFF and not 0xD800 <= u <= 0xDFFF and chr(u).isprintable():
            text += f" '{chr(u)}'"
        return _pad(text, spec, False)
    base = {"v": 10, "d": 10, "b": 2, "o": 8, "O": 8, "x": 16, "X": 16}.get(verb)
    if base is None:
        return _bad(verb, x)
    digits = "" if spec.prec == 0 and x == 0 else format(abs(x), {10: "d", 2: "b", 8: "o", 16: "x"}[base])
    if verb == "X":
        digits = digits.upper()
    sign = "-" if x < 0 else "+" if spec.plus and verb != "v" else " " if spec.space else ""
    zero = spec.zero
    if spec.prec is not None:
        digits = digits.rjust(spec.prec, "0")
        zero = False
    elif spec.zero and spec.width:
        digits = digits.rjust(spec.width - len(sign), "0")
    if spec.sharp and verb != "v" or verb == "O":
        if base == 8 and verb == "o" and not digits.startswith("0"):
            digits = "0" + digits
        elif verb == "O":
            digits = "0o" + digits
        elif base == 16:
            digits = ("0X" if verb == "X" else "0x") + digits
        elif base == 2:
            digits = "0b" + digits
    return _pad(sign + digits, spec, zero)


def _float(verb: str, x: float, spec: _Spec) -> str:
    """Go's ``fmtFloat``: ``%v`` is the shortest ``%g``; infinities and NaN are never zero-padded."""
    if verb not in "veEfFgG":
        return _bad(verb, x)
    sign = "-" if math.copysign(1, x) < 0 else "+" if spec.plus else " " if spec.space else ""
    if math.isnan(x):
        return _pad(("+" if spec.plus else " " if spec.space else "") + "NaN", spec, False)
    if math.isinf(x):
        return _pad(("-" if x < 0 else "+" if spec.plus else " " if spec.space else "+") + "Inf", spec, False)
    a = abs(x)
    if verb in "vgG" and spec.prec is None:
        body = go_float(a).upper() if verb == "G" else go_float(a)
    else:
        p = 6 if spec.prec is None else spec.prec
        kind = {"e": "e", "E": "E", "f": "f", "F": "f", "g": "g", "G": "G", "v": "g"}[verb]
        body = f"{a:{'#' if spec.sharp and kind in 'eEf' else ''}.{p}{kind}}"
    if spec.sharp and verb in "gG":
        body = _sharp_g(body, 6 if spec.prec is None else max(spec.prec, 1))
    if spec.zero and spec.width and len(sign) + len(body) < spec.width:
        body = body.rjust(spec.width - len(sign), "0")
    return _pad(sign + body, spec, False)


def _complex(verb: str, z: complex, spec: _Spec) -> str:
    """Go's ``fmtComplex``: ``(re+imi)``, each part formatted (and padded) as a float, the imaginary one signed."""
    if verb not in "veEfFgG":
        return _bad(verb, z)
    real = _Spec(**{**spec.__dict__, "plus": spec.plus and verb != "v"})  # %+v is Go's struct-field syntax
    imag = _Spec(**{**spec.__dict__, "plus": True})
    return f"({_float(verb, z.real, real)}{_float(verb, z.imag, imag)}i)"


def _sharp_g(body: str, digits: int) -> str:
    """Go's ``%#g``: keep a decimal point and trailing zeros up to ``digits`` significant digits."""
    mant, e, exp = body.partition("e") if "e" in body else body.partition("E")
    seen = False
    for c in mant:
        if c.isdigit():
            seen = seen or c != "0"
            digits -= seen
    if "." not in mant:
        digits -= mant == "0"
        mant += "."
    return mant + "0" * max(digits, 0) + e + exp


def _string(verb: str, s: str, spec: _Spec) -> str:
    """``%s``/``%v`` (truncated to the precision in runes), ``%q`` (Go's ``strconv.Quote``), ``%x`` (bytes)."""
    if verb in "vs":
        return _pad(s if spec.prec is None else s[: spec.prec], spec)
    if verb == "q":
        t = s if spec.prec is None else s[: spec.prec]
        if spec.sharp and _can_backquote(t):
            return _pad(f"`{t}`", spec)
        return _pad(go_quote(t, '"', ascii_only=spec.plus), spec)
    b = s.encode("utf-8")
    if spec.prec is not None:
        b = b[: spec.prec]
    digits = "0123456789ABCDEF" if verb == "X" else "0123456789abcdef"
    parts = [digits[c >> 4] + digits[c & 15] for c in b]
    prefix = "0X" if verb == "X" else "0x"
    if spec.space:
        text = " ".join(prefix + p if spec.sharp else p for p in parts)
    else:
        text = (prefix if spec.sharp and parts else "") + "".join(parts)
    return _pad(text, spec)


def _can_backquote(s: str) -> bool:
    return all(c == "\t" or (c >= " " and c not in "`\x7f\ufeff") for c in s)


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\"}


def go_quote(s: str, quote: str = '"', ascii_only: bool = False) -> str:
    """Go's ``strconv.Quote`` (``QuoteToASCII`` with ``ascii_only``, ``QuoteRune`` with ``'``): printable
    runes kept, the usual backslash escapes, others as ``\\x``, ``\\u`` or ``\\U``."""
    out = [quote]
    for c in s:
        o = ord(c)
        if c == quote:
            out.append("\\" + c)
        elif c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif (c.isprintable() or c == " ") and not (ascii_only and o > 0x7E) and not 0xD800 <= o <= 0xDFFF:
            out.append(c)
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append(quote)
    return "".join(out)

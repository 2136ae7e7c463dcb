"""Printing like Go's ``fmt`` (``%v``) and ``encoding/json``; ``printf`` is in :mod:`.sprintf`.

Numbers and maps print the way Go prints them (``1e+06``, sorted map keys, ``\\u003c``)
because those bytes end up in the prompt the target and the drafter see.
"""

from __future__ import annotations

import json
import math
from typing import Any

from local_eagle.ollama.template.limits import MAX_DEPTH, VALUE_DEPTH_MESSAGE, LimitExceeded
from local_eagle.ollama.template.values import (
    MISSING,
    FuncError,
    GoJSON,
    GoStringer,
    GoStruct,
    NilMap,
    NilSlice,
    OrderedMap,
    go_type,
    sort_key,
    truth,
)


def _digits(x: float) -> tuple[str, str, int]:
    """Shortest round-trip digits of a finite non-zero float: (sign, digits, decimal point position)."""
    r = repr(abs(x))
    mant, _, exp_s = r.partition("e")
    int_part, _, frac = mant.partition(".")
    allx = int_part + frac
    stripped = allx.lstrip("0")
    point = len(int_part) + (int(exp_s) if exp_s else 0) - (len(allx) - len(stripped))
    return ("-" if x < 0 else ""), (stripped.rstrip("0") or "0"), point


def _fixed(sign: str, digits: str, point: int) -> str:
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _exponent(sign: str, digits: str, point: int, min_exp_digits: int) -> str:
    exp = point - 1
    m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{m}e{'-' if exp < 0 else '+'}{abs(exp):0{min_exp_digits}d}"


def go_float(x: float) -> str:
    """Go's ``%v`` for a float64 (``strconv`` 'g', shortest): exponent form when the exponent is
    below -4 or at least 6, so 1e6 prints ``1e+06`` and 123456.0 prints ``123456``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    sign, digits, point = _digits(x)
    exp = point - 1
    if exp < -4 or exp >= 6:
        return _exponent(sign, digits, point, 2)
    return _fixed(sign, digits, point)


def go_complex(z: complex) -> str:
    """Go's ``%v`` for a complex128: ``(1+2i)``, each part as a float64 and the imaginary one always signed."""
    imag = go_float(z.imag)
    return f"({go_float(z.real)}{'' if imag[0] in '+-' else '+'}{imag}i)"


def go_format(v: Any, depth: int = 0) -> str:
    """How Go's fmt prints a value with ``%v`` (what an action like ``{{ .X }}`` outputs).

    ``depth`` is how deep ``v`` sits in the value being printed; past :data:`.MAX_DEPTH` this raises
    :class:`.LimitExceeded`, since request data (tool arguments) may nest deeper than Python's stack.
    """
    if depth > MAX_DEPTH:
        raise LimitExceeded(VALUE_DEPTH_MESSAGE)
    if v is None:
        return "<nil>"
    if v is MISSING:
        return "<no value>"
    if isinstance(v, GoStringer):
        return v.text
    if isinstance(v, GoJSON):
        return go_json(v.value, depth + 1)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, complex):
        return go_complex(v)
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return "[" + " ".join(str(b) for b in v) + "]"
    if isinstance(v, GoStruct):
        return "{" + " ".join(go_format(x, depth + 1) for x in v.values()) + "}"
    if isinstance(v, dict):
        d = depth + 1
        return "map[" + " ".join(f"{go_format(k, d)}:{go_format(v[k], d)}" for k in sorted(v, key=sort_key)) + "]"
    if isinstance(v, list | tuple):
        return "[" + " ".join(go_format(x, depth + 1) for x in v) + "]"
    return str(v)


def _json_float(x: float) -> str:
    """``encoding/json``: shortest digits, plain unless below 1e-6 or from 1e21 up (then ``1e-7``)."""
    if math.isnan(x) or math.isinf(x):
        raise FuncError(f"json: unsupported value: {go_float(x)}")
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    sign, digits, point = _digits(x)
    if abs(x) < 1e-6 or abs(x) >= 1e21:
        return _exponent(sign, digits, point, 1)
    return _fixed(sign, digits, point)


_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _json_string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    for k, rep in _JSON_ESCAPES.items():
        out = out.replace(k, rep)
    return out


def go_json(v: Any, depth: int = 0) -> str:
    """Go's ``json.Marshal``: no spaces, map keys sorted, struct fields in order, ``<>&`` escaped.

    ``depth`` as for :func:`go_format`.
    """
    if depth > MAX_DEPTH:
        raise LimitExceeded(VALUE_DEPTH_MESSAGE)
    if isinstance(v, GoStringer):
        return go_json(v.marshal, depth + 1)
    if isinstance(v, GoJSON):
        return go_json(v.value, depth + 1)
    if v is None or v is MISSING or isinstance(v, NilSlice | NilMap):
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _json_float(v)
    if isinstance(v, str):
        return _json_string(v)
    if isinstance(v, GoStruct):
        parts = []
        for k, x in v.items():
            name, _, opts = v.json_tags.get(k, k).partition(",")
            if name == "-" or ("omitempty" in opts.split(",") and not truth(x)):
                continue
            parts.append(f"{_json_string(name)}:{go_json(x, depth + 1)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(v, dict):
        keys = list(v) if isinstance(v, OrderedMap) else sorted(v, key=lambda k: str(k))
        return "{" + ",".join(f"{_json_string(str(k))}:{go_json(v[k], depth + 1)}" for k in keys) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(go_json(x, depth + 1) for x in v) + "]"
    raise FuncError(f"json: unsupported type: {go_type(v) if isinstance(v, complex) else type(v).__name__}")

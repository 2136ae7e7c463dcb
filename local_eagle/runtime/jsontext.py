"""JSON text from outside (a request body, a JSON string inside one), read with bounds: one place for what may come in.

Python's ``json`` takes what the wire cannot be trusted to keep small or sound: nesting deep enough to raise
RecursionError (here, or in whatever recurses over the value later: a template, llguidance, ``json.dumps``), an
integer of more than 4300 digits (ValueError), and ``\\ud800`` escapes that decode to lone UTF-16 surrogates, which
no UTF-8 encoder takes (UnicodeEncodeError wherever the text meets the tokenizer, a file or the runner's pipe). Each
is refused here with one line naming the field, so that the code after it never meets them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from local_eagle.errors import LocalEagleError

MAX_DEPTH = 64  # arrays and objects in one another: a tool's JSON schema needs a dozen
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # how a surrogate reaches JSON text: as an escape
_SURROGATE = re.compile("[\ud800-\udfff]")  # after decoding, a pair is one character: what is left is lone


class JSONTextError(LocalEagleError):
    """JSON text that cannot be taken as it is (not JSON, too deep, a number too long, a lone surrogate): one line
    that names the field."""


def loads(data: bytes | str, what: str) -> Any:
    """``data`` decoded, every string in it valid Unicode and no deeper than :data:`MAX_DEPTH`; ``what`` names it
    in the error (``the request body``, ``messages[1].tool_calls[0].function.arguments``)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise JSONTextError(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise JSONTextError(f"{what} is not valid JSON") from None
    except ValueError:  # int("9" * 5000): sys.get_int_max_str_digits()
        raise JSONTextError(f"{what} has a number with more digits than any field takes") from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    surrogates = bool(_ESCAPED_SURROGATE.search(raw))
    constants = b"NaN" in raw or b"Infinity" in raw  # Python's json reads them; JSON has no such numbers
    if surrogates or constants or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:  # else none can be there: no walk
        check(value, what if what != "the request body" else "", surrogates)
    return value


def check(value: Any, where: str = "", surrogates: bool = True) -> None:
    """``value`` (decoded JSON) no deeper than :data:`MAX_DEPTH`, no number in it NaN or infinite (``NaN`` and
    ``Infinity``, which Python's json reads and Go's refuses) and, with ``surrogates``, no string or key in it holding
    a lone surrogate; walked without recursion, so that a deep value cannot exhaust the stack here, and
    without paths (half a second for a schema of 480,000 values with them) until it fails: then again, to name it."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, str):
            if surrogates and _SURROGATE.search(v):
                break
        elif isinstance(v, float):
            if not math.isfinite(v):
                break
        elif isinstance(v, dict):
            if depth > MAX_DEPTH or surrogates and any(_SURROGATE.search(k) for k in v if isinstance(k, str)):
                break
            todo.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            if depth > MAX_DEPTH:
                break
            todo.extend((x, depth + 1) for x in v)
    else:
        return
    _name_the_problem(value, where, surrogates)


def _name_the_problem(value: Any, where: str, surrogates: bool) -> None:
    """:func:`check`'s walk again, with each value's path, to raise its error where it fails."""
    todo: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 1, ())]
    while todo:
        v, depth, path = todo.pop()
        if isinstance(v, str):
            if surrogates:
                _check_text(v, where, path)
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise JSONTextError(f"{_name(where, path) or 'the request body'} must be a finite number, got {v} (JSON "
                                "has no NaN or Infinity)")  # fmt: skip
        if not isinstance(v, dict | list):
            continue
        if depth > MAX_DEPTH:
            inside = f" (in {_name('', path[:1])})" if path and not where else ""
            raise JSONTextError(f"{where or 'the request body'} is nested more than {MAX_DEPTH} levels deep{inside}")
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for key, x in items:
            if surrogates and isinstance(key, str) and _SURROGATE.search(key):
                _check_text(key, where, path, key=True)
            todo.append((x, depth + 1, (*path, key)))


def longer_than(value: Any, limit: int) -> bool:
    """Whether ``value`` written as JSON is surely longer than ``limit`` characters: counted in Python (which lets
    other threads run, as one ``json.dumps`` of megabytes does not) and stopped as soon as it is; a lower bound
    (no separators counted), so a value it passes may still be a little longer once written."""
    total, todo = 0, [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            total += len(v) + 2
        elif isinstance(v, dict):
            total += 2
            for k, x in v.items():
                total += len(k) + 3 if isinstance(k, str) else 4
                todo.append(x)
        elif isinstance(v, list):
            total += 2
            todo.extend(v)
        else:
            total += 1
        if total > limit:
            return True
    return False


def _check_text(text: str, where: str, path: tuple[Any, ...], key: bool = False) -> None:
    found = _SURROGATE.search(text)
    if found is None:
        return
    name = _name(where, path) or "the request body"
    what = "a key of " + name if key else name
    raise JSONTextError(
        f"{what} holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x} at character {found.start()}): "
        "text must be valid Unicode (a high surrogate escape followed by a low one, or none)"
    )


def _name(where: str, path: tuple[Any, ...]) -> str:
    """A field's name as the errors write it: ``messages[0].content``, ``format.properties.a``."""
    out = where
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
            continue
        shown = p if len(p) <= 40 else p[:37] + "..."
        shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")  # a key's own surrogate, written \\ud800
        out += f".{shown}" if out else shown
    return out

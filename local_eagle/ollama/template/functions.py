"""The built-in functions templates call: Go's ``and or not len index slice eq ne lt le gt ge print printf
println`` and Ollama's ``json currentDate yesterdayDate toTypeScriptType``.

Comparison follows Go's typing (``eq 1 "1"`` is an error, not false) because a template that
errors in Ollama should error here too rather than render a different prompt.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from local_eagle.ollama.template.limits import Budget
from local_eagle.ollama.template.printing import go_format, go_json
from local_eagle.ollama.template.sprintf import go_sprintf
from local_eagle.ollama.template.values import MISSING, FuncError, GoJSON, GoStruct, NilMap, NilSlice, go_type, truth


def _kind(v: Any) -> str:
    """Go's ``basicKind`` after ``indirectInterface``: one of the kinds ``eq`` and ``lt`` compare by value,
    ``nil`` for an invalid value (a nil interface), ``other`` for structs, maps and slices."""
    if isinstance(v, GoJSON):
        return _kind(v.value)
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, complex):
        return "complex"
    if isinstance(v, str):
        return "string"
    if v is None or v is MISSING:
        return "nil"
    return "other"


def _reflect_kind(v: Any) -> str:
    v = v.value if isinstance(v, GoJSON) else v
    if v is None or v is MISSING:
        return "invalid"
    if isinstance(v, GoStruct):
        return "struct"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, list | tuple | bytes | bytearray):
        return "slice"
    return type(v).__name__


def _is_nil(v: Any) -> bool:
    v = v.value if isinstance(v, GoJSON) else v
    return v is None or v is MISSING or isinstance(v, NilMap | NilSlice)


def _comparable(v: Any) -> bool:
    """Go's ``Type.Comparable``: maps and slices are not, a struct is when all its fields are."""
    v = v.value if isinstance(v, GoJSON) else v
    if isinstance(v, GoStruct):
        return all(_comparable(x) for x in v.values())
    return not isinstance(v, dict | list | tuple | bytes | bytearray)


def _eq(a: Any, *others: Any) -> bool:
    """Go's ``eq``: basic kinds by value (an error across kinds, unless one side is nil); other values only
    when both are of one kind: nil maps and slices equal nil, comparable structs compare by fields."""
    if not others:
        raise FuncError("missing argument for comparison")
    basic = ("bool", "int", "float", "complex", "string")
    ka = _kind(a)
    for b in others:
        kb = _kind(b)
        if (ka in basic or kb in basic) and ka != kb:  # nil and the other kinds are one kind to Go's eq
            if ka != "nil" and kb != "nil":
                raise FuncError("incompatible types for comparison")
            continue
        if ka in basic:
            truth = (a.value if isinstance(a, GoJSON) else a) == (b.value if isinstance(b, GoJSON) else b)
        else:
            ra, rb = _reflect_kind(a), _reflect_kind(b)
            if ra != rb and "invalid" not in (ra, rb):
                raise FuncError(f"non-comparable types {ra} and {rb}")
            if _is_nil(a) or _is_nil(b):
                truth = _is_nil(a) == _is_nil(b)
            elif not _comparable(b):
                raise FuncError(f"non-comparable type {go_type(b)}")
            else:
                truth = a == b and getattr(a, "type_name", "") == getattr(b, "type_name", "")
        if truth:
            return True
    return False


def _less(a: Any, b: Any) -> bool:
    """Go's ``lt``: ints, floats and strings of one kind; bools and complex numbers are not ordered."""
    ka, kb = _kind(a), _kind(b)
    if ka in ("nil", "other") or kb in ("nil", "other"):
        raise FuncError("invalid type for comparison")
    if ka != kb:
        raise FuncError("incompatible types for comparison")
    if ka in ("bool", "complex"):
        raise FuncError("invalid type for comparison")
    a, b = (a.value if isinstance(a, GoJSON) else a), (b.value if isinstance(b, GoJSON) else b)
    return bool(a < b)


def _index_arg(v: Any, size: int) -> int:
    """Go's ``indexArg``: an integer from 0 to ``size`` (the length, or the capacity for ``slice``)."""
    if v is None or v is MISSING:
        raise FuncError("cannot index slice/array with nil")
    if not isinstance(v, int) or isinstance(v, bool):
        raise FuncError(f"cannot index slice/array with type {go_type(v)}")
    if v < 0 or v > size:
        raise FuncError(f"index out of range: {v}")
    return v


def key_type(d: dict[Any, Any]) -> str:
    """The Go key type a dict stands for: Ollama's maps are all ``map[string]...``, so an empty one is too."""
    kinds = {_kind(k) for k in d}
    if not kinds or kinds == {"string"}:
        return "string"
    return "int" if kinds == {"int"} else "interface {}"


def _index(a: list[Any]) -> Any:
    """Go's ``index``: a missing map key gives the zero value (here Go's invalid value, as for a
    ``map[string]any``); a nil or wrongly typed key, an index past the end, or a nil item is an error."""
    if not a:
        raise FuncError("wrong number of args for index: want at least 1 got 0")
    v = a[0].value if isinstance(a[0], GoJSON) else a[0]
    if v is None or v is MISSING:
        raise FuncError("index of untyped nil")
    for ix in a[1:]:
        ix = ix.value if isinstance(ix, GoJSON) else ix
        v = v.value if isinstance(v, GoJSON) else v
        if v is None or v is MISSING:
            raise FuncError("index of nil pointer")
        if isinstance(v, list | tuple | str):
            seq = v.encode("utf-8") if isinstance(v, str) else v
            i = _index_arg(ix, len(seq))
            if i == len(seq):
                raise FuncError(f"index out of range: {i}")
            v = seq[i]
        elif isinstance(v, dict) and not isinstance(v, GoStruct):
            key = key_type(v)
            if (ix is None or ix is MISSING) and key != "interface {}":
                raise FuncError(f"value is nil; should be of type {key}")
            if key != "interface {}" and _kind(ix) != key:
                raise FuncError(f"value has type {go_type(ix)}; should be {key}")
            v = v.get(None if ix is MISSING else ix, MISSING)
        else:
            raise FuncError(f"can't index item of type {'struct' if isinstance(v, GoStruct) else go_type(v)}")
    return v


def _slice(a: list[Any], budget: Budget) -> Any:
    """Go's ``slice``: ``slice x 1 2`` is ``x[1:2]``; indexes must satisfy ``0 <= i <= j <= k <= cap``."""
    if not a:
        raise FuncError("wrong number of args for slice: want at least 1 got 0")
    v = a[0].value if isinstance(a[0], GoJSON) else a[0]
    if v is None or v is MISSING:
        raise FuncError("slice of untyped nil")
    if len(a) > 4:
        raise FuncError(f"too many slice indexes: {len(a) - 1}")
    if isinstance(v, str):
        if len(a) == 4:
            raise FuncError("cannot 3-index slice a string")
        seq: Any = v.encode("utf-8")
    elif isinstance(v, list | tuple):
        seq = v
    else:
        raise FuncError(f"can't slice item of type {go_type(v)}")
    idx = [0, len(seq), len(seq)]
    for i, x in enumerate(a[1:]):
        idx[i] = _index_arg(x.value if isinstance(x, GoJSON) else x, len(seq))
    if idx[0] > idx[1]:
        raise FuncError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(a) == 4 and idx[1] > idx[2]:
        raise FuncError(f"invalid slice index: {idx[1]} > {idx[2]}")
    if isinstance(v, str):
        return seq[idx[0] : idx[1]].decode("utf-8", errors="replace")
    budget.spend_work(idx[1] - idx[0])
    return list(seq[idx[0] : idx[1]])


def _len(v: Any) -> int:
    v = v.value if isinstance(v, GoJSON) else v
    if v is None or v is MISSING:
        raise FuncError("len of nil pointer")
    if isinstance(v, str):
        return len(v.encode("utf-8"))
    if isinstance(v, list | tuple | dict):
        return len(v)
    raise FuncError(f"len of type {go_type(v)}")


# ----------------------------------------------------------------------------------------------
# Ollama's own functions (template/template.go: funcs)


def _today() -> date:
    """Local date, as Go's ``time.Now()``; a test may replace this."""
    return datetime.now().date()


def _go_date(d: date) -> str:
    """Go's ``Format("2006-01-02")``."""
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def _string_args(name: str, a: list[Any]) -> None:
    """Ollama declares the date functions ``func(args ...string)``: Go refuses any other argument type."""
    for x in a:
        if not isinstance(x, str):
            raise FuncError(f"wrong type for value; expected string; got {go_type(x)}")


_TS_TYPES = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean"}
_TS_TYPES |= {"array": "any[]", "object": "Record<string, any>", "null": "null"}


def typescript_type(prop: GoStruct) -> str:
    """``api.ToolProperty.ToTypeScriptType``: the ``anyOf`` branches or the JSON Schema types joined
    by `` | ``, each mapped to TypeScript (``integer`` is ``number``, an unknown type is ``any``)."""
    any_of = prop.get("AnyOf") or []
    if any_of:
        return " | ".join(typescript_type(p) for p in any_of)
    types = prop.get("Type")
    types = types.value if isinstance(types, GoJSON) else types
    names = [types] if isinstance(types, str) else list(types or [])
    if not names or names == [""]:
        return "any"
    return " | ".join(_TS_TYPES.get(t, "any") for t in names)


def _ollama_function(name: str, a: list[Any]) -> str:
    if name in ("currentDate", "yesterdayDate"):
        _string_args(name, a)  # Ollama ignores the format argument: always YYYY-MM-DD
        today = _today()
        return _go_date(today if name == "currentDate" else today - timedelta(days=1))
    if len(a) != 1:
        raise FuncError(f"wrong number of args for {name}: want 1 got {len(a)}")
    v = a[0]
    if isinstance(v, GoStruct) and v.type_name == "api.ToolProperty":
        return typescript_type(v)
    return "any"


OLLAMA_FUNCS = frozenset({"currentDate", "yesterdayDate", "toTypeScriptType"})
"""Functions Ollama's ``template.Parse`` adds to Go's (besides ``json``)."""


def call_builtin(name: str, a: list[Any], budget: Budget) -> Any:
    """Call built-in ``name`` on evaluated arguments; :class:`FuncError` says why Go would refuse them.

    The work is charged to ``budget``: a step per :data:`.WORK_PER_STEP` characters of string
    arguments (``len``, ``index``, ``slice`` and the comparisons go through them) and of list
    elements copied, and the text ``print``, ``printf``, ``println`` and ``json`` build to its output.
    """

    def n_args(want: int) -> None:
        if len(a) != want:
            raise FuncError(f"wrong number of args for {name}: want {want} got {len(a)}")

    budget.spend_work(sum(len(x) for x in a if isinstance(x, str)))

    if name == "not":
        n_args(1)
        return not truth(a[0])
    if name == "eq":
        if not a:
            raise FuncError("wrong number of args for eq: want at least 1 got 0")
        return _eq(a[0], *a[1:])
    if name == "ne":
        n_args(2)
        return not _eq(a[0], a[1])
    if name in ("lt", "le", "gt", "ge"):
        n_args(2)
        x, y = a
        if name == "lt":
            return _less(x, y)
        if name == "le":
            return _less(x, y) or _eq(x, y)
        if name == "gt":
            return not (_less(x, y) or _eq(x, y))
        return not _less(x, y)
    if name == "len":
        n_args(1)
        return _len(a[0])
    if name == "index":
        return _index(a)
    if name == "slice":
        return _slice(a, budget)
    if name in OLLAMA_FUNCS:
        return _ollama_function(name, a)
    args = [None if x is MISSING else x for x in a]
    if name == "json":
        n_args(1)
        out = [go_json(args[0])]
    elif name == "print":
        out = []
        for i, x in enumerate(args):
            if i > 0 and not isinstance(x, str) and not isinstance(args[i - 1], str):
                out.append(" ")
            out.append(go_format(x))
    elif name == "println":
        out = []
        for x in args:
            out += [" ", go_format(x)] if out else [go_format(x)]
        out.append("\n")
    elif name == "printf":
        if not args or not isinstance(args[0], str):
            raise FuncError("printf needs a format string")
        out = [go_sprintf(args[0], args[1:], budget)]
    else:  # pragma: no cover - the parser accepts no other names
        raise FuncError(f"function {name!r} not defined")
    budget.spend_output(sum(map(len, out)))  # before joining: print $x $x ... must not build gigabytes
    return "".join(out)

"""The built-in functions templates call: ``and or not len index slice eq ne lt le gt ge print printf println
json``.

Comparison follows Go's typing (``eq 1 "1"`` is an error, not false) because a template that
errors in Ollama should error here too rather than render a different prompt.
"""

from __future__ import annotations

from typing import Any

from local_eagle.ollama.template.limits import Budget
from local_eagle.ollama.template.printing import go_format, go_json, go_sprintf
from local_eagle.ollama.template.values import MISSING, FuncError, GoJSON, go_type, truth


def _kind(v: Any) -> str:
    if isinstance(v, GoJSON):
        return _kind(v.value)
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if v is None or v is MISSING:
        return "nil"
    return "other"


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise FuncError("missing argument for comparison")
    ka = _kind(a)
    for b in others:
        kb = _kind(b)
        if ka == "nil" or kb == "nil":
            if ka == kb:
                return True
            continue
        if ka != kb:
            raise FuncError("incompatible types for comparison")
        if ka == "other":
            raise FuncError("non-comparable type")
        if a == b:
            return True
    return False


def _less(a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka not in ("int", "float", "string") or kb not in ("int", "float", "string"):
        raise FuncError("invalid type for comparison")
    if ka != kb:
        raise FuncError("incompatible types for comparison")
    return bool(a < b)


def _index_arg(v: Any, cap: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise FuncError(f"cannot index slice/array with type {go_type(v)}")
    if v < 0 or v > cap:
        raise FuncError(f"index out of range: {v}")
    return v


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
        v = a[0].value if isinstance(a[0], GoJSON) else a[0]
        if isinstance(v, str):
            return len(v.encode("utf-8"))
        if isinstance(v, list | tuple | dict):
            return len(v)
        raise FuncError(f"len of type {go_type(v)}")
    if name == "index":
        if not a:
            raise FuncError("wrong number of args for index: want at least 1 got 0")
        v = a[0]
        for ix in a[1:]:
            v = v.value if isinstance(v, GoJSON) else v
            if isinstance(v, list | tuple):
                i = _index_arg(ix, len(v) - 1)
                v = v[i]
            elif isinstance(v, str):
                i = _index_arg(ix, len(v.encode()) - 1)
                v = v.encode()[i]
            elif isinstance(v, dict):
                v = v.get(ix, MISSING)
            elif v is None or v is MISSING:
                raise FuncError("index of untyped nil")
            else:
                raise FuncError(f"can't index item of type {go_type(v)}")
        return v
    if name == "slice":
        if not a:
            raise FuncError("wrong number of args for slice: want at least 1 got 0")
        v = a[0].value if isinstance(a[0], GoJSON) else a[0]
        if len(a) > 4:
            raise FuncError(f"too many slice indexes: {len(a) - 1}")
        if isinstance(v, str):
            if len(a) == 4:
                raise FuncError("cannot 3-index slice a string")
            b = v.encode("utf-8")
            idx = [_index_arg(x, len(b)) for x in a[1:]]
            lo, hi = (idx + [len(b)])[:2] if idx else (0, len(b))
            if lo > hi:
                raise FuncError(f"invalid slice index: {lo} > {hi}")
            return b[lo:hi].decode("utf-8", errors="replace")
        if isinstance(v, list | tuple):
            idx = [_index_arg(x, len(v)) for x in a[1:]]
            lo = idx[0] if idx else 0
            hi = idx[1] if len(idx) > 1 else len(v)
            if lo > hi:
                raise FuncError(f"invalid slice index: {lo} > {hi}")
            budget.spend_work(hi - lo)
            return list(v[lo:hi])
        if v is None or v is MISSING:
            raise FuncError("slice of untyped nil")
        raise FuncError(f"can't slice item of type {go_type(v)}")
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

"""The values a template sees and the error it raises: Go's invalid value, structs, JSON-printing values.

Go distinguishes a missing map key (the invalid value, which prints ``<no value>``) from a
missing struct field (an error) and from ``nil``; Ollama's templates rely on all three, so
they are distinct Python values here rather than ``None`` everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from local_eagle.errors import LocalEagleError


class GoTemplateError(LocalEagleError):
    """A template that does not parse, fails while executing, or exceeds a limit (:mod:`.limits`).

    ``line`` and ``col`` count from 1 in the template; ``col`` (the action's ``{{``) is given where
    a position within the line helps, as for a limit hit by one action among many on a line.
    """

    def __init__(self, msg: str, line: int | None = None, col: int | None = None) -> None:
        self.msg = msg
        self.line = line
        self.col = col
        where = (f"line {line}, column {col}: " if col else f"line {line}: ") if line else ""
        super().__init__(where + msg)


class _Missing:
    """Go's invalid value: what a missing map key yields. Prints ``<no value>``, is false."""

    _inst: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class GoStruct(dict):  # type: ignore[type-arg]
    """A Go struct seen from a template: a missing field is an error, not a zero value (unlike a map).

    Keys are Go field names (``Role``, ``Content``); ``json_tags`` maps them to the names and
    ``omitempty`` options ``json.Marshal`` uses, e.g. ``{"Name": "name", "ID": "id,omitempty"}``.
    """

    def __init__(self, *args: Any, json_tags: Mapping[str, str] | None = None, type_name: str = "", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.json_tags = dict(json_tags or {})
        self.type_name = type_name  # the Go type, where a function cares (``toTypeScriptType``)


class GoJSON:
    """A value that prints as its JSON, like Ollama's ``api.Tools`` / ``ToolCallFunctionArguments``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GoJSON) and other.value == self.value

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"GoJSON({self.value!r})"


_SAME: Any = object()


class GoStringer(GoJSON):
    """A Go value whose ``String`` method prints ``text`` (Ollama's ``api.PropertyType``, a nil
    ``templateProperties`` printing ``{}``): ``range``, ``len``, ``index`` and fields see ``value``,
    ``json.Marshal`` writes ``marshal`` (``value`` unless given)."""

    def __init__(self, value: Any, text: str, marshal: Any = _SAME) -> None:
        super().__init__(value)
        self.text = text
        self.marshal = value if marshal is _SAME else marshal

    def __repr__(self) -> str:
        return f"GoStringer({self.value!r}, {self.text!r})"


class NilSlice(list):  # type: ignore[type-arg]
    """A nil Go slice: empty to ``len``, ``range`` and truth, but ``json.Marshal`` writes ``null``
    (Ollama's ``.Tools`` when a request has none, a message's ``ToolCalls`` when it made none)."""


class NilMap(dict):  # type: ignore[type-arg]
    """A nil Go map: empty to ``len``, ``range``, ``index`` and truth; ``json.Marshal`` writes ``null``."""


class OrderedMap(dict):  # type: ignore[type-arg]
    """Ollama's ordered maps (``api.ToolPropertiesMap``): ``json.Marshal`` keeps insertion order
    instead of sorting the keys as it does for a Go map."""


class FuncError(Exception):
    """A built-in function refused its arguments; the executor adds the function name and line."""


def truth(v: Any) -> bool:
    """Go template truth: false, 0 (also ``0i``), nil, a missing value, and empty strings, byte strings,
    slices and maps are false."""
    if v is MISSING or v is None:
        return False
    if isinstance(v, GoJSON):
        return truth(v.value)
    if isinstance(v, GoStruct):
        return True
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float | complex):
        return v != 0
    if isinstance(v, str | bytes | bytearray | list | tuple | dict):
        return len(v) > 0
    return True


def go_type(v: Any) -> str:
    if v is None or v is MISSING:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, complex):
        return "complex128"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "slice"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def sort_key(k: Any) -> tuple[int, Any]:
    return (0, k) if isinstance(k, int | float) else (1, str(k))

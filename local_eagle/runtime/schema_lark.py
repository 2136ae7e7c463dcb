"""A JSON schema read the way llama.cpp reads it, as an llguidance Lark grammar.

JSON Schema lets an object with ``properties`` take any other key and a number any length. llama.cpp (so Ollama and
llama-server) does not (``common/json-schema-to-grammar.cpp``): an object with ``properties`` and no
``additionalProperties`` takes no other key (``_build_object_rule``), and a number's integral part has at most 16
digits, its decimal part 1 to 16 (``PRIMITIVE_RULES``: ``integral-part``, ``decimal-part``). With llguidance's own
reading a small model can write keys the schema never named, or ``0.99999...`` until the token limit, and the reply
is cut and is not JSON. These are the conventions a user of Ollama expects, so every schema the server constrains
to (``format``, ``response_format``, a forced tool call's arguments) goes through :func:`schema_rules`.

llguidance has no option for either convention and its JSON compiler writes numbers itself, so the schema becomes a
Lark grammar: objects, arrays, ``anyOf``, type lists, ``$ref`` and numbers are written here; a part of the schema
that holds no number (a string, an enum, a const...) is left to llguidance as ``%json {...}`` (with its objects
closed as above), as is a part this module does not write (``allOf``, ``oneOf``, ``patternProperties``, an
``additionalProperties`` schema...; numbers there keep llguidance's reading). An explicit ``additionalProperties:
true`` still allows other keys. Where the schema bounds a number (``minimum``...), the bound holds and so do the
digit limits; an integer bounded on both sides takes the digits its bounds need, as in llama.cpp.

JSON is written as :data:`~local_eagle.runtime.grammar.JSON_STYLE` says (one line, ``", "`` and ``": "``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

INTEGRAL = "(0|[1-9][0-9]{0,15})"
"""llama.cpp's ``integral-part``: 0, or up to 16 digits without a leading zero."""
DECIMALS = "[0-9]{1,16}"
"""llama.cpp's ``decimal-part``."""
NUMBER = rf"-?{INTEGRAL}(\.{DECIMALS})?([eE][-+]?{INTEGRAL})?"
"""llama.cpp's ``number``."""
INTEGER = rf"-?{INTEGRAL}"
"""llama.cpp's ``integer``."""

ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                         "writeOnly", "$schema", "$id", "$defs", "definitions"})  # fmt: skip
"""Keys that say nothing about what the output may be."""
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_ABSENT = object()


# numbers --------------------------------------------------------------------------------------------------------


def _split(m: Decimal) -> tuple[str, str]:
    """A non-negative decimal's integral digits (no leading zero) and decimal digits (no trailing zero)."""
    text = format(m, "f")
    i, _, f = text.partition(".")
    return i.lstrip("0") or "0", f.rstrip("0")


def _int_gt(i: str) -> str:
    """Canonical integers (no leading zero) greater than ``i``: more digits, or as many and greater at the first
    digit that differs."""
    parts = [f"[1-9][0-9]{{{len(i)},}}"]
    for k, c in enumerate(i):
        if c != "9":
            parts.append(f"{i[:k]}[{int(c) + 1}-9][0-9]{{{len(i) - k - 1}}}")
    return "|".join(parts)


def _int_lt(i: str) -> str | None:
    """Canonical integers less than ``i`` (None where there is none: ``i`` is 0)."""
    parts = []
    if len(i) > 1:
        parts.append(f"0|[1-9][0-9]{{0,{len(i) - 2}}}")
    for k, c in enumerate(i):
        low = 1 if k == 0 and len(i) > 1 else 0
        if int(c) > low:
            parts.append(f"{i[:k]}[{low}-{int(c) - 1}][0-9]{{{len(i) - k - 1}}}")
    return "|".join(parts) or None


def _frac_gt(f: str) -> str:
    """Decimal digits ``d`` with ``0.d > 0.f`` (``f`` has no trailing zero)."""
    parts = [f"{f[:k]}[{int(c) + 1}-9][0-9]*" for k, c in enumerate(f) if c != "9"]
    parts.append(f"{f}[0-9]*[1-9][0-9]*")
    return "|".join(parts)


def _frac_lt(f: str) -> str | None:
    """Decimal digits ``d`` with ``0.d < 0.f``: smaller at the first digit that differs, or a shorter prefix."""
    parts = [f"{f[:k]}[0-{int(c) - 1}][0-9]*" for k, c in enumerate(f) if c != "0"]
    parts += [f[:k] for k in range(1, len(f))]
    return "|".join(parts) or None


def _magnitude_at_least(m: Decimal, inclusive: bool) -> str:
    """Unsigned numbers (``I`` or ``I.F``) at least ``m`` (more than ``m`` when not ``inclusive``)."""
    i, f = _split(m)
    parts = [f"({_int_gt(i)})(\\.[0-9]+)?"]
    if not f:
        parts.append(f"{i}(\\.[0-9]+)?" if inclusive else f"{i}\\.[0-9]*[1-9][0-9]*")
    else:
        parts.append(f"{i}\\.({_frac_gt(f)}|{f}0*)" if inclusive else f"{i}\\.({_frac_gt(f)})")
    return "|".join(f"({p})" for p in parts)


def _magnitude_at_most(m: Decimal, inclusive: bool) -> str | None:
    """Unsigned numbers at most ``m`` (less than ``m`` when not ``inclusive``); None where there is none."""
    i, f = _split(m)
    parts = []
    lt = _int_lt(i)
    if lt:
        parts.append(f"({lt})(\\.[0-9]+)?")
    if not f:
        if inclusive:
            parts.append(f"{i}(\\.0+)?")
    else:
        smaller = _frac_lt(f)
        fracs = "|".join(x for x in (smaller, f"{f}0*" if inclusive else None) if x)
        parts.append(f"{i}(\\.({fracs}))?")
    return "|".join(f"({p})" for p in parts) or None


def at_least(bound: Decimal, inclusive: bool) -> str:
    """A regex of the numbers (as :data:`NUMBER` writes them, without an exponent) at least ``bound``."""
    if bound > 0 or (bound == 0 and inclusive):
        return _magnitude_at_least(bound, inclusive)
    negative = _magnitude_at_most(-bound, inclusive)
    nonnegative = "[0-9][0-9.]*" if bound < 0 else _magnitude_at_least(bound, False)
    return f"({nonnegative})" + (f"|-({negative})" if negative else "")


def at_most(bound: Decimal, inclusive: bool) -> str:
    """A regex of the numbers (without an exponent) at most ``bound``."""
    if bound < 0 or (bound == 0 and not inclusive):
        return f"-({_magnitude_at_least(-bound, inclusive)})"
    positive = _magnitude_at_most(bound, inclusive)
    return "-[0-9][0-9.]*" + (f"|({positive})" if positive else "")


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def number_regexes(schema: dict[str, Any]) -> list[str] | None:
    """The regexes a number the schema allows matches, all of them (a Lark terminal intersects them): its shape,
    then one regex a bound. None where a bound is not a finite number (llguidance reads the schema then)."""
    integer = schema.get("type") == "integer"
    bounds: list[tuple[str, Decimal]] = []
    for key in _BOUNDS:
        if key in schema:
            d = _decimal(schema[key])
            if d is None:
                return None
            bounds.append((key, d))
    if integer:
        two_sided = any(k.endswith("inimum") for k, _ in bounds) and any(k.endswith("aximum") for k, _ in bounds)
        shape = r"-?(0|[1-9][0-9]*)" if two_sided else INTEGER  # llama.cpp's build_min_max_int, both ends given
    else:
        shape = NUMBER if not bounds else rf"-?{INTEGRAL}(\.{DECIMALS})?"  # bounded: no exponent (as llguidance)
    out = [shape]
    for key, d in bounds:
        out.append(at_least(d, key == "minimum") if key.endswith("inimum") else at_most(d, key == "maximum"))
    return out


# the schema -----------------------------------------------------------------------------------------------------


def _types(node: dict[str, Any]) -> list[Any]:
    t = node.get("type")
    return t if isinstance(t, list) else [t]


def close_objects(node: Any, skip: frozenset[int] = frozenset()) -> Any:
    """A copy of ``node`` in which every object with ``properties`` and no ``additionalProperties`` (llama.cpp's
    rule) takes no other key, for the parts llguidance reads (``%json``). An ``allOf`` member, a node with an
    ``allOf``, a definition ``skip`` names (by ``id``: those an ``allOf`` refers to) and an object whose
    ``required`` names a key outside ``properties`` stay open (the objects inside them are closed): ``allOf`` merges
    its members' keys, and closing one member would refuse another's."""
    if isinstance(node, list):
        return [close_objects(x, skip) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "allOf" and isinstance(value, list):
            out[key] = [_close_children(x, skip) for x in value]
        elif key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas") \
                and isinstance(value, dict):  # fmt: skip
            out[key] = {k: (_close_children if id(v) in skip else close_objects)(v, skip) for k, v in value.items()}
        elif key in ("enum", "const", "default", "examples", "required"):
            out[key] = value
        else:
            out[key] = close_objects(value, skip)
    required = node.get("required")
    props = node.get("properties")
    types = _types(node)
    if (
        isinstance(props, dict)
        and "additionalProperties" not in node
        and "allOf" not in node
        and (None in types or "object" in types)
        and (not isinstance(required, list) or all(r in props for r in required))
    ):
        out["additionalProperties"] = False
    return out


def _close_children(node: Any, skip: frozenset[int]) -> Any:
    """An ``allOf`` member left open, its own parts closed."""
    if not isinstance(node, dict):
        return node
    closed = close_objects(node, skip)
    if "additionalProperties" not in node:
        closed.pop("additionalProperties", None)
    return closed


class _Writer:
    """Writes one schema's rules; names carry ``prefix`` so that several schemas share one grammar."""

    def __init__(self, root: dict[str, Any], prefix: str, style: dict[str, Any]) -> None:
        self.root = root
        self.prefix = prefix
        self.style = style
        self.item = json.dumps(style["item_separator"])
        self.colon = json.dumps(style["key_separator"])
        self.rules: list[str] = []
        self.count = 0
        self.refs: dict[str, str] = {}
        self.any_value: str | None = None
        self.allof_refs = frozenset(id(t) for t in self._allof_targets())
        self.defs = {k: root[k] for k in ("$defs", "definitions") if isinstance(root.get(k), dict)}

    # helpers

    def _name(self, kind: str = "n") -> str:
        self.count += 1
        return f"{self.prefix}{kind}{self.count}"

    def _rule(self, body: str) -> str:
        name = self._name()
        self.rules.append(f"{name}: {body}")
        return name

    def _target(self, ref: Any) -> Any:
        """The schema a local reference (``#/$defs/X``, ``#/definitions/X``, ``#``) points to; None otherwise."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None
        node: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def _allof_targets(self) -> Iterator[Any]:
        for node in _walk(self.root):
            for member in node.get("allOf") or []:
                if isinstance(member, dict) and "$ref" in member:
                    target = self._target(member["$ref"])
                    if target is not None:
                        yield target

    def has_numbers(self, node: Any, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``node`` can hold a number: a number or integer type anywhere in it, or a part that takes any
        value (``{}``, ``true``, ``{"type": "object"}``...), references followed."""
        if node is True:
            return True
        if not isinstance(node, dict):
            return False
        for sub in _walk(node):
            ref = sub.get("$ref")
            if isinstance(ref, str) and ref not in seen:
                if self.has_numbers(self._target(ref), seen | {ref}):
                    return True
            types = _types(sub)
            if "number" in types or "integer" in types:
                return True
            if not set(sub) - ANNOTATIONS:
                return True
            if "object" in types and "properties" not in sub and sub.get("additionalProperties", True) is not False:
                return True
            if "array" in types and "items" not in sub and "prefixItems" not in sub:
                return True
        return False

    def delegate(self, node: Any) -> str:
        """``node`` left to llguidance (``%json``), its objects closed, the root's definitions with it."""
        schema: dict[str, Any] = close_objects(node, self.allof_refs) if isinstance(node, dict) else \
            {"anyOf": [{}]} if node is True else {"not": {}}  # fmt: skip
        schema = {"x-guidance": dict(self.style), **schema}
        if any("$ref" in sub for sub in _walk(node)):
            for key, defs in self.defs.items():
                schema.setdefault(key, close_objects(defs, self.allof_refs))
        return self._rule(f"%json {json.dumps(schema, ensure_ascii=False)}")

    # the writer

    def visit(self, node: Any) -> str:
        """The rule for ``node``."""
        if node is True or (isinstance(node, dict) and not set(node) - ANNOTATIONS):
            return self.value()
        if not isinstance(node, dict):
            return self.delegate(node)
        keys = set(node) - ANNOTATIONS
        if keys == {"$ref"}:
            return self.ref(node["$ref"])
        if keys == {"anyOf"} and isinstance(node["anyOf"], list) and node["anyOf"]:
            return self._rule(" | ".join(self.visit(x) for x in node["anyOf"]))
        if isinstance(node.get("type"), list) and node["type"] and keys.isdisjoint({"anyOf", "oneOf", "allOf",
                                                                                     "$ref", "enum", "const"}):
            return self._rule(" | ".join(self.visit({**node, "type": t}) for t in node["type"]))
        if not self.has_numbers(node):
            return self.delegate(node)
        kind = node.get("type")
        # a number's "format" (OpenAPI's "float", "int64") is ignored, as llama.cpp ignores it
        if kind in ("number", "integer") and keys <= {"type", "format", *_BOUNDS}:
            regexes = number_regexes(node)
            if regexes is not None:
                terminal = self.prefix.upper() + f"NUM{self.count + 1}"
                self.count += 1
                self.rules.append(f"{terminal}: " + " & ".join(f"/{r}/" for r in regexes))
                return self._rule(terminal)
        additional = node.get("additionalProperties", _ABSENT)
        object_keys = {"type", "properties", "required", "additionalProperties"}
        if (kind == "object" or (kind is None and "properties" in node)) and keys <= object_keys \
                and additional in (_ABSENT, False):  # fmt: skip
            if "properties" not in node and additional is _ABSENT:
                return self.any_object()
            return self.object(node)
        array_keys = {"type", "items", "minItems", "maxItems"}
        if (kind == "array" or (kind is None and "items" in node)) and keys <= array_keys:
            return self.array(node)
        return self.delegate(node)

    def ref(self, ref: str) -> str:
        if ref in self.refs:
            return self.refs[ref]
        target = self._target(ref)
        if target is None:
            return self.delegate({"$ref": ref})
        name = self._name()
        self.refs[ref] = name
        self.rules.append(f"{name}: {self.visit(target)}")
        return name

    def object(self, node: dict[str, Any]) -> str:
        """An object that takes only its ``properties``, in their order, each ``required`` one present."""
        props = node.get("properties") or {}
        required = node.get("required") or []
        if not isinstance(props, dict) or not isinstance(required, list) or not all(r in props for r in required):
            return self.delegate(node)
        entries = []
        for key, sub in props.items():
            literal = json.dumps(json.dumps(key, ensure_ascii=False), ensure_ascii=False)
            entries.append((f"{literal} {self.colon} {self.visit(sub)}", key in required))
        rest: list[str | None] = [None] * (len(entries) + 1)  # rest[i]: entries i.. after one already written
        for i in range(len(entries) - 1, -1, -1):
            pair, needed = entries[i]
            tail = f" {rest[i + 1]}" if rest[i + 1] else ""
            rest[i] = self._rule(f"{self.item} {pair}{tail}" if needed else f"({self.item} {pair})?{tail}")
        firsts = []
        for i, (pair, needed) in enumerate(entries):
            firsts.append(pair + (f" {rest[i + 1]}" if rest[i + 1] else ""))
            if needed:
                break
        optional = not required
        inner = " | ".join(f"({f})" for f in firsts)
        if not inner:
            return self._rule('"{}"')
        return self._rule(f'"{{" ({inner}){"?" if optional else ""} "}}"')

    def array(self, node: dict[str, Any]) -> str:
        items = node.get("items", True)
        low, high = node.get("minItems", 0), node.get("maxItems")
        counts = isinstance(low, int) and (high is None or isinstance(high, int))
        if not isinstance(items, dict | bool) or not counts:
            return self.delegate(node)
        if high is not None and high < low:
            return self.delegate(node)
        if high == 0:
            return self._rule('"[]"')
        item = self.visit(items)
        more = f"({self.item} {item})"
        if high is None:
            repeat = f"{more}*" if low <= 1 else f"{more}{{{low - 1},}}"
        else:
            repeat = f"{more}{{{max(low - 1, 0)},{high - 1}}}"
        inner = f"{item} {repeat}"
        return self._rule(f'"[" {inner} "]"' if low > 0 else f'"[" ({inner})? "]"')

    def any_object(self) -> str:
        self.value()
        return f"{self.prefix}object"

    def value(self) -> str:
        """Any JSON value, with llama.cpp's numbers (its ``value``, ``object`` and ``array`` rules)."""
        if self.any_value is None:
            p, item, colon = self.prefix, self.item, self.colon
            string = self.delegate({"type": "string"})
            self.rules += [
                f'{p}value: {p}object | {p}array | {string} | {p.upper()}NUMBER | "true" | "false" | "null"',
                f'{p}object: "{{" ({string} {colon} {p}value ({item} {string} {colon} {p}value)*)? "}}"',
                f'{p}array: "[" ({p}value ({item} {p}value)*)? "]"',
                f"{p.upper()}NUMBER: /{NUMBER}/",
            ]
            self.any_value = f"{p}value"
        return self.any_value


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema object in ``node`` (itself included), values of const, enum, default and examples skipped."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
        elif isinstance(n, dict):
            yield n
            for key, value in n.items():
                if key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas") \
                        and isinstance(value, dict):  # fmt: skip
                    stack.extend(value.values())
                elif key not in ("enum", "const", "default", "examples", "required"):
                    stack.append(value)


def schema_rules(schema: dict[str, Any], style: dict[str, Any], prefix: str = "") -> tuple[str, list[str]]:
    """``(rule, rules)``: the name of the rule for ``schema`` (read as llama.cpp reads it, module docstring) and the
    Lark rules it needs. ``prefix`` starts every name, so that several schemas can share a grammar."""
    writer = _Writer(schema, prefix, style)
    top = writer.visit(schema)
    return top, writer.rules


def schema_to_lark(schema: dict[str, Any], style: dict[str, Any]) -> str:
    """The whole grammar of ``schema``: ``start`` is its rule."""
    top, rules = schema_rules(schema, style)
    return "\n".join([f"start: {top}", *rules]) + "\n"

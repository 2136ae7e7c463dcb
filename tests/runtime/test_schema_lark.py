"""JSON schemas read as llama.cpp reads them (issue 46): an object with ``properties`` and no
``additionalProperties`` takes no other key, numbers have at most 16 integral and 1-16 decimal digits, bounds hold,
``additionalProperties: true`` still allows other keys. Checked by walking llguidance's matcher over text with a
byte vocabulary (one token a byte), and the number regexes against Python's decimal arithmetic."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal
from typing import Any

import llguidance
import pytest

from local_eagle.runtime.grammar import GrammarSpec
from local_eagle.runtime.schema_lark import number_regexes
from local_eagle.serve.toolchoice import tool_call_grammar


class _Bytes:
    """A vocabulary of the 256 bytes and one end token."""

    is_tokenizer_wrapper = True

    def __init__(self) -> None:
        self.tokens = [bytes([i]) for i in range(256)] + [b"\xff<eos>"]
        self.eos_token_id, self.bos_token_id, self.special_token_ids = 256, None, []

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


TOKENIZER = llguidance.LLTokenizer(_Bytes())


def accepts(spec: GrammarSpec, text: str) -> bool:
    """Whether ``text`` is a whole output the grammar allows."""
    matcher = llguidance.LLMatcher(TOKENIZER, spec.llguidance_grammar())
    assert not matcher.get_error(), matcher.get_error()
    data = list(text.encode())
    return matcher.try_consume_tokens(data) == len(data) and matcher.is_accepting()


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "nick": {"type": ["string", "null"]},
    },
    "required": ["name", "age"],
}
POINT = {"type": "object", "properties": {"v": {"type": "number"}}, "required": ["v"]}
REFS = {
    "$defs": {"P": POINT},
    "type": "object",
    "properties": {"p": {"$ref": "#/$defs/P"}, "q": {"anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}]}},
    "required": ["p"],
}
NESTED = {"type": "object", "properties": {"s": {"type": "object", "properties": {"a": {"type": "string"}}}}}
LIST = {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "integer"}, "minItems": 2}}}
ALLOF = {
    "type": "object",
    "allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "string"}}}],
}

ALLOF_REF = {
    "$defs": {"A": {"properties": {"a": {"type": "string"}}}},
    "type": "object",
    "allOf": [{"$ref": "#/$defs/A"}, {"properties": {"b": {"type": "string"}}}],
}


@pytest.mark.parametrize(
    ("schema", "text", "allowed"),
    [
        (PERSON, '{"name": "a", "age": 3}', True),
        (PERSON, '{"name": "a", "age": 3, "birth_date": "x"}', False),  # a key the properties do not name
        (PERSON, '{"name": "a", "age": 3, "score": 0.5, "tags": ["x"], "nick": null}', True),
        (PERSON, '{"name": "a", "age": 3, "score": 0.9999999999999999}', True),  # 16 decimals
        (PERSON, '{"name": "a", "age": 3, "score": 0.99999999999999999}', False),  # 17
        (PERSON, '{"name": "a", "age": 3, "score": 1.5}', False),  # above its maximum
        (PERSON, '{"name": "a", "age": 1234567890123456}', True),  # 16 integral digits
        (PERSON, '{"name": "a", "age": 12345678901234567}', False),  # 17
        (PERSON, '{"name": "a", "age": 3, "tags": ["x", "y", "z"]}', False),  # maxItems
        (PERSON, '{"name": "a", "score": 0.5, "age": 3}', False),  # properties in their order
        ({**PERSON, "additionalProperties": True}, '{"name": "a", "age": 3, "birth_date": "x"}', True),
        (POINT, '{"v": 1e5}', True),
        (POINT, '{"v": 1.12345678901234567}', False),
        ({"type": "object", "properties": {"v": {"type": "number"}}}, "{}", True),  # nothing required
        (REFS, '{"p": {"v": 1}, "q": null}', True),
        (REFS, '{"p": {"v": 1, "w": 2}}', False),  # closed through a reference
        (NESTED, '{"s": {"a": "x"}}', True),
        (NESTED, '{"s": {"a": "x", "b": "y"}}', False),  # closed where llguidance writes it (no number inside)
        (LIST, '{"l": [1]}', False),
        (LIST, '{"l": [1, 2, 3]}', True),
        ({"type": "object", "properties": {"e": {"enum": ["a", "b"]}, "c": {"const": 5}}}, '{"e": "a", "c": 5}', True),
        (ALLOF, '{"a": "x", "b": "y"}', True),  # allOf members stay open to each other
        (ALLOF_REF, '{"a": "x", "b": "y"}', True),  # so does a definition an allOf refers to
        ({"type": "object", "properties": {"p": {"type": "number", "format": "float"}}}, '{"p": 0.25}', True),
        ({"type": "object", "properties": {"p": {"type": "number", "format": "float"}}}, '{"p": 0.12345678901234567}',
         False),  # OpenAPI's format on a number changes nothing  # fmt: skip
    ],
)
def test_schemas_read_as_llama_cpp_reads_them(schema: dict[str, Any], text: str, allowed: bool) -> None:
    assert json.loads(text) is not None
    assert accepts(GrammarSpec.json_schema(schema), text) is allowed


def test_json_mode_numbers_have_llama_cpps_length() -> None:
    spec = GrammarSpec.json_object()
    assert accepts(spec, '{"a": [1, 2.5, {"b": null}], "c": "d"}')
    assert not accepts(spec, '{"a": 0.12345678901234567}')


def test_a_forced_tool_calls_arguments_are_closed() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": POINT}}]
    spec = tool_call_grammar(tools, tools, "{", "", lambda text: ([], []), lambda ids: [])
    assert accepts(spec, '{"name": "f", "arguments": {"v": 2}}')
    assert not accepts(spec, '{"name": "f", "arguments": {"v": 2, "w": 1}}')
    assert not accepts(spec, '{"name": "f", "arguments": {"v": 2.00000000000000000}}')


def test_bad_schemas_keep_llguidances_reasons() -> None:
    from local_eagle.runtime.grammar import GrammarError

    with pytest.raises(GrammarError, match=r"^format: .*minimum \(5\) is greater than maximum \(3\)"):
        GrammarSpec.json_schema({"type": "integer", "minimum": 5, "maximum": 3}, "format")


def _number(rng: random.Random) -> str:
    sign = rng.choice(["", "-"])
    whole = rng.choice(["0", str(rng.randint(1, 9)), str(rng.randint(10, 999)), str(rng.randint(1000, 10**17))])
    decimals = rng.choice(["", "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 18)))])
    return sign + whole + decimals


def _expected(schema: dict[str, Any], text: str) -> bool:
    """What llama.cpp's number rules and the schema's bounds allow, by arithmetic."""
    m = re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?(0|[1-9][0-9]*))?", text)
    if not m:
        return False
    whole, decimals, exponent = m.group(1), (m.group(2) or "")[1:], m.group(3)
    keys = set(schema) - {"type"}
    if schema["type"] == "integer":
        two_sided = keys & {"minimum", "exclusiveMinimum"} and keys & {"maximum", "exclusiveMaximum"}
        ok = not decimals and not exponent and (bool(two_sided) or len(whole) <= 16)
    else:
        ok = len(whole) <= 16 and len(decimals) <= 16 and not (keys and exponent)
    value = Decimal(text)
    for key in keys:
        bound = Decimal(repr(schema[key]))
        ok = ok and {"minimum": value >= bound, "maximum": value <= bound,
                     "exclusiveMinimum": value > bound, "exclusiveMaximum": value < bound}[key]  # fmt: skip
    return ok


def test_number_regexes_agree_with_arithmetic() -> None:
    """Shapes and bounds, for integers and numbers, against Decimal comparisons (``-0`` aside: refused where a
    bound of 0 keeps to non-negative numbers, a choice llama.cpp's rules do not make)."""
    rng = random.Random(46)
    values = [0, 1, -1, 0.5, -0.5, 10000, 2000, 3.25, -3.25, 99, 100, 0.001, 7, 120, -120, 1.05, 10]
    checked = 0
    for _ in range(400):
        schema: dict[str, Any] = {"type": rng.choice(["number", "integer"])}
        for key in rng.sample(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"], rng.randint(0, 2)):
            schema[key] = rng.choice(values)
        regexes = [re.compile(r) for r in number_regexes(schema) or []]
        texts = [_number(rng) for _ in range(20)]
        for v in values:
            texts += [str(v), f"-{v}", f"{v}0", f"{v}.0", f"{v}1"]
        for text in texts:
            if re.fullmatch(r"-0(\.0+)?", text):
                continue
            assert all(r.fullmatch(text) for r in regexes) == _expected(schema, text), (schema, text)
            checked += 1
    assert checked > 30_000

"""The grammar layer (runtime.grammar): specs from both APIs' request values, compiling over a GGUF's vocabulary,
and a generation's constraint (masks, consume, validate, rollback, copies, forced tokens, the end)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Model
from local_eagle.runtime.grammar import (
    Grammar,
    GrammarError,
    GrammarSpec,
    compile_grammar,
    tokenizer_for,
)

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def model(target_gguf: Path) -> Model:
    return Model(target_gguf, n_gpu_layers=0)


@pytest.fixture(scope="module")
def person(model: Model) -> Grammar:
    return compile_grammar(model, GrammarSpec.json_schema(PERSON))


def tokens(grammar: Grammar, text: str) -> list[int]:
    return grammar.tokenizer.tokenize_str(text)


def bits_set(words: np.ndarray) -> int:
    return int(np.unpackbits(words.view(np.uint8)).sum())


# specs ----------------------------------------------------------------------------------------------------------


def test_ollama_format_values() -> None:
    assert GrammarSpec.from_ollama_format(None) is None
    assert GrammarSpec.from_ollama_format("") is None
    assert GrammarSpec.from_ollama_format("json") == GrammarSpec("json")
    spec = GrammarSpec.from_ollama_format(PERSON)
    assert spec is not None and spec.kind == "json_schema" and spec.schema == PERSON
    # key order is kept: it is the order the output writes them in
    assert list(json.loads(spec.source)["properties"]) == ["name", "age"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("xml", 'format must be "json" or a JSON schema object'),
        (3, 'format must be "json" or a JSON schema object'),
        ([PERSON], 'format must be "json" or a JSON schema object'),
        ({"type": "objectx"}, "format: Invalid type: objectx"),
        ({"not": {}}, 'format: Unimplemented keys: ["not"]'),
        ({"properties": {"a": {"$ref": "#/nope"}}}, "format: Pointer '/nope' does not exist"),
        ({"type": "integer", "minimum": 5, "maximum": 3}, "format: Unsatisfiable schema"),
    ],
)
def test_bad_ollama_format_is_one_line_naming_the_field(value: object, words: str) -> None:
    with pytest.raises(LocalEagleError) as e:
        GrammarSpec.from_ollama_format(value)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_openai_response_format_values() -> None:
    assert GrammarSpec.from_openai_response_format(None) is None
    assert GrammarSpec.from_openai_response_format({"type": "text"}) is None
    assert GrammarSpec.from_openai_response_format({"type": "json_object"}) == GrammarSpec("json")
    value = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    assert GrammarSpec.from_openai_response_format(value) == GrammarSpec.json_schema(PERSON)
    no_schema = {"type": "json_schema", "json_schema": {"name": "any"}}
    assert GrammarSpec.from_openai_response_format(no_schema) == GrammarSpec("json")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("json", "response_format must be an object with a type"),
        ({"type": "yaml"}, "response_format.type must be"),
        ({"type": "json_schema"}, "response_format.json_schema must be an object"),
        ({"type": "json_schema", "json_schema": {"name": 3, "schema": PERSON}}, "json_schema.name must be a string"),
        ({"type": "json_schema", "json_schema": {"schema": PERSON, "strict": "yes"}}, "strict must be true or false"),
        ({"type": "json_schema", "json_schema": {"schema": [1]}}, "response_format.json_schema.schema must be"),
        ({"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}}, "json_schema.schema: Invalid type"),
    ],
)
def test_bad_openai_response_format(value: object, words: str) -> None:
    with pytest.raises(LocalEagleError) as e:
        GrammarSpec.from_openai_response_format(value)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_spec_round_trips_the_runner_wire() -> None:
    for spec in (GrammarSpec("json"), GrammarSpec.json_schema(PERSON), GrammarSpec.lark('start: "a"+'),
                 GrammarSpec.regex("[0-9]+")):  # fmt: skip
        assert GrammarSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
        assert hash(spec) == hash(GrammarSpec.from_dict(spec.to_dict()))


def test_bad_kind_lark_and_regex_are_refused() -> None:
    with pytest.raises(GrammarError, match="grammar kind must be one of"):
        GrammarSpec("xml")
    with pytest.raises(GrammarError, match="grammar: .*unclosed character class"):
        GrammarSpec.lark("start: /[/")
    with pytest.raises(GrammarError, match="regex: .*unclosed group"):
        GrammarSpec.regex("a(b")
    with pytest.raises(GrammarError, match="schema is not valid JSON"):
        GrammarSpec.json_schema("{nope")


# compiling -------------------------------------------------------------------------------------------------------


def test_the_tiny_byte_vocabulary_builds_a_tokenizer_once(model: Model) -> None:
    tok = tokenizer_for(model)
    assert tok is tokenizer_for(model)  # kept
    assert tok.vocab_size == model.n_vocab
    assert tok.eos_tokens == [2]  # </s>, the tiny vocabulary's only end token
    assert tok.decode_bytes(tok.tokenize_str('{"a": 1}')) == b'{"a": 1}'


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (GrammarSpec("lark", "start: <|im_end|>"), "unknown special token"),
        (GrammarSpec("regex", r"[^\x00-\x{10FFFF}]"), "no sequence of tiny-target.gguf's tokens satisfies it"),
        (GrammarSpec("lark", 'start: a\na: a "x"'), "no sequence of tiny-target.gguf's tokens satisfies it"),
    ],
)
def test_a_grammar_the_vocabulary_cannot_satisfy_is_refused(model: Model, spec: GrammarSpec, words: str) -> None:
    with pytest.raises(GrammarError) as e:
        compile_grammar(model, spec)
    assert words in str(e.value) and "\n" not in str(e.value)


# a generation's constraint ---------------------------------------------------------------------------------------


def test_a_schema_walk(person: Grammar) -> None:
    c = person.matcher()
    text = '{"name": "Bo", "age": 7}'
    ids = tokens(person, text)
    assert person.tokenizer.decode_bytes(c.forced()) == b'{"name": "'  # the fixed start: the first key
    assert c.validate(ids) == len(ids)
    assert c.validate([*ids, 2]) == len(ids) + 1  # the end token, once complete
    assert c.validate([*ids, 2, 5]) == len(ids) + 1  # nothing after it
    assert not c.accepting() and not c.stopped()
    for t in ids:
        assert c.allows(t) and c.mask()[t]
        c.consume(t)
    assert c.accepting() and c.stopped() and c.forced() == []
    assert [int(t) for t in c.allowed()] == [2]
    c.consume([2])
    assert c.ended and c.stopped() and c.consumed == len(ids) + 1
    assert bits_set(c.bitmask()) == 0 and c.validate([2]) == 0


def test_consume_refuses_and_keeps_its_place(person: Grammar) -> None:
    c = person.matcher()
    c.consume(tokens(person, '{"name": "'))
    before = c.consumed
    with pytest.raises(GrammarError, match="not allowed by the json_schema grammar"):
        c.consume(tokens(person, 'x", "age": x'))
    assert c.consumed == before
    c.consume(tokens(person, 'x", "age": 1}'))
    assert c.accepting()
    with pytest.raises(GrammarError, match="token 2 .* not allowed|token"):
        person.matcher().consume([2])  # an end token before the output is complete


def test_rollback_and_copy(person: Grammar) -> None:
    c = person.matcher()
    ids = tokens(person, '{"name": "Al", "age": 30}')
    c.consume([*ids, 2])
    c.rollback(1)  # the end token
    assert not c.ended and c.accepting()
    c.rollback(len(ids))
    assert c.consumed == 0 and c.validate(ids) == len(ids)
    c.consume(ids[:4])
    branch = c.copy()
    branch.consume(ids[4:])
    assert branch.accepting() and not c.accepting() and c.consumed == 4
    assert c.validate(ids[4:]) == len(ids) - 4
    with pytest.raises(GrammarError, match="cannot roll back"):
        c.rollback(5)


def test_apply_sets_minus_inf_where_refused(person: Grammar) -> None:
    rng = np.random.default_rng(0)
    for prefix in ("", '{"name": "', '{"name": "x", "age": '):  # few allowed, most allowed, digits
        c = person.matcher()
        if prefix:
            c.consume(tokens(person, prefix))
        ok = c.mask()
        logits = rng.standard_normal(person.n_vocab).astype(np.float32)
        before = logits.copy()
        out = c.apply(logits)
        assert out is logits
        assert np.array_equal(np.isfinite(logits), ok)
        assert np.array_equal(logits[ok], before[ok])
        longer = np.zeros(person.n_vocab + 7, dtype=np.float32)
        c.apply(longer)
        assert np.all(np.isinf(longer[person.n_vocab :]))


def test_masks_along_a_draft(person: Grammar) -> None:
    c = person.matcher()
    ids = tokens(person, '{"name": "Jo", "age": 5}')
    masks, n = c.masks_along([*ids, 2, 7])
    assert n == len(ids) + 1 and masks.shape == (len(ids) + 3, person.n_words)
    walker = person.matcher()
    for i, t in enumerate(ids):
        assert np.array_equal(masks[i], walker.bitmask())
        walker.consume(t)
    assert np.array_equal(masks[len(ids)], walker.bitmask())
    assert bits_set(masks[len(ids) + 1]) == 0  # after the end token
    assert c.consumed == 0 and np.array_equal(c.bitmask(), masks[0])  # the state did not move
    # a draft the grammar leaves early: masks as far as it goes
    wrong = ids[:3] + tokens(person, "}") + ids[4:]
    _, n = c.masks_along(wrong)
    assert n == c.validate(wrong) < len(wrong)


def test_json_object_lark_and_regex(model: Model) -> None:
    anything = compile_grammar(model, GrammarSpec("json"))
    c = anything.matcher()
    ids = tokens(anything, '{"a": [1, 2.5, {"b": null}], "c": "d"}')
    assert c.validate([*ids, 2]) == len(ids) + 1
    assert c.validate(tokens(anything, "[1]")) == 0  # an object, as Ollama's and OpenAI's JSON modes
    # one line, as json.dumps writes it: no whitespace but the separators'
    assert c.validate(tokens(anything, '{ "a": 1}')) == 1
    assert c.validate(tokens(anything, '{"a":1}')) == 5  # { " a " : and not 1 without its space

    yes_no = compile_grammar(model, GrammarSpec.lark('start: "yes" | "no"'))
    c = yes_no.matcher()
    assert c.validate([*tokens(yes_no, "no"), 2]) == 3
    assert c.validate(tokens(yes_no, "maybe")) == 0
    digits = compile_grammar(model, GrammarSpec.regex("[0-9]{3}"))
    c = digits.matcher()
    c.consume(tokens(digits, "12"))
    assert not c.accepting()
    c.consume(tokens(digits, "3"))
    assert c.stopped() and c.allowed().tolist() == [2]


# the demo target's 262K vocabulary ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_mask_cost_on_the_demo_target() -> None:
    """The per-token mask cost docs/structured.md quotes: a JSON schema walked token by token on Gemma 3 270M."""
    from local_eagle.assets import demo_target

    model = Model(demo_target(), n_gpu_layers=0)
    t0 = time.perf_counter()
    tokenizer_for(model)
    built = time.perf_counter() - t0
    g = compile_grammar(model, GrammarSpec.json_schema(PERSON))
    assert g.end_tokens == [1, 106, 212]  # <eos>, <end_of_turn> and the other end token Gemma 3 lists
    ids = tokens(g, '{"name": "Alice Smith", "age": 42}')
    c = g.matcher()
    costs = []
    for t in ids:
        c._fresh = False
        t1 = time.perf_counter()
        c.bitmask()
        costs.append(time.perf_counter() - t1)
        c.consume(t)
    assert c.accepting() and c.validate([106]) == 1
    median_us = float(np.median(costs)) * 1e6
    print(f"tokenizer {built:.2f} s; mask median {median_us:.0f} us, max {max(costs) * 1e6:.0f} us")
    assert median_us < 2000

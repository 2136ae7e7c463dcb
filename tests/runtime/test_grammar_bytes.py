"""Structured output where llama.cpp's tokenize does not spell the text it is given.

A SentencePiece vocabulary without a lone ``▁`` (the bench's tiny pair, ``python -m local_eagle.bench.pair --tiny``)
tokenizes a space as the three UTF-8 bytes of ``▁`` (byte fallback on the escaped text), whose pieces spell ``▁``,
not a space. llguidance forced such tokens through the mask (a JSON schema's ``": "``) and its consume then refused
them: ``GrammarError: token 229 (0xE2) is not allowed``. The grammar's tokenizer now keeps to tokens whose pieces
spell the text, so every token the mask allows can be consumed, and speculative output stays the target alone's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from converters import convert, write_checkpoint
from local_eagle.bench.structured import StructuredTask, check_identity_under
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.grammar import GrammarSpec, tokenizer_for
from local_eagle.runtime.identity import DIVERGENT
from local_eagle.testing.tiny import make_drafter, write_tiny_target
from local_eagle.testing.tiny_pair import LAYERS, SPEC

SPACE_AS_BYTES = b"\xe2\x96\x81"  # U+2581, SentencePiece's escaped space, as llama.cpp's byte fallback spells it

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}
BOOK = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "year": {"type": "integer", "minimum": 1500, "maximum": 2025},
        "genre": {"enum": ["fiction", "mystery", "science fiction"]},
        "available": {"type": "boolean"},
    },
    "required": ["title", "year", "genre", "available"],
    "additionalProperties": False,
}
TASKS = [
    ("Describe a fictional person as JSON with name, age and hobbies:\n", PERSON),
    ("A library catalog record for a classic novel, as JSON:\n", BOOK),
]
SETTINGS = [
    dict(draft_max=3, adaptive=False),
    dict(draft_max=6, adaptive=True),
    dict(draft_max=4, adaptive=False, draft_grammar=False),
]
OPTS = EngineOptions(n_ctx=512, n_batch=64, n_threads=1)


@pytest.fixture(scope="module")
def bench_pair(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """The bug's own pair: the bench's tiny random Q4_K_M target and f16 drafter (1024 pieces, no lone ``▁``)."""
    from local_eagle.bench.pair import make_pair

    paths = make_pair(tmp_path_factory.mktemp("bench-pair"), tiny=True, threads=1)
    eng = Engine(paths["target"], paths["drafter"], OPTS)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def f32_pair(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """An f32 tiny target with the same kind of vocabulary and a random drafter: single-row and batched decodes
    agree closely enough here for token-for-token equality (the Q4_K_M pair has near-ties)."""
    d = tmp_path_factory.mktemp("no-space-pair")
    spec = replace(SPEC, extra_tokens=("\u2581the", "\u2581a", "e", "t", "\u2581and", "\u2581t"))
    target = write_tiny_target(d / "target.gguf", spec, seed=5)
    n_vocab = 259 + len(spec.extra_tokens)
    model = make_drafter(n_vocab, spec.n_embd, LAYERS, eagle31=True, draft_vocab=128, seed=11)
    ckpt = write_checkpoint(model.state_dict(), model.cfg.to_dict(), d / "drafter.ckpt")
    eng = Engine(target, convert(ckpt, target, d / "drafter.gguf", outtype="f32").outfile, OPTS)
    yield eng
    eng.close()


def _spelled(eng: Engine, tokens: list[int]) -> bytes:
    return b"".join(eng.model.token_to_piece(t) for t in tokens)


@pytest.mark.parametrize("pair", ["bench_pair", "f32_pair"])
def test_llama_tokenize_spells_a_space_otherwise_and_the_grammar_tokenizer_does_not(pair, request) -> None:
    eng: Engine = request.getfixturevalue(pair)
    assert SPACE_AS_BYTES in _spelled(eng, eng.model.tokenize('": "', add_special=False).tolist())  # the cause
    tok = tokenizer_for(eng.model)
    for text in (' "', '{"name": "', '", "age": ', "a b  c\n", " ünï “q” 日本"):
        ids = tok.tokenize_str(text)
        assert tok.decode_bytes(ids) == text.encode(), text


@pytest.mark.parametrize("pair", ["bench_pair", "f32_pair"])
def test_every_token_the_mask_allows_can_be_consumed(pair, request) -> None:
    """Along the target's constrained output, every allowed token validates, and the forced ones spell bytes the
    grammar takes (the mask is a single forced token wherever the grammar fixes the next bytes)."""
    eng: Engine = request.getfixturevalue(pair)
    prompt, schema = TASKS[0]
    spec = GrammarSpec.json_schema(schema)
    out = eng.generate(prompt, max_tokens=200, draft_max=0, grammar=spec)
    c = eng.grammar(spec).matcher()
    for t in out.tokens:
        refused = [int(a) for a in c.allowed() if c.validate([int(a)]) != 1]
        assert not refused, (c.consumed, refused[:5])
        forced = c.forced()
        assert c.validate(forced) == len(forced)
        c.consume(t)


@pytest.mark.parametrize(("prompt", "schema"), TASKS, ids=["person", "book"])
def test_json_schema_output_is_valid_and_speculative_is_the_target_alone(f32_pair, prompt, schema) -> None:
    spec = GrammarSpec.json_schema(schema)
    base = f32_pair.generate(prompt, max_tokens=200, draft_max=0, grammar=spec)
    assert base.stats.stop_reason == "eos", base.text
    jsonschema.validate(json.loads(base.text), schema)
    for kw in SETTINGS:
        res = f32_pair.generate(prompt, max_tokens=200, grammar=spec, **kw)
        assert res.tokens == base.tokens, kw
        assert res.stats.stop_reason == base.stats.stop_reason


@pytest.mark.parametrize(("prompt", "schema"), TASKS, ids=["person", "book"])
def test_the_bench_pair_writes_valid_json_alone_and_speculative(bench_pair, prompt, schema) -> None:
    """What raised on the bench's tiny pair (``bench --prompts drafters/prompts/json-heldout.jsonl``): now valid
    JSON, target alone and speculative; speculative is the target alone's but for a float near-tie."""
    spec = GrammarSpec.json_schema(schema)
    base = bench_pair.generate(prompt, max_tokens=200, draft_max=0, grammar=spec)
    assert base.stats.stop_reason == "eos", base.text
    jsonschema.validate(json.loads(base.text), schema)
    for kw in SETTINGS:
        res = bench_pair.generate(prompt, max_tokens=200, grammar=spec, **kw)
        jsonschema.validate(json.loads(res.text), schema)
        verdict = check_identity_under(bench_pair, StructuredTask(prompt, spec), base, res)
        assert verdict.verdict != DIVERGENT, (kw, verdict)


def test_a_vocabulary_llama_tokenize_spells_keeps_its_tokens(tmp_path: Path) -> None:
    """With a lone ``▁`` piece (llama.cpp's tokens spell the text) the forced tokens are llama.cpp's own."""
    eng = Engine(write_tiny_target(tmp_path / "t.gguf", SPEC), None, OPTS)
    try:
        tok = tokenizer_for(eng.model)
        for text in ('{"name": "', '", "age": ', " the a and"):
            sentinel = eng.model.tokenize("\x01" + text, add_special=False).tolist()
            head = eng.model.tokenize("\x01", add_special=False).tolist()
            assert sentinel[: len(head)] == head
            assert tok.tokenize_str(text) == sentinel[len(head) :], text
    finally:
        eng.close()

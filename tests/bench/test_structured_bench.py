"""``bench --json-schema / --grammar``: the target alone, grammar-aware and unconstrained drafting under a
constraint, in one run, on the same prompts; every output checked against its schema and the target alone's."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from local_eagle.bench.structured import (
    AWARE,
    TARGET_ALONE,
    UNCONSTRAINED,
    StructuredTask,
    check_output,
    read_structured_tasks,
)
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.grammar import GrammarSpec

runner = CliRunner()

# schemas the tiny byte vocabulary can satisfy: short strings, an enum, an array, a nested object
NAME = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "kind": {"enum": ["PA", "BC"]}},
        "required": ["name", "kind"], "additionalProperties": False}  # fmt: skip
TAGS = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
        "maxItems": 3}, "box": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
        "maximum": 99}}, "required": ["n"], "additionalProperties": False}}, "required": ["tags", "box"],
        "additionalProperties": False}  # fmt: skip
LARK = 'start: "{" NAME ": " NUM "}"\nNAME: /[A-P]{2,8}/\nNUM: /[0-9]{1,3}/\n'


def _schema_prompts(d) -> str:
    path = d / "schema-prompts.jsonl"
    lines = [{"prompt": p, "schema": s} for p, s in [("hello", NAME), ("ABC xyz", TAGS), ("PAB", NAME)]]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return str(path)


def _plain_prompts(d) -> str:
    path = d / "plain-prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in ["hello", "xyzA"]) + "\n")
    return str(path)


def _bench(pair, *args):
    d, target, draft = pair
    return runner.invoke(app, ["bench", "-m", str(target), "-d", str(draft), "--threads", "1", *args],
                         env={"COLUMNS": "200"})  # fmt: skip


def test_schemas_on_their_lines_three_ways_in_one_run(pair):
    d = pair[0]
    r = _bench(pair, "--prompts", _schema_prompts(d), "-n", "64", "--draft-max", "3", "--fixed", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["drafting"], x["setting"]) for x in rows] == [(TARGET_ALONE, "-"), (AWARE, "3"), (UNCONSTRAINED, "3")]
    for x in rows:
        assert x["prompts"] == 3
        assert x["valid"] == 3 and x["invalid"] == [] and x["cut"] == 0  # every output parses and validates
        assert x["identical"] == 3 and x["divergent"] == 0 and x["near_ties"] == 0  # lossless either way
    assert rows[0]["speedup"] == 1.0 and rows[0]["acceptance_length"] == 1.0
    alone, aware, free = rows
    assert aware["tokens"] == free["tokens"] == alone["tokens"]
    assert len(aware["acceptance_per_position"]) == 3
    # the drafts know the grammar: more tokens per target call, and forced tokens cost no drafter call
    assert aware["acceptance_length"] > free["acceptance_length"]
    assert aware["drafter_calls_per_call"] < free["drafter_calls_per_call"]


def test_one_schema_for_every_prompt_and_the_table(pair, tmp_path):
    schema = tmp_path / "name.json"
    schema.write_text(json.dumps(NAME))
    r = _bench(pair, "--prompts", _plain_prompts(pair[0]), "--json-schema", str(schema), "-n", "40")
    assert r.exit_code == 0, r.output
    for needle in ("greedy under constraints", "target alone", "grammar-aware", "unconstrained", "auto<=8",
                   "per-position acceptance", "2/2"):  # fmt: skip
        assert needle in r.output, needle


def test_a_lark_grammar_with_several_settings(pair, tmp_path):
    grammar = tmp_path / "g.lark"
    grammar.write_text(LARK)
    r = _bench(pair, "--prompts", _plain_prompts(pair[0]), "--grammar", str(grammar), "-n", "24",
               "--draft-max", "2", "--draft-max", "4", "--fixed", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["label"] for x in rows] == [TARGET_ALONE, f"{AWARE} 2", f"{UNCONSTRAINED} 2", f"{AWARE} 4",
                                          f"{UNCONSTRAINED} 4"]  # fmt: skip
    assert all(x["valid"] == 2 and x["identical"] == 2 and x["divergent"] == 0 for x in rows)


def test_a_cut_output_is_counted_invalid_not_hidden(pair, tmp_path):
    schema = tmp_path / "tags.json"
    schema.write_text(json.dumps(TAGS))
    r = _bench(pair, "--prompts", _plain_prompts(pair[0]), "--json-schema", str(schema), "-n", "6",
               "--draft-max", "3", "--fixed", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    for x in json.loads(r.output):
        assert x["valid"] == 0 and x["cut"] == 2 and x["identical"] == 2
        assert all("does not parse" in bad["reason"] and bad["stop_reason"] == "length" for bad in x["invalid"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--tree", "4"], "--tree: not under a constraint"),
     (["--concurrency", "1,2"], "--concurrency: not under a constraint"),
     (["--json-schema", "MISSING.json"], "MISSING.json"),
     (["--format", "yaml"], '--format must be "json"')],
)  # fmt: skip
def test_flags_that_do_not_go_with_a_constraint(pair, args, needle):
    r = _bench(pair, "--prompts", _schema_prompts(pair[0]), *args)
    assert r.exit_code != 0
    assert needle in " ".join(r.output.split())
    assert "Traceback" not in r.output


def test_reading_tasks(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "a", "schema": NAME}) + "\n" + json.dumps({"prompt": "b"}) + "\n")
    with pytest.raises(LocalEagleError, match=r"t.jsonl:2: no 'schema'"):
        read_structured_tasks(path, None)
    tasks = read_structured_tasks(path, GrammarSpec.json_object())
    assert [t.spec.kind for t in tasks] == ["json_schema", "json"]  # a line's own schema wins
    path.write_text(json.dumps({"prompt": "a", "schema": {"type": "objectx"}}) + "\n")
    with pytest.raises(LocalEagleError, match=r"t.jsonl:1: schema"):
        read_structured_tasks(path, None)


def test_check_output_validates_against_the_schema():
    task = StructuredTask("p", GrammarSpec.json_schema(NAME))
    assert check_output(task, '{"name": "AB", "kind": "PA"}', [], None) is None
    assert "does not parse" in check_output(task, '{"name": "AB", "ki', [], None)
    assert "does not validate" in check_output(task, '{"name": "AB", "kind": "ZZ"}', [], None)

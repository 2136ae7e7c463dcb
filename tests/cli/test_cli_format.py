"""`generate --format json / --json-schema / --grammar` and `run --format json`: the constraint reaches the engine as
``grammar=`` (its stream is wrapped here to record the keyword and run without it), bad values are one line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.runtime.engine import Engine
from local_eagle.runtime.grammar import GrammarSpec

runner = CliRunner()
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.fixture
def seen(monkeypatch) -> list[Any]:
    real = Engine.stream
    got: list[Any] = []

    def stream(self: Engine, *args: Any, **kwargs: Any) -> Any:
        got.append(kwargs.pop("grammar", "absent"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "stream", stream)
    return got


def generate(pair, *args: str):
    _, target, draft = pair
    return runner.invoke(app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "4",
                               "--temperature", "0", "--threads", "1", *args])  # fmt: skip


def test_generate_passes_the_constraint(pair, seen, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    lark = tmp_path / "yes.lark"
    lark.write_text('start: "yes" | "no"\n')
    for args in ([], ["--format", "json"], ["--json-schema", str(schema)], ["--grammar", str(lark)]):
        r = generate(pair, *args)
        assert r.exit_code == 0, r.output
    assert seen == ["absent", GrammarSpec("json"), GrammarSpec.json_schema(PERSON), GrammarSpec.lark(lark.read_text())]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--format", "xml"], '--format must be "json"'),
        (["--format", "json", "--grammar", "x.lark"], "give one of --format and --grammar, not both"),
        (["--json-schema", "missing.json"], "missing.json"),
        (["--grammar", "@bad"], "--grammar @bad: .*unclosed character class"),
        (["--json-schema", "@bad"], "--json-schema @bad: Invalid type: objectx"),
    ],
)
def test_generate_refuses_bad_constraints_in_one_line(pair, seen, tmp_path, args, words):
    import re

    bad = tmp_path / "bad"
    bad.write_text('{"type": "objectx"}' if "--json-schema" in args else "start: /[/")
    args = [str(bad) if a == "@bad" else a for a in args]
    words = words.replace("@bad", re.escape(str(bad)))
    r = generate(pair, *args)
    assert r.exit_code == 2, r.output
    assert re.search(words, r.output.replace("\n", " ")) or words in r.output, r.output
    assert seen == []


def test_run_format_json(pair, seen, tmp_path):
    """`local-eagle run NAME PROMPT --format json` as `ollama run --format json`."""
    _, target, draft = pair
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\nPARAMETER temperature 0\nPARAMETER num_predict 4\n")
    r = runner.invoke(app, ["create", "fmt", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["run", "fmt", "hi", "--format", "json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["run", "fmt", "hi", "--format", "yaml"])
    assert r.exit_code == 2 and '--format must be "json"' in r.output
    assert seen == [GrammarSpec("json")]

"""The built-in jobs: the tiny self-check (default run) and the Gemma 3 270M demo pair (slow)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app

runner = CliRunner()


def test_selfcheck_agrees_with_the_reference():
    r = runner.invoke(app, ["selfcheck", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output.strip().splitlines()[-1])
    assert {row["outtype"] for row in rows} == {"f32", "f16", "q8_0"}
    assert all(row["ok"] for row in rows)


@pytest.mark.slow
def test_demo_pair_is_lossless_and_accepts():
    """Fixed k=4 (acceptance does not depend on this machine's costs), then the default adaptive policy."""
    r = runner.invoke(app, ["demo", "--json", "-n", "64", "--draft-max", "4", "--fixed"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output.strip().splitlines()[-1])
    assert res["identity"]["verdict"] != "divergent"
    assert res["speculative"]["acceptance_length"] > 1.8
    r = runner.invoke(app, ["demo", "--json", "-n", "64"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["identity"]["verdict"] != "divergent"


@pytest.mark.slow
def test_the_demo_prompts_answer_reads_well():
    """The first run a user sees: the target's own answer to the demo prompt (what demo prints, the speculative
    output being the same) starts with the function asked for and repeats no line over and over."""
    from local_eagle.assets import DEMO_PROMPT, demo_drafter, demo_target
    from local_eagle.runtime.engine import Engine, EngineOptions

    with Engine(demo_target(), demo_drafter(), EngineOptions(n_ctx=1024)) as engine:
        text = engine.generate(DEMO_PROMPT, max_tokens=128, draft_max=0).text
    assert text.lstrip().startswith("return (celsius * 9/5) + 32"), text
    lines = [line.strip() for line in text.splitlines() if len(line.strip()) > 3]  # not a docstring's quotes
    assert len(lines) > 8 and max(lines.count(line) for line in set(lines)) <= 3, text

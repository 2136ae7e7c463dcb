"""Projected speed on another machine: a run's rounds priced on a cost profile (bench --cost-profile)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from local_eagle.bench.project import (
    CostProfile,
    builtin_profiles,
    load_profile,
    projected_ms,
    projected_speedup,
    write_profile,
)
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError

FLAT = CostProfile("flat", {1: 10.0, 64: 10.0}, {1: 1.0, 64: 1.0}, 0.0)
LINEAR = CostProfile("linear", {1: 10.0, 2: 20.0}, {1: 1.0, 2: 2.0}, 0.0)


def test_interpolation_between_points_and_the_last_slope_beyond() -> None:
    assert LINEAR.verify(1) == 10.0 and LINEAR.verify(1.5) == 15.0
    assert LINEAR.verify(5) == pytest.approx(50.0)  # beyond the table: the last slope, costs keep growing
    assert FLAT.verify(40) == 10.0


def test_a_round_costs_its_verify_its_drafter_calls_and_the_host() -> None:
    # a chain of 3: catch-up of 2 rows, then 2 calls of 1 row; all 3 accepted
    chain = [(4, 3, 3, 2, 2)]
    assert projected_ms(chain, LINEAR, 0.5) == pytest.approx(40.0 + 0.5 + 2.0 + 2 * 1.0)
    # a tree: one catch-up row, then frontiers of 4 and 4 rows over two calls
    tree = [(16, 5, 3, 1, 8)]
    assert projected_ms(tree, FLAT, 0.0) == pytest.approx(10.0 + 1.0 + 2 * 1.0)
    # an idle round (nothing drafted): the verify of one row alone
    assert projected_ms([(1, 0, 0, 0, 0)], LINEAR, 0.0) == 10.0


def test_speedup_where_rows_are_free_and_where_they_cost() -> None:
    rounds = [(5, 4, 4, 1, 3)] * 10  # every draft of 4 accepted: 5 tokens a call
    assert projected_speedup(rounds, FLAT, 0.0) == pytest.approx(5 * 10 / (10 + 4))
    assert projected_speedup(rounds, LINEAR, 0.0) < 1.0  # a call costs its rows: drafting loses
    assert projected_speedup([(1, 0, 0, 0, 0)] * 3, LINEAR, 0.3) == pytest.approx(1.0)  # idle rounds: 1x


def test_builtin_profiles_load_with_their_sources() -> None:
    names = builtin_profiles()
    assert {"rtx4090-8b-q4", "rtx4090-1b-f32", "h100-8b-q4"} <= set(names)
    for name in names:
        p = load_profile(name)
        assert p.verify(1) > 0 and p.verify(64) >= p.verify(16) >= p.verify(1)
        assert "not measured" in p.kind or "measured by local-eagle" in p.kind  # an estimate says so


@pytest.mark.parametrize(
    "text,match",
    [("{", "not a cost profile"), ('{"verify_ms": {"2": 1}, "drafter_ms": {"1": 1}}', "needs the 1-row call"),
     ('{"verify_ms": {"1": -1}, "drafter_ms": {"1": 1}}', "positive"), ('{"verify_ms": []}', "not a cost profile")],
)  # fmt: skip
def test_bad_profiles_are_one_line(tmp_path, text: str, match: str) -> None:
    p = tmp_path / "p.json"
    p.write_text(text)
    with pytest.raises(LocalEagleError, match=match):
        load_profile(p)
    with pytest.raises(LocalEagleError, match="no built-in profile of that name"):
        load_profile("no-such-profile")


def test_a_written_profile_loads_back(tmp_path) -> None:
    curve = {"target": "t.gguf", "drafter": "d.gguf", "verify_ms": {1: 5.0, 8: 6.0}, "drafter_ms": {1: 0.5, 8: 0.7}}
    p = load_profile(write_profile(tmp_path / "mine.json", curve, 0.4, "mine"))
    assert (p.name, p.verify(8), p.drafter(1), p.host_ms) == ("mine", 6.0, 0.5, 0.4)


def test_bench_projects_and_keeps_rounds(pair, tmp_path) -> None:
    d, target, draft = pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "ABC xyz"}) + "\n")
    base = ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(prompts), "-n", "24", "--fixed",
            "--draft-max", "3", "--tree", "5", "--json", "--threads", "1",
            "--cost-profile", "rtx4090-8b-q4"]  # fmt: skip
    r = CliRunner().invoke(app, [*base, "--rounds", "--measure-costs", str(tmp_path / "here.json")])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output.strip().splitlines()[-1])
    for row in rows:
        assert sum(1 + rec[1] for rec in row["rounds"]) == 23  # every token but the prefill's came from a round
        assert all(rec[0] >= 1 and rec[2] >= 0 for rec in row["rounds"])
        assert row["projected"]["rtx4090-8b-q4"] > 1.0  # accepted drafts on near-flat costs pay
    assert load_profile(tmp_path / "here.json").verify(64) > 0
    plain = json.loads(CliRunner().invoke(app, base).output.strip().splitlines()[-1])
    assert all(row["rounds"] is None and "rtx4090-8b-q4" in row["projected"] for row in plain)


def test_a_profile_as_the_policys_fixed_costs() -> None:
    costs = LINEAR.fixed_costs(rows=8)
    T = costs.verify(10)
    assert T[1] == pytest.approx(0.010) and T[10] == pytest.approx(0.100)  # seconds, the last slope beyond the table
    assert costs.call(2) == pytest.approx(0.002) and costs.first_step == pytest.approx(0.001)
    costs.add_verify(1, 5.0)
    costs.add_draft(1, 5.0)
    assert costs.verify(1)[1] == pytest.approx(0.010) and costs.draft_step == pytest.approx(0.001)  # timings ignored
    assert costs.host == 0.0
    assert CostProfile("x", {1: 10.0}, {1: 1.0}, None).fixed_costs().host == pytest.approx(1e-4)  # none given: 0.1 ms


def test_bench_decides_on_another_machines_costs(pair, tmp_path) -> None:
    """--decide-on: on near-flat costs the adaptive policy drafts (trees, on an engine opened for them), where on
    this CPU's own costs it would draft almost nothing; the rows are projected on that profile; output identical."""
    d, target, draft = pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("ABC xyz", "hello world", "xyz ABC")))
    base = ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(prompts), "-n", "32", "--json",
            "--threads", "1"]  # fmt: skip
    r = CliRunner().invoke(app, [*base, "--decide-on", "rtx4090-8b-q4"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output.strip().splitlines()[-1])
    assert row["adaptive"] and row["mean_verify_rows"] > 2.0, row["mean_verify_rows"]
    assert "rtx4090-8b-q4" in row["projected"] and row["divergent"] == 0
    r = CliRunner().invoke(app, [*base, "--decide-on", "no-such-profile"])
    assert r.exit_code != 0 and "no built-in profile" in r.output

"""``bench --tree``: fixed draft trees beside chains, rows that say what they verified."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app

runner = CliRunner()


def _prompts(d) -> str:
    path = d / "tree-prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in ["hello", "ABC xyz"]) + "\n")
    return str(path)


def test_bench_trees_and_chains_json(pair):
    d, target, draft = pair
    r = runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), "-n", "32", "--fixed",
              "--draft-max", "3", "--tree", "3", "--tree", "9", "--tree-width", "3", "--json", "--threads", "1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(row["draft_max"], row["tree_nodes"]) for row in rows] == [(3, None), (3, 3), (9, 9)]
    assert rows[2]["tree_width"] == 3 and rows[2]["tree_depth"] == 9
    for row in rows:
        assert row["identical"] and row["divergent"] == 0
        assert 1.0 < row["mean_verify_rows"] <= row["draft_max"] + 1
        assert row["acceptance_length"] > 2  # the cycle pair: drafts right once inside the cycle
    assert rows[2]["mean_verify_rows"] > rows[1]["mean_verify_rows"]


def test_bench_tree_table(pair):
    d, target, draft = pair
    r = runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), "-n", "16", "--fixed",
              "--tree", "4", "--threads", "1"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "tree 4 (d4 w4)" in r.output and "rows/call" in r.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--tree", "0", "--fixed"], "tree nodes must be between 1 and 255"),
     (["--tree", "4", "--tree-width", "99", "--fixed"], "tree width must be between 1 and 64")],
)  # fmt: skip
def test_bench_tree_flags_are_checked(pair, args, needle):
    d, target, draft = pair
    r = runner.invoke(app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), *args])
    assert r.exit_code != 0
    assert needle in r.output
    assert "Traceback" not in r.output


def test_bench_adaptive_tree_setting(pair):
    """Without --fixed a tree is an option the adaptive rounds take only where the measured costs favour it."""
    d, target, draft = pair
    r = runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), "-n", "24", "--tree", "15",
              "--json", "--threads", "1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    assert row["adaptive"] and row["tree_nodes"] == 15 and row["draft_max"] == 8 and row["identical"]
    assert 1.0 <= row["mean_verify_rows"] <= 16


def test_bench_plot_draws_chains_and_trees(pair, tmp_path):
    d, target, draft = pair
    out = tmp_path / "plot.png"
    r = runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), "-n", "16", "--fixed",
              "--draft-max", "3", "--tree", "3", "--tree", "7", "--json", "--threads", "1", "--plot", str(out)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    r = runner.invoke(app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), "--plot", str(d)])
    assert r.exit_code != 0 and "is a directory" in r.output

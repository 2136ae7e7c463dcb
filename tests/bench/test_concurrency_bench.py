"""``bench --concurrency``: settings with and without drafting at several concurrencies on one parallel engine."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from local_eagle.bench.concurrency import cost_rows, parse_concurrency, run_at
from local_eagle.bench.run import DraftSetting
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.testing.threads import assert_one_team_at_a_time, decoding_threads

runner = CliRunner()
PROMPTS = ["hello", "ABC xyz", "PAB", "a", "xyz, 日本"]


def _prompts(d) -> str:
    path = d / "concurrency-prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in PROMPTS) + "\n")
    return str(path)


def _bench(pair, *args: str):
    d, target, draft = pair
    return runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", _prompts(d), "--threads", "1", *args],
        env={"COLUMNS": "200"},
    )  # fmt: skip


def test_concurrency_json(pair):
    r = _bench(pair, "-n", "16", "--concurrency", "2,1", "--draft-max", "auto", "--draft-max", "2", "--fixed",
               "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["concurrency"] == [1, 2] and report["prompts"] == len(PROMPTS) and report["max_tokens"] == 16
    rows = report["rows"]
    assert [(row["concurrency"], row["setting"]) for row in rows] == [
        (1, "none"), (1, "auto<=8"), (1, "2"), (2, "none"), (2, "auto<=8"), (2, "2")
    ]  # fmt: skip
    for row in rows:
        # every output equals the target alone's (the cycle pair has no near-ties)
        assert row["requests"] == len(PROMPTS) and row["identical"] == len(PROMPTS), row
        assert row["near_ties"] == 0 and row["divergent"] == 0 and row["divergences"] == []
        assert row["tokens"] == 16 * len(PROMPTS)
        assert row["aggregate_tps"] > 0 and row["per_request_tps"] > 0 and row["wall_seconds"] > 0
        assert row["speedup"] > 0 and row["batching_gain"] > 0
    none = [row for row in rows if row["setting"] == "none"]
    assert all(row["speedup"] == 1.0 and row["acceptance_length"] == 1.0 and not row["adaptive"] for row in none)
    assert none[0]["batching_gain"] == 1.0  # the target alone, one request at a time
    fixed = [row for row in rows if row["setting"] == "2"]
    assert all(row["acceptance_length"] > 2 and not row["adaptive"] for row in fixed)  # the cycle pair drafts right
    auto = [row for row in rows if row["setting"] == "auto<=8"]
    assert all(row["adaptive"] and row["policy"] for row in auto)  # the batch's policy, or a lone seat's
    costs = report["costs"]
    assert {"1", "2", "3", "4", "5", "6", "8", "10"} <= set(map(str, costs["verify_ms"]))
    assert costs["verify_ratio"]["1"] == 1.0 and costs["drafter_ms"]


def test_concurrency_table(pair):
    r = _bench(pair, "-n", "8", "--concurrency", "1,2")
    assert r.exit_code == 0, r.output
    needles = ["aggregate tok/s", "per-request tok/s", "speedup", "accept len", "batching gain", "identical",
               "cost of a call by rows", "batching allows", f"{len(PROMPTS)}/{len(PROMPTS)}", "auto<=8", "none"]
    for needle in needles:
        assert needle in r.output, needle


def test_without_one_there_is_no_batching_gain(pair):
    r = _bench(pair, "-n", "4", "--concurrency", "2", "--draft-max", "1", "--fixed", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rows"]
    assert [row["setting"] for row in rows] == ["none", "1"]
    assert all(row["batching_gain"] is None for row in rows)


def test_repeat_runs_every_setting_that_many_times_and_reports_them_together(pair):
    r = _bench(pair, "-n", "4", "--concurrency", "2", "--draft-max", "1", "--fixed", "--repeat", "3", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["repeat"] == 3
    for row in report["rows"]:
        assert row["requests"] == 3 * len(PROMPTS) and row["identical"] + row["near_ties"] == 3 * len(PROMPTS)
        assert row["tokens"] == 3 * len(PROMPTS) * 4  # -n 4, no stop string in the tiny pair's cycle
        assert row["aggregate_tps"] == pytest.approx(row["tokens"] / row["wall_seconds"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--repeat", "2"], "--repeat: only with --concurrency"),
     (["--concurrency", "8"], "needs at least 8 prompts"),
     (["--concurrency", "1,x"], "numbers separated by commas"),
     (["--concurrency", "0"], "between 1 and"),
     (["--concurrency", "2", "--tree", "4"], "--tree: not with --concurrency"),
     (["--concurrency", "2", "--rounds", "--json"], "--rounds: not with --concurrency")],
)  # fmt: skip
def test_concurrency_flags_are_checked(pair, args, needle):
    r = _bench(pair, *args)
    assert r.exit_code != 0
    assert needle in r.output
    assert "Traceback" not in r.output


def test_parse_concurrency_and_cost_rows():
    assert parse_concurrency("16, 1,4,4") == [1, 4, 16]
    with pytest.raises(LocalEagleError):
        parse_concurrency("")
    assert cost_rows([1, 4, 16]) == (1, 2, 3, 4, 5, 8, 12, 16, 20, 32, 48, 64, 80)
    assert max(cost_rows([64, 128])) <= 512


def test_run_at_keeps_c_requests_in_flight():
    """As a server's clients: c in flight until the prompts run out, each prompt once, results in prompt order."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}
    seen: list[str] = []

    def generate(prompt, **kw):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            seen.append(prompt)
        time.sleep(0.02)
        with lock:
            state["now"] -= 1
        return SimpleNamespace(prompt=prompt, kw=kw)

    prompts = [f"p{i}" for i in range(10)]
    results, seconds, wall = run_at(SimpleNamespace(generate=generate), prompts, 3, DraftSetting(4, False), 7)
    assert state["most"] == 3
    assert sorted(seen) == sorted(prompts)
    assert [r.prompt for r in results] == prompts
    assert results[0].kw["draft_max"] == 4 and results[0].kw["adaptive"] is False and results[0].kw["max_tokens"] == 7
    assert all(s > 0 for s in seconds) and wall >= max(seconds)


def test_the_reference_engine_computes_only_on_threads_that_end(pair, monkeypatch):
    """libgomp stops spinning once more threads keep OpenMP teams than there are cores: the reference engine's
    team in the main thread beside the batch thread's made every call of the passes slower (a 4-request round
    48 ms against 33 on a 2-core CPU)."""
    seen = decoding_threads(monkeypatch)
    r = _bench(pair, "-n", "8", "--concurrency", "2", "--json")
    assert r.exit_code == 0, r.output
    assert any(t.name == "bench-reference" for t in seen)  # the target alone's outputs
    assert_one_team_at_a_time(seen)


def test_on_own_thread_returns_and_raises_in_the_caller():
    from local_eagle.bench.concurrency import on_own_thread

    assert on_own_thread(lambda: threading.current_thread().name) == "bench-reference"
    with pytest.raises(LocalEagleError, match="boom"):
        on_own_thread(lambda: (_ for _ in ()).throw(LocalEagleError("boom")))

"""Recorded bench rounds replayed on a pair (bench.replay, measure replay): shapes and counts, never speed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from local_eagle.bench import replay
from local_eagle.bench.project import profile_from, projected_ms, projected_speedup
from local_eagle.bench.replay import (
    acceptance_per_position,
    drafter_call_rows,
    read_settings,
    replay_rounds,
    setting_label,
    settings_from,
    split_rows,
    unique_labels,
)
from local_eagle.errors import LocalEagleError
from local_eagle.kit.measure import main as measure

DECIDED = Path(__file__).parents[2] / "drafters" / "results" / "decide-on-rtx4090-8b-q4-gemma3-270m.json"

# a chain of 3 (one round idle, one refusing its last step), a tree of 15, the policy's mix
CHAIN = [[4, 2, 3, 1, 2], [4, 3, 3, 3, 2], [4, 0, 3, 4, 2], [1, 0, 0, 0, 0], [4, 1, 3, 1, 2], [3, 2, 3, 2, 2]]
TREE = [[16, 4, 6, 1, 21], [16, 1, 7, 5, 37], [16, 6, 10, 2, 38]]
AUTO = [[24, 3, 3, 1, 16], [1, 0, 0, 0, 0], [8, 2, 4, 4, 12], [4, 3, 3, 1, 2]]


def _setting(rounds: list[list[int]], draft_max: int, adaptive: bool = False, tree: int | None = None) -> dict:
    tokens = sum(1 + r[1] for r in rounds)
    return {"draft_max": draft_max, "adaptive": adaptive, "tree_nodes": tree, "rounds": rounds,
            "acceptance_length": tokens / len(rounds), "host_ms_per_round": 0.5}  # fmt: skip


SETTINGS = [_setting(AUTO, 8, adaptive=True), _setting(CHAIN, 3), _setting(TREE, 15, tree=15)]
CURVE = {"verify_ms": {"1": 10.0, "16": 11.0, "64": 14.0}, "drafter_ms": {"1": 1.0, "64": 2.0}}


def test_drafter_rows_split_evenly_in_whole_rows_at_least_one_a_call() -> None:
    assert split_rows(21, 5) == [5, 4, 4, 4, 4] and split_rows(2, 2) == [1, 1] and split_rows(7, 1) == [7]
    assert split_rows(1, 3) == [1, 1, 1]  # fewer rows than calls: a call never decodes nothing
    assert split_rows(5, 0) == []
    assert drafter_call_rows((16, 4, 6, 1, 21)) == [1, 5, 4, 4, 4, 4]
    assert drafter_call_rows((4, 2, 3, 0, 2)) == [1, 1, 1]  # no catch-up rows: the first step's one row
    assert drafter_call_rows((1, 0, 0, 0, 0)) == []


def test_per_position_acceptance_for_chains_as_the_engine_counts_it() -> None:
    # position 1 drafted in 5 rounds, accepted in 4; position 2 in 5, 3; position 3 in 4, 1
    assert acceptance_per_position([tuple(r) for r in CHAIN]) == pytest.approx([4 / 5, 3 / 5, 1 / 4])
    assert acceptance_per_position([tuple(r) for r in TREE]) is None
    assert acceptance_per_position([(1, 0, 0, 0, 0)]) is None
    for s, raw in zip(read_settings(DECIDED), json.loads(DECIDED.read_text()), strict=True):
        got = acceptance_per_position(s.rounds)
        if s.tree_nodes is None and not s.adaptive:  # the record's own figures, from its rounds alone
            assert got == pytest.approx(raw["acceptance_per_position"])
        else:
            assert got is None


def test_labels_name_the_setting_and_never_collide() -> None:
    assert [setting_label(8, True, None), setting_label(3, False, None), setting_label(15, False, 15)] == [
        "auto", "chain 3", "tree 15"]  # fmt: skip
    assert unique_labels(["chain 3", "auto", "chain 3"]) == ["chain 3", "auto", "chain 3 #2"]
    assert [s.label for s in read_settings(DECIDED)] == ["auto", "chain 3", "chain 6", "tree 15", "tree 62"]
    assert [s.label for s in settings_from([SETTINGS[1], SETTINGS[1]], "x")] == ["chain 3", "chain 3 #2"]


@pytest.mark.parametrize(
    "raw,match",
    [({"rounds": []}, "expected a non-empty list of bench settings"),
     ([{"draft_max": 3}], r"setting 0\.rounds: expected a non-empty list of rounds"),
     ([{"draft_max": 3, "rounds": [[4, 2, 3]]}], r"setting 0\.rounds\[0\]: expected 5 whole numbers"),
     ([{"draft_max": 3, "rounds": [[4, 4, 3, 1, 2]]}], r"rounds\[0\]: .*accepts at most rows - 1"),
     ([{"rounds": [[1, 0, 0, 0, 0]]}], r"setting 0\.draft_max: expected int"),
     ([{"draft_max": 3, "adaptive": "yes", "rounds": [[1, 0, 0, 0, 0]]}], r"setting 0\.adaptive: expected true")],
)  # fmt: skip
def test_a_bad_settings_list_names_the_setting_and_field(raw: object, match: str) -> None:
    with pytest.raises(LocalEagleError, match=match):
        settings_from(raw, "r.json")


def test_the_projection_is_project_projected_ms_of_the_rounds() -> None:
    rounds = [tuple(r) for r in TREE]
    p = replay.projection(rounds, CURVE, 0.5, measured_tps=100.0, baseline_tps=80.0)
    profile = profile_from(CURVE, "c")
    assert p["ms"] == pytest.approx(projected_ms(rounds, profile, 0.5))
    assert p["speedup"] == pytest.approx(projected_speedup(rounds, profile, 0.5))
    assert p["tokens_per_second"] == pytest.approx(sum(1 + r[1] for r in rounds) / p["ms"] * 1e3)
    assert p["projection_error"]["tokens_per_second"] == pytest.approx(p["tokens_per_second"] / 100.0 - 1)
    assert p["projection_error"]["speedup"] == pytest.approx(p["speedup"] / 1.25 - 1)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory) -> dict[str, str]:
    from local_eagle.bench.pair import make_pair

    return make_pair(tmp_path_factory.mktemp("pair"), tiny=True)


def _check_counts(out: dict, settings: list[dict], max_rounds: int | None = None) -> None:
    assert [s["label"] for s in out["settings"]] == [s.label for s in settings_from(settings, "x")]
    assert out["baseline"]["tokens"] > 0 and "one sequence" in out["note"]
    for got, recorded in zip(out["settings"], settings, strict=True):
        rounds = recorded["rounds"][:max_rounds]
        tokens = sum(1 + r[1] for r in rounds)
        assert got["rounds"] == got["target_calls"] == len(rounds) and not got["truncated"]
        assert got["tokens"] == tokens and got["acceptance_length"] == pytest.approx(tokens / len(rounds))
        assert got["drafter_calls"] == sum(r[2] for r in rounds)
        assert got["seconds"] > 0 and got["speedup"] > 0 and got["projected"]["host_record"]["host_ms"] == 0.5
        assert set(got["projected"]) == {"host_0", "host_record", "host_replay"}
        assert got["projection_error"] == got["projected"]["host_record"]["projection_error"]
        assert got["acceptance_per_position"] == acceptance_per_position([tuple(r) for r in rounds])
    if max_rounds is None:
        assert [s["acceptance_length"] for s in out["settings"]] == pytest.approx(
            [s["acceptance_length"] for s in settings])  # fmt: skip


def test_replay_on_the_tiny_pair_emits_the_recorded_tokens(tiny_pair, monkeypatch) -> None:
    out = replay_rounds(tiny_pair["target"], tiny_pair["drafter"], SETTINGS, prefix=16, threads=1, costs=CURVE)
    _check_counts(out, SETTINGS)
    assert [s["label"] for s in out["settings"]] == ["auto", "chain 3", "tree 15"]
    assert all(s["resets"] == 0 for s in out["settings"])
    monkeypatch.setattr(replay, "CTX_MAX", 48)  # a small context: the replay starts over from the prefix
    long = [_setting(CHAIN * 8, 3), _setting(TREE * 3, 15, tree=15)]
    small = replay_rounds(tiny_pair["target"], tiny_pair["drafter"], long, prefix=16, threads=1, costs=CURVE)
    _check_counts(small, long)
    assert all(s["resets"] > 0 for s in small["settings"])


def test_a_past_deadline_truncates_every_setting(tiny_pair) -> None:
    out = replay_rounds(tiny_pair["target"], tiny_pair["drafter"], SETTINGS, prefix=16, threads=1, deadline=0.0)
    assert out["baseline"]["truncated"] and all(s["truncated"] and s["rounds"] == 0 for s in out["settings"])
    assert all(s["tokens"] == 0 and s["projected"] is None for s in out["settings"])


def test_the_kit_prints_the_replay_as_json(tiny_pair, tmp_path, capsys) -> None:
    rounds = tmp_path / "rounds.json"
    rounds.write_text(json.dumps(SETTINGS))
    args = ["replay", tiny_pair["target"], tiny_pair["drafter"], str(rounds), "--prefix", "16", "--threads", "1"]
    measure([*args, "--max-rounds", "3", "--rows", "1,4,16,24", "--repeats", "1"])  # measures the curve first
    out = json.loads(capsys.readouterr().out)
    _check_counts(out, SETTINGS, max_rounds=3)
    assert out["costs_measured_here"] and set(out["costs"]["verify_ms"]) == {"1", "4", "16", "24"}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(out["costs"]))
    measure([*args, "--costs", str(costs)])
    again = json.loads(capsys.readouterr().out)
    _check_counts(again, SETTINGS)
    assert not again["costs_measured_here"]


@pytest.mark.parametrize(
    "which,text,match",
    [("rounds", "[{\"draft_max\": 3, \"rounds\": [[4, 2]]}]", r"bad\.json: setting 0\.rounds\[0\]: expected 5"),
     ("rounds", "{", r"bad\.json: not a bench rounds file"),
     ("costs", "{\"verify_ms\": {\"1\": 1}}", r"bad\.json: not a cost profile")],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_it(tmp_path, capsys, which: str, text: str, match: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    rounds = bad if which == "rounds" else tmp_path / "rounds.json"
    if which == "costs":
        rounds.write_text(json.dumps(SETTINGS))
    args = ["replay", "t.gguf", "d.gguf", str(rounds)] + (["--costs", str(bad)] if which == "costs" else [])
    with pytest.raises(SystemExit) as e:
        measure(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("measure replay: ") and re.search(match, err)

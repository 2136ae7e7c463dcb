"""`generate` and `bench` as a user runs them, and the pair checks' error messages."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.testing.tiny import TinyTargetSpec, write_tiny_target

runner = CliRunner()


def test_generate_streams_text_and_stats(pair):
    _, target, draft = pair
    r = runner.invoke(
        app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "20", "--temperature", "0",
              "--threads", "1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "PABCDEFGHIJKLMNOPABC" in r.output
    assert "acceptance length" in r.output


def generate_json(pair, *args: str) -> dict:
    """``generate --json`` on the pair, one thread, prompt "hi"; the object it prints."""
    _, target, draft = pair
    r = runner.invoke(
        app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "--json", "--threads", "1", *args]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_generate_json(pair):
    obj = generate_json(pair, "-n", "12", "--temperature", "0", "--draft-max", "3", "--fixed")
    assert obj["text"] == "PABCDEFGHIJK"
    assert len(obj["tokens"]) == 12
    st = obj["stats"]
    assert st["acceptance_length"] > 2 and len(st["acceptance_per_position"]) == 3
    for key in ("target_seconds", "drafter_seconds", "host_seconds", "tokens_per_second", "stop_reason"):
        assert key in st
    assert not st["adaptive"] and sum(st["draft_lengths"]) == st["target_calls"]


def test_generate_is_adaptive_by_default_and_reports_the_draft_lengths_chosen(pair):
    _, target, draft = pair
    r = runner.invoke(
        app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "24", "--temperature", "0",
              "--json", "--threads", "1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output)
    assert obj["text"] == "PABCDEFGHIJKLMNOPABCDEFG"  # the target's own, whatever was drafted
    st = obj["stats"]
    # rounds by tokens drafted: 0..8 in chains (auto: up to 8), up to --tree auto's nodes in a tree
    n = len(st["draft_lengths"])
    assert st["adaptive"] and n >= 9
    assert sum(st["draft_lengths"]) == st["target_calls"] == len(obj["draft_lengths_by_round"])
    assert st["draft_lengths"] == [obj["draft_lengths_by_round"].count(k) for k in range(n)]
    r = runner.invoke(app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "--draft-max", "many"])
    assert_one_line_error(r, "--draft-max must be 'auto' or a number")


def test_bench_table_and_json(pair):
    d, target, draft = pair
    prompts = d / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ["hello", "abc", "ABC xyz"]) + "\n")
    r = runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(prompts), "-n", "32",
              "--draft-max", "2", "--draft-max", "4", "--fixed", "--draft-max", "auto", "--json", "--threads", "1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(row["draft_max"], row["adaptive"]) for row in rows] == [(2, False), (4, False), (8, True)]
    for row in rows:
        assert row["identical"] and row["prompts"] == 3 and row["near_ties"] == row["divergent"] == 0
        assert row["baseline_tps"] > 0 and row["speculative_tps"] > 0
        assert row["ideal_speedup"] > 0 and row["verify_call_ms"] > 0
        assert sum(row["draft_lengths"]) == pytest.approx(1.0)
    assert all(row["acceptance_length"] > 2 for row in rows[:2])
    assert rows[2]["policy"] is not None and len(rows[2]["policy"]["verify_ms"]) == 9
    r = runner.invoke(
        app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(prompts), "-n", "16", "--threads", "1"]
    )
    assert r.exit_code == 0, r.output
    assert "speedup" in r.output and "accept len" in r.output and "draft lengths" in r.output


def assert_one_line_error(r, *needles):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    text = " ".join(r.output.split())
    for n in needles:
        assert n in text, text


def test_missing_model_file(pair, tmp_path):
    r = runner.invoke(app, ["generate", "-m", str(tmp_path / "none.gguf"), "-p", "x"])
    assert_one_line_error(r, "not found")


def test_needs_exactly_one_prompt(pair):
    _, target, _ = pair
    assert_one_line_error(runner.invoke(app, ["generate", "-m", str(target)]), "--prompt")


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (TinyTargetSpec(n_embd=32), "hidden size 64"),
        (TinyTargetSpec(n_layer=3), "out of range"),
        (TinyTargetSpec(extra_tokens=("\u2581",)), "vocabulary"),
    ],
)
def test_drafter_for_another_target_is_refused(pair, tmp_path, spec, needle):
    _, _, draft = pair
    other = write_tiny_target(tmp_path / "other.gguf", spec)
    r = runner.invoke(app, ["generate", "-m", str(other), "-d", str(draft), "-p", "x", "-n", "2"])
    assert_one_line_error(r, needle)


def test_bad_prompts_file(pair, tmp_path):
    _, target, draft = pair
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "ok"}\n{oops\n')
    r = runner.invoke(app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(bad)])
    assert_one_line_error(r, "p.jsonl:2", "not valid JSON")


def test_generate_and_fit_from_a_modelfile(pair, tmp_path):
    d, target, draft = pair
    mf = tmp_path / "Modelfile"
    mf.write_text(
        f'FROM {target}\nDRAFT {draft}\nTEMPLATE """Q: {{{{ .Prompt }}}}"""\n'
        "PARAMETER temperature 0\nPARAMETER num_predict 30\nPARAMETER stop JK\nPARAMETER draft_num_predict 3\n"
        "PARAMETER num_ctx 512\n"
    )
    r = runner.invoke(app, ["generate", "-f", str(mf), "-p", "hi", "--json", "--threads", "1", "--tree", "off"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output)
    # the template ends in the prompt's last letter 'i' -> outside the cycle -> 'P' first, stop before JK
    assert obj["text"] == "PABCDEFGHI"
    assert obj["stats"]["stop_reason"] == "stop"
    assert len(obj["stats"]["acceptance_per_position"]) == 3  # the Modelfile's draft_num_predict bounds the chains
    # a flag overrides the Modelfile
    r = runner.invoke(app, ["generate", "-f", str(mf), "-p", "hi", "-n", "5", "--json", "--threads", "1"])
    assert json.loads(r.output)["text"] == "PABCD"
    r = runner.invoke(app, ["fit", "-f", str(mf), "--vram-gb", "24", "--json"])
    assert r.exit_code == 0, r.output


def test_a_negative_seed_samples_at_random(pair):
    assert len(generate_json(pair, "-n", "8", "--temperature", "0.7", "--seed", "-1")["tokens"]) == 8


def test_threads_past_the_cores_run_and_past_the_table_are_refused(pair):
    _, target, draft = pair
    args = ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "5", "--temperature", "0", "--json"]
    r = runner.invoke(app, [*args, "--threads", "500"])  # clamped to the cores present
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["text"] == "PABCD"
    assert_one_line_error(runner.invoke(app, [*args, "--threads", "100000"]), "--threads:", "between 0 and 512")


@pytest.mark.parametrize("command", ["generate", "bench", "train"])
def test_input_files_that_are_not_utf8_are_named(pair, tmp_path, command):
    _, target, draft = pair
    bad = tmp_path / ("prompt.txt" if command == "generate" else "prompts.jsonl")
    bad.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    args = {
        "generate": ["generate", "-m", str(target), "--prompt-file", str(bad)],
        "bench": ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(bad)],
        "train": ["train", "--target", str(target), "--prompts", str(bad), "--out", str(tmp_path / "run")],
    }[command]
    what = "prompt file" if command == "generate" else "prompts file"
    assert_one_line_error(runner.invoke(app, args), f"{bad.name}:2: the {what} is not UTF-8 text (byte 32)")


def test_bench_limit_must_leave_a_prompt(pair, tmp_path):
    _, target, draft = pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    r = runner.invoke(app, ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(prompts), "--limit", "0"])
    assert_one_line_error(r, "--limit must be at least 1 (prompts to use), got 0")

"""``pull``, ``create`` with ``FROM hf.co/...`` and ``DRAFT hf.co/...``, ``-m`` / ``-d`` names, on the local Hub."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hubserver import DRAFTER_REPO, GATED_REPO, TARGET_REPO, FakeHub, TinyRepos
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.testing.ollama_store import write_model

runner = CliRunner()
GREEDY = ["-p", "hi", "--raw", "--temperature", "0", "-n", "12", "--stop", "Q", "--threads", "1", "--json"]


def one_line_error(r) -> str:
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def test_pull_prints_the_file(hub: FakeHub, tiny_repos: TinyRepos) -> None:
    r = runner.invoke(app, ["pull", f"hf.co/{TARGET_REPO}:Q8_0"])
    assert r.exit_code == 0, r.output
    path = Path(r.stdout.strip().splitlines()[-1])
    assert path.name == "cycle-Q8_0.gguf" and path.read_bytes() == tiny_repos.other
    assert f"pulled hf.co/{TARGET_REPO}:Q8_0: GGUF" in r.output


def test_pull_errors_are_one_line(hub: FakeHub) -> None:
    line = one_line_error(runner.invoke(app, ["pull", "hf.co/nobody/nothing"]))
    assert "no such repository" in line
    line = one_line_error(runner.invoke(app, ["pull", f"hf.co/{GATED_REPO}"]))
    assert "hf auth login" in line and f"{hub.endpoint}/{GATED_REPO}" in line
    line = one_line_error(runner.invoke(app, ["pull", f"hf.co/{TARGET_REPO}:Q6_K"]))
    assert "the repository has: Q2_K, Q4_K_M, Q8_0" in line
    assert "pull takes a Hugging Face name" in one_line_error(runner.invoke(app, ["pull", "llama3.1:8b"]))


def test_create_from_and_draft_on_the_hub(
    hub: FakeHub, tiny_repos: TinyRepos, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the target's download is cut short once and resumes (small chunks: huggingface_hub keeps whole ones)
    monkeypatch.setattr("huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    hub.cut["cycle-Q4_K_M.gguf"] = 4 * 64 * 1024
    mf = tmp_path / "Modelfile"
    mf.write_text(
        f"FROM hf.co/{TARGET_REPO}\nDRAFT hf.co/{DRAFTER_REPO}\nPARAMETER temperature 0\nPARAMETER num_predict 12\n"
        'PARAMETER stop "Q"\nPARAMETER num_thread 1\nTEMPLATE {{ .Prompt }}\n'
    )
    r = runner.invoke(app, ["create", "hubcyc", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    assert "success: created hubcyc:latest" in r.output and "cycle-Q4_K_M.gguf" in r.output
    sha = hashlib.sha256(tiny_repos.target).hexdigest()
    assert [r.range is not None for r in hub.seen("cdn", "GET") if r.path.endswith(sha)] == [False, True]
    shown = runner.invoke(app, ["show", "hubcyc", "--modelfile"]).stdout
    assert "cycle-Q4_K_M.gguf" in shown and "DRAFT " in shown
    r = runner.invoke(app, ["generate", "-m", "hubcyc", "-p", "hi", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["text"] == "PABCDEFGHIJK" and any(got["draft_lengths_by_round"])
    # a second create converts nothing and downloads nothing
    n = len(hub.seen("cdn", "GET"))
    assert runner.invoke(app, ["create", "hubcyc2", "-f", str(mf)]).exit_code == 0
    assert len(hub.seen("cdn", "GET")) == n
    drafters = Path(os.environ["LOCAL_EAGLE_MODELS"]) / "drafters"
    assert len(list(drafters.glob("*.gguf"))) == 1  # converted once, kept in the store's cache


def test_flag_errors_are_one_line(hub: FakeHub) -> None:
    line = one_line_error(runner.invoke(app, ["generate", "-m", "hf.co/nobody/nothing", "-p", "hi"]))
    assert line == f"error: hf.co/nobody/nothing: no such repository ({hub.endpoint}/nobody/nothing)"
    args = ["generate", "-m", f"hf.co/{TARGET_REPO}", "-d", f"hf.co/{GATED_REPO}", "-p", "hi"]
    line = one_line_error(runner.invoke(app, args))
    assert line.startswith(f"error: --draft hf.co/{GATED_REPO}: access denied (401)")


def test_model_and_draft_flags_take_hub_names(hub: FakeHub) -> None:
    r = runner.invoke(app, ["generate", "-m", f"hf.co/{TARGET_REPO}", "-d", f"hf.co/{DRAFTER_REPO}", *GREEDY])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["text"] == "PABCDEFGHIJK" and any(got["draft_lengths_by_round"])


def test_a_checkpoint_as_from_is_one_line(hub: FakeHub, tmp_path: Path) -> None:
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM hf.co/{DRAFTER_REPO}\n")
    line = one_line_error(runner.invoke(app, ["create", "bad", "-f", str(mf)]))
    assert f"FROM hf.co/{DRAFTER_REPO} is a drafter checkpoint, not a GGUF model" in line
    mf.write_text("FROM hf.co/nobody/nothing\n")
    line = one_line_error(runner.invoke(app, ["create", "bad", "-f", str(mf)]))
    assert line.endswith(f"Modelfile:1: FROM hf.co/nobody/nothing: no such repository ({hub.endpoint}/nobody/nothing)")


def test_a_name_ollama_pulled_is_read_from_its_store(hub: FakeHub, tiny_repos: TinyRepos, tmp_path: Path,
                                                     monkeypatch) -> None:  # fmt: skip
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    gguf = tmp_path / "pulled-by-ollama.gguf"
    gguf.write_bytes(tiny_repos.target)
    write_model(root, "cycle-GGUF", gguf, host="hf.co", namespace="tiny", tag="Q4_K_M", template="{{ .Prompt }}")
    r = runner.invoke(app, ["modelfile", "show", "-f", str(_modelfile(tmp_path, f"FROM hf.co/{TARGET_REPO}:Q4_K_M"))])
    assert r.exit_code == 0, r.output
    assert "sha256-" in r.stdout and f"# FROM hf.co/{TARGET_REPO}:Q4_K_M" in r.stdout
    assert hub.requests == []  # Ollama's copy, as `ollama create` would use it: nothing fetched


def _modelfile(d: Path, text: str) -> Path:
    mf = d / "Modelfile"
    mf.write_text(text + "\n")
    return mf

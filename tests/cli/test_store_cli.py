"""``create``, ``list``, ``show``, ``cp``, ``rm`` and ``run`` as a user types them, and names given to ``generate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.testing.ollama_store import write_model

runner = CliRunner()


@pytest.fixture
def created(pair, tmp_path: Path) -> Path:
    """The cycle pair created as ``cyc`` with a Modelfile that pins greedy decoding; returns the Modelfile."""
    _, target, draft = pair
    mf = tmp_path / "Modelfile"
    mf.write_text(
        f'FROM {target}\nDRAFT {draft}\nPARAMETER temperature 0\nPARAMETER num_predict 12\nPARAMETER stop "Q"\n'
        "PARAMETER num_thread 1\nSYSTEM be brief\nTEMPLATE {{ .Prompt }}\n"
    )
    r = runner.invoke(app, ["create", "cyc", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    assert "success: created cyc:latest" in r.output
    return mf


def test_list_and_ls(created: Path) -> None:
    for cmd in ("list", "ls"):
        r = runner.invoke(app, [cmd])
        assert r.exit_code == 0, r.output
        assert "cyc:latest" in r.stdout and "NAME" in r.stdout


def test_show_summary_and_parts(created: Path, pair) -> None:
    r = runner.invoke(app, ["show", "cyc"])
    assert r.exit_code == 0, r.output
    for needle in ("architecture", "llama", "context length", "quantization", "F32", "eagle3", "EAGLE version",
                   "3.1", "target layers", "temperature"):  # fmt: skip
        assert needle in r.stdout, needle
    r = runner.invoke(app, ["show", "cyc", "--modelfile"])
    assert r.exit_code == 0 and "# FROM cyc" in r.stdout and f"FROM {pair[1]}" in r.stdout
    assert f"DRAFT {pair[2]}" in r.stdout
    assert runner.invoke(app, ["show", "cyc", "--template"]).stdout == "{{ .Prompt }}\n"
    assert runner.invoke(app, ["show", "cyc", "--system"]).stdout == "be brief\n"
    params = runner.invoke(app, ["show", "cyc", "--parameters"]).stdout
    assert 'stop                           "Q"' in params and "num_predict" in params


def test_cp_and_rm(created: Path) -> None:
    assert runner.invoke(app, ["cp", "cyc", "cyc2"]).exit_code == 0
    r = runner.invoke(app, ["rm", "cyc"])
    assert r.exit_code == 0 and "deleted 'cyc:latest'" in r.stdout
    listed = runner.invoke(app, ["list"]).stdout
    assert "cyc2:latest" in listed and "cyc:latest" not in listed
    r = runner.invoke(app, ["rm", "cyc"])
    assert r.exit_code == 2 and "not found" in r.output


def test_a_bad_name_is_one_line(created: Path) -> None:
    r = runner.invoke(app, ["create", "bad name", "-f", str(created)])
    assert r.exit_code == 2 and "not a valid Ollama model name" in r.output


def test_generate_by_name_equals_the_modelfile(created: Path) -> None:
    args = ["-p", "hi", "--json"]
    by_file = runner.invoke(app, ["generate", "-f", str(created), *args])
    by_name = runner.invoke(app, ["generate", "-m", "cyc", *args])
    assert by_file.exit_code == 0 and by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.stdout)["text"] == json.loads(by_file.stdout)["text"] == "PABCDEFGHIJK"


def test_run_with_a_prompt_answers_once(created: Path) -> None:
    r = runner.invoke(app, ["run", "cyc", "hi"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().endswith("PABCDEFGHIJK")


def test_run_a_model_of_ollamas_store(pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    write_model(root, "cycle", pair[1], tag="tiny", template="{{ .Prompt }}",
                params={"temperature": 0, "num_predict": 5, "num_thread": 1})  # fmt: skip
    r = runner.invoke(app, ["run", "cycle:tiny", "hi"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().endswith("PABCD")


def test_a_moved_gguf_is_one_line(pair, tmp_path: Path) -> None:
    gguf = tmp_path / "t.gguf"
    gguf.write_bytes(pair[1].read_bytes())
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {gguf}\n")
    assert runner.invoke(app, ["create", "moved", "-f", str(mf)]).exit_code == 0
    gguf.unlink()
    r = runner.invoke(app, ["run", "moved", "hi"])
    assert r.exit_code == 2 and f"its model GGUF {gguf} has moved or been deleted" in r.output

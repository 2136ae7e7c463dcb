"""``create``, ``list``, ``show``, ``cp``, ``rm`` and ``run`` as a user types them, and names given to ``generate``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.ollama.store import MODEL, TEMPLATE
from local_eagle.testing.ollama_store import plant_blob, run_bounded, write_model

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


def test_from_a_name_of_local_eagles_store(created: Path, pair, tmp_path: Path) -> None:
    """Issue 46: ``show --modelfile`` suggests ``FROM cyc``; ``create``, ``modelfile render`` and ``modelfile
    show`` take that name, inheriting the GGUF, the drafter, the template and the parameters, as a FROM of
    Ollama's store does."""
    mf = tmp_path / "Derived"
    mf.write_text("FROM cyc\nPARAMETER num_predict 3\n")
    r = runner.invoke(app, ["create", "derived", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    shown = runner.invoke(app, ["show", "derived", "--modelfile"]).stdout
    assert f"FROM {pair[1]}" in shown and f"DRAFT {pair[2]}" in shown and "TEMPLATE {{ .Prompt }}" in shown
    assert "PARAMETER num_predict 3" in shown and "PARAMETER temperature 0" in shown
    convo = tmp_path / "convo.json"
    convo.write_text('[{"role": "user", "content": "hi"}]')
    r = runner.invoke(app, ["modelfile", "render", "-f", str(mf), "--messages", str(convo)])
    assert r.exit_code == 0 and r.stdout.startswith("hi"), r.output
    r = runner.invoke(app, ["modelfile", "show", "-f", str(mf)])
    assert r.exit_code == 0 and f"FROM {pair[1]}" in r.stdout, r.output


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


# --- planted blobs, damaged entries and names that look like markup: one line each -----------------


def invoke(args: list[str]):
    return run_bounded(lambda: runner.invoke(app, args))


def one_line_error(r) -> str:
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


@pytest.fixture
def planted_store(tmp_path: Path, target_gguf: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def make(kind: str, media: str = TEMPLATE) -> Path:
        target = {"fifo": fifo, "zero": Path("/dev/zero"), "passwd": Path("/etc/passwd")}[kind]
        if not target.exists():
            pytest.skip(f"{target} does not exist here")
        gguf = None if media == MODEL else target_gguf
        write_model(root, "planted", gguf, layers=[plant_blob(root, target, media)])
        return target

    return make


@pytest.mark.parametrize("media", [TEMPLATE, MODEL])
@pytest.mark.parametrize("kind", ["fifo", "zero", "passwd"])
def test_planted_blobs_are_one_line_in_every_command(planted_store, tmp_path: Path, kind: str, media: str) -> None:
    target = planted_store(kind, media)
    mf = tmp_path / "FromPlanted"
    mf.write_text("FROM planted\n")
    for args in (["show", "planted"], ["show", "planted", "--template"], ["create", "copy", "-f", str(mf)],
                 ["run", "planted", "hi"]):  # fmt: skip
        line = one_line_error(invoke(args))
        assert f"links to {target}, outside" in line and "root:x" not in line, (args, line)


def test_damaged_entries_are_warnings_in_list_and_removable(tmp_path: Path, target_gguf: Path) -> None:
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target_gguf}\n")
    for name in ("good", "deep", "typed"):
        assert runner.invoke(app, ["create", name, "-f", str(mf)]).exit_code == 0
    root = Path(os.environ["LOCAL_EAGLE_MODELS"]) / "manifests" / "registry.ollama.ai" / "library"
    (root / "deep" / "latest").write_text("[" * 100_000 + "]" * 100_000)
    typed = json.loads((root / "typed" / "latest").read_text())
    typed["files"][0]["path"], typed["created_at"] = 7, 5
    (root / "typed" / "latest").write_text(json.dumps(typed))
    r = invoke(["list"])
    assert r.exit_code == 0 and "good:latest" in r.stdout and "deep" not in r.stdout, r.output
    warnings = [x for x in r.output.splitlines() if x.startswith("warning: ")]
    assert len(warnings) == 2 and "nested more than 64 deep" in r.output and "created_at must be" in r.output
    for args in (["show", "deep"], ["show", "typed", "--template"], ["cp", "typed", "t2"], ["run", "deep", "hi"]):
        assert "not a readable local-eagle model entry" in one_line_error(invoke(args)), args
    r = invoke(["rm", "deep", "typed"])
    assert r.exit_code == 0 and "deleted 'deep:latest'" in r.stdout and "deleted 'typed:latest'" in r.stdout
    r = invoke(["list"])
    assert "good:latest" in r.stdout and "warning" not in r.output


def test_names_and_text_print_as_they_are(tmp_path: Path, target_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rich would read ``:b:`` as an emoji code and ``[bold]`` as markup; user text must come out as typed."""
    folder = tmp_path / "[bold]models :b:"
    folder.mkdir()
    gguf = folder / "m.gguf"
    gguf.write_bytes(target_gguf.read_bytes())
    mf = tmp_path / "Modelfile"
    mf.write_text(f'FROM {gguf}\nSYSTEM "[bold]be brief :b:"\nPARAMETER stop "[red]x:b:"\n')
    r = runner.invoke(app, ["create", "x:b:/ns/m:t", "-f", str(mf)])
    assert r.exit_code == 0 and f"using model {gguf}" in r.output and "created x:b:/ns/m:t" in r.output, r.output
    assert "x:b:/ns/m:t" in runner.invoke(app, ["list"]).stdout
    shown = runner.invoke(app, ["show", "x:b:/ns/m:t"]).stdout
    assert "[bold]be brief :b:" in shown and "[red]x:b:" in shown
    assert '"[red]x:b:"' in runner.invoke(app, ["show", "x:b:/ns/m:t", "--parameters"]).stdout
    assert "copied 'x:b:/ns/m:t' to 'y:b:/ns/m:t'" in runner.invoke(app, ["cp", "x:b:/ns/m:t", "y:b:/ns/m:t"]).stdout
    assert "deleted 'y:b:/ns/m:t'" in runner.invoke(app, ["rm", "y:b:/ns/m:t"]).stdout
    assert "'a:b:c' is not a valid Ollama model name" in one_line_error(
        runner.invoke(app, ["cp", "x:b:/ns/m:t", "a:b:c"])
    )
    assert "'[bold]x'" in one_line_error(runner.invoke(app, ["show", "[bold]x"]))
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    write_model(root, "odd", target_gguf, params={"[bold]odd:b:": 1})
    (tmp_path / "FromOdd").write_text("FROM odd\n")
    r = runner.invoke(app, ["create", "odd2", "-f", str(tmp_path / "FromOdd")])
    assert r.exit_code == 0 and "warning: " in r.output and "parameter [bold]odd:b: (in" in r.output, r.output

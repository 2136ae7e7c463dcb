"""A DFlash block drafter named in a Modelfile's DRAFT (its GGUF or its checkpoint folder): ``create`` takes it,
``show``, ``/api/show``, ``inspect`` and ``doctor --draft`` name its family, and running it is refused in one line
until local-eagle drafts with block drafters. The EAGLE drafter of the cycle pair is named as EAGLE 3.1 beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from converters.dflash_gguf import convert_dflash
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.ollama.modelfile import parse
from local_eagle.testing.tiny_dflash import TinyDFlashSpec, write_dflash_checkpoint

runner = CliRunner()
SPEC = TinyDFlashSpec()


@pytest.fixture(scope="module")
def dflash(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> tuple[Path, Path]:
    """(checkpoint folder, its GGUF converted against the tiny target)."""
    d = tmp_path_factory.mktemp("dflash-draft")
    ckpt = write_dflash_checkpoint(d / "ckpt", SPEC)
    return ckpt, convert_dflash(ckpt, target_gguf, d / "tiny-dflash.gguf", outtype="f16").outfile


def _text(output: str) -> str:
    return " ".join(output.split())


def test_modelfile_takes_a_dflash_gguf_and_show_names_it(dflash, target_gguf: Path, tmp_path: Path) -> None:
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target_gguf}\nDRAFT {dflash[1]}\n")
    assert parse(mf.read_text(), base_dir=tmp_path).draft == dflash[1]
    r = runner.invoke(app, ["create", "dfl", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", "dfl"])
    assert r.exit_code == 0, r.output
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in r.stdout.splitlines() if len(line.split()) > 1}
    assert "dflash" in r.stdout and "DFlash" in r.stdout
    assert rows["family"] == "DFlash" and rows["block"] == "size           4"
    assert "EAGLE version" not in r.stdout
    assert "not yet" not in _text(r.stdout)  # a DFlash drafter drafts
    assert "target layers        2, 4, 5" in r.stdout  # the checkpoint's 1, 3, 4: llama.cpp layer inputs


def test_modelfile_takes_a_dflash_checkpoint_folder(dflash, target_gguf: Path, tmp_path: Path) -> None:
    """``create`` converts the folder with the DFlash converter (cached as any DRAFT checkpoint) and stores the GGUF."""
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target_gguf}\nDRAFT {dflash[0]}\n")
    r = runner.invoke(app, ["create", "dflck", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    shown = runner.invoke(app, ["show", "dflck", "--modelfile"]).stdout
    draft = Path(next(line for line in shown.splitlines() if line.startswith("DRAFT ")).split(" ", 1)[1])
    assert draft.suffix == ".gguf" and draft.is_file()
    from local_eagle.gguf import read_model_info

    assert read_model_info(draft).family == "dflash"
    assert "DFlash" in runner.invoke(app, ["show", "dflck"]).stdout


def test_api_show_names_the_family(dflash, pair, target_gguf: Path, tmp_path: Path) -> None:
    from local_eagle.serve.store_api import _show

    m = parse(f"FROM {target_gguf}\nDRAFT {dflash[1]}\n", base_dir=tmp_path)
    info = _show(None, "dfl", m)["model_info"]  # type: ignore[arg-type]
    assert info["local_eagle.draft_family"] == "DFlash" and info["local_eagle.block_size"] == SPEC.block_size
    assert info["local_eagle.drafts"] is True and info["local_eagle.eagle_version"] is None
    assert info["local_eagle.target_layers"] == [2, 4, 5]
    _, target, draft = pair
    info = _show(None, "cyc", parse(f"FROM {target}\nDRAFT {draft}\n", base_dir=tmp_path))["model_info"]  # type: ignore[arg-type]
    assert info["local_eagle.draft_family"] == "EAGLE 3.1" and info["local_eagle.eagle_version"] == "3.1"
    assert "local_eagle.block_size" not in info


def test_inspect_and_doctor_name_the_family(dflash, pair) -> None:
    from local_eagle.doctor import OK, WARN, drafter_check

    r = runner.invoke(app, ["inspect", str(dflash[1])])
    assert r.exit_code == 0 and "DFlash drafter" in r.output and "block size" in r.output
    assert json.loads(runner.invoke(app, ["inspect", str(dflash[1]), "--json"]).output)["family"] == "dflash"
    c = drafter_check(dflash[1])
    assert c.status == OK and "DFlash block drafter (dflash), block of 4" in c.detail
    assert "local-eagle drafts with it, one block a round" in c.detail
    c = drafter_check(pair[2])
    assert c.status == OK and c.detail.startswith("EAGLE 3.1 drafter (eagle3)")
    assert drafter_check(pair[1]).status == WARN  # a target without an MTP head


def test_doctor_names_an_mtp_head(tmp_path: Path) -> None:
    from local_eagle.doctor import OK, drafter_check
    from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_tiny_glm4moe_mtp

    target = write_tiny_glm4moe_mtp(tmp_path / "glm.gguf", TinyGlm4MoeSpec())
    c = drafter_check(target)
    assert c.status == OK and "own MTP head" in c.detail


def test_a_dflash_drafter_is_not_read_as_an_eagle_one(dflash) -> None:
    """``read_spec`` reads EAGLE drafters; the engine opens a DFlash one itself (``runtime.dflash``)."""
    from local_eagle.runtime.drafter import read_spec

    with pytest.raises(LocalEagleError) as e:
        read_spec(dflash[1])
    msg = str(e.value)
    assert str(dflash[1]) in msg and "block drafter, not an EAGLE 3 / 3.1 drafter" in msg and "\n" not in msg


def test_generating_and_running_with_a_dflash_draft(dflash, target_gguf: Path, tmp_path: Path) -> None:
    """End to end: ``generate --draft`` with the DFlash GGUF drafts blocks, and so does ``run`` of a model whose
    DRAFT names it; a DSpark drafter drafts too, the target alone's text, and so does a DFlash2 drafter (greedy), whose
    sampling is refused in one line, no traceback."""
    pytest.importorskip("llama_cpp")
    base = ["generate", "-m", str(target_gguf), "-p", "hi", "-n", "6", "--ctx", "256", "--temperature", "0",
            "--threads", "1", "--json"]
    alone = runner.invoke(app, base)
    r = runner.invoke(app, [*base, "--draft", str(dflash[1])])
    assert r.exit_code == 0 and alone.exit_code == 0, r.output
    assert json.loads(r.output)["text"] == json.loads(alone.output)["text"]
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target_gguf}\nDRAFT {dflash[1]}\nPARAMETER num_ctx 256\nPARAMETER num_predict 2\n")
    assert runner.invoke(app, ["create", "dflrun", "-f", str(mf)]).exit_code == 0
    r = runner.invoke(app, ["run", "dflrun", "hi"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    from converters.dflash_gguf import convert_dflash
    from local_eagle.testing.tiny_dflash import TinyDFlash2Spec, TinyDSparkSpec

    ckpt = write_dflash_checkpoint(tmp_path / "dspark", TinyDSparkSpec())
    dspark = convert_dflash(ckpt, target_gguf, tmp_path / "dspark.gguf").outfile
    r = runner.invoke(app, [*base, "--draft", str(dspark)])
    assert r.exit_code == 0 and json.loads(r.output)["text"] == json.loads(alone.output)["text"], r.output
    ckpt = write_dflash_checkpoint(tmp_path / "dflash2", TinyDFlash2Spec())
    dflash2 = convert_dflash(ckpt, target_gguf, tmp_path / "dflash2.gguf").outfile
    r = runner.invoke(app, [*base, "--draft", str(dflash2)])
    assert r.exit_code == 0 and json.loads(r.output)["text"] == json.loads(alone.output)["text"], r.output
    r = runner.invoke(app, ["generate", "-m", str(target_gguf), "--draft", str(dflash2), "-p", "hi", "-n", "2",
                            "--temperature", "0.8"])  # fmt: skip
    assert r.exit_code != 0 and "a DFlash2 drafter" in _text(r.output) and "Traceback" not in r.output

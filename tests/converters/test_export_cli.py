"""``local-eagle export`` on the command line: the result in one line (or JSON), a bad input in one line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from converters import convert, read_checkpoint
from local_eagle.cli.app import app


def test_export_command(target_gguf, checkpoint_factory, tmp_path):
    _, ckpt = checkpoint_factory(eagle31=True, draft_vocab=128)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile
    r = CliRunner().invoke(app, ["export", str(g), "-o", str(tmp_path / "out"), "--format", "eagle3", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["format"] == "eagle3" and res["eagle_version"] == "3.1" and res["draft_vocab_size"] == 128
    assert read_checkpoint(tmp_path / "out").format == "eagle3"
    r = CliRunner().invoke(app, ["export", str(g), "-o", str(tmp_path / "spec")])
    assert r.exit_code == 0, r.output
    assert "EAGLE 3.1 drafter as a checkpoint in the speculators format" in " ".join(r.output.split())


def test_export_refuses_a_target_in_one_line(target_gguf, tmp_path):
    r = CliRunner().invoke(app, ["export", str(target_gguf), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    assert "expected an eagle3 drafter GGUF" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()

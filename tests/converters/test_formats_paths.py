"""A weight index names shard files beside it: a ``weight_map`` entry that is absolute or climbs out with ``..``
is refused, not read, so ``convert`` cannot be pointed at any file the user can read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import converters.formats as formats
from converters.formats import read_checkpoint
from local_eagle.errors import CheckpointError


@pytest.fixture
def sharded(checkpoint_factory, tmp_path: Path) -> tuple[Path, Path]:
    """A sharded checkpoint in ``tmp_path/ckpt...`` and a valid copy of its first shard outside it."""
    _, d = checkpoint_factory(weights="sharded", draft_vocab=128)
    idx = d / "model.safetensors.index.json"
    first = sorted(set(json.loads(idx.read_text())["weight_map"].values()))[0]
    outside = tmp_path / "elsewhere" / "outside.safetensors"
    outside.parent.mkdir()
    shutil.copy(d / first, outside)
    return d, outside


def point_at(d: Path, target: str) -> None:
    idx = d / "model.safetensors.index.json"
    index = json.loads(idx.read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    index["weight_map"] = {k: (target if v == first else v) for k, v in index["weight_map"].items()}
    idx.write_text(json.dumps(index))


def escapes(d: Path, outside: Path) -> list[str]:
    return [str(outside), "../elsewhere/outside.safetensors", f"sub/../../{outside.parent.name}/outside.safetensors"]


@pytest.mark.parametrize("case", [0, 1, 2], ids=["absolute", "dotdot", "down-up"])
def test_a_weight_map_that_leaves_the_checkpoint_is_not_read(sharded, monkeypatch, case):
    d, outside = sharded
    shard = escapes(d, outside)[case]
    point_at(d, shard)
    opened: list[Path] = []
    real = formats._load_safetensors
    monkeypatch.setattr(formats, "_load_safetensors", lambda p: opened.append(Path(p)) or real(p))
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(d)
    msg = str(e.value)
    assert "\n" not in msg and "model.safetensors.index.json" in msg and repr(shard) in msg, msg
    assert "outside" in msg and "expected a shard file beside the index" in msg, msg
    assert not any(p.resolve() == outside.resolve() for p in opened)


@pytest.mark.parametrize("value", [5, None, "", "a\x00b"])
def test_a_weight_map_value_that_is_no_file_name_is_one_line(sharded, value):
    d, _ = sharded
    idx = d / "model.safetensors.index.json"
    idx.write_text(json.dumps({"weight_map": {"a.weight": value}}))
    with pytest.raises(CheckpointError, match="weight_map"):
        read_checkpoint(d)


def test_convert_says_it_in_one_line(sharded, target_gguf, tmp_path):
    from local_eagle.cli.app import app

    d, outside = sharded
    point_at(d, "../elsewhere/outside.safetensors")
    out = tmp_path / "o.gguf"
    r = CliRunner().invoke(app, ["convert", str(d), "--target", str(target_gguf), "--outfile", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "a path outside" in " ".join(r.output.split()), r.output
    assert not out.exists()

"""Training states are data, never code: ``--init-from`` and ``--resume`` read tensors and plain values only.

A state is a pickle; unpickling a hostile one runs whatever its ``__reduce__`` names. These tests plant
such files and check that nothing runs, the CLI says so in one line naming the file, and that the
states local-eagle itself writes (today's and the earlier numpy-carrying ones) still load.
"""

from __future__ import annotations

import os
import pathlib
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.testing.tiny_pair import training_inputs

runner = CliRunner()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return training_inputs(tmp_path_factory.mktemp("train-state"), 8)


def run_train(setup, out: Path, *extra: str):
    _, target, prompts = setup
    return runner.invoke(
        app, ["train", "--target", str(target), "--prompts", str(prompts), "--out", str(out), "--draft-vocab", "64",
              "--epochs", "1", "--max-tokens-per-sample", "24", "--target-layers", "1,3,4", "--threads", "1", *extra],
    )  # fmt: skip


class Touch:
    """Unpickling this creates ``marker``: what a hostile state would do with ``os.system`` or worse."""

    def __init__(self, marker: Path, how: str) -> None:
        self.marker, self.how = marker, how

    def __reduce__(self):
        if self.how == "system":
            return (os.system, (f"touch {self.marker}",))
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def plant(path: Path, marker: Path, how: str) -> Path:
    """A file shaped like a training state whose loading would create ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"model": Touch(marker, how), "vocab_ids": [1, 2], "config": {"arch": "eagle3.1"}}
    if how == "raw-pickle":
        with path.open("wb") as f:
            pickle.dump(state, f)
    else:
        import torch

        torch.save(state, path)
    return path


HOW = ["system", "path-touch", "raw-pickle"]


def one_line_refusal(r, path: Path) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output, r.output
    text = " ".join(r.output.split())
    assert "error:" in text and str(path) in text, text
    assert "tensors and plain values" in text, text
    return text


@pytest.mark.parametrize("how", HOW)
def test_planted_pickle_in_init_from_does_not_run(setup, tmp_path, how):
    marker = tmp_path / "pwned"
    state = plant(tmp_path / "evil" / "train-state.pt", marker, how)
    r = run_train(setup, tmp_path / "o", "--init-from", str(tmp_path / "evil"))
    assert not marker.exists()
    one_line_refusal(r, state)
    assert not (tmp_path / "o" / "data").exists()  # refused before the capture


@pytest.mark.parametrize("how", HOW)
def test_planted_pickle_in_resume_does_not_run(setup, tmp_path, how):
    marker = tmp_path / "pwned"
    state = plant(tmp_path / "o" / "train-state.pt", marker, how)
    r = run_train(setup, tmp_path / "o", "--resume")
    assert not marker.exists()
    one_line_refusal(r, state)
    assert not (tmp_path / "o" / "data").exists()
    assert state.exists()  # the refused file is left as it was, not overwritten


def test_not_a_state_is_one_line(setup, tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a pickle at all")
    r = run_train(setup, tmp_path / "o", "--init-from", str(junk))
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    text = " ".join(r.output.split())
    assert f"--init-from {junk}: not a local-eagle training state" in text, text


def test_written_state_is_tensors_and_plain_values(setup, tmp_path):
    import torch

    assert run_train(setup, tmp_path / "run").exit_code == 0
    st = torch.load(tmp_path / "run" / "train-state.pt", weights_only=True)
    assert isinstance(st["vocab_ids"], torch.Tensor) and st["config"]["arch"] == "eagle3.1"


def test_earlier_numpy_state_still_loads(setup, tmp_path):
    """States written before this change held ``vocab_ids`` as a numpy array; they warm-start and resume."""
    import torch

    assert run_train(setup, tmp_path / "old").exit_code == 0
    path = tmp_path / "old" / "train-state.pt"
    st = torch.load(path, weights_only=True)
    st["vocab_ids"] = st["vocab_ids"].numpy()
    st.pop("format", None)
    torch.save(st, path)
    r = run_train(setup, tmp_path / "warm", "--init-from", str(tmp_path / "old"))
    assert r.exit_code == 0, r.output
    r = run_train(setup, tmp_path / "old", "--resume", "--epochs", "2")
    assert r.exit_code == 0, r.output

"""The model pair the CLI tests run: the tiny cycle target and its EAGLE 3.1 drafter, built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters import convert, write_checkpoint
from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(folder, target, drafter): the target writes the letters P, A, B, ... P, A, ... and the drafter
    predicts them, so greedy outputs and acceptance are known in advance. Tests must not change them."""
    d = tmp_path_factory.mktemp("cli-pair")
    target = write_cycle_target(d / "target.gguf")
    m = make_cycle_drafter(True)
    draft = convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), target, d / "draft.gguf").outfile
    return d, target, draft

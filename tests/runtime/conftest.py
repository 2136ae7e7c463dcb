"""Fixtures the runtime tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sampling_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, drafter) for the sampling tests: a blurred cycle the drafter gets right often, not always."""
    from converters import convert, write_checkpoint
    from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

    d = tmp_path_factory.mktemp("sampling-pair")
    target = write_cycle_target(d / "t.gguf", margin=0.25, noise=0.1, seed=4)
    m = make_cycle_drafter(True, noise=0.05, seed=5)
    ckpt = write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt")
    return target, convert(ckpt, target, d / "d.gguf", outtype="f32").outfile

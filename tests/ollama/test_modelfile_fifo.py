"""A Modelfile whose FROM is a FIFO or a device is refused in one line, never opened (a FIFO would block)."""

from __future__ import annotations

import os

import pytest

from local_eagle.ollama.modelfile import ModelfileError, parse, resolve_model
from local_eagle.testing.ollama_store import run_bounded


@pytest.mark.parametrize("kind", ["fifo", "fifo-link", "dev-zero"])
def test_from_a_fifo_or_a_device_is_refused_without_blocking(tmp_path, kind: str) -> None:
    target = tmp_path / "model.gguf"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "fifo-link":
        os.mkfifo(tmp_path / "pipe")
        target.symlink_to(tmp_path / "pipe")
    else:
        target.symlink_to("/dev/zero")
    m = parse("FROM ./model.gguf\n", base_dir=tmp_path)

    def resolve():
        with pytest.raises(ModelfileError, match="is not a GGUF file"):
            resolve_model(m)

    run_bounded(resolve, 20)

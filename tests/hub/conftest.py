"""The local Hub of :mod:`hubserver`, serving the tiny cycle pair; ``HF_ENDPOINT`` and ``HF_HOME`` point at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubserver import DRAFTER_REPO, GATED_REPO, TARGET_REPO, FakeHub, TinyRepos, serve, target_files

from converters.formats import write_checkpoint
from local_eagle.testing.tiny import TinyTargetSpec, write_tiny_target
from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target


@pytest.fixture(scope="session")
def tiny_repos(tmp_path_factory: pytest.TempPathFactory) -> TinyRepos:
    d = tmp_path_factory.mktemp("hub-files")
    target = write_cycle_target(d / "target.gguf")
    other = write_tiny_target(d / "other.gguf", TinyTargetSpec(), seed=3)
    m = make_cycle_drafter(True)
    ckpt = write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt")
    return TinyRepos(
        target.read_bytes(), other.read_bytes(), (ckpt / "config.json").read_bytes(),
        (ckpt / "model.safetensors").read_bytes(),
    )  # fmt: skip


@pytest.fixture
def hub(tiny_repos: TinyRepos, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The local Hub with the cycle target (GGUFs), its EAGLE 3.1 drafter checkpoint and a gated repo."""
    fake = FakeHub()
    servers = [serve(fake, "hub"), serve(fake, "cdn")]
    fake.endpoint, fake.cdn = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    fake.add(TARGET_REPO, target_files(tiny_repos))
    fake.add(DRAFTER_REPO, {"config.json": tiny_repos.config, "model.safetensors": tiny_repos.weights,
                            "README.md": b"# drafter\n"})  # fmt: skip
    fake.add(GATED_REPO, {"gated-Q4_K_M.gguf": tiny_repos.target}, gated=True)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-saved-login"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # read at import, maybe offline
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("LOCAL_EAGLE_CACHE", str(tmp_path / "le-cache"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN",
                 "HUGGING_FACE_HUB_TOKEN"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    yield fake
    for s in servers:
        s.shutdown()
        s.server_close()

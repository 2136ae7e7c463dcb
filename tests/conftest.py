from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from converters import convert
from converters.formats import write_checkpoint
from local_eagle.testing.tiny import TinyTargetSpec, make_drafter, write_tiny_target
from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

TARGET_LAYERS = [1, 3, 4]
SPEC = TinyTargetSpec()
N_VOCAB = 265


@pytest.fixture(autouse=True)
def _no_ollama_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read the machine's own Ollama store: ``FROM name`` finds only what a test builds."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path_factory.getbasetemp() / "no-ollama-store"))
    # nor write to the user's own store: each test gets an empty one
    monkeypatch.setenv("LOCAL_EAGLE_MODELS", str(tmp_path_factory.mktemp("local-eagle-models")))
    # nor reach the Hugging Face Hub: an hf.co name comes from an empty cache (tests/hub serves a local Hub)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "no-hf-home"))


@pytest.fixture(scope="session")
def target_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_target(tmp_path_factory.mktemp("target") / "tiny-target.gguf", SPEC)


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(folder, target, drafter): the target writes the letters P, A, B, ... P, A, ... and the drafter
    predicts them, so greedy outputs and acceptance are known in advance. Tests must not change them.
    The folder also holds the drafter's checkpoint, ``ckpt``."""
    d = tmp_path_factory.mktemp("cli-pair")
    target = write_cycle_target(d / "target.gguf")
    m = make_cycle_drafter(True)
    draft = convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), target, d / "draft.gguf").outfile
    return d, target, draft


@pytest.fixture
def drafter_factory() -> Callable[..., Any]:
    def make(**kw: Any):
        kw.setdefault("target_layers", TARGET_LAYERS)
        return make_drafter(target_vocab=N_VOCAB, target_hidden=SPEC.n_embd, **kw)

    return make


def state_dict_for(model: Any, with_d2t: bool = True) -> dict[str, Any]:
    sd = dict(model.state_dict())
    if not with_d2t:
        sd.pop("d2t")
        sd.pop("t2d")
    return sd


@pytest.fixture
def checkpoint_factory(tmp_path: Path, drafter_factory: Callable[..., Any]) -> Callable[..., tuple[Any, Path]]:
    """Build a random drafter and write it as a checkpoint; returns (reference model, directory)."""
    counter = iter(range(10_000))

    def make(
        fmt: str = "eagle3",
        weights: str = "safetensors",
        fc_norm_style: str = "plain",
        with_d2t: bool = True,
        mutate: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
        config_edit: Callable[[dict[str, Any]], None] | None = None,
        **kw: Any,
    ) -> tuple[Any, Path]:
        """``mutate`` edits the canonical tensors and fields; ``config_edit`` the written config.json (other names)."""
        model = drafter_factory(**kw)
        sd = state_dict_for(model, with_d2t)
        cfg = model.cfg.to_dict()
        if mutate:
            mutate(sd, cfg)
        d = write_checkpoint(sd, cfg, tmp_path / f"ckpt{next(counter)}", fmt, weights, fc_norm_style)
        if config_edit:
            raw = json.loads((d / "config.json").read_text())
            config_edit(raw)
            (d / "config.json").write_text(json.dumps(raw))
        return model, d

    return make

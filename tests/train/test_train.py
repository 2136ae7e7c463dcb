"""`local-eagle train` end to end on a tiny target: capture, training, checkpoint, conversion, speculation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from converters.formats import read_checkpoint, to_reference
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.gguf import ModelInfo, read_model_info
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.testing.oracle import agrees, compare
from local_eagle.testing.tiny_pair import training_inputs
from local_eagle.train.trainer import TrainConfig, hf_vocab_size, train

runner = CliRunner()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return training_inputs(tmp_path_factory.mktemp("train"), 16, ({"text": "ABCDEFGHIJ xyz ABCDEFG"},))


def cfg(**kw) -> TrainConfig:
    base = dict(draft_vocab=64, epochs=6, lr=1e-3, max_tokens_per_sample=40, n_threads=1, target_layers=[1, 3, 4])
    base.update(kw)
    return TrainConfig(**base)


def mean_acceptance(target, draft) -> float:
    with Engine(target, draft, EngineOptions(n_ctx=256, n_threads=1)) as eng:
        lens = [eng.generate(p, max_tokens=48, draft_max=4).stats.acceptance_length for p in ("hello", "abc", "xyz")]
    return float(np.mean(lens))


def test_train_end_to_end_beats_untrained(setup, tmp_path):
    d, target, prompts = setup
    # effectively untrained: one epoch at a learning rate that moves nothing (--epochs 0 is refused)
    untrained_cfg = cfg(epochs=1, lr=1e-12)
    train(target, prompts, tmp_path / "untrained", untrained_cfg, gguf_out=tmp_path / "u.gguf", progress=False)
    reports = train(target, prompts, tmp_path / "trained", cfg(), gguf_out=tmp_path / "t.gguf", progress=False)
    assert len(reports) == 6 and reports[-1].train_loss < reports[0].train_loss
    assert len(list((tmp_path / "trained" / "data").glob("sample-*.npz"))) == 17
    ck = read_checkpoint(tmp_path / "trained" / "drafter")
    assert ck.flags["fc_norm"] and ck.flags["norm_output"] and ck.config["draft_vocab_size"] == 64
    untrained, trained = mean_acceptance(target, tmp_path / "u.gguf"), mean_acceptance(target, tmp_path / "t.gguf")
    assert trained > untrained + 1.0, (untrained, trained)
    # the trained checkpoint converts and runs on llama.cpp as the torch reference says
    steps = compare(tmp_path / "t.gguf", target, to_reference(ck), n_steps=3)
    assert all(agrees("q8_0", s) for s in steps)


def test_resume_continues(setup, tmp_path):
    d, target, prompts = setup
    out = tmp_path / "run"
    first = train(target, prompts, out, cfg(epochs=1), progress=False)
    with pytest.raises(LocalEagleError, match="--resume"):
        train(target, prompts, out, cfg(epochs=2), progress=False)
    both = train(target, prompts, out, cfg(epochs=2), resume=True, progress=False)
    assert len(first) == 1 and len(both) == 2
    assert both[0] == first[0]


def run_train(setup, out, *extra: str, target=None):
    """``local-eagle train`` on the tiny cycle target, one short epoch; later options override earlier ones."""
    _, default_target, prompts = setup
    return runner.invoke(
        app, ["train", "--target", str(target or default_target), "--prompts", str(prompts), "--out", str(out),
              "--draft-vocab", "64", "--epochs", "1", "--max-tokens-per-sample", "24", "--target-layers", "1,3,4",
              "--threads", "1", *extra],
    )  # fmt: skip


def test_eagle3_arch_and_cli(setup, tmp_path):
    """Also: config.json's vocab_size is the HF target's (--vocab-size here), and the padded t2d converts back."""
    d, target, prompts = setup
    n_vocab = read_model_info(target).n_vocab
    extra = ["--arch", "eagle3", "--vocab-size", str(n_vocab + 35), "--gguf", str(tmp_path / "e3.gguf"), "--json"]
    r = run_train(setup, tmp_path / "e3", *extra)
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output.strip().splitlines()[-1])) == 1
    ck = read_checkpoint(tmp_path / "e3" / "drafter")
    assert not ck.flags["fc_norm"] and not ck.flags["norm_output"]
    assert ck.config["vocab_size"] == n_vocab + 35
    assert read_model_info(tmp_path / "e3.gguf").draft_vocab_size == 64


def test_hf_vocab_size_is_the_embedding_rows():
    info = ModelInfo(Path("t.gguf"), "llama", 6, 64, 265, tensor_shapes={"token_embd.weight": (64, 320)})
    assert hf_vocab_size(info) == 320
    assert hf_vocab_size(info, 400) == 400
    with pytest.raises(LocalEagleError, match="--vocab-size: 100 is smaller than the 265 tokens"):
        hf_vocab_size(info, 100)


BAD_OPTIONS = [
    (["--draft-vocab", "0"], ["--draft-vocab", "got 0"]),
    (["--ttt-steps", "0"], ["--ttt-steps", "got 0"]),
    (["--epochs", "0"], ["--epochs", "untrained drafter"]),
    (["--lr", "nan"], ["--lr", "got nan"]),
    (["--lr", "-1"], ["--lr", "got -1"]),
    (["--device", "cuda"], ["--device cuda", "sees no CUDA GPU", "use --device cpu"]),
    (["--device", "tpu"], ["--device: expected cpu, cuda or cuda:N"]),
    (["--gguf-type", "q4_0"], ["--gguf-type", "f32, f16, bf16, q8_0", "'q4_0'"]),
    (["--vocab-size", "10"], ["--vocab-size: 10 is smaller"]),
    (["--max-hours", "0"], ["--max-hours: expected a positive number of hours, got 0"]),
    (["--window-tokens", "0"], ["--window-tokens: expected a positive number of tokens per training step, got 0"]),
    (["--init-from", "nowhere"], ["--init-from nowhere: no training state"]),
]


@pytest.mark.parametrize(("extra", "needles"), BAD_OPTIONS, ids=[" ".join(c[0]) for c in BAD_OPTIONS])
def test_bad_options_fail_before_any_work(setup, tmp_path, monkeypatch, extra, needles):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without CUDA
    r = run_train(setup, tmp_path / "o", *extra)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "Traceback" not in r.output and "error:" in text
    for n in needles:
        assert n in text, text
    assert not (tmp_path / "o" / "data").exists()  # refused before the capture
    assert not (tmp_path / "o" / "drafter").exists()


def test_out_is_a_file(setup, tmp_path):
    (tmp_path / "o").write_text("not a directory")
    r = run_train(setup, tmp_path / "o")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "--out:" in r.output and "is a file, expected a directory" in " ".join(r.output.split())


@pytest.mark.parametrize("how", ["same-path", "symlink"])
def test_gguf_is_the_target(setup, tmp_path, how):
    _, target, _ = setup
    own = tmp_path / "target.gguf"
    own.write_bytes(target.read_bytes())
    gguf = own
    if how == "symlink":
        gguf = tmp_path / "link.gguf"
        gguf.symlink_to(own)
    r = run_train(setup, tmp_path / "o", "--gguf", str(gguf), target=own)
    assert r.exit_code == 2, r.output
    assert "--gguf" in r.output and "target GGUF" in r.output and "would destroy it" in " ".join(r.output.split())
    assert own.read_bytes() == target.read_bytes()
    assert not (tmp_path / "o" / "data").exists()


def test_empty_prompt_set(setup, tmp_path):
    _, target, _ = setup
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    r = runner.invoke(app, ["train", "--target", str(target), "--prompts", str(empty), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "empty" in r.output


def test_disk_space_is_checked(setup, tmp_path, monkeypatch):
    import shutil

    from local_eagle.train import data as traindata

    _, target, prompts = setup
    monkeypatch.setattr(traindata.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    with pytest.raises(LocalEagleError, match="is free"):
        train(target, prompts, tmp_path / "full", cfg(), progress=False)


def test_max_hours_stops_training_and_still_writes_the_drafter(setup, tmp_path):
    r = run_train(
        setup, tmp_path / "budget", "--epochs", "50", "--max-hours", "1e-9", "--gguf", str(tmp_path / "b.gguf")
    )
    assert r.exit_code == 0, r.output
    assert "budget is spent" in r.output
    assert (tmp_path / "budget" / "drafter" / "config.json").exists() and (tmp_path / "b.gguf").exists()


def test_lr_factor_warms_up_decays_and_follows_a_time_budget():
    from local_eagle.train.trainer import lr_factor

    assert lr_factor(0, 100, 10) == pytest.approx(0.1 * 0.5 * (1 + math.cos(0.0)))
    assert lr_factor(50, 100, 10) == pytest.approx(0.5)
    assert lr_factor(100, 100, 10) == pytest.approx(0.0, abs=1e-12)
    # a time budget that ends the run at step 50 of 100: halfway by steps, fully annealed by time
    assert lr_factor(50, 100, 10, elapsed=3600.0, max_seconds=3600.0) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(50, 100, 10, elapsed=900.0, max_seconds=3600.0) == pytest.approx(0.5)  # steps lead
    assert lr_factor(25, 100, 10, elapsed=1800.0, max_seconds=3600.0) == pytest.approx(0.5)  # time leads


def test_windows_cut_samples_into_steps():
    from local_eagle.train.trainer import windows

    assert windows([10, 300], None) == [(0, 0, 10), (1, 0, 300)]
    assert windows([10, 256], 256) == [(0, 0, 10), (1, 0, 256)]
    # 600 = 256 + 256 + 88: the 88-token tail is a window of its own (over a quarter window)
    assert windows([600], 256) == [(0, 0, 256), (0, 256, 512), (0, 512, 600)]
    # 520 = 256 + 256 + 8: the 8-token tail joins the window before it
    assert windows([520], 256) == [(0, 0, 256), (0, 256, 520)]
    cover = windows([1000, 37, 513], 100)
    for i, n in enumerate([1000, 37, 513]):
        spans = [(a, b) for j, a, b in cover if j == i]
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(b == a2 for (_, b), (a2, _) in zip(spans, spans[1:], strict=False))


def test_window_of_slices_every_per_token_array():
    from local_eagle.train.trainer import window_of

    n = 12
    sample = {"tokens": np.arange(n), "features": np.ones((n, 6)), "feature_scale": np.arange(n, dtype=np.float32),
              "top_ids": np.zeros((n, 4)), "prompt_len": np.array(3)}  # fmt: skip
    w = window_of(sample, 4, 9)
    assert w["tokens"].tolist() == list(range(4, 9)) and w["features"].shape == (5, 6)
    assert w["feature_scale"].tolist() == [4, 5, 6, 7, 8] and w["top_ids"].shape == (5, 4)
    assert int(w["prompt_len"]) == 3
    assert window_of(sample, 0, n) is sample


def test_window_tokens_and_init_from(setup, tmp_path):
    """Windowed training runs more steps on the same data; --init-from starts from a run's weights."""
    r = run_train(setup, tmp_path / "win", "--window-tokens", "8", "--json")
    assert r.exit_code == 0, r.output
    whole = run_train(setup, tmp_path / "whole", "--json")
    assert whole.exit_code == 0, whole.output
    import torch

    def steps(d):
        return torch.load(d / "train-state.pt", weights_only=True)["scheduler"]["last_epoch"]

    assert steps(tmp_path / "win") > steps(tmp_path / "whole")
    # warm start: the new run's first report beats a cold start's, since it begins where "win" ended
    warm = run_train(setup, tmp_path / "warm", "--window-tokens", "8", "--init-from", str(tmp_path / "win"), "--json")
    assert warm.exit_code == 0, warm.output
    first_warm = json.loads(warm.output.strip().splitlines()[-1])[0]
    first_cold = json.loads(r.output.strip().splitlines()[-1])[0]
    assert first_warm["train_loss"] < first_cold["train_loss"]


def test_init_from_another_arch_is_refused(setup, tmp_path):
    assert run_train(setup, tmp_path / "other", "--arch", "eagle3").exit_code == 0
    r = run_train(setup, tmp_path / "run", "--init-from", str(tmp_path / "other"))
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "an eagle3 drafter, expected --arch eagle3.1" in text, r.output
    assert "Traceback" not in r.output


def test_init_from_carries_shared_head_rows_into_another_draft_vocab(setup, tmp_path):
    import torch

    assert run_train(setup, tmp_path / "small", "--draft-vocab", "32").exit_code == 0
    r = run_train(setup, tmp_path / "big", "--init-from", str(tmp_path / "small"), "--lr", "1e-12")
    assert r.exit_code == 0, r.output
    small, big = (torch.load(tmp_path / d / "train-state.pt", weights_only=True) for d in ("small", "big"))
    old_row = {int(t): i for i, t in enumerate(small["vocab_ids"])}
    shared = [(i, old_row[int(t)]) for i, t in enumerate(big["vocab_ids"]) if int(t) in old_row]
    assert 0 < len(shared) < len(big["vocab_ids"])
    for new_i, old_i in shared:  # lr 1e-12: the warm start's rows are still the earlier run's
        assert torch.allclose(big["model"]["lm_head.weight"][new_i], small["model"]["lm_head.weight"][old_i], atol=1e-6)
    down = "midlayer.mlp.down_proj.weight"
    assert torch.allclose(big["model"][down], small["model"][down], atol=1e-6)

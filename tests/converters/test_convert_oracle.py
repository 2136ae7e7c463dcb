"""Convert fixture checkpoints of every format, load them in llama.cpp, compare with the torch reference."""

from __future__ import annotations

import numpy as np
import pytest

from converters.eagle3_gguf import convert
from local_eagle.gguf import read_model_info
from local_eagle.testing.oracle import agrees, compare

CASES = [
    # id, checkpoint kwargs, drafter kwargs, outtype
    ("eagle3-original-f32", dict(fmt="eagle3"), dict(eagle31=False), "f32"),
    ("eagle31-plain-f32", dict(fmt="eagle3"), dict(eagle31=True), "f32"),
    ("eagle31-d2t-f16", dict(fmt="eagle3"), dict(eagle31=True, draft_vocab=128), "f16"),
    (
        "eagle31-shared-embd-head",
        dict(fmt="eagle3", with_d2t=False),
        dict(eagle31=True, own_embeddings=False, own_lm_head=False),
        "f32",
    ),
    (
        "eagle31-d2t-no-head",
        dict(fmt="modelopt"),
        dict(eagle31=True, draft_vocab=100, own_lm_head=False),
        "f32",
    ),
    (
        "vllm-model-fc-norm-sharded",
        dict(fmt="vllm", weights="sharded", fc_norm_style="model"),
        dict(eagle31=True, draft_vocab=128),
        "f32",
    ),
    (
        "speculators-bin",
        dict(fmt="speculators", weights="bin"),
        dict(eagle31=False, norm_before_residual=True, own_embeddings=False),
        "f32",
    ),
    (
        "speculators-eagle31-legacy-norms",
        dict(fmt="speculators", fc_norm_style="legacy"),
        dict(eagle31=True, norm_before_residual=True, draft_vocab=128),
        "f16",
    ),
    ("modelopt-norm-before-fc", dict(fmt="modelopt"), dict(eagle31=False, norm_before_fc=True), "f32"),
    ("eagle31-bf16", dict(fmt="eagle3"), dict(eagle31=True, draft_vocab=128), "bf16"),
    ("eagle31-q8_0", dict(fmt="eagle3"), dict(eagle31=True, draft_vocab=128), "q8_0"),
    ("eagle3-q8_0-sharded", dict(fmt="eagle3", weights="sharded"), dict(eagle31=False), "q8_0"),
]


@pytest.mark.parametrize(("ckpt_kw", "drafter_kw", "outtype"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_llama_cpp_matches_reference(target_gguf, checkpoint_factory, tmp_path, ckpt_kw, drafter_kw, outtype):
    model, ckpt = checkpoint_factory(**ckpt_kw, **drafter_kw)
    out = tmp_path / "drafter.gguf"
    res = convert(ckpt, target_gguf, out, outtype=outtype)
    assert res.eagle_version == ("3.1" if drafter_kw.get("eagle31") else "3")
    info = read_model_info(out)
    assert info.is_drafter and info.fc_norm == drafter_kw.get("eagle31", False)
    assert info.draft_vocab_size == drafter_kw.get("draft_vocab", 265)
    steps = compare(out, target_gguf, model, n_steps=3)
    assert len(steps) == 3
    for s in steps:
        assert agrees(outtype, s), (outtype, s)
    if outtype in ("f32", "f16"):
        assert all(s.argmax_equal for s in steps)


def test_eagle31_parts_matter(target_gguf, checkpoint_factory, tmp_path):
    """Switching fc_norm / norm_output off changes the logits, and llama.cpp follows the reference both ways."""
    model, ckpt31 = checkpoint_factory(eagle31=True, seed=7)

    def off(sd, cfg):
        cfg["fc_norm"] = False
        cfg["norm_output"] = False
        for i in range(3):
            sd.pop(f"fc_norm.{i}.weight")

    model3, ckpt3 = checkpoint_factory(eagle31=True, seed=7, mutate=off)
    model3.cfg.fc_norm = False
    model3.cfg.norm_output = False
    convert(ckpt31, target_gguf, tmp_path / "d31.gguf", outtype="f32")
    convert(ckpt3, target_gguf, tmp_path / "d3.gguf", outtype="f32")
    with_31 = compare(tmp_path / "d31.gguf", target_gguf, model, n_steps=3)
    without = compare(tmp_path / "d3.gguf", target_gguf, model3, n_steps=3)
    assert all(agrees("f32", s) for s in with_31 + without)
    # the reference of one setting must not explain the other's output
    cross = compare(tmp_path / "d3.gguf", target_gguf, model, n_steps=3)
    assert max(s.rel_diff for s in cross) > 0.05


def test_fc_norm_only_changes_first_step_feedback_changes_later(target_gguf, checkpoint_factory, tmp_path):
    """norm_output alone leaves the first draft step untouched and changes the chained ones."""
    model, ckpt = checkpoint_factory(eagle31=True, seed=3)

    def no_feedback_norm(sd, cfg):
        cfg["norm_output"] = False

    model_b, ckpt_b = checkpoint_factory(eagle31=True, seed=3, mutate=no_feedback_norm)
    model_b.cfg.norm_output = False
    convert(ckpt, target_gguf, tmp_path / "a.gguf", outtype="f32")
    convert(ckpt_b, target_gguf, tmp_path / "b.gguf", outtype="f32")
    a = compare(tmp_path / "a.gguf", target_gguf, model, n_steps=3)
    b = compare(tmp_path / "b.gguf", target_gguf, model_b, n_steps=3)
    assert all(agrees("f32", s) for s in a + b)
    cross = compare(tmp_path / "b.gguf", target_gguf, model, n_steps=3)
    assert cross[0].rel_diff < 1e-3
    assert max(s.rel_diff for s in cross[1:]) > 0.05


def test_q_k_permutation_is_needed(target_gguf, checkpoint_factory, tmp_path, monkeypatch):
    """Without the rope permutation the prefill attention differs: the permutation is exercised."""
    import converters.eagle3_gguf as conv

    model, ckpt = checkpoint_factory(eagle31=False)
    monkeypatch.setattr(conv, "permute_for_rope", lambda w, n: w)
    conv.convert(ckpt, target_gguf, tmp_path / "bad.gguf", outtype="f32")
    steps = compare(tmp_path / "bad.gguf", target_gguf, model, n_steps=2)
    assert max(s.rel_diff for s in steps) > 1e-2
    assert np.isfinite(steps[0].max_abs_diff)

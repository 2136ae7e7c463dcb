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


# --- one fixture per layout seen in the wild ------------------------------------------------------


def torchspec_names(sd, cfg):
    """TorchSpec exports its Llama drafter's layer as ``layers.0.*`` (its ``midlayer.*`` renamed)."""
    for k in [k for k in sd if k.startswith("midlayer.")]:
        sd["layers.0." + k[len("midlayer.") :]] = sd.pop(k)


def torchspec_config(raw):
    """TorchSpec's draft config.json: no layer ids and no EAGLE 3.1 flags, plus num_aux_hidden_states."""
    for k in ("eagle_aux_hidden_state_layer_ids", "fc_norm", "norm_output", "norm_before_fc", "norm_before_residual"):
        del raw[k]
    raw.update(model_type="llama", num_aux_hidden_states=3, attention_bias=False, pretraining_tp=1)


def use_aux_norm(raw):
    """The older name of fc_norm (early EAGLE 3.1 exports, SGLang)."""
    del raw["fc_norm"]
    raw["use_aux_norm"] = True


def norm_output_only(sd, cfg):
    cfg["norm_output"] = True


def without_d2t(sd, cfg):
    sd.pop("d2t")


LAYOUTS = [
    # id, checkpoint kwargs, reference-model fields changed by the layout, convert kwargs
    (
        "torchspec-llama",
        dict(fmt="eagle3", eagle31=False, draft_vocab=128, mutate=torchspec_names, config_edit=torchspec_config),
        {},
        dict(target_layers=[1, 3, 4]),
    ),
    (
        "speculators-norm-before-fc-norm-output",
        dict(
            fmt="speculators",
            eagle31=False,
            norm_before_fc=True,
            norm_before_residual=True,
            draft_vocab=128,
            mutate=norm_output_only,
        ),
        dict(norm_output=True),
        {},
    ),  # fmt: skip
    ("use-aux-norm", dict(fmt="vllm", eagle31=True, draft_vocab=128, config_edit=use_aux_norm), {}, {}),
    ("t2d-without-d2t", dict(fmt="eagle3", eagle31=True, draft_vocab=128, mutate=without_d2t), {}, {}),
]


@pytest.mark.parametrize(
    ("ckpt_kw", "model_fields", "convert_kw"), [c[1:] for c in LAYOUTS], ids=[c[0] for c in LAYOUTS]
)
def test_layout_matches_reference(target_gguf, checkpoint_factory, tmp_path, ckpt_kw, model_fields, convert_kw):
    model, ckpt = checkpoint_factory(**ckpt_kw)
    for k, v in model_fields.items():
        setattr(model.cfg, k, v)
    out = tmp_path / "drafter.gguf"
    convert(ckpt, target_gguf, out, outtype="f32", **convert_kw)
    info = read_model_info(out)
    cfg = model.cfg
    flags = (info.fc_norm, info.norm_output, info.norm_before_fc, info.norm_before_residual)
    assert flags == (cfg.fc_norm, cfg.norm_output, cfg.norm_before_fc, cfg.norm_before_residual)
    assert info.draft_vocab_size == 128
    steps = compare(out, target_gguf, model, n_steps=3)
    assert all(agrees("f32", s) and s.argmax_equal for s in steps), steps

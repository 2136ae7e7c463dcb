"""Each checkpoint format reads back into the same canonical tensors and flags."""

from __future__ import annotations

import json

import numpy as np
import pytest

from converters.formats import canonical_name, detect_format, read_checkpoint

LAYOUTS = [
    ("eagle3", "safetensors", "plain"),
    ("eagle3", "bin", "plain"),
    ("vllm", "sharded", "model"),
    ("speculators", "safetensors", "legacy"),
    ("speculators", "sharded", "plain"),
    ("modelopt", "bin", "model"),
]


@pytest.mark.parametrize(("fmt", "weights", "style"), LAYOUTS)
@pytest.mark.parametrize("eagle31", [False, True])
def test_round_trip(checkpoint_factory, fmt, weights, style, eagle31):
    model, d = checkpoint_factory(fmt=fmt, weights=weights, fc_norm_style=style, eagle31=eagle31, draft_vocab=128)
    ck = read_checkpoint(d)
    assert ck.format == fmt
    assert ck.flags["fc_norm"] is eagle31 and ck.flags["norm_output"] is eagle31
    sd = {k: v.numpy() for k, v in model.state_dict().items() if k != "t2d"}
    assert set(ck.tensors) == set(sd)
    for k, v in sd.items():
        np.testing.assert_array_equal(ck.tensors[k], v.astype(ck.tensors[k].dtype), err_msg=k)
    assert ck.config["target_layers"] == model.cfg.target_layers
    assert ck.config["draft_vocab_size"] == 128


@pytest.mark.parametrize("value", [True, False])
def test_speculators_norm_before_residual_always_written(checkpoint_factory, value):
    """speculators reads an absent key as false, vLLM's adapter as true: the writer never leaves it out."""
    _, d = checkpoint_factory(fmt="speculators", norm_before_residual=value)
    raw = json.loads((d / "config.json").read_text())
    assert raw["norm_before_residual"] is value
    assert raw["speculators_config"]["algorithm"] == "eagle3"
    assert read_checkpoint(d).flags["norm_before_residual"] is value


def test_speculators_absent_norm_before_residual_reads_true(checkpoint_factory):
    """A published speculators config without the key is read as vLLM reads it."""
    _, d = checkpoint_factory(
        fmt="speculators", norm_before_residual=True, config_edit=lambda c: c.pop("norm_before_residual")
    )
    assert read_checkpoint(d).flags["norm_before_residual"] is True


def test_modelopt_flags_inside_eagle_config(checkpoint_factory):
    _, d = checkpoint_factory(fmt="modelopt", eagle31=False, norm_before_fc=True)
    raw = json.loads((d / "config.json").read_text())
    assert raw["eagle_config"]["norm_before_fc"] is True and "norm_before_fc" not in raw
    assert read_checkpoint(d).flags["norm_before_fc"] is True


def test_detect_by_draft_vocab_size_without_architecture():
    assert detect_format({"draft_vocab_size": 32000, "num_hidden_layers": 1}) == "eagle3"


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.q_proj.weight"),
        ("layers.0.mlp.up_proj.weight", "midlayer.mlp.up_proj.weight"),
        ("model.layers.0.hidden_norm.weight", "midlayer.hidden_norm.weight"),
        ("model.fc_norm.2.weight", "fc_norm.2.weight"),
        ("aux_norm_mid.weight", "fc_norm.1.weight"),
        ("model.embed_tokens.weight", "embed_tokens.weight"),
        ("midlayer.self_attn.rotary_emb.inv_freq", None),
    ],
)
def test_canonical_names(name, canonical):
    assert canonical_name(name) == canonical


def test_written_vocab_size_is_the_hf_targets(tmp_path, drafter_factory, target_gguf):
    """config.json names the HF target's vocabulary (padded embedding rows); t2d is padded to it and converts back."""
    from safetensors.numpy import load_file

    from converters import convert, write_checkpoint

    model = drafter_factory(draft_vocab=128, own_embeddings=False)
    d = write_checkpoint(model.state_dict(), model.cfg.to_dict(), tmp_path / "ck", vocab_size=320)
    assert json.loads((d / "config.json").read_text())["vocab_size"] == 320
    t2d = load_file(str(d / "model.safetensors"))["t2d"]
    assert t2d.shape == (320,) and t2d.sum() == 128 and not t2d[265:].any()
    assert read_checkpoint(d).config["vocab_size"] == 320
    assert convert(d, target_gguf, tmp_path / "d.gguf").draft_vocab_size == 128
    with pytest.raises(ValueError, match="embed_tokens has 265 rows"):
        own = drafter_factory(draft_vocab=128)
        write_checkpoint(own.state_dict(), own.cfg.to_dict(), tmp_path / "ck2", vocab_size=320)

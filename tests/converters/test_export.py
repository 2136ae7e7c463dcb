"""GGUF -> checkpoint -> GGUF gives back the same drafter; no engine package needed (speculators' own check is in
test_export_speculators.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from converters import convert, read_checkpoint
from converters.eagle3_gguf import permute_for_rope
from converters.export import export, read_drafter_gguf, unpermute_for_rope
from converters.formats import to_reference
from local_eagle.errors import LocalEagleError
from local_eagle.gguf import open_gguf, read_model_info, tensor_f32
from local_eagle.reference import ttt_forward
from local_eagle.testing.oracle import agrees, compare
from local_eagle.testing.tiny import target_head_weights

VARIANTS = [
    ("eagle3", dict(eagle31=False)),
    ("eagle31-reduced-vocab", dict(eagle31=True, draft_vocab=128)),
    ("eagle31-norm-before-residual", dict(eagle31=True, norm_before_residual=True)),
    ("eagle3-norm-before-fc", dict(eagle31=False, norm_before_fc=True, draft_vocab=100)),
]


def gguf_tensors(path) -> dict[str, np.ndarray]:
    h = open_gguf(path)
    return {t.name: (tensor_f32(h, t.name) if t.name != "d2t" else None) for t in h.tensors}


def test_unpermute_inverts_permute():
    w = np.random.default_rng(0).standard_normal((64, 24)).astype(np.float32)
    for heads in (1, 2, 4):
        np.testing.assert_array_equal(unpermute_for_rope(permute_for_rope(w, heads), heads), w)


@pytest.mark.parametrize("fmt", ["speculators", "eagle3"])
@pytest.mark.parametrize("kw", [v[1] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_round_trip(target_gguf, checkpoint_factory, tmp_path, fmt, kw):
    """The exported checkpoint holds the original tensors and flags, converts back to the same GGUF, and its
    torch reference gives the original's logits; llama.cpp on the re-converted GGUF agrees with it."""
    model, ckpt = checkpoint_factory(**kw)
    first = convert(ckpt, target_gguf, tmp_path / "a.gguf", outtype="f32").outfile
    res = export(first, tmp_path / "out", fmt=fmt)
    assert res.eagle_version == ("3.1" if kw["eagle31"] else "3")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left
    back = read_checkpoint(res.outdir)
    orig = read_checkpoint(ckpt)
    if not orig.tensors["d2t"].any():
        del orig.tensors["d2t"]  # an identity map: the GGUF and the export leave it out
    assert back.format == fmt
    assert back.config == orig.config
    assert set(back.tensors) == set(orig.tensors)
    for name, arr in orig.tensors.items():
        np.testing.assert_array_equal(back.tensors[name], arr, err_msg=name)

    second = convert(res.outdir, target_gguf, tmp_path / "b.gguf", outtype="f32").outfile
    a, b = gguf_tensors(first), gguf_tensors(second)
    assert set(a) == set(b)
    for name in a:
        if a[name] is not None:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    ia, ib = read_model_info(first).to_dict(), read_model_info(second).to_dict()
    for d in (ia, ib):
        d.pop("path")
    assert ia == ib

    rng = np.random.default_rng(1)
    feats = torch.from_numpy((rng.standard_normal((8, 192)) * 4).astype(np.float32))
    toks = torch.from_numpy(rng.integers(3, 265, size=11))
    with torch.no_grad():
        want = ttt_forward(model, toks, feats, 3)
        got = ttt_forward(to_reference(back), toks, feats, 3)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    steps = compare(second, target_gguf, to_reference(back), n_steps=3)
    assert all(agrees("f32", s) and s.argmax_equal for s in steps), steps


def test_speculators_config_block(target_gguf, checkpoint_factory, tmp_path):
    _, ckpt = checkpoint_factory(eagle31=True, norm_before_residual=False)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf").outfile
    res = export(g, tmp_path / "out", target_gguf=target_gguf, verifier="meta-llama/Llama-3.1-8B-Instruct")
    raw = json.loads((res.outdir / "config.json").read_text())
    assert raw["speculators_model_type"] == "eagle3"
    assert raw["norm_before_residual"] is False and raw["fc_norm"] is True and raw["norm_output"] is True
    assert raw["speculators_config"]["verifier"] == {
        "name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
        "architectures": ["LlamaForCausalLM"],
    }
    assert raw["transformer_layer_config"]["num_hidden_layers"] == 1


def test_shared_embeddings_come_from_the_target(target_gguf, checkpoint_factory, tmp_path):
    """A drafter that borrows the target's embeddings and head at run time carries copies of them once exported."""
    _, ckpt = checkpoint_factory(eagle31=True, own_embeddings=False, own_lm_head=False, with_d2t=False)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile
    with pytest.raises(LocalEagleError, match="pass --target"):
        export(g, tmp_path / "out", fmt="speculators")
    assert not (tmp_path / "out").exists()
    res = export(g, tmp_path / "out", fmt="speculators", target_gguf=target_gguf)
    embd, head = target_head_weights(target_gguf)
    back = read_checkpoint(res.outdir)
    np.testing.assert_array_equal(back.tensors["embed_tokens.weight"], embd)
    np.testing.assert_array_equal(back.tensors["lm_head.weight"], head)


def test_padded_vocab_size(target_gguf, checkpoint_factory, tmp_path):
    """--vocab-size names the Hugging Face target's (padded) vocabulary: embeddings and t2d are padded to it."""
    _, ckpt = checkpoint_factory(eagle31=True, draft_vocab=128)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile
    res = export(g, tmp_path / "out", fmt="eagle3", vocab_size=320)
    raw = json.loads((res.outdir / "config.json").read_text())
    assert raw["vocab_size"] == 320
    back = read_checkpoint(res.outdir)
    assert back.tensors["embed_tokens.weight"].shape == (320, 64)
    assert not back.tensors["embed_tokens.weight"][265:].any()
    with pytest.raises(LocalEagleError, match="--vocab-size: 200 is below"):
        export(g, tmp_path / "out2", vocab_size=200)


@pytest.mark.parametrize(("outtype", "dtype"), [("f16", torch.float16), ("bf16", torch.bfloat16), ("q8_0", None)])
def test_dtype_follows_the_gguf(target_gguf, checkpoint_factory, tmp_path, outtype, dtype):
    """auto keeps f16 / bf16 matrices as they are and writes a quantised GGUF as float32, which holds it exactly."""
    from safetensors.torch import load_file

    _, ckpt = checkpoint_factory(eagle31=True)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype=outtype).outfile
    res = export(g, tmp_path / "out", fmt="eagle3")
    sd = load_file(str(res.outdir / "model.safetensors"))
    assert sd["fc.weight"].dtype == (dtype or torch.float32)
    assert sd["norm.weight"].dtype == torch.float32
    h = open_gguf(g)
    np.testing.assert_array_equal(sd["fc.weight"].float().numpy(), tensor_f32(h, "fc.weight"))


def test_llama3_rope_scaling_survives(target_gguf, checkpoint_factory, tmp_path):
    rs = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }

    def add(sd, cfg):
        cfg["rope_scaling"] = rs

    _, ckpt = checkpoint_factory(eagle31=True, mutate=add)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile
    res = export(g, tmp_path / "out")
    assert read_checkpoint(res.outdir).config["rope_scaling"] == rs


def test_refusals_leave_nothing(target_gguf, checkpoint_factory, tmp_path):
    _, ckpt = checkpoint_factory(eagle31=True)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf").outfile
    with pytest.raises(LocalEagleError, match="expected an eagle3 drafter GGUF"):
        export(target_gguf, tmp_path / "x")
    with pytest.raises(LocalEagleError, match="--format: expected one of speculators, eagle3"):
        export(g, tmp_path / "x", fmt="modelopt")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(LocalEagleError, match="is not empty"):
        export(g, tmp_path / "full")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("ckpt")) == ["d.gguf", "full"]
    (tmp_path / "empty").mkdir()
    assert export(g, tmp_path / "empty").outdir == tmp_path / "empty"


def test_read_drafter_gguf_gives_offsets(target_gguf, checkpoint_factory, tmp_path):
    """The GGUF holds absolute target ids; a checkpoint holds EAGLE's offsets (target id = i + d2t[i])."""
    model, ckpt = checkpoint_factory(eagle31=False, draft_vocab=50)
    g = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile
    back, n_vocab = read_drafter_gguf(g)
    assert n_vocab == 265
    np.testing.assert_array_equal(back.tensors["d2t"], model.d2t.numpy())

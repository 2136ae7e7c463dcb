"""DSpark and DFlash2 block drafters: tiny generated checkpoints convert to the ``dflash`` GGUF llama.cpp's own
converter writes for them, the pinned llama.cpp loads it with the variant's heads, and bad input is one line.

The expected keys and tensor names are those of the llama.cpp that llama-cpp-python 0.3.36 vendors:
``conversion/qwen.py`` (``DFlashModel``, registered for ``DFlashDraftModel`` and ``DFlash2DraftModel``, and
``DSparkModel(DFlashModel)``), its ``gguf-py`` (``tensor_mapping.py``: ``model.markov_head.markov_w1`` ->
``markov_w1``, ``model.confidence_head.proj`` -> ``conf_proj``, ``model.layers.{bid}.attention_conv.base_kernel``
-> ``blk.{bid}.attn_conv_base``, ``model.candidate_selector.*`` -> ``selector_*``; ``gguf_writer.py``: the
``dflash.conv_kernel_size`` / ``conv_group_size`` / ``selector_rank`` / ``selector_top_k`` / ``sample_from_anchor``
/ ``has_confidence_head`` keys) and ``src/models/dflash.cpp`` (``load_arch_tensors``: the shapes).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from typer.testing import CliRunner

from converters.dflash_gguf import convert_dflash, is_block_drafter
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.testing.tiny_dflash import (
    N_VOCAB,
    TinyDFlash2Spec,
    TinyDSparkSpec,
    dflash2_config,
    dflash2_state_dict,
    dspark_config,
    dspark_state_dict,
    write_dflash_checkpoint,
)

runner = CliRunner()
D2 = TinyDFlash2Spec()
DS = TinyDSparkSpec()


def field(reader: GGUFReader, key: str) -> Any:
    return reader.fields[key].contents()


def shapes(reader: GGUFReader) -> dict[str, tuple[int, ...]]:
    return {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}


def convert(tmp_path: Path, target: Path, spec: Any, outtype: str = "f32", **kw: Any) -> tuple[Any, GGUFReader]:
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", spec, **kw)
    assert is_block_drafter(ckpt)
    res = convert_dflash(ckpt, target, tmp_path / "d.gguf", outtype=outtype)
    return res, GGUFReader(res.outfile)


@pytest.mark.parametrize("prefix", ["", "model."])
def test_dflash2_writes_the_conv_and_selector_keys_and_tensors(tmp_path: Path, target_gguf: Path, prefix: str) -> None:
    res, g = convert(tmp_path, target_gguf, D2, prefix=prefix)
    assert res.family == "dflash2"
    assert field(g, "general.architecture") == "dflash"
    # DFlashModel.set_gguf_parameters: the four keys, from dflash_config
    assert field(g, "dflash.conv_kernel_size") == D2.conv_kernel_size
    assert field(g, "dflash.conv_group_size") == D2.conv_group_size
    assert field(g, "dflash.selector_rank") == D2.selector_rank
    assert field(g, "dflash.selector_top_k") == D2.selector_top_k
    assert field(g, "dflash.block_size") == D2.block_size
    assert field(g, "dflash.target_layers") == [x + 1 for x in D2.target_layers]
    assert field(g, "tokenizer.ggml.mask_token_id") == D2.mask_token_id
    assert "dflash.sample_from_anchor" not in g.fields and "dflash.has_confidence_head" not in g.fields

    # dflash.cpp's create_tensor shapes (ggml order: the torch shapes reversed)
    h, k, r = D2.n_embd, D2.conv_kernel_size, D2.selector_rank
    proj = 2 * k * (h // D2.conv_group_size)
    got = shapes(g)
    assert got["selector_predecessor.weight"] == got["selector_successor.weight"] == (r, N_VOCAB)
    assert got["selector_hidden.weight"] == (h, r)
    for i in range(D2.n_layer):
        for part in ("attn", "ffn"):
            assert got[f"blk.{i}.{part}_conv_base"] == (h, k, 2)
            assert got[f"blk.{i}.{part}_conv_proj.weight"] == (h, proj)
    assert len(got) == 3 + 11 * D2.n_layer + 3 + 4 * D2.n_layer == res.tensor_count

    sd = dflash2_state_dict(D2, prefix=prefix)
    data = {t.name: np.asarray(t.data) for t in g.tensors}
    np.testing.assert_array_equal(data["blk.1.attn_conv_base"], sd[f"{prefix}layers.1.attention_conv.base_kernel"])
    np.testing.assert_array_equal(
        data["blk.0.ffn_conv_proj.weight"], sd[f"{prefix}layers.0.mlp_conv.kernel_projection.weight"]
    )
    np.testing.assert_array_equal(
        data["selector_predecessor.weight"], sd[f"{prefix}candidate_selector.predecessor_codebook"]
    )


def test_dflash2_f16_keeps_the_conv_base_f32_and_loads(
    tmp_path: Path, target_gguf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """conversion/base.py keeps tensors not named ``*.weight`` F32; the pinned loader takes the file as DFlash2
    (its log says so, and it loads only when every tensor in the file was taken at the shape it expects)."""
    from local_eagle.llamacpp.model import Model

    _, g = convert(tmp_path, target_gguf, D2, outtype="f16")
    monkeypatch.setenv("LOCAL_EAGLE_LLAMA_LOG", "1")  # the log callback prints llama.cpp's lines too
    types = {t.name: t.tensor_type for t in g.tensors}
    assert types["blk.0.attn_conv_base"] == GGMLQuantizationType.F32
    assert types["blk.0.attn_conv_proj.weight"] == types["selector_hidden.weight"] == GGMLQuantizationType.F16
    m = Model(tmp_path / "d.gguf", n_gpu_layers=0, what="DFlash2 drafter")
    assert m.arch() == "dflash"
    assert (m.n_layer, m.n_embd, m.n_vocab) == (D2.n_layer, D2.n_embd, N_VOCAB)
    assert m.target_layer_ids() == [x + 1 for x in D2.target_layers]
    assert "DFlash2 conv kernel = 3, group = 16, selector rank = 8, top-k = 4" in capsys.readouterr().out


@pytest.mark.parametrize("prefix", ["", "model."])
def test_dspark_writes_the_markov_and_confidence_heads(tmp_path: Path, target_gguf: Path, prefix: str) -> None:
    res, g = convert(tmp_path, target_gguf, DS, prefix=prefix)
    assert res.family == "dspark"
    assert field(g, "general.architecture") == "dflash"
    # DSparkModel.set_gguf_parameters: DeepSpec exports sample from the anchor; the confidence head is present
    assert field(g, "dflash.sample_from_anchor") is True
    assert field(g, "dflash.has_confidence_head") is True
    assert field(g, "dflash.target_layers") == [x + 1 for x in DS.target_layers]
    assert field(g, "dflash.block_size") == DS.block_size
    assert field(g, "tokenizer.ggml.mask_token_id") == DS.mask_token_id
    assert "dflash.conv_kernel_size" not in g.fields

    h, r = DS.n_embd, DS.markov_rank
    got = shapes(g)
    assert got["markov_w1.weight"] == got["markov_w2.weight"] == (r, N_VOCAB)
    assert got["conf_proj.weight"] == (h + r, 1) and got["conf_proj.bias"] == (1,)
    assert "d2t" not in got and "output.weight" not in got  # a full-vocabulary draft: the target's head
    assert len(got) == 3 + 11 * DS.n_layer + 4 == res.tensor_count
    sd = dspark_state_dict(DS, prefix=prefix)
    data = {t.name: np.asarray(t.data) for t in g.tensors}
    np.testing.assert_array_equal(data["markov_w1.weight"], sd[f"{prefix}markov_head.markov_w1.weight"])
    np.testing.assert_array_equal(data["conf_proj.weight"], sd[f"{prefix}confidence_head.proj.weight"])


def test_dspark_reduced_vocabulary_and_no_confidence_head(tmp_path: Path, target_gguf: Path) -> None:
    """``d2t`` becomes absolute target ids (I64), the draft keeps its own head, ``t2d`` is dropped."""
    spec = replace(DS, draft_vocab=100, confidence_head=False)
    _, g = convert(tmp_path, target_gguf, spec)
    assert field(g, "dflash.has_confidence_head") is False
    got = shapes(g)
    assert got["markov_w2.weight"] == (spec.markov_rank, 100) and got["output.weight"] == (spec.n_embd, 100)
    assert "conf_proj.weight" not in got and "t2d" not in got
    d2t = next(t for t in g.tensors if t.name == "d2t")
    assert d2t.tensor_type == GGMLQuantizationType.I64
    offsets = dspark_state_dict(spec)["d2t"]
    np.testing.assert_array_equal(np.asarray(d2t.data), offsets + np.arange(100))


def test_dspark_speculators_format(tmp_path: Path, target_gguf: Path) -> None:
    """``transformer_layer_config`` is merged, ``aux_hidden_state_layer_ids`` name layer inputs (stored as they are),
    and an EAGLE-3-style export does not sample from the anchor."""
    spec = replace(DS, speculators=True)
    assert "transformer_layer_config" in dspark_config(spec)
    res, g = convert(tmp_path, target_gguf, spec)
    assert field(g, "dflash.target_layers") == [x + 1 for x in DS.target_layers]
    assert res.checkpoint_layers == list(DS.target_layers)
    assert field(g, "dflash.sample_from_anchor") is False
    assert field(g, "dflash.block_count") == DS.n_layer


@pytest.mark.parametrize("spec", [DS, replace(DS, draft_vocab=100), replace(DS, speculators=True)], ids=str)
def test_dspark_loads_in_the_pinned_llama_cpp(
    tmp_path: Path,
    target_gguf: Path,
    spec: TinyDSparkSpec,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from local_eagle.llamacpp.model import Model

    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", spec)
    out = convert_dflash(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f16").outfile
    monkeypatch.setenv("LOCAL_EAGLE_LLAMA_LOG", "1")
    m = Model(out, n_gpu_layers=0, what="DSpark drafter")
    assert m.arch() == "dflash"
    assert (m.n_layer, m.n_embd, m.n_vocab) == (spec.n_layer, spec.n_embd, N_VOCAB)
    assert m.target_layer_ids() == [x + 1 for x in spec.target_layers]
    log = capsys.readouterr().out
    assert f"DFlash with DSpark markov head (rank = {spec.markov_rank})" in log
    assert ("DFlash using d2t mapping (draft_vocab_size = 100)" in log) == (spec.draft_vocab == 100)


def test_dflash_config_optional_scalars_are_written(tmp_path: Path, target_gguf: Path) -> None:
    """DFlashModel.set_gguf_parameters' optional keys, for any family; dflash_config's block_size wins."""
    cfg = dflash2_config(D2)
    cfg["dflash_config"].update(block_size=6, attention_value_scale=0.5, causal=False)
    cfg.update(block_size=9, output_multiplier=2.0, final_logit_softcapping=0.0, input_embedding_scale=3.0,
               rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5})  # fmt: skip
    del cfg["rope_theta"]
    _, g = convert(tmp_path, target_gguf, D2, config=cfg)
    assert field(g, "dflash.block_size") == 6
    assert field(g, "dflash.attention.value_scale") == 0.5
    assert field(g, "dflash.logit_scale") == 2.0 and field(g, "dflash.embedding_scale") == 3.0
    assert "dflash.final_logit_softcapping" not in g.fields  # written only when positive
    assert field(g, "dflash.attention.causal") is False
    assert field(g, "dflash.rope.dimension_count") == D2.head_dim // 2
    assert field(g, "dflash.rope.freq_base") == 5e5


def test_cli_reports_the_family(tmp_path: Path, target_gguf: Path) -> None:
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", DS)
    out = tmp_path / "d.gguf"
    res = runner.invoke(app, ["convert", str(ckpt), "--target", str(target_gguf), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["family"] == "dspark"


def _d2cfg(**dcfg: Any) -> dict[str, Any]:
    cfg = dflash2_config(D2)
    for k, v in dcfg.items():
        if v is None:
            cfg["dflash_config"].pop(k, None)
        else:
            cfg["dflash_config"][k] = v
    return cfg


def _dscfg(**edits: Any) -> dict[str, Any]:
    cfg = dspark_config(DS)
    for k, v in edits.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def _d2sd(drop: str | None = None, **extra: np.ndarray) -> dict[str, np.ndarray]:
    sd = dflash2_state_dict(D2)
    if drop:
        sd.pop(drop)
    sd.update(extra)
    return sd


def _dssd(drop: str | None = None, **extra: np.ndarray) -> dict[str, np.ndarray]:
    sd = dspark_state_dict(DS)
    if drop:
        sd.pop(drop)
    sd.update(extra)
    return sd


BAD: dict[str, tuple[Any, dict[str, Any] | None, dict[str, np.ndarray] | None, tuple[str, ...]]] = {
    # DFlash2
    "DFlash2 without conv_kernel_size": (D2, _d2cfg(conv_kernel_size=None), None, ("config.json", "conv_kernel_size")),
    "DFlash2 without selector_top_k": (D2, _d2cfg(selector_top_k=None), None, ("config.json", "selector_top_k")),
    "DFlash2 group not dividing the width": (D2, _d2cfg(conv_group_size=24), None, ("config.json", "conv_group_size")),
    "DFlash2 top-k too large": (D2, _d2cfg(selector_top_k=8), None, ("config.json", "selector_top_k", "72")),
    "DFlash2 missing a conv": (
        D2,
        None,
        _d2sd(drop="layers.1.mlp_conv.kernel_projection.weight"),
        ("ckpt", "'layers.1.mlp_conv.kernel_projection.weight'"),
    ),
    "DFlash2 missing the selector": (
        D2,
        None,
        _d2sd(drop="candidate_selector.hidden_projection.weight"),
        ("ckpt", "'candidate_selector.hidden_projection.weight'"),
    ),
    "DFlash2 codebook of another rank": (
        D2,
        None,
        _d2sd(**{"candidate_selector.successor_codebook": np.ones((N_VOCAB, 4), np.float32)}),
        ("ckpt", "'candidate_selector.successor_codebook'", "[265, 4]", "[265, 8]"),
    ),
    "DFlash2 base kernel of another size": (
        D2,
        None,
        _d2sd(**{"layers.0.attention_conv.base_kernel": np.ones((2, 5, 64), np.float32)}),
        ("ckpt", "'layers.0.attention_conv.base_kernel'", "[2, 5, 64]", "[2, 3, 64]"),
    ),
    "a DSpark head in a DFlash2 checkpoint": (
        D2,
        None,
        _d2sd(**{"markov_head.markov_w1.weight": np.ones((N_VOCAB, 8), np.float32)}),
        ("ckpt", "'markov_head.markov_w1.weight'", "DSpark", "DFlash2 checkpoint"),
    ),
    # DSpark
    "DSpark without vocab_size": (DS, _dscfg(vocab_size=None), None, ("config.json", "'vocab_size'")),
    "DSpark of another vocabulary": (DS, _dscfg(vocab_size=300), None, ("config.json", "vocab_size is 300", "265")),
    "DSpark draft vocabulary too large": (
        DS,
        _dscfg(draft_vocab_size=400),
        None,
        ("config.json", "draft_vocab_size 400 exceeds vocab_size 265"),
    ),
    "DSpark of another Markov head": (DS, _dscfg(markov_head_type="gated"), None, ("config.json", "'vanilla'")),
    "DSpark with a bad anchor flag": (
        DS,
        _dscfg(sample_from_anchor="yes"),
        None,
        ("config.json", "sample_from_anchor"),
    ),
    "DSpark aux ids not ints": (
        DS,
        {**dspark_config(replace(DS, speculators=True)), "aux_hidden_state_layer_ids": [0, 2]},
        None,
        ("config.json", "aux_hidden_state_layer_ids"),
    ),
    "DSpark without its Markov head": (
        DS,
        None,
        _dssd(drop="markov_head.markov_w2.weight"),
        ("ckpt", "'markov_head.markov_w2.weight'"),
    ),
    "DSpark Markov head of another vocabulary": (
        DS,
        None,
        _dssd(**{"markov_head.markov_w1.weight": np.ones((200, 8), np.float32)}),
        ("ckpt", "'markov_head.markov_w1.weight'", "[200, 8]", "[265, 8]"),
    ),
    "DSpark reduced vocabulary without d2t": (
        DS,
        _dscfg(draft_vocab_size=100),
        _dssd(**{"markov_head.markov_w2.weight": np.ones((100, 8), np.float32)}),
        ("ckpt", "'d2t'", "draft_vocab_size 100"),
    ),
    "DSpark d2t past the vocabulary": (
        DS,
        _dscfg(draft_vocab_size=4),
        _dssd(
            d2t=np.array([0, 0, 0, 300], np.int64),
            **{"markov_head.markov_w2.weight": np.ones((4, 8), np.float32), "lm_head.weight": np.ones((4, 64), "f4")},
        ),
        ("ckpt", "'d2t'", "draft token 3", "303"),
    ),
    "DSpark d2t twice the same id": (
        DS,
        _dscfg(draft_vocab_size=2),
        _dssd(
            d2t=np.array([1, 0], np.int64),
            **{"markov_head.markov_w2.weight": np.ones((2, 8), np.float32), "lm_head.weight": np.ones((2, 64), "f4")},
        ),
        ("ckpt", "'d2t'", "same target id"),
    ),
    "a DFlash2 conv in a DSpark checkpoint": (
        DS,
        None,
        _dssd(**{"layers.0.attention_conv.base_kernel": np.ones((2, 3, 64), np.float32)}),
        ("ckpt", "'layers.0.attention_conv.base_kernel'", "DFlash2", "DSpark checkpoint"),
    ),
    "interleaved RoPE": (D2, {**dflash2_config(D2), "rope_is_neox_style": False}, None, ("config.json", "neox")),
    "use_swa": (D2, _d2cfg(use_swa=True, swa_window_size=8), None, ("config.json", "sliding-window")),
    "a mask embedding": (DS, None, None, ("mask_embedding.pt", "not supported")),
    "a DeepSeek-V4 DSpark": (DS, _dscfg(architectures=["DeepseekV4DSparkModel"]), None, ("config.json", "DeepSeek-V4")),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_naming_the_file_or_field(tmp_path: Path, target_gguf: Path, case: str) -> None:
    spec, config, sd, needles = BAD[case]
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", spec, config=config, state_dict=sd)
    out = tmp_path / "d.gguf"
    if case == "a mask embedding":
        (ckpt / "mask_embedding.pt").write_bytes(b"")
    with pytest.raises(LocalEagleError) as err:
        convert_dflash(ckpt, target_gguf, out)
    text = str(err.value)
    assert "\n" not in text
    for n in needles:
        assert n in text, text
    assert not out.exists()
    res = runner.invoke(app, ["convert", str(ckpt), "--target", str(target_gguf), "-o", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert needles[-1] in " ".join(res.output.split())

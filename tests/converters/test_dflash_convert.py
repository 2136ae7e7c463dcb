"""DFlash block drafters: a tiny generated checkpoint converts to the GGUF llama.cpp's own converter writes,
the pinned llama.cpp loads it as a ``dflash`` model, and bad input gets one line naming the file or field.

The expected names are transcribed from llama.cpp's sources (upstream versions whose loader matches the
strings and symbols of the libllama llama-cpp-python 0.3.36 ships; its exact vendored tree was not at hand):
``conversion/qwen.py`` ``DFlashModel`` (a ``Qwen3Model``: ``TextModel.set_gguf_parameters`` plus
``dflash.target_layers`` / ``target_hidden_size`` / ``block_size`` / ``mask_token_id`` and the target's
tokenizer), ``src/models/dflash.cpp`` ``load_arch_tensors`` (the tensor table and shapes) and
``common/speculative.cpp`` ``draft-dflash`` (the mask token from ``llama_vocab_mask``, i.e.
``tokenizer.ggml.mask_token_id``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader
from typer.testing import CliRunner

from converters.dflash_gguf import convert_dflash, is_block_drafter
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.testing.tiny_dflash import TinyDFlashSpec, dflash_config, dflash_state_dict, write_dflash_checkpoint

runner = CliRunner()
SPEC = TinyDFlashSpec()

# TextModel.set_gguf_parameters + DFlashModel.set_gguf_parameters, under the dflash architecture
UPSTREAM_KEYS = (
    "general.architecture",
    "general.name",
    "general.file_type",
    "general.quantization_version",
    "dflash.block_count",
    "dflash.context_length",
    "dflash.embedding_length",
    "dflash.feed_forward_length",
    "dflash.attention.head_count",
    "dflash.attention.head_count_kv",
    "dflash.rope.freq_base",
    "dflash.attention.layer_norm_rms_epsilon",
    "dflash.attention.key_length",
    "dflash.attention.value_length",
    "dflash.target_layers",
    "dflash.target_hidden_size",
    "dflash.block_size",
    "dflash.mask_token_id",
    # the target's tokenizer (set_vocab reads the target's folder; here the target's GGUF)
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    # what draft-dflash reads for the block's mask slots
    "tokenizer.ggml.mask_token_id",
)
# dflash.cpp load_arch_tensors: the required top-level tensors (fc, the encoder's hidden_norm as enc.output_norm,
# the decoder's final norm) and each block's Qwen3 tensors; ggml shapes are the torch shapes reversed
UPSTREAM_TOP = {"fc.weight", "enc.output_norm.weight", "output_norm.weight"}
UPSTREAM_BLOCK = (
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "attn_q_norm.weight",
    "attn_k_norm.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
)


def loader_shapes(spec: TinyDFlashSpec) -> dict[str, tuple[int, ...]]:
    """dflash.cpp's create_tensor shapes (ggml order) for a drafter of this spec."""
    h, hd, ff = spec.n_embd, spec.head_dim, spec.n_ff
    shapes = {
        "fc.weight": (len(spec.target_layers) * h, h),
        "enc.output_norm.weight": (h,),
        "output_norm.weight": (h,),
    }
    per = {
        "attn_norm.weight": (h,),
        "attn_q.weight": (h, hd * spec.n_head),
        "attn_k.weight": (h, hd * spec.n_head_kv),
        "attn_v.weight": (h, hd * spec.n_head_kv),
        "attn_output.weight": (hd * spec.n_head, h),
        "attn_q_norm.weight": (hd,),
        "attn_k_norm.weight": (hd,),
        "ffn_norm.weight": (h,),
        "ffn_gate.weight": (h, ff),
        "ffn_up.weight": (h, ff),
        "ffn_down.weight": (ff, h),
    }
    for i in range(spec.n_layer):
        shapes.update({f"blk.{i}.{k}": v for k, v in per.items()})
    return shapes


def field(reader: GGUFReader, key: str) -> Any:
    return reader.fields[key].contents()


@pytest.mark.parametrize("prefix", ["", "model."])
def test_converts_with_every_upstream_key_and_tensor(tmp_path: Path, target_gguf: Path, prefix: str) -> None:
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", SPEC, prefix=prefix)
    assert is_block_drafter(ckpt)
    res = convert_dflash(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32")
    g = GGUFReader(res.outfile)
    missing = [k for k in UPSTREAM_KEYS if k not in g.fields]
    assert not missing, missing
    assert field(g, "general.architecture") == "dflash"
    assert field(g, "dflash.target_layers") == [x + 1 for x in SPEC.target_layers]  # outputs -> inputs
    assert field(g, "dflash.block_size") == SPEC.block_size
    assert field(g, "dflash.mask_token_id") == field(g, "tokenizer.ggml.mask_token_id") == SPEC.mask_token_id
    assert field(g, "dflash.block_count") == SPEC.n_layer
    assert field(g, "dflash.target_hidden_size") == SPEC.n_embd
    assert field(g, "dflash.attention.key_length") == SPEC.head_dim
    target = GGUFReader(target_gguf)
    assert field(g, "tokenizer.ggml.tokens") == field(target, "tokenizer.ggml.tokens")

    shapes = {t.name: tuple(int(x) for x in t.shape) for t in g.tensors}
    assert shapes == loader_shapes(SPEC)
    assert UPSTREAM_TOP | {f"blk.{i}.{n}" for i in range(SPEC.n_layer) for n in UPSTREAM_BLOCK} == set(shapes)
    assert (res.tensor_count, res.block_count, res.checkpoint_layers) == (len(shapes), SPEC.n_layer, [1, 3, 4])

    # values travel unchanged (Qwen3 RoPE is NEOX: no q/k permute), each under its llama.cpp name
    sd = dflash_state_dict(SPEC, prefix=prefix)
    data = {t.name: np.asarray(t.data) for t in g.tensors}
    np.testing.assert_array_equal(data["fc.weight"], sd["fc.weight"])
    np.testing.assert_array_equal(data["enc.output_norm.weight"], sd["hidden_norm.weight"])
    np.testing.assert_array_equal(data["blk.1.attn_q.weight"], sd[f"{prefix}layers.1.self_attn.q_proj.weight"])
    np.testing.assert_array_equal(data["blk.0.attn_k_norm.weight"], sd[f"{prefix}layers.0.self_attn.k_norm.weight"])


def test_own_embeddings_and_head_keep_their_names(tmp_path: Path, target_gguf: Path) -> None:
    sd = dflash_state_dict(SPEC)
    rng = np.random.default_rng(1)
    sd["embed_tokens.weight"] = rng.standard_normal((265, SPEC.n_embd)).astype(np.float32)
    sd["lm_head.weight"] = rng.standard_normal((265, SPEC.n_embd)).astype(np.float32)
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", SPEC, state_dict=sd)
    g = GGUFReader(convert_dflash(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile)
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in g.tensors}
    assert shapes["token_embd.weight"] == shapes["output.weight"] == (SPEC.n_embd, 265)


@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_loads_in_the_pinned_llama_cpp(tmp_path: Path, target_gguf: Path, outtype: str) -> None:
    """llama_model_load takes the GGUF as a dflash model with the converted target layers (no target needed to
    load: dflash.cpp borrows the target's embeddings and head only when it builds a decoding graph)."""
    from local_eagle.llamacpp.model import Model

    spec = replace(SPEC, target_layers=(0, 2, 4), block_size=8)
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", spec)
    out = convert_dflash(ckpt, target_gguf, tmp_path / "d.gguf", outtype=outtype).outfile
    m = Model(out, n_gpu_layers=0, what="DFlash drafter")
    assert m.arch() == "dflash"
    assert (m.n_layer, m.n_embd, m.n_vocab) == (spec.n_layer, spec.n_embd, 265)
    assert m.target_layer_ids() == [1, 3, 5]


def test_cli_converts_a_dflash_checkpoint(tmp_path: Path, target_gguf: Path) -> None:
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", SPEC)
    out = tmp_path / "d.gguf"
    args = ["convert", str(ckpt), "--target", str(target_gguf), "-o", str(out), "--target-layers", "0,4", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2  # fc.weight takes 3 target layers, 2 are named
    assert "fc.weight" in res.output and "3 target layers" in " ".join(res.output.split())
    args[-2] = "4,0,3"
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["checkpoint_layers"] == [4, 0, 3]
    assert field(GGUFReader(out), "dflash.target_layers") == [5, 1, 4]


def _cfg(**edits: Any) -> dict[str, Any]:
    cfg = dflash_config(SPEC)
    for k, v in edits.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def _sd(drop: str | None = None, **extra: np.ndarray) -> dict[str, np.ndarray]:
    sd = dflash_state_dict(SPEC)
    if drop:
        sd.pop(drop)
    sd.update(extra)
    return sd


BAD: dict[str, tuple[dict[str, Any] | None, dict[str, np.ndarray] | None, tuple[str, ...]]] = {
    "no hidden_size": (_cfg(hidden_size=None), None, ("config.json", "'hidden_size'")),
    "hidden_size a string": (_cfg(hidden_size="64"), None, ("config.json", "'hidden_size'")),
    "dflash_config a list": (_cfg(dflash_config=[1]), None, ("config.json", "'dflash_config'")),
    "target layers not ints": (
        _cfg(dflash_config={"mask_token_id": 1, "target_layer_ids": ["a"]}),
        None,
        ("config.json", "target_layer_ids"),
    ),
    "target layer past the target": (
        _cfg(dflash_config={"mask_token_id": 1, "target_layer_ids": [1, 3, 6]}),
        None,
        ("config.json", "target layer id 6", "6 layers"),
    ),
    "the target's last layer": (
        _cfg(dflash_config={"mask_token_id": 1, "target_layer_ids": [1, 3, 5]}),
        None,
        ("config.json", "target layer id 5", "last layer", "cannot capture"),
    ),
    "mask outside the vocabulary": (
        _cfg(dflash_config={"mask_token_id": 265, "target_layer_ids": [1, 3, 4]}),
        None,
        ("config.json", "mask_token_id 265"),
    ),
    "no mask token": (
        _cfg(dflash_config={"target_layer_ids": [1, 3, 4]}),
        None,
        ("config.json", "mask_token_id"),
    ),
    "block size 1": (_cfg(block_size=1), None, ("config.json", "'block_size'")),
    "hidden size unlike the target's": (
        _cfg(target_hidden_size=128),
        None,
        ("config.json", "target_hidden_size is 128", "embedding_length 64"),
    ),
    "yarn rope": (_cfg(rope_scaling={"rope_type": "yarn", "factor": 4.0}), None, ("config.json", "'yarn'")),
    "sliding window": (_cfg(layer_types=["sliding_attention", "full_attention"]), None, ("config.json", "sliding")),
    "a DeepSeek-V4 DSpark checkpoint": (_cfg(architectures=["DeepseekV4DSparkModel"]), None, ("config.json", "DSpark")),
    "missing fc": (None, _sd(drop="fc.weight"), ("ckpt", "missing tensor 'fc.weight'")),
    "missing a layer tensor": (
        None,
        _sd(drop="layers.1.self_attn.k_norm.weight"),
        ("ckpt", "'layers.1.self_attn.k_norm.weight'"),
    ),
    "a layer past num_hidden_layers": (
        None,
        _sd(**{"layers.2.input_layernorm.weight": np.ones(64, np.float32)}),
        ("ckpt", "'layers.2.input_layernorm.weight'", "2 layers"),
    ),
    "an unknown tensor": (None, _sd(**{"extra.weight": np.ones(4, np.float32)}), ("ckpt", "'extra.weight'")),
    "a Markov head": (
        None,
        _sd(**{"markov_head.markov_w1.weight": np.ones((265, 8), np.float32)}),
        ("ckpt", "markov_head.markov_w1.weight", "DSpark"),
    ),
    "a reduced vocabulary": (None, _sd(d2t=np.arange(265, dtype=np.int64)), ("ckpt", "'d2t'")),
    "fc for two layers": (
        None,
        _sd(**{"fc.weight": np.ones((64, 128), np.float32)}),
        ("ckpt", "'fc.weight'", "[64, 128]", "2 target layers, but 3 are named"),
    ),
    "q_proj of the wrong width": (
        None,
        _sd(**{"layers.0.self_attn.q_proj.weight": np.ones((48, 64), np.float32)}),
        ("ckpt", "'layers.0.self_attn.q_proj.weight'", "[48, 64]", "[64, 64]"),
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_naming_the_file_or_field(tmp_path: Path, target_gguf: Path, case: str) -> None:
    config, sd, needles = BAD[case]
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", SPEC, config=config, state_dict=sd)
    out = tmp_path / "d.gguf"
    with pytest.raises(LocalEagleError) as err:
        convert_dflash(ckpt, target_gguf, out)
    text = str(err.value)
    assert "\n" not in text
    for n in needles:
        assert n in text, text
    assert not out.exists()
    assert not list(tmp_path.glob(".d.gguf.*")), "temporary file left behind"
    res = runner.invoke(app, ["convert", str(ckpt), "--target", str(target_gguf), "-o", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert needles[-1] in " ".join(res.output.split())


def test_a_drafter_as_target_is_refused(tmp_path: Path, target_gguf: Path) -> None:
    ckpt = write_dflash_checkpoint(tmp_path / "ckpt", SPEC)
    first = convert_dflash(ckpt, target_gguf, tmp_path / "d.gguf").outfile
    with pytest.raises(LocalEagleError, match="is a dflash drafter, expected the target"):
        convert_dflash(ckpt, first, tmp_path / "d2.gguf")


def test_a_checkpoint_without_dflash_config_goes_to_the_eagle_reader(tmp_path: Path) -> None:
    d = tmp_path / "eagle"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    assert not is_block_drafter(d)
    (d / "config.json").write_text("{not json")
    assert not is_block_drafter(d)


def test_llama_cpp_captures_layer_inputs(target_gguf: Path) -> None:
    """Why ``dflash.target_layers`` is each checkpoint id plus one: the pinned llama.cpp's capture of layer 0 is the
    token embeddings, the input of layer 0, so capture ``id + 1`` is the output of layer ``id``, the state a DFlash
    checkpoint's ``target_layer_ids`` name."""
    from local_eagle.llamacpp.model import Context, ContextOptions, Model
    from local_eagle.llamacpp.staging import staging

    embd = {t.name: np.asarray(t.data) for t in GGUFReader(target_gguf).tensors}["token_embd.weight"]
    ctx = Context(Model(target_gguf, n_gpu_layers=0), ContextOptions(n_ctx=64, n_batch=16, n_ubatch=16, type_k=0))
    for il in (0, 1):
        staging.set_embeddings_layer_inp(ctx.ptr, il, True)
    tokens = np.array([1, 50, 60, 70])
    ctx.decode(tokens, np.arange(4), outputs=True)
    rows = [np.ctypeslib.as_array(staging.get_embeddings_layer_inp(ctx.ptr, il), shape=(4, 64)) for il in (0, 1)]
    np.testing.assert_allclose(rows[0], embd[tokens], rtol=0, atol=1e-6)
    assert np.abs(rows[1] - embd[tokens]).max() > 0.1

"""Pack a DFlash block drafter checkpoint into the ``dflash`` GGUF that the pinned llama.cpp loads.

DFlash (z-lab, "block diffusion for flash speculative decoding") drafts a whole block in one
forward pass: the block ``[last token, <mask> * (block_size - 1)]`` attends over K/V that the
target's hidden states (captured at ``target_layer_ids``, fused by ``fc`` + ``hidden_norm``)
put into the drafter's cache. Its body is a Qwen3 decoder stack without embeddings or head: the
drafter borrows both from the target at run time.

The GGUF written here holds what llama.cpp's own converter (``conversion/qwen.py``,
``DFlashModel``) writes for the same checkpoint -- the Qwen3 text-model keys under ``dflash.``,
``dflash.target_layers`` (the checkpoint's ids plus one, ``gguf_target_layers``) / ``target_hidden_size`` /
``block_size`` / ``mask_token_id`` and the target's tokenizer -- with the tensor names
``src/models/dflash.cpp`` loads. The tokenizer comes from the target's GGUF rather than its Hugging
Face folder (the same keys, as llama.cpp wrote them for the target), and the mask token is also
written as ``tokenizer.ggml.mask_token_id``, which is where ``common/speculative.cpp``'s
``draft-dflash`` reads it (``llama_vocab_mask``).

DSpark (a Markov and a confidence head) and DFlash2 (per-layer dynamic convolutions and a
candidate selector) share the architecture: their keys and tensors are read in ``dflash_variants``
and written here beside the DFlash ones, as llama.cpp's ``DSparkModel`` / ``DFlashModel`` write them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter, Keys

from converters import dflash_variants as variants
from converters.eagle3_gguf import FILE_TYPES, open_inputs, write_tensors
from converters.formats import _to_numpy, load_weights
from local_eagle.errors import CheckpointError, LocalEagleError
from local_eagle.files import atomic_output
from local_eagle.gguf import ModelInfo, copy_fields
from local_eagle.gguf.check import read_json
from local_eagle.gguf.keys import (
    KEY_DFLASH_BLOCK_SIZE,
    KEY_DFLASH_MASK_TOKEN,
    KEY_DFLASH_TARGET_HIDDEN,
    KEY_DFLASH_TARGET_LAYERS,
)

ARCH = "dflash"
# The Hugging Face architecture names llama.cpp's converter registers for the dflash GGUF (``DFlashModel``,
# ``DSparkModel``), and the block-drafter names it does not take or local-eagle refuses (dflash_variants).
DFLASH_ARCHITECTURES = ("DFlashDraftModel", *variants.DFLASH2_ARCHITECTURES, *variants.DSPARK_ARCHITECTURES)
UNSUPPORTED_ARCHITECTURES = variants.REFUSED_ARCHITECTURES
# a DSpark / DFlash2 part in a checkpoint whose config names another family
VARIANT_TENSOR = re.compile(
    r"(^|\.)(markov_head|confidence_head|candidate_selector)\.|(^|\.)(attention_conv|mlp_conv)\."
)

LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_TENSORS = {
    "fc.weight": "fc.weight",
    "hidden_norm.weight": "enc.output_norm.weight",  # DFLASH_HIDDEN_NORM: the loader's output_norm_enc
    "norm.weight": "output_norm.weight",
    "embed_tokens.weight": "token_embd.weight",  # optional: drafts that carry their own embeddings
    "lm_head.weight": "output.weight",  # optional: drafts that carry their own head
}
REQUIRED_TOP = ("fc.weight", "hidden_norm.weight", "norm.weight")
IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")
CONFIG_INTS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "max_position_embeddings",
)
LAYER_NAME = re.compile(r"^layers\.(\d+)\.(.+)$")
FAMILY_NAMES = {"dflash": "DFlash", "dflash2": "DFlash2", "dspark": "DSpark"}


@dataclass
class DFlashResult:
    """What ``convert_dflash`` wrote, for the CLI's one line and ``--json``."""

    outfile: Path
    family: str
    target_layers: list[int]  # dflash.target_layers: the captured layer inputs
    checkpoint_layers: list[int]  # the checkpoint's target_layer_ids: the layers whose outputs those are
    block_size: int
    mask_token_id: int
    block_count: int
    tensor_count: int
    nbytes: int


def is_block_drafter(draft_dir: str | os.PathLike[str]) -> bool:
    """Whether a checkpoint directory holds a DFlash / DSpark / DFlash2 drafter (so ``convert`` picks this path).

    Judged by config.json alone: its architectures or a ``dflash_config`` block; anything unreadable is
    left to the EAGLE reader, which reports it in its own words.
    """
    path = Path(draft_dir) / "config.json"
    try:
        raw = read_json(path)
    except LocalEagleError:
        return False
    if not isinstance(raw, dict):
        return False
    archs = raw.get("architectures") or []
    names = set(DFLASH_ARCHITECTURES) | set(UNSUPPORTED_ARCHITECTURES)
    return isinstance(raw.get("dflash_config"), dict) or any(isinstance(a, str) and a in names for a in archs)


def _int_field(raw: dict[str, Any], key: str, path: Path, lo: int = 1, hi: int = 1 << 24) -> int:
    v = raw.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise CheckpointError(f"{path}: '{key}' is {str(v)[:40]}, expected an integer from {lo} to {hi}")
    return v


def _float_field(raw: dict[str, Any], key: str, path: Path, default: float) -> float:
    v = raw.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
        raise CheckpointError(f"{path}: '{key}' is {str(v)[:40]}, expected a positive number")
    return float(v)


def read_dflash_config(draft_dir: Path) -> dict[str, Any]:
    """config.json of a DFlash / DFlash2 / DSpark checkpoint, checked and flattened: what the GGUF is written from."""
    path = draft_dir / "config.json"
    if not draft_dir.is_dir():
        raise CheckpointError(f"{draft_dir}: not a directory (expected a DFlash checkpoint directory)")
    if not path.is_file():
        raise CheckpointError(f"{path}: missing config.json")
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    family = variants.family_of(raw, path)
    dspark: dict[str, Any] = {}
    if family == "dspark":
        raw, dspark = variants.dspark_hparams(raw, path)
    dcfg = raw.get("dflash_config", {})
    if dcfg is None:
        dcfg = {}
    if not isinstance(dcfg, dict):
        raise CheckpointError(f"{path}: 'dflash_config' is {str(dcfg)[:40]}, expected a JSON object")
    cfg: dict[str, Any] = {k: _int_field(raw, k, path) for k in CONFIG_INTS}
    cfg["num_key_value_heads"] = _int_field(
        {"num_key_value_heads": raw.get("num_key_value_heads", cfg["num_attention_heads"])}, "num_key_value_heads", path
    )
    head_dim = raw.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    cfg["head_dim"] = _int_field({"head_dim": head_dim}, "head_dim", path)
    cfg["rms_norm_eps"] = _float_field(raw, "rms_norm_eps", path, 1e-6)
    rp = raw.get("rope_parameters")
    rp = rp if isinstance(rp, dict) else {}
    theta = raw.get("rope_theta", rp.get("rope_theta"))  # newer exports keep it in rope_parameters
    cfg["rope_theta"] = _float_field({"rope_theta": theta}, "rope_theta", path, 10000.0)
    # DFlashModel: dflash_config's block_size first, then the top level's, else 16
    block = dcfg.get("block_size", raw.get("block_size", 16))
    cfg["block_size"] = _int_field({"block_size": block}, "block_size", path, 2, 1024)
    rs = raw.get("rope_scaling") or rp
    kind = str((rs or {}).get("rope_type") or (rs or {}).get("type") or "default").lower() if rs else "default"
    if kind != "default":
        raise CheckpointError(
            f"{path}: rope_scaling type {kind!r} is not supported for DFlash drafters yet (plain RoPE only)"
        )
    layer_types = raw.get("layer_types") or []
    swa_size = dcfg.get("swa_window_size") or raw.get("sliding_window")
    swa = (raw.get("use_sliding_window") or dcfg.get("use_swa")) and swa_size
    if swa or any(t == "sliding_attention" for t in layer_types):
        raise CheckpointError(
            f"{path}: sliding-window attention (layer_types, use_sliding_window or dflash_config.use_swa); "
            "sliding-window DFlash drafters are not supported yet"
        )
    if raw.get("rope_is_neox_style", True) is False:
        raise CheckpointError(
            f"{path}: 'rope_is_neox_style' is false; interleaved-RoPE drafters (which llama.cpp's converter permutes "
            "to NeoX order) are not supported yet"
        )
    if (draft_dir / "mask_embedding.pt").exists():
        raise CheckpointError(
            f"{draft_dir / 'mask_embedding.pt'}: a drafter with its own mask embedding (patched into the target's "
            "embeddings by llama.cpp's converter) is not supported yet"
        )
    layers = dcfg.get("target_layer_ids", raw.get("target_layer_ids"))
    if layers is not None and (
        not isinstance(layers, list) or not layers or any(isinstance(x, bool) or not isinstance(x, int) for x in layers)
    ):
        raise CheckpointError(
            f"{path}: 'dflash_config.target_layer_ids' is {str(layers)[:60]}, expected a list of ints"
        )
    cfg["target_layer_ids"] = layers
    mask = dcfg.get("mask_token_id", raw.get("mask_token_id"))
    if mask is not None and (isinstance(mask, bool) or not isinstance(mask, int) or mask < 0):
        raise CheckpointError(f"{path}: 'dflash_config.mask_token_id' is {str(mask)[:40]}, expected a token id")
    cfg["mask_token_id"] = mask
    ths = raw.get("target_hidden_size")
    cfg["target_hidden_size"] = None if ths is None else _int_field(raw, "target_hidden_size", path)
    cfg["dflash2"] = variants.dflash2_fields(raw, dcfg, family, path)
    if cfg["dflash2"] and family == "dflash":
        family = "dflash2"  # DFlashModel takes both names alike: the conv / selector fields make it one
    cfg["family"] = family
    cfg.update(dspark)
    cfg["optional_keys"] = variants.optional_keys(raw, dcfg, cfg["head_dim"], path)
    return cfg


def parse_layer_list(text: str) -> list[int]:
    """``--target-layers`` for a block drafter: one or more comma-separated layer ids (DFlash drafters take 5 or so)."""
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise LocalEagleError(f"--target-layers: expected integers like 1,9,17,25,33, got {text[:60]!r}") from None
    if not layers or any(x < 0 for x in layers):
        raise LocalEagleError(f"--target-layers: expected non-negative layer ids, got {text[:60]!r}")
    return layers


def gguf_target_layers(layer_ids: list[int]) -> list[int]:
    """``dflash.target_layers`` for a checkpoint's ``target_layer_ids``: each id plus one.

    DFlash checkpoints name the target layer whose *output* the drafter was trained on (z-lab's and
    SpecForge's ``hidden_states[id + 1]``); llama.cpp captures layer *inputs*
    (``llama_set_embeddings_layer_inp``: layer 0's input is the token embeddings), and the output of
    layer ``id`` is the input of layer ``id + 1``. llama.cpp's converter writes the ids so shifted
    (a Qwen3-8B drafter's ``[1, 9, 17, 25, 33]`` loads as ``extract_layers = [2, 10, 18, 26, 34]``).
    """
    return [int(x) + 1 for x in layer_ids]


def default_target_layers(n_target: int, n_draft: int) -> list[int]:
    """llama.cpp's fallback when a config names no layers: evenly spaced over the target (SpecForge's rule)."""
    return [max(0, (i + 1) * n_target // (n_draft + 1) - 1) for i in range(n_draft)]


def read_dflash_tensors(draft_dir: Path, cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """The checkpoint's tensors, each one accounted for: DFlash ones under their canonical (un-prefixed) names,
    DSpark / DFlash2 ones under their GGUF names (``cfg["sources"]`` keeps the checkpoint's names for errors)."""
    out: dict[str, np.ndarray] = {}
    n_layer, family = cfg["num_hidden_layers"], cfg["family"]
    sources: dict[str, str] = {}
    for name, t in load_weights(draft_dir).items():
        if IGNORED.search(name):
            continue
        cname = name.removeprefix("model.")
        gname = variants.variant_tensor_name(cname, family, n_layer)
        if gname is not None:
            if gname in out:
                raise CheckpointError(f"{draft_dir}: tensor '{name}' appears twice (as '{sources[gname]}' too)")
            out[gname], sources[gname] = _to_numpy(t), name
            continue
        m = VARIANT_TENSOR.search(cname)
        owner = "DSpark" if m and (m.group(2) or "") in ("markov_head", "confidence_head") else "DFlash2"
        if m and owner.lower() != family:
            raise CheckpointError(
                f"{draft_dir}: tensor '{name}' belongs to a {owner} drafter, but config.json's architectures make this "
                f"a {FAMILY_NAMES[family]} checkpoint (docs/block-drafters.md)"
            )
        if cname in ("d2t", "t2d"):
            arr = _to_numpy(t)
            if family == "dspark":  # DSparkModel keeps d2t (as absolute target ids) and drops t2d
                if cname == "d2t":
                    out["d2t"] = variants.dspark_d2t(arr, cfg, draft_dir)
                continue
            if cname == "d2t" and arr.size and np.any(arr != 0):
                raise CheckpointError(
                    f"{draft_dir}: tensor 'd2t' maps a reduced draft vocabulary; DFlash drafters share the target's "
                    "vocabulary and llama.cpp's converter drops d2t, so a non-identity map cannot be kept"
                )
            continue  # identity maps: llama.cpp's converter drops them too
        if family == "dspark" and cname == "lm_head.weight" and cfg["draft_vocab_size"] == cfg["vocab_size"]:
            continue  # DSparkModel.modify_tensors: a full-vocabulary draft uses the target's head
        m = LAYER_NAME.match(cname)
        if m:
            if int(m.group(1)) >= n_layer or m.group(2) not in LAYER_TENSORS:
                raise CheckpointError(
                    f"{draft_dir}: unexpected tensor '{name}' for a {FAMILY_NAMES[family]} drafter with "
                    f"{n_layer} layers"
                )
        elif cname not in TOP_TENSORS:
            raise CheckpointError(f"{draft_dir}: unexpected tensor '{name}' for a {FAMILY_NAMES[family]} drafter")
        if cname in out:
            raise CheckpointError(f"{draft_dir}: tensor '{cname}' appears twice (with and without 'model.')")
        out[cname] = _to_numpy(t)
    for name in REQUIRED_TOP:
        if name not in out:
            raise CheckpointError(f"{draft_dir}: missing tensor '{name}'")
    for i in range(n_layer):
        for suffix in LAYER_TENSORS:
            if f"layers.{i}.{suffix}" not in out:
                raise CheckpointError(f"{draft_dir}: missing tensor 'layers.{i}.{suffix}'")
    for gname, cname in variants.required_variant_tensors(cfg):
        if gname not in out:
            raise CheckpointError(f"{draft_dir}: missing tensor '{cname}' (a {FAMILY_NAMES[family]} drafter's)")
    if family == "dspark" and cfg["draft_vocab_size"] < cfg["vocab_size"]:
        for need in ("d2t", "lm_head.weight"):
            if need not in out:
                raise CheckpointError(
                    f"{draft_dir}: missing tensor '{need}': draft_vocab_size {cfg['draft_vocab_size']} is below "
                    f"vocab_size {cfg['vocab_size']}, and a reduced vocabulary needs its map and its own head"
                )
    cfg["sources"] = sources
    return out


def expected_shapes(cfg: dict[str, Any], n_layers_in: int, n_vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor's torch shape, as ``dflash.cpp``'s ``load_arch_tensors`` will demand it (reversed)."""
    h, ff, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    per_layer = {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (nq, h),
        "self_attn.k_proj.weight": (nkv, h),
        "self_attn.v_proj.weight": (nkv, h),
        "self_attn.o_proj.weight": (h, nq),
        "self_attn.q_norm.weight": (hd,),
        "self_attn.k_norm.weight": (hd,),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate_proj.weight": (ff, h),
        "mlp.up_proj.weight": (ff, h),
        "mlp.down_proj.weight": (h, ff),
    }
    shapes = {
        "fc.weight": (h, n_layers_in * h),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
        "embed_tokens.weight": (n_vocab, h),
        "lm_head.weight": (n_vocab, h),
    }
    for i in range(cfg["num_hidden_layers"]):
        shapes.update({f"layers.{i}.{k}": v for k, v in per_layer.items()})
    return shapes


def plan_dflash(
    draft_dir: Path, target: ModelInfo, target_kv: dict[str, Any], target_layers: list[int] | None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Check a DFlash checkpoint against its target; return (resolved config, canonical tensors)."""
    cfg = read_dflash_config(draft_dir)
    cpath = draft_dir / "config.json"
    h = cfg["hidden_size"]
    if h % cfg["num_attention_heads"] or cfg["num_attention_heads"] % cfg["num_key_value_heads"]:
        raise CheckpointError(
            f"{cpath}: num_attention_heads {cfg['num_attention_heads']} must divide hidden_size {h} and be a "
            f"multiple of num_key_value_heads {cfg['num_key_value_heads']}"
        )
    ths = cfg["target_hidden_size"] or target.n_embd
    if ths != target.n_embd:
        raise CheckpointError(
            f"{cpath}: target_hidden_size is {ths} but target {target.path.name} has embedding_length {target.n_embd}"
        )
    if h != target.n_embd:
        # dflash.cpp sizes fc as {n_target_layers * n_embd, n_embd} with the drafter's own n_embd, and the
        # drafter embeds its block with the target's token_embd: both widths must agree
        raise CheckpointError(
            f"{cpath}: hidden_size is {h} but target {target.path.name} has embedding_length {target.n_embd}; "
            "llama.cpp's dflash drafter shares the target's embeddings and needs the same width"
        )
    cfg["target_hidden_size"] = ths
    layers = target_layers or cfg["target_layer_ids"] or default_target_layers(target.n_layer, cfg["num_hidden_layers"])
    last = target.n_layer - 1
    for lid in layers:
        if lid == last:
            raise CheckpointError(
                f"{cpath}: target layer id {lid} is the last layer of target {target.path.name}: its output is the "
                "target's final hidden state, which llama.cpp cannot capture (it captures layer inputs, "
                f"of layers 0..{last})"
            )
        if not 0 <= lid < last:
            raise CheckpointError(
                f"{cpath}: target layer id {lid} is out of range for target {target.path.name} "
                f"with {target.n_layer} layers (expected 0..{last - 1})"
            )
    cfg["checkpoint_layers"] = [int(x) for x in layers]
    cfg["target_layers"] = gguf_target_layers(layers)
    mask = cfg["mask_token_id"]
    if mask is None:
        mask = target_kv.get(Keys.Tokenizer.MASK_ID)
        if not isinstance(mask, int):
            raise CheckpointError(
                f"{cpath}: no 'dflash_config.mask_token_id' and the target's tokenizer names no mask token; "
                "the drafter fills its block with that token"
            )
    if not 0 <= mask < target.n_vocab:
        raise CheckpointError(
            f"{cpath}: mask_token_id {mask} is outside the target vocabulary of {target.n_vocab} tokens"
        )
    cfg["mask_token_id"] = int(mask)
    if cfg["family"] == "dspark" and cfg["vocab_size"] != target.n_vocab:
        raise CheckpointError(
            f"{cpath}: vocab_size is {cfg['vocab_size']} but target {target.path.name} has {target.n_vocab} tokens; "
            "a DSpark drafter's Markov head is keyed on the target's vocabulary"
        )
    tensors = read_dflash_tensors(draft_dir, cfg)
    shapes = expected_shapes(cfg, len(cfg["target_layers"]), target.n_vocab)
    shapes.update(variants.variant_shapes(cfg, tensors, target.n_vocab))
    if cfg["family"] == "dspark":
        shapes["lm_head.weight"] = (cfg["draft_vocab_size"], h)
        shapes["d2t"] = (cfg["draft_vocab_size"],)
    for name, arr in tensors.items():
        want = shapes[name]
        if tuple(arr.shape) != want:
            hint = ""
            if name == "fc.weight" and arr.ndim == 2 and arr.shape[0] == h and arr.shape[1] % h == 0:
                hint = f" ({arr.shape[1] // h} target layers, but {len(cfg['target_layers'])} are named)"
            raise CheckpointError(
                f"{draft_dir}: tensor '{cfg['sources'].get(name, name)}' has shape {list(arr.shape)}, "
                f"expected {list(want)}{hint}"
            )
    return cfg, tensors


def gguf_tensors(tensors: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """The tensors under their GGUF names, top-level first and then by block (llama.cpp's Qwen3 RoPE is NEOX:
    q/k rows keep Hugging Face's order, unlike the llama-family permute of the EAGLE path)."""
    out = [(TOP_TENSORS[k], v) for k, v in tensors.items() if k in TOP_TENSORS]
    order = list(LAYER_TENSORS) + [f"{p}_conv_{k}" for p in ("attn", "ffn") for k in ("base", "proj.weight")]
    blocks = []
    for k, v in tensors.items():
        m = LAYER_NAME.match(k)
        if m:
            bid, part = int(m.group(1)), m.group(2)
            blocks.append((bid, order.index(part), f"blk.{bid}.{LAYER_TENSORS[part]}", v))
        elif k.startswith("blk."):  # a DFlash2 block's convolutions, already under their GGUF names
            bid, _, part = k.removeprefix("blk.").partition(".")
            blocks.append((int(bid), order.index(part), k, v))
        elif k not in TOP_TENSORS:  # the DSpark / DFlash2 top-level tensors, already under their GGUF names
            out.append((k, v))
    out += [(name, v) for _, _, name, v in sorted(blocks, key=lambda b: (b[0], b[1]))]
    return out


def convert_dflash(
    draft_dir: str | os.PathLike[str],
    target_gguf: str | os.PathLike[str],
    outfile: str | os.PathLike[str],
    outtype: str = "f16",
    target_layers: list[int] | None = None,
    progress: bool = False,
) -> DFlashResult:
    """Convert a DFlash / DFlash2 / DSpark checkpoint directory into a ``dflash`` GGUF paired with ``target_gguf``."""
    out, reader, target = open_inputs(draft_dir, target_gguf, outfile, outtype)
    if target.arch in (ARCH, "eagle3"):
        raise LocalEagleError(f"{target_gguf}: is a {target.arch} drafter, expected the target model's GGUF")
    cfg, tensors = plan_dflash(Path(draft_dir), target, reader.kv, target_layers)
    ordered = gguf_tensors(tensors)
    with atomic_output(out) as tmp:
        w = GGUFWriter(tmp, ARCH)
        w.add_name(f"{target.name or target.path.stem} {FAMILY_NAMES[cfg['family']]} drafter")
        w.add_file_type(FILE_TYPES[outtype])
        w.add_quantization_version(2)
        # the Qwen3 text-model keys (TextModel.set_gguf_parameters)
        w.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=ARCH), cfg["num_hidden_layers"])
        w.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=ARCH), cfg["max_position_embeddings"])
        w.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=ARCH), cfg["hidden_size"])
        w.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=ARCH), cfg["intermediate_size"])
        w.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=ARCH), cfg["num_attention_heads"])
        w.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=ARCH), cfg["num_key_value_heads"])
        w.add_float32(Keys.Rope.FREQ_BASE.format(arch=ARCH), cfg["rope_theta"])
        w.add_float32(Keys.Attention.LAYERNORM_RMS_EPS.format(arch=ARCH), cfg["rms_norm_eps"])
        w.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=ARCH), cfg["head_dim"])
        w.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=ARCH), cfg["head_dim"])
        # the DFlash keys (DFlashModel.set_gguf_parameters)
        w.add_key_value(KEY_DFLASH_TARGET_LAYERS, cfg["target_layers"], GGUFValueType.ARRAY, GGUFValueType.INT32)
        w.add_uint32(KEY_DFLASH_TARGET_HIDDEN, cfg["target_hidden_size"])
        w.add_uint32(KEY_DFLASH_BLOCK_SIZE, cfg["block_size"])
        w.add_uint32(KEY_DFLASH_MASK_TOKEN, cfg["mask_token_id"])
        # DFlashModel's optional scalars, then the DFlash2 conv / selector keys and DSparkModel's two flags
        for key, val in cfg["optional_keys"] + variants.variant_keys(cfg, {n for n, _ in ordered}):
            if isinstance(val, bool):
                w.add_bool(key, val)
            elif isinstance(val, int):
                w.add_uint32(key, val)
            else:
                w.add_float32(key, val)
        for key, val, vtype, sub in copy_fields(reader, "tokenizer."):
            if key != Keys.Tokenizer.MASK_ID:
                w.add_key_value(key, val, vtype, sub)
        w.add_uint32(Keys.Tokenizer.MASK_ID, cfg["mask_token_id"])
        n_tensors = write_tensors(w, ordered, outtype, progress)
        nbytes = tmp.stat().st_size
    return DFlashResult(
        outfile=out,
        family=cfg["family"],
        target_layers=cfg["target_layers"],
        checkpoint_layers=cfg["checkpoint_layers"],
        block_size=cfg["block_size"],
        mask_token_id=cfg["mask_token_id"],
        block_count=cfg["num_hidden_layers"],
        tensor_count=n_tensors,
        nbytes=nbytes,
    )

"""The DSpark and DFlash2 parts of a ``dflash`` GGUF: what they add to a DFlash checkpoint, read and checked.

Both are written by llama.cpp's own converter as the ``dflash`` architecture (``conversion/qwen.py`` of the
llama.cpp that llama-cpp-python 0.3.36 vendors): ``DFlashModel`` is registered for ``DFlashDraftModel`` *and*
``DFlash2DraftModel``, and ``DSparkModel(DFlashModel)`` for the Qwen3-backbone DSpark names. The names and
shapes below are that converter's (and its ``gguf-py`` tensor map's) and ``src/models/dflash.cpp``'s:

- **DFlash2** (``dflash_config.conv_kernel_size`` present): the keys ``dflash.conv_kernel_size`` /
  ``conv_group_size`` / ``selector_rank`` / ``selector_top_k`` (all four from ``dflash_config``), per-layer
  dynamic convolutions ``layers.N.attention_conv.base_kernel`` -> ``blk.N.attn_conv_base`` (no ``.weight``:
  kept F32), ``layers.N.attention_conv.kernel_projection.weight`` -> ``blk.N.attn_conv_proj.weight`` and the
  same for ``mlp_conv`` -> ``ffn_conv_*``, and the candidate selector
  ``candidate_selector.{predecessor,successor}_codebook`` -> ``selector_{predecessor,successor}.weight``,
  ``candidate_selector.hidden_projection.weight`` -> ``selector_hidden.weight``.
- **DSpark**: a Markov head ``markov_head.markov_w1/markov_w2.weight`` -> ``markov_w1/markov_w2.weight``, an
  optional confidence head ``confidence_head.proj.{weight,bias}`` -> ``conf_proj.{weight,bias}``, the keys
  ``dflash.sample_from_anchor`` and ``dflash.has_confidence_head`` (bools), an optional reduced draft
  vocabulary (``d2t`` written as absolute target ids, I64; the draft's own ``lm_head`` kept only then), and two
  config schemas: DFlash-style top-level ``target_layer_ids`` / ``mask_token_id``, or the speculators
  format's ``transformer_layer_config`` + ``aux_hidden_state_layer_ids`` (ids of layer *inputs*).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from gguf import Keys

from local_eagle.errors import CheckpointError
from local_eagle.gguf.keys import (
    BLOCK_DRAFTER_ARCH,
    KEY_DFLASH_CAUSAL,
    KEY_DFLASH_HAS_CONFIDENCE_HEAD,
    KEY_DFLASH_SAMPLE_FROM_ANCHOR,
)

ARCH = BLOCK_DRAFTER_ARCH
# conversion/qwen.py: @ModelBase.register("DFlashDraftModel", "DFlash2DraftModel") class DFlashModel
DFLASH2_ARCHITECTURES = ("DFlash2DraftModel",)
# conversion/qwen.py: @ModelBase.register(...) class DSparkModel(DFlashModel), a Qwen3 body
DSPARK_ARCHITECTURES = (
    "Qwen3DSparkModel",
    "DSparkDraftModel",
    "DSparkSpeculator",
    "Lfm2DSparkDraftModel",
    "LingDSparkModel",
)
# Names still refused, each with the reason
REFUSED_ARCHITECTURES = {
    "DeepseekV4DSparkModel": "a DSpark drafter on DeepSeek-V4's backbone (llama.cpp's conversion/deepseek.py); "
    "local-eagle converts Qwen3-backbone DSpark drafters only",
    "DeepseekV41DSparkModel": "a DSpark drafter on DeepSeek-V4's backbone, which llama.cpp's converter of the "
    "pinned version does not register; local-eagle converts Qwen3-backbone DSpark drafters only",
    "Gemma4DSparkModel": "a DSpark drafter on Gemma 4's backbone (llama.cpp's conversion/gemma.py); "
    "local-eagle converts Qwen3-backbone DSpark drafters only",
    "DSparkForCausalLM": "a DSpark name the pinned llama.cpp's converter does not register (it takes "
    + ", ".join(DSPARK_ARCHITECTURES) + ")",
    "DsparkSpeculator": "a DSpark name the pinned llama.cpp's converter does not register (it takes "
    + ", ".join(DSPARK_ARCHITECTURES) + ")",
}

DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
DSPARK_TOP = {
    "markov_head.markov_w1.weight": "markov_w1.weight",
    "markov_head.markov_w2.weight": "markov_w2.weight",
    "confidence_head.proj.weight": "conf_proj.weight",
    "confidence_head.proj.bias": "conf_proj.bias",
}
DSPARK_REQUIRED = ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight")
DFLASH2_TOP = {
    # DFlashModel.modify_tensors appends ".weight" to the bare codebook names; a ".weight" one maps the same
    "candidate_selector.predecessor_codebook": "selector_predecessor.weight",
    "candidate_selector.predecessor_codebook.weight": "selector_predecessor.weight",
    "candidate_selector.successor_codebook": "selector_successor.weight",
    "candidate_selector.successor_codebook.weight": "selector_successor.weight",
    "candidate_selector.hidden_projection.weight": "selector_hidden.weight",
}
DFLASH2_LAYER = {
    "attention_conv.base_kernel": "attn_conv_base",
    "attention_conv.kernel_projection.weight": "attn_conv_proj.weight",
    "mlp_conv.base_kernel": "ffn_conv_base",
    "mlp_conv.kernel_projection.weight": "ffn_conv_proj.weight",
}
# DFlashModel.set_gguf_parameters' optional scalars: (config field, also read at the top level, GGUF key, kind)
OPTIONAL_KEYS = (
    ("attention_value_scale", False, "attention.value_scale", "float"),
    ("output_multiplier", True, "logit_scale", "float"),
    ("final_logit_softcapping", True, "final_logit_softcapping", "softcap"),
    ("input_embedding_scale", True, "embedding_scale", "float"),
)


def _ints(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def family_of(raw: dict[str, Any], path: Path) -> str:
    """``dflash``, ``dflash2`` or ``dspark`` from config.json's architectures; a refused name is one line."""
    archs = [a for a in raw.get("architectures") or [] if isinstance(a, str)]
    for a in archs:
        if a in REFUSED_ARCHITECTURES:
            why = REFUSED_ARCHITECTURES[a]
            raise CheckpointError(f"{path}: architectures names {a}, {why} (docs/block-drafters.md)")
    if any(a in DSPARK_ARCHITECTURES for a in archs):
        return "dspark"
    if any(a in DFLASH2_ARCHITECTURES for a in archs):
        return "dflash2"
    return "dflash"


def dspark_hparams(raw: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """DSparkModel.__init__'s reading: (the config as DFlash reads it, the DSpark facts).

    ``sample_from_anchor`` defaults to true for DFlash-lineage exports and false for EAGLE-3-style ones (those
    with ``transformer_layer_config`` or ``aux_hidden_state_layer_ids``); the latter's nested config is merged
    over the top level, and their ``aux_hidden_state_layer_ids`` (layer inputs) become ``target_layer_ids``
    minus one, which the GGUF stores plus one again.
    """
    eagle_style = "transformer_layer_config" in raw or "aux_hidden_state_layer_ids" in raw
    anchor = raw.get("sample_from_anchor", not eagle_style)
    if not isinstance(anchor, bool):
        raise CheckpointError(f"{path}: 'sample_from_anchor' is {str(anchor)[:40]}, expected true or false")
    nested = raw.get("transformer_layer_config")
    if nested is not None:
        if not isinstance(nested, dict):
            raise CheckpointError(f"{path}: 'transformer_layer_config' is {str(nested)[:40]}, expected a JSON object")
        raw = {**raw, **nested}
    if "dflash_config" not in raw:
        if "aux_hidden_state_layer_ids" in raw:
            aux = raw["aux_hidden_state_layer_ids"]
            if not _ints(aux) or min(aux) < 1:
                raise CheckpointError(
                    f"{path}: 'aux_hidden_state_layer_ids' is {str(aux)[:60]}, expected a list of layer ids from 1"
                )
            raw = {**raw, "dflash_config": {"mask_token_id": raw.get("mask_token_id"),
                                            "target_layer_ids": [i - 1 for i in aux]}}  # fmt: skip
        else:
            keep = ("target_layer_ids", "mask_token_id")
            raw = {**raw, "dflash_config": {k: raw[k] for k in keep if k in raw}}
    kind = raw.get("markov_head_type", "vanilla")
    if kind != "vanilla":
        raise CheckpointError(f"{path}: 'markov_head_type' is {str(kind)[:40]!r}; llama.cpp takes 'vanilla' only")
    vocab = raw.get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise CheckpointError(f"{path}: 'vocab_size' is {str(vocab)[:40]}, expected a positive integer")
    draft = raw.get("draft_vocab_size") or vocab
    if isinstance(draft, bool) or not isinstance(draft, int) or draft < 1:
        raise CheckpointError(f"{path}: 'draft_vocab_size' is {str(draft)[:40]}, expected a positive integer")
    if draft > vocab:
        raise CheckpointError(f"{path}: draft_vocab_size {draft} exceeds vocab_size {vocab}")
    return raw, {"sample_from_anchor": anchor, "vocab_size": vocab, "draft_vocab_size": draft}


def dflash2_fields(raw: dict[str, Any], dcfg: dict[str, Any], family: str, path: Path) -> dict[str, int] | None:
    """The four DFlash2 keys from ``dflash_config`` (None for a plain DFlash), checked as dflash.cpp will."""
    if "conv_kernel_size" not in dcfg:
        if family == "dflash2":
            raise CheckpointError(
                f"{path}: 'dflash_config.conv_kernel_size' is missing; a DFlash2 drafter needs "
                "conv_kernel_size, conv_group_size, selector_rank and selector_top_k in dflash_config"
            )
        return None
    out = {}
    for key in DFLASH2_KEYS:
        v = dcfg.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
            raise CheckpointError(f"{path}: 'dflash_config.{key}' is {str(v)[:40]}, expected a positive integer")
        out[key] = v
    h = raw.get("hidden_size")
    if isinstance(h, int) and h % out["conv_group_size"]:
        raise CheckpointError(
            f"{path}: 'dflash_config.conv_group_size' {out['conv_group_size']} does not divide hidden_size {h}"
        )
    k = out["selector_top_k"]
    if isinstance(h, int) and h < k * (k + 1):
        raise CheckpointError(
            f"{path}: 'dflash_config.selector_top_k' {k} is too large for hidden_size {h} (llama.cpp's selector "
            f"lattice needs hidden_size >= top_k * (top_k + 1) = {k * (k + 1)})"
        )
    return out


def optional_keys(raw: dict[str, Any], dcfg: dict[str, Any], head_dim: int, path: Path) -> list[tuple[str, Any]]:
    """The optional scalar keys DFlashModel.set_gguf_parameters writes when the config has them: (key, value)."""
    out: list[tuple[str, Any]] = []
    for field, top, key, kind in OPTIONAL_KEYS:
        v = dcfg[field] if field in dcfg else raw.get(field) if top else None
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise CheckpointError(f"{path}: '{field}' is {str(v)[:40]}, expected a number")
        if kind == "softcap" and v <= 0:
            continue  # written only when positive
        out.append((f"{ARCH}.{key}", float(v)))
    causal = raw.get("is_causal")
    if causal is None:
        causal = dcfg.get("causal")
    if causal is not None:
        if not isinstance(causal, bool):
            raise CheckpointError(f"{path}: 'is_causal' is {str(causal)[:40]}, expected true or false")
        out.append((KEY_DFLASH_CAUSAL, causal))
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    prf = rope.get("partial_rotary_factor", raw.get("partial_rotary_factor")) if isinstance(rope, dict) else None
    if prf is not None:
        if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
            raise CheckpointError(f"{path}: 'partial_rotary_factor' is {str(prf)[:40]}, expected a number in (0, 1]")
        out.append((Keys.Rope.DIMENSION_COUNT.format(arch=ARCH), int(head_dim * prf)))
    return out


def variant_tensor_name(cname: str, family: str, n_layer: int) -> str | None:
    """The GGUF name of a DSpark / DFlash2 tensor (its canonical, un-prefixed name), or None if it is not one."""
    if cname in DSPARK_TOP:
        return DSPARK_TOP[cname] if family == "dspark" else None
    if cname in DFLASH2_TOP:
        return DFLASH2_TOP[cname] if family == "dflash2" else None
    if family == "dflash2" and cname.startswith("layers."):
        bid, _, part = cname.removeprefix("layers.").partition(".")
        if bid.isdigit() and int(bid) < n_layer and part in DFLASH2_LAYER:
            return f"blk.{int(bid)}.{DFLASH2_LAYER[part]}"
    return None


def required_variant_tensors(cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """(a GGUF name the loader demands, the checkpoint name to report) for the family."""
    if cfg["family"] == "dspark":
        return [(DSPARK_TOP[k], k) for k in DSPARK_REQUIRED]
    if cfg["family"] == "dflash2":
        out = [
            ("selector_predecessor.weight", "candidate_selector.predecessor_codebook"),
            ("selector_successor.weight", "candidate_selector.successor_codebook"),
            ("selector_hidden.weight", "candidate_selector.hidden_projection.weight"),
        ]
        for i in range(cfg["num_hidden_layers"]):
            out += [(f"blk.{i}.{g}", f"layers.{i}.{c}") for c, g in DFLASH2_LAYER.items()]
        return out
    return []


def variant_shapes(cfg: dict[str, Any], tensors: dict[str, np.ndarray], n_vocab: int) -> dict[str, tuple[int, ...]]:
    """Torch shapes (dflash.cpp's create_tensor shapes reversed) of the variant's tensors, by GGUF name."""
    h = cfg["hidden_size"]
    if cfg["family"] == "dspark":
        w1 = tensors.get("markov_w1.weight")
        rank = int(w1.shape[-1]) if w1 is not None and w1.ndim == 2 else 0
        return {
            "markov_w1.weight": (n_vocab, rank),
            "markov_w2.weight": (cfg["draft_vocab_size"], rank),
            "conf_proj.weight": (1, h + rank),
            "conf_proj.bias": (1,),
        }
    if cfg["family"] == "dflash2":
        d2 = cfg["dflash2"]
        kernel, rank = d2["conv_kernel_size"], d2["selector_rank"]
        proj = 2 * kernel * (h // d2["conv_group_size"])
        shapes = {
            "selector_predecessor.weight": (n_vocab, rank),
            "selector_successor.weight": (n_vocab, rank),
            "selector_hidden.weight": (rank, h),
        }
        for i in range(cfg["num_hidden_layers"]):
            for part in ("attn", "ffn"):
                shapes[f"blk.{i}.{part}_conv_base"] = (2, kernel, h)
                shapes[f"blk.{i}.{part}_conv_proj.weight"] = (proj, h)
        return shapes
    return {}


def dspark_d2t(d2t: np.ndarray, cfg: dict[str, Any], where: Path) -> np.ndarray:
    """DSparkModel.prepare_tensors: ``d2t`` (offsets) as absolute target ids, int64, each checked."""
    data = np.asarray(d2t).astype(np.int64).reshape(-1)
    n_draft, n_vocab = cfg["draft_vocab_size"], cfg["vocab_size"]
    if data.size != n_draft:
        raise CheckpointError(f"{where}: tensor 'd2t' has {data.size} entries, but draft_vocab_size is {n_draft}")
    data = data + np.arange(data.size, dtype=np.int64)
    bad = np.flatnonzero((data < 0) | (data >= n_vocab))
    if bad.size:
        raise CheckpointError(
            f"{where}: tensor 'd2t' maps draft token {int(bad[0])} to target id {int(data[bad[0]])}, outside "
            f"vocab_size {n_vocab}"
        )
    if np.unique(data).size != data.size:
        raise CheckpointError(f"{where}: tensor 'd2t' maps several draft tokens to the same target id")
    return data


def variant_keys(cfg: dict[str, Any], gguf_names: set[str]) -> list[tuple[str, Any]]:
    """The family's own keys, in DFlashModel / DSparkModel.set_gguf_parameters' order: (key, int or bool)."""
    out: list[tuple[str, Any]] = []
    if cfg.get("dflash2"):
        out += [(f"{ARCH}.{k}", cfg["dflash2"][k]) for k in DFLASH2_KEYS]
    if cfg["family"] == "dspark":
        out.append((KEY_DFLASH_SAMPLE_FROM_ANCHOR, cfg["sample_from_anchor"]))
        out.append((KEY_DFLASH_HAS_CONFIDENCE_HEAD, any(n.startswith("conf_proj.") for n in gguf_names)))
    return out

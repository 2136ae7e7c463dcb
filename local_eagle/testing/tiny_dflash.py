"""Tiny DFlash, DFlash2 and DSpark block-drafter checkpoints, generated on the spot (as ``tiny.py`` makes EAGLE
drafters).

A checkpoint here is what z-lab publishes for a DFlash drafter (``DFlashDraftModel``): config.json
with a ``dflash_config`` block (``target_layer_ids``, ``mask_token_id``) and ``block_size``, and a
model.safetensors of top-level Qwen3 decoder layers plus ``fc`` / ``hidden_norm`` / ``norm``, with no
embeddings or head. Random weights at the tiny target's width, so the converter and llama.cpp's
loader can be exercised on a CPU in a second with nothing downloaded.

The two siblings carry what llama.cpp's converter (``conversion/qwen.py``, ``DFlashModel`` / ``DSparkModel``,
and its ``gguf-py`` tensor map) reads from them: a DFlash2 drafter (``DFlash2DraftModel``) adds
``conv_kernel_size`` / ``conv_group_size`` / ``selector_rank`` / ``selector_top_k`` to ``dflash_config``, each
layer's ``attention_conv`` / ``mlp_conv`` (``base_kernel``, ``kernel_projection.weight``) and a
``candidate_selector`` (``predecessor_codebook``, ``successor_codebook``, ``hidden_projection.weight``); a DSpark
drafter (``Qwen3DSparkModel``, or the speculators format's ``DSparkSpeculator``) keeps ``target_layer_ids`` /
``mask_token_id`` at the top level (or ``aux_hidden_state_layer_ids`` and a ``transformer_layer_config``) and adds
``markov_head.markov_w1/markov_w2.weight``, optionally ``confidence_head.proj.{weight,bias}``, and for a reduced
draft vocabulary ``d2t`` with its own ``lm_head``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from local_eagle.testing.tiny import TinyTargetSpec, random_f32

N_VOCAB = 265  # the tiny target's byte vocabulary


@dataclass(frozen=True)
class TinyDFlashSpec:
    """The shape of a tiny DFlash drafter; ``n_embd`` must equal the target's (the drafter borrows its embeddings)."""

    n_layer: int = 2
    n_embd: int = TinyTargetSpec().n_embd
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 96
    n_ctx: int = 1024
    block_size: int = 4
    target_layers: tuple[int, ...] = (1, 3, 4)
    mask_token_id: int = 264  # the tiny byte vocabulary's last piece
    rope_theta: float = 10000.0
    eps: float = 1e-6
    extra_config: dict[str, Any] = field(default_factory=dict)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def dflash_state_dict(spec: TinyDFlashSpec, seed: int = 0, prefix: str = "") -> dict[str, np.ndarray]:
    """Random weights under the checkpoint's own names (``prefix`` is ``""`` or ``"model."``, as exports differ)."""
    mat, norm = random_f32(np.random.default_rng(seed))
    h, hd = spec.n_embd, spec.head_dim
    sd: dict[str, np.ndarray] = {
        "fc.weight": mat(h, len(spec.target_layers) * h),
        "hidden_norm.weight": norm(h),
        f"{prefix}norm.weight": norm(h),
    }
    for i in range(spec.n_layer):
        p = f"{prefix}layers.{i}."
        sd[p + "input_layernorm.weight"] = norm(h)
        sd[p + "self_attn.q_proj.weight"] = mat(spec.n_head * hd, h)
        sd[p + "self_attn.k_proj.weight"] = mat(spec.n_head_kv * hd, h)
        sd[p + "self_attn.v_proj.weight"] = mat(spec.n_head_kv * hd, h)
        sd[p + "self_attn.o_proj.weight"] = mat(h, spec.n_head * hd)
        sd[p + "self_attn.q_norm.weight"] = norm(hd)
        sd[p + "self_attn.k_norm.weight"] = norm(hd)
        sd[p + "post_attention_layernorm.weight"] = norm(h)
        sd[p + "mlp.gate_proj.weight"] = mat(spec.n_ff, h)
        sd[p + "mlp.up_proj.weight"] = mat(spec.n_ff, h)
        sd[p + "mlp.down_proj.weight"] = mat(h, spec.n_ff)
    return sd


def dflash_config(spec: TinyDFlashSpec, n_vocab: int = 265) -> dict[str, Any]:
    """config.json as z-lab's DFlash drafters write it (Qwen3 fields + ``dflash_config``)."""
    cfg: dict[str, Any] = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "block_size": spec.block_size,
        "dflash_config": {"mask_token_id": spec.mask_token_id, "target_layer_ids": list(spec.target_layers)},
        "hidden_size": spec.n_embd,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.n_ff,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "num_hidden_layers": spec.n_layer,
        "num_target_layers": TinyTargetSpec().n_layer,
        "max_position_embeddings": spec.n_ctx,
        "rms_norm_eps": spec.eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "vocab_size": n_vocab,
        "tie_word_embeddings": False,
        "attention_bias": False,
    }
    cfg.update(spec.extra_config)
    return cfg


@dataclass(frozen=True)
class TinyDFlash2Spec(TinyDFlashSpec):
    """A tiny DFlash2 drafter: DFlash plus dynamic convolutions and a candidate selector (dflash.cpp needs
    ``n_embd % conv_group_size == 0`` and ``n_embd >= top_k * (top_k + 1)``)."""

    conv_kernel_size: int = 3
    conv_group_size: int = 16
    selector_rank: int = 8
    selector_top_k: int = 4


@dataclass(frozen=True)
class TinyDSparkSpec(TinyDFlashSpec):
    """A tiny DSpark drafter: DFlash plus a Markov head of ``markov_rank`` and (optionally) a confidence head.

    ``draft_vocab`` below the target's 265 makes a reduced draft vocabulary (``d2t`` and the draft's own head);
    ``speculators`` writes the speculators format (``DSparkSpeculator``) instead of DeepSpec's (``Qwen3DSparkModel``).
    """

    markov_rank: int = 8
    confidence_head: bool = True
    draft_vocab: int | None = None
    speculators: bool = False


def dflash2_state_dict(spec: TinyDFlash2Spec, seed: int = 0, prefix: str = "") -> dict[str, np.ndarray]:
    """A DFlash2 checkpoint's weights: the DFlash ones, each layer's convolutions and the candidate selector."""
    sd = dflash_state_dict(spec, seed, prefix)
    mat, _ = random_f32(np.random.default_rng(seed + 1))
    h, k = spec.n_embd, spec.conv_kernel_size
    proj = 2 * k * (h // spec.conv_group_size)
    for i in range(spec.n_layer):
        for part in ("attention_conv", "mlp_conv"):
            p = f"{prefix}layers.{i}.{part}."
            sd[p + "base_kernel"] = mat(2 * k, h).reshape(2, k, h)
            sd[p + "kernel_projection.weight"] = mat(proj, h)
    sd[f"{prefix}candidate_selector.predecessor_codebook"] = mat(N_VOCAB, spec.selector_rank)
    sd[f"{prefix}candidate_selector.successor_codebook"] = mat(N_VOCAB, spec.selector_rank)
    sd[f"{prefix}candidate_selector.hidden_projection.weight"] = mat(spec.selector_rank, h)
    return sd


def dflash2_config(spec: TinyDFlash2Spec) -> dict[str, Any]:
    """config.json of a DFlash2 drafter: DFlash's, with the convolution and selector geometry in ``dflash_config``."""
    cfg = dflash_config(replace(spec, extra_config={}))
    cfg["architectures"] = ["DFlash2DraftModel"]
    cfg["dflash_config"].update(
        conv_kernel_size=spec.conv_kernel_size,
        conv_group_size=spec.conv_group_size,
        selector_rank=spec.selector_rank,
        selector_top_k=spec.selector_top_k,
    )
    cfg.update(spec.extra_config)
    return cfg


def dspark_state_dict(spec: TinyDSparkSpec, seed: int = 0, prefix: str = "") -> dict[str, np.ndarray]:
    """A DSpark checkpoint's weights: the DFlash ones and the Markov (and confidence) head; with a reduced draft
    vocabulary also ``d2t`` (offsets: target id minus draft id, as EAGLE-3 stores it) and the draft's head."""
    sd = dflash_state_dict(spec, seed, prefix)
    rng = np.random.default_rng(seed + 2)
    mat, _ = random_f32(rng)
    n_draft, r, h = spec.draft_vocab or N_VOCAB, spec.markov_rank, spec.n_embd
    sd[f"{prefix}markov_head.markov_w1.weight"] = mat(N_VOCAB, r)
    sd[f"{prefix}markov_head.markov_w2.weight"] = mat(n_draft, r)
    if spec.confidence_head:
        sd[f"{prefix}confidence_head.proj.weight"] = mat(1, h + r)
        sd[f"{prefix}confidence_head.proj.bias"] = np.zeros(1, np.float32)
    if spec.draft_vocab:
        ids = np.sort(rng.choice(N_VOCAB, size=n_draft, replace=False)).astype(np.int64)
        sd["d2t"] = ids - np.arange(n_draft, dtype=np.int64)
        sd["t2d"] = np.isin(np.arange(N_VOCAB), ids)
        sd["lm_head.weight"] = mat(n_draft, h)
    return sd


def dspark_config(spec: TinyDSparkSpec) -> dict[str, Any]:
    """config.json of a DSpark drafter, in DeepSpec's schema (top-level ``target_layer_ids`` / ``mask_token_id``)
    or the speculators format's (``transformer_layer_config`` + ``aux_hidden_state_layer_ids``, layer inputs)."""
    body = dflash_config(replace(spec, extra_config={}))
    dcfg = body.pop("dflash_config")
    head: dict[str, Any] = {
        "block_size": body.pop("block_size"),
        "mask_token_id": dcfg["mask_token_id"],
        "markov_rank": spec.markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": spec.confidence_head,
        "confidence_head_with_markov": spec.confidence_head,
    }
    if spec.draft_vocab:
        head["draft_vocab_size"] = spec.draft_vocab
    if spec.speculators:
        del body["architectures"]
        cfg = {"architectures": ["DSparkSpeculator"], "speculators_model_type": "dspark", **head,
               "aux_hidden_state_layer_ids": [i + 1 for i in dcfg["target_layer_ids"]],
               "transformer_layer_config": body}  # fmt: skip
    else:
        cfg = {**body, **head, "architectures": ["Qwen3DSparkModel"], "target_layer_ids": dcfg["target_layer_ids"]}
    cfg.update(spec.extra_config)
    return cfg


def write_dflash_checkpoint(
    directory: str | Path,
    spec: TinyDFlashSpec | None = None,
    seed: int = 0,
    prefix: str = "",
    state_dict: dict[str, np.ndarray] | None = None,
    config: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny DFlash checkpoint (config.json + model.safetensors) and return its directory; a
    ``TinyDFlash2Spec`` or ``TinyDSparkSpec`` writes that family's checkpoint.

    ``state_dict`` / ``config`` replace the generated ones (tests edit them to make bad input).
    """
    from safetensors.numpy import save_file

    spec = spec or TinyDFlashSpec()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, TinyDSparkSpec):
        make_sd, make_cfg = dspark_state_dict, dspark_config
    elif isinstance(spec, TinyDFlash2Spec):
        make_sd, make_cfg = dflash2_state_dict, dflash2_config
    else:
        make_sd, make_cfg = dflash_state_dict, dflash_config
    sd = state_dict if state_dict is not None else make_sd(spec, seed, prefix)
    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(config if config is not None else make_cfg(spec), indent=1))
    return d


def block_gguf_and_reference(folder: str | Path, target_gguf: str | Path, spec: TinyDFlashSpec, seed: int):
    """A tiny block drafter converted (f32) in ``folder`` and its torch reference (``testing.dflash_reference``) on
    the same weights, the target's embeddings and head: ``(gguf path, DFlashReference)``, the oracle pair."""
    from gguf import GGUFReader

    from converters.dflash_gguf import convert_dflash, read_dflash_config
    from local_eagle.testing.dflash_reference import DFlashReference, DFlashShape

    ckpt = write_dflash_checkpoint(Path(folder) / "ckpt", spec, seed=seed)
    out = convert_dflash(ckpt, target_gguf, Path(folder) / "d.gguf", outtype="f32").outfile
    weights = {t.name: np.asarray(t.data) for t in GGUFReader(target_gguf).tensors}
    make_sd = dspark_state_dict if isinstance(spec, TinyDSparkSpec) else dflash_state_dict
    ref = DFlashReference(
        DFlashShape.from_config(read_dflash_config(ckpt)),
        make_sd(spec, seed),  # type: ignore[arg-type]
        weights["token_embd.weight"],
        weights["output.weight"],
    )
    return out, ref


def write_block_gguf(folder: str | Path, target_gguf: str | Path, spec: TinyDFlashSpec, seed: int = 3) -> Path:
    """A tiny block drafter for ``target_gguf``, its checkpoint written and converted (f32) in ``folder``: the GGUF
    the engine tests load."""
    from converters.dflash_gguf import convert_dflash

    ckpt = write_dflash_checkpoint(Path(folder) / "ckpt", spec, seed=seed)
    return convert_dflash(ckpt, target_gguf, Path(folder) / "d.gguf", outtype="f32").outfile


def open_block_pair(target_gguf: str | Path, drafter_gguf: str | Path, n_ubatch: int = 64, n_seq: int = 1):
    """(model, target, capture, drafter) of a tiny pair on the CPU with f32 caches, as the engine wires them: the
    capture of the drafter's layers first (a callback capture is the target context's ``cb_eval``), then the
    target's context, then the drafter bound to it. ``n_ubatch`` is the drafter's."""
    from local_eagle.llamacpp.model import Context, ContextOptions, Model
    from local_eagle.runtime.capture import LayerCapture
    from local_eagle.runtime.dflash import BlockDrafter, block_target_layers

    f32 = 0  # GGML_TYPE_F32
    opts = ContextOptions(n_ctx=256, n_batch=64, n_ubatch=64, type_k=f32, type_v=f32, flash_attn=False)
    model = Model(target_gguf, n_gpu_layers=0, what="target")
    cap = LayerCapture.create(model, block_target_layers(drafter_gguf))
    target = Context(model, opts, cb_eval=cap.callback)
    dopts = replace(opts, n_batch=n_ubatch, n_ubatch=n_ubatch, n_seq_max=n_seq)
    drafter = BlockDrafter(drafter_gguf, target, dopts, n_gpu_layers=0)
    cap.attach(target)
    return model, target, cap, drafter

"""Tiny DFlash block-drafter checkpoints, generated on the spot (as ``tiny.py`` makes EAGLE drafters).

A checkpoint here is what z-lab publishes for a DFlash drafter (``DFlashDraftModel``): config.json
with a ``dflash_config`` block (``target_layer_ids``, ``mask_token_id``) and ``block_size``, and a
model.safetensors of top-level Qwen3 decoder layers plus ``fc`` / ``hidden_norm`` / ``norm``, with no
embeddings or head. Random weights at the tiny target's width, so the converter and llama.cpp's
loader can be exercised on a CPU in a second with nothing downloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from local_eagle.testing.tiny import TinyTargetSpec, random_f32


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


def write_dflash_checkpoint(
    directory: str | Path,
    spec: TinyDFlashSpec | None = None,
    seed: int = 0,
    prefix: str = "",
    state_dict: dict[str, np.ndarray] | None = None,
    config: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny DFlash checkpoint (config.json + model.safetensors) and return its directory.

    ``state_dict`` / ``config`` replace the generated ones (tests edit them to make bad input).
    """
    from safetensors.numpy import save_file

    spec = spec or TinyDFlashSpec()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    sd = state_dict if state_dict is not None else dflash_state_dict(spec, seed, prefix)
    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(config if config is not None else dflash_config(spec), indent=1))
    return d

"""Tiny generated targets that carry MTP (NextN) layers, for the MTP drafter's tests.

Two families of the pinned llama.cpp, random f32 weights, the byte vocabulary of ``testing.tiny``:

- ``glm4moe`` (GLM-4.5 / 4.6 / 4.7, ``src/models/glm4-moe.cpp``), the simplest with plain attention everywhere:
  a dense first layer, MoE layers after it (routed experts with a sigmoid router and a selection bias, one shared
  expert), and one NextN block after the trunk: a MoE decoder block with ``nextn.{eh_proj,enorm,hnorm}`` in front
  and, optionally, its own head (``nextn.shared_head_{norm,head}``; without them the trunk's ``output_norm`` and
  ``output``);
- ``qwen35`` (Qwen3.5 / 3.6 dense, ``src/models/qwen35.cpp``), a hybrid target: gated-delta-net layers, gated
  attention every ``full_attention_interval``-th layer, and a full-attention NextN block.

``block_count`` counts the NextN block; ``nextn_predict_layers`` says how many of the last blocks are NextN.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import ExpertGatingFuncType

from local_eagle.testing.tiny import add_byte_tokenizer, byte_vocab, finish_gguf, random_f32, tiny_gguf_writer


@dataclass(frozen=True)
class TinyGlm4MoeSpec:
    n_layer: int = 3  # trunk blocks (the first dense, the rest MoE)
    n_nextn: int = 1  # NextN blocks after the trunk; the pinned glm4moe MTP graph asserts exactly 1
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128  # the dense layer's FFN
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_expert_shared: int = 1
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-5
    own_head: bool = True  # write nextn.shared_head_{norm,head}; False: the MTP block uses the trunk's head
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def write_tiny_glm4moe_mtp(
    path: str | os.PathLike[str],
    spec: TinyGlm4MoeSpec | None = None,
    seed: int = 0,
    mtp: bool = True,
) -> Path:
    """A random-weight f32 ``glm4moe`` GGUF whose last ``n_nextn`` blocks are NextN (MTP) blocks.

    ``mtp=False`` writes the same trunk without the NextN blocks (``nextn_predict_layers`` absent), a
    target with no built-in head.
    """
    spec = spec or TinyGlm4MoeSpec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    n_nextn = spec.n_nextn if mtp else 0
    n_all = spec.n_layer + n_nextn
    mat, norm = random_f32(rng)

    def experts(rows: int, cols: int) -> np.ndarray:  # ggml {cols, rows, n_expert}
        return (rng.standard_normal((spec.n_expert, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    p = Path(path)
    w = tiny_gguf_writer(p, "glm4moe", "tiny-glm4moe-mtp" if mtp else "tiny-glm4moe", spec, n_all)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_shared_count(spec.n_expert_shared)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_leading_dense_block_count(1)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(1.0)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)  # as GLM-4.5
    if n_nextn:
        w.add_nextn_predict_layers(n_nextn)
    add_byte_tokenizer(w, tokens, scores, types)

    w.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    w.add_tensor("output_norm.weight", norm(h))
    w.add_tensor("output.weight", mat(n_vocab, h, 4.0))
    n_ff_shexp = spec.n_ff_exp * spec.n_expert_shared
    for i in range(n_all):
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm(h))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(spec.n_head * hd, h))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
        w.add_tensor(f"blk.{i}.attn_q.bias", (0.1 * rng.standard_normal(spec.n_head * hd)).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_k.bias", (0.1 * rng.standard_normal(spec.n_head_kv * hd)).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_v.bias", (0.1 * rng.standard_normal(spec.n_head_kv * hd)).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", norm(h))
        if i == 0:
            w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, h))
            w.add_tensor(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, h))
            w.add_tensor(f"blk.{i}.ffn_down.weight", mat(h, spec.n_ff))
        else:
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", mat(spec.n_expert, h))
            w.add_tensor(f"blk.{i}.exp_probs_b.bias", (0.1 * rng.standard_normal(spec.n_expert)).astype(np.float32))
            w.add_tensor(f"blk.{i}.ffn_gate_exps.weight", experts(spec.n_ff_exp, h))
            w.add_tensor(f"blk.{i}.ffn_up_exps.weight", experts(spec.n_ff_exp, h))
            w.add_tensor(f"blk.{i}.ffn_down_exps.weight", experts(h, spec.n_ff_exp))
            w.add_tensor(f"blk.{i}.ffn_gate_shexp.weight", mat(n_ff_shexp, h))
            w.add_tensor(f"blk.{i}.ffn_up_shexp.weight", mat(n_ff_shexp, h))
            w.add_tensor(f"blk.{i}.ffn_down_shexp.weight", mat(h, n_ff_shexp))
        if i >= spec.n_layer:
            w.add_tensor(f"blk.{i}.nextn.eh_proj.weight", mat(h, 2 * h))  # ggml {2h, h}: [enorm(e); hnorm(h)]
            w.add_tensor(f"blk.{i}.nextn.enorm.weight", norm(h))
            w.add_tensor(f"blk.{i}.nextn.hnorm.weight", norm(h))
            if spec.own_head:
                w.add_tensor(f"blk.{i}.nextn.shared_head_norm.weight", norm(h))
                w.add_tensor(f"blk.{i}.nextn.shared_head_head.weight", mat(n_vocab, h, 4.0))
    finish_gguf(w)
    return p


@dataclass(frozen=True)
class TinyQwen35Spec:
    """A tiny ``qwen35`` (Qwen3.5 / 3.6 dense): gated-delta-net layers and, every ``full_attention_interval``-th
    layer, gated attention with q/k norms; one NextN block after the trunk (a full-attention block)."""

    n_layer: int = 4
    full_attention_interval: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    ssm_d_conv: int = 4
    ssm_d_state: int = 16  # head size of the linear attention's keys and values
    ssm_n_group: int = 2  # key heads
    ssm_dt_rank: int = 4  # value heads
    rope_sections: tuple[int, int, int, int] = (3, 3, 2, 0)
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-6
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def write_tiny_qwen35_mtp(
    path: str | os.PathLike[str], spec: TinyQwen35Spec | None = None, seed: int = 0, mtp: bool = True
) -> Path:
    """A random-weight f32 ``qwen35`` GGUF (a hybrid target) whose last block is a NextN (MTP) block."""
    spec = spec or TinyQwen35Spec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    n_all = spec.n_layer + (1 if mtp else 0)
    key_dim = spec.ssm_d_state * spec.ssm_n_group
    value_dim = spec.ssm_d_state * spec.ssm_dt_rank
    conv_dim = 2 * key_dim + value_dim
    mat, norm = random_f32(rng)

    p = Path(path)
    w = tiny_gguf_writer(p, "qwen35", "tiny-qwen35-mtp" if mtp else "tiny-qwen35", spec, n_all)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(2 * sum(spec.rope_sections))
    w.add_rope_dimension_sections(list(spec.rope_sections))
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_ssm_conv_kernel(spec.ssm_d_conv)
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(spec.ssm_d_state)
    w.add_ssm_time_step_rank(spec.ssm_dt_rank)
    w.add_ssm_group_count(spec.ssm_n_group)
    w.add_full_attention_interval(spec.full_attention_interval)
    if mtp:
        w.add_nextn_predict_layers(1)
    add_byte_tokenizer(w, tokens, scores, types)

    w.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    w.add_tensor("output_norm.weight", norm(h))
    w.add_tensor("output.weight", mat(n_vocab, h, 4.0))
    for i in range(n_all):
        recurrent = i < spec.n_layer and (i + 1) % spec.full_attention_interval != 0
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm(h))
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", norm(h))
        if recurrent:
            w.add_tensor(f"blk.{i}.attn_qkv.weight", mat(conv_dim, h))
            w.add_tensor(f"blk.{i}.attn_gate.weight", mat(value_dim, h))
            w.add_tensor(f"blk.{i}.ssm_conv1d.weight", mat(conv_dim, spec.ssm_d_conv))
            w.add_tensor(f"blk.{i}.ssm_dt.bias", (0.1 * rng.standard_normal(spec.ssm_dt_rank)).astype(np.float32))
            w.add_tensor(f"blk.{i}.ssm_a", (-np.exp(0.3 * rng.standard_normal(spec.ssm_dt_rank))).astype(np.float32))
            w.add_tensor(f"blk.{i}.ssm_beta.weight", mat(spec.ssm_dt_rank, h))
            w.add_tensor(f"blk.{i}.ssm_alpha.weight", mat(spec.ssm_dt_rank, h))
            w.add_tensor(f"blk.{i}.ssm_norm.weight", norm(spec.ssm_d_state))
            w.add_tensor(f"blk.{i}.ssm_out.weight", mat(h, value_dim))
        else:
            w.add_tensor(f"blk.{i}.attn_q.weight", mat(2 * spec.n_head * hd, h))  # queries and their gates
            w.add_tensor(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
            w.add_tensor(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
            w.add_tensor(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", norm(hd))
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", norm(hd))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, h))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, h))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(h, spec.n_ff))
        if i >= spec.n_layer:
            w.add_tensor(f"blk.{i}.nextn.eh_proj.weight", mat(h, 2 * h))
            w.add_tensor(f"blk.{i}.nextn.enorm.weight", norm(h))
            w.add_tensor(f"blk.{i}.nextn.hnorm.weight", norm(h))
            w.add_tensor(f"blk.{i}.nextn.shared_head_norm.weight", norm(h))
    finish_gguf(w)
    return p

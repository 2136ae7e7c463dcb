"""Tiny generated hybrid MTP targets beside ``qwen35``: the families whose recurrent state llama.cpp rolls back by
snapshots in code of their own.

- ``nemotron_h_moe`` (Nemotron 3 / Nemotron-H MoE, ``src/models/nemotron-h.cpp`` trunk, ``nemotron-h-moe.cpp`` head):
  Mamba 2 layers (``llm_build_mamba_base::build_mamba2_layer``), NoPE attention layers and MoE layers (ReLU² experts
  without a gate, a sigmoid router with a selection bias, one shared expert), each its own block; a layer is Mamba 2
  where its ``head_count_kv`` and ``feed_forward_length`` are both 0, attention where only its FFN length is. The
  NextN block folds an attention and a MoE sub-layer; its final norm is a LayerNorm (``nextn.shared_head_norm``)
  and it uses the trunk's head.
- ``bailingmoe3`` (Ling / Ring 2.5, ``src/models/bailingmoe3.cpp``): Kimi-delta-attention layers (separate q/k/v
  short convolutions, a per-channel gate, ``llm_build_delta_net_base::build_recurrent_attn``) where the KV head count
  is 0, gated MLA attention elsewhere, a dense first FFN and MoE after it; the NextN block is a gated MLA MoE block
  whose final norm is ``layer_output_norm``, on the trunk's head.
- ``qwen3next`` (Qwen3-Next, ``src/models/qwen3next.cpp``): gated-delta-net layers (fused ``attn_qkv``, ``attn_gate``,
  ``ssm_ba``) and gated attention with q/k norms, every block MoE with a gated shared expert.
  ``llm_arch_supports_rs_rollback`` leaves it out, so llama.cpp clamps ``n_rs_seq`` to 0 and its head's rounds roll
  back by checkpoints (``runtime.mtp.CHECKPOINT_ROLLBACK_ARCHS``).

A :func:`cycle_overrides` model is ``testing.tiny_pair``'s letter cycle, as ``tiny_mtp.cycle_qwen35_tensors``: every
attention and FFN output is zero, the recurrent layers' output small and random (a state rolled back wrong shows in
the logits, the cycle holds), and the NextN block's ``eh_proj`` keeps the token half. Neither family loads a head of
the NextN block's own, so a draft the target rejects is made in ``eh_proj``: after each letter of ``head_misses`` it
maps the letter to the next one, and the head names the letter two ahead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import ExpertGatingFuncType, GGUFWriter, LlamaFileType

from local_eagle.testing.tiny import add_byte_tokenizer, byte_vocab, finish_gguf, random_f32
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, cycle_glm4moe_tensors

HYBRID_FAMILIES = ("nemotron_h_moe", "bailingmoe3")
"""The families whose head drafts (``runtime.mtp.CHECKED_ROLLBACK_ARCHS``)."""
CHECKPOINT_FAMILIES = ("qwen3next",)
"""The families written here llama.cpp keeps no snapshots for: their rounds roll back by checkpoints."""
LAYERS = {"nemotron_h_moe": "MAEME", "bailingmoe3": "MAMMA", "qwen3next": "MAMA"}
"""Each family's default trunk (:class:`TinyHybridSpec` ``layers``)."""


@dataclass(frozen=True)
class TinyHybridSpec:
    """One tiny shape for the hybrid families; the fields a family does not read are ignored.

    ``layers``: the trunk, a letter a block: ``M`` recurrent (Mamba 2 / KDA), ``A`` attention, ``E`` a MoE FFN
    (nemotron_h_moe's own blocks; bailingmoe3 puts an FFN in every block, dense in the first); empty: the family's
    default (:data:`LAYERS`).
    """

    arch: str
    layers: str = ""
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128  # bailingmoe3's dense first FFN
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ff_shexp: int = 32
    ssm_d_conv: int = 4
    ssm_d_inner: int = 64  # Mamba 2: ssm_n_head heads of d_inner / ssm_n_head
    ssm_d_state: int = 16
    ssm_n_head: int = 4
    ssm_n_group: int = 2
    kda_head_dim: int = 16  # bailingmoe3's KDA heads: n_head of them
    q_lora_rank: int = 32
    kv_lora_rank: int = 32
    qk_rope_head_dim: int = 8
    qk_nope_head_dim: int = 16
    v_head_dim: int = 16
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-5
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")

    def __post_init__(self) -> None:
        if not self.layers:
            object.__setattr__(self, "layers", LAYERS[self.arch])

    @property
    def n_layer(self) -> int:
        return len(self.layers)


def _writer(p: Path, spec: TinyHybridSpec, name: str, n_all: int) -> GGUFWriter:
    w = GGUFWriter(p, spec.arch)
    w.add_name(name)
    w.add_file_type(LlamaFileType.ALL_F32)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(n_all)
    w.add_head_count(spec.n_head)
    return w


def write_tiny_hybrid_mtp(
    path: str | os.PathLike[str],
    spec: TinyHybridSpec,
    seed: int = 0,
    mtp: bool = True,
    overrides: dict[str, np.ndarray] | None = None,
) -> Path:
    """A random-weight f32 hybrid GGUF of ``spec.arch`` whose last block is a NextN (MTP) block (``mtp=False``:
    the trunk alone). ``overrides`` replaces tensors by name; the random draws stay the same."""
    writers = {"nemotron_h_moe": _nemotron_h_moe, "bailingmoe3": _bailingmoe3, "qwen3next": _qwen3next}
    if spec.arch not in writers:
        raise ValueError(f"no tiny hybrid writer for '{spec.arch}' (have {', '.join(writers)})")
    return writers[spec.arch](Path(path), spec, seed, mtp, overrides or {})


def _nemotron_h_moe(p: Path, spec: TinyHybridSpec, seed: int, mtp: bool, overrides: dict[str, np.ndarray]) -> Path:
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    n_all = spec.n_layer + (1 if mtp else 0)
    kinds = spec.layers + ("N" if mtp else "")
    d_inner, d_state, n_group, n_ssm_head = spec.ssm_d_inner, spec.ssm_d_state, spec.ssm_n_group, spec.ssm_n_head
    conv_dim = d_inner + 2 * n_group * d_state
    mat, norm = random_f32(rng)

    def experts(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((spec.n_expert, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def put(name: str, value: np.ndarray) -> None:
        w.add_tensor(name, overrides.get(name, value))

    w = _writer(p, spec, "tiny-nemotron-h-moe-mtp" if mtp else "tiny-nemotron-h-moe", n_all)
    w.add_head_count_kv([spec.n_head_kv if k in "AN" else 0 for k in kinds])
    w.add_feed_forward_length([spec.n_ff_exp if k in "EN" else 0 for k in kinds])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_eps(spec.eps)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_ssm_conv_kernel(spec.ssm_d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_ssm_head)
    w.add_ssm_group_count(n_group)
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_expert_shared_feed_forward_length(spec.n_ff_shexp)
    w.add_expert_shared_count(1)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(1.0)
    if mtp:
        w.add_nextn_predict_layers(1)
    add_byte_tokenizer(w, tokens, scores, types)

    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    for i, kind in enumerate(kinds):
        b = f"blk.{i}"
        put(f"{b}.attn_norm.weight", norm(h))
        if kind == "M":
            put(f"{b}.ssm_in.weight", mat(2 * d_inner + 2 * n_group * d_state + n_ssm_head, h))
            put(f"{b}.ssm_conv1d.weight", mat(conv_dim, spec.ssm_d_conv))
            put(f"{b}.ssm_conv1d.bias", (0.1 * rng.standard_normal(conv_dim)).astype(np.float32))
            put(f"{b}.ssm_dt.bias", (0.1 * rng.standard_normal(n_ssm_head)).astype(np.float32))
            put(f"{b}.ssm_a", (-np.exp(0.3 * rng.standard_normal((n_ssm_head, 1)))).astype(np.float32))
            put(f"{b}.ssm_d", (1.0 + 0.1 * rng.standard_normal((n_ssm_head, 1))).astype(np.float32))
            put(f"{b}.ssm_norm.weight", norm(d_inner).reshape(n_group, d_inner // n_group))
            put(f"{b}.ssm_out.weight", mat(h, d_inner))
        if kind in "AN":
            put(f"{b}.attn_q.weight", mat(spec.n_head * hd, h))
            put(f"{b}.attn_k.weight", mat(spec.n_head_kv * hd, h))
            put(f"{b}.attn_v.weight", mat(spec.n_head_kv * hd, h))
            put(f"{b}.attn_output.weight", mat(h, spec.n_head * hd))
        if kind == "N":
            put(f"{b}.nextn.eh_proj.weight", mat(h, 2 * h))
            put(f"{b}.nextn.enorm.weight", norm(h))
            put(f"{b}.nextn.hnorm.weight", norm(h))
            put(f"{b}.nextn.shared_head_norm.weight", norm(h))
            put(f"{b}.post_attention_norm.weight", norm(h))
        if kind in "EN":
            put(f"{b}.ffn_gate_inp.weight", mat(spec.n_expert, h))
            put(f"{b}.exp_probs_b.bias", (0.1 * rng.standard_normal(spec.n_expert)).astype(np.float32))
            put(f"{b}.ffn_up_exps.weight", experts(spec.n_ff_exp, h))
            put(f"{b}.ffn_down_exps.weight", experts(h, spec.n_ff_exp))
            put(f"{b}.ffn_up_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"{b}.ffn_down_shexp.weight", mat(h, spec.n_ff_shexp))
    finish_gguf(w)
    return p


def _bailingmoe3(p: Path, spec: TinyHybridSpec, seed: int, mtp: bool, overrides: dict[str, np.ndarray]) -> Path:
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, n_head = len(tokens), spec.n_embd, spec.n_head
    n_all = spec.n_layer + (1 if mtp else 0)
    kinds = spec.layers + ("N" if mtp else "")
    d_inner, d_conv = spec.kda_head_dim * n_head, spec.ssm_d_conv
    k_mla, rope, kv_lora = spec.qk_nope_head_dim + spec.qk_rope_head_dim, spec.qk_rope_head_dim, spec.kv_lora_rank
    mat, norm = random_f32(rng)

    def stack(n: int, rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((n, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def put(name: str, value: np.ndarray) -> None:
        w.add_tensor(name, overrides.get(name, value))

    w = _writer(p, spec, "tiny-bailingmoe3-mtp" if mtp else "tiny-bailingmoe3", n_all)
    w.add_head_count_kv([0 if k == "M" else 1 for k in kinds])
    w.add_feed_forward_length(spec.n_ff)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_rope_dimension_count(rope)
    w.add_q_lora_rank(spec.q_lora_rank)
    w.add_kv_lora_rank(kv_lora)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(k_mla)
    w.add_value_length_mla(spec.v_head_dim)
    w.add_ssm_conv_kernel(d_conv)
    w.add_kda_head_dim(spec.kda_head_dim)
    w.add_bool(f"{spec.arch}.kda.safe_gate", True)  # keys the installed gguf-py does not name yet
    w.add_float32(f"{spec.arch}.kda.gate_lower_bound", -5.0)
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_expert_shared_feed_forward_length(spec.n_ff_shexp)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(1)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(1.0)
    if mtp:
        w.add_nextn_predict_layers(1)
    add_byte_tokenizer(w, tokens, scores, types)

    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    for i, kind in enumerate(kinds):
        b = f"blk.{i}"
        put(f"{b}.attn_norm.weight", norm(h))
        if kind == "M":
            for part in "qkv":
                put(f"{b}.ssm_conv1d_{part}.weight", mat(d_inner, d_conv).reshape(1, d_inner, 1, d_conv))
                put(f"{b}.attn_{part}.weight", mat(d_inner, h))
            put(f"{b}.ssm_f_a.weight", mat(d_inner, h))
            put(f"{b}.ssm_beta.weight", mat(n_head, h))
            put(f"{b}.ssm_a", np.exp(0.3 * rng.standard_normal((n_head, 1))).astype(np.float32))
            put(f"{b}.ssm_dt.bias", (0.1 * rng.standard_normal(d_inner)).astype(np.float32))
            put(f"{b}.ssm_g_a.weight", mat(d_inner, h))
            put(f"{b}.ssm_norm.weight", norm(spec.kda_head_dim))
            put(f"{b}.attn_output.weight", mat(h, d_inner))
        else:
            put(f"{b}.attn_q_a.weight", mat(spec.q_lora_rank, h))
            put(f"{b}.attn_q_a_norm.weight", norm(spec.q_lora_rank))
            put(f"{b}.attn_q_b.weight", mat(n_head * k_mla, spec.q_lora_rank))
            put(f"{b}.attn_kv_a_mqa.weight", mat(kv_lora + rope, h))
            put(f"{b}.attn_kv_a_norm.weight", norm(kv_lora))
            put(f"{b}.attn_k_b.weight", stack(n_head, kv_lora, spec.qk_nope_head_dim))
            put(f"{b}.attn_v_b.weight", stack(n_head, spec.v_head_dim, kv_lora))
            put(f"{b}.attn_gate.weight", mat(n_head, h))
            put(f"{b}.attn_output.weight", mat(h, n_head * spec.v_head_dim))
        put(f"{b}.ffn_norm.weight", norm(h))
        if i == 0:
            put(f"{b}.ffn_gate.weight", mat(spec.n_ff, h))
            put(f"{b}.ffn_up.weight", mat(spec.n_ff, h))
            put(f"{b}.ffn_down.weight", mat(h, spec.n_ff))
        else:
            put(f"{b}.ffn_gate_inp.weight", mat(spec.n_expert, h))
            put(f"{b}.exp_probs_b.bias", (0.1 * rng.standard_normal(spec.n_expert)).astype(np.float32))
            put(f"{b}.ffn_gate_exps.weight", stack(spec.n_expert, spec.n_ff_exp, h))
            put(f"{b}.ffn_up_exps.weight", stack(spec.n_expert, spec.n_ff_exp, h))
            put(f"{b}.ffn_down_exps.weight", stack(spec.n_expert, h, spec.n_ff_exp))
            put(f"{b}.ffn_gate_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"{b}.ffn_up_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"{b}.ffn_down_shexp.weight", mat(h, spec.n_ff_shexp))
        if kind == "N":
            put(f"{b}.nextn.eh_proj.weight", mat(h, 2 * h))
            put(f"{b}.nextn.enorm.weight", norm(h))
            put(f"{b}.nextn.hnorm.weight", norm(h))
            put(f"{b}.layer_output_norm.weight", norm(h))
    finish_gguf(w)
    return p


def _qwen3next(p: Path, spec: TinyHybridSpec, seed: int, mtp: bool, overrides: dict[str, np.ndarray]) -> Path:
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    n_all = spec.n_layer + (1 if mtp else 0)
    kinds = spec.layers + ("N" if mtp else "")
    key_dim, value_dim = spec.ssm_d_state * spec.ssm_n_group, spec.ssm_d_state * spec.ssm_n_head
    conv_dim = 2 * key_dim + value_dim
    mat, norm = random_f32(rng)

    def stack(n: int, rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((n, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def put(name: str, value: np.ndarray) -> None:
        w.add_tensor(name, overrides.get(name, value))

    w = _writer(p, spec, "tiny-qwen3next-mtp" if mtp else "tiny-qwen3next", n_all)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_feed_forward_length(spec.n_ff)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_ssm_conv_kernel(spec.ssm_d_conv)
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(spec.ssm_d_state)
    w.add_ssm_time_step_rank(spec.ssm_n_head)
    w.add_ssm_group_count(spec.ssm_n_group)
    w.add_full_attention_interval(2)
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_expert_shared_feed_forward_length(spec.n_ff_shexp)
    if mtp:
        w.add_nextn_predict_layers(1)
    add_byte_tokenizer(w, tokens, scores, types)

    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    for i, kind in enumerate(kinds):
        b = f"blk.{i}"
        put(f"{b}.attn_norm.weight", norm(h))
        put(f"{b}.post_attention_norm.weight", norm(h))
        if kind == "M":
            put(f"{b}.attn_qkv.weight", mat(conv_dim, h))
            put(f"{b}.attn_gate.weight", mat(value_dim, h))
            put(f"{b}.ssm_conv1d.weight", mat(conv_dim, spec.ssm_d_conv))
            put(f"{b}.ssm_dt.bias", (0.1 * rng.standard_normal(spec.ssm_n_head)).astype(np.float32))
            put(f"{b}.ssm_a", (-np.exp(0.3 * rng.standard_normal(spec.ssm_n_head))).astype(np.float32))
            put(f"{b}.ssm_ba.weight", mat(2 * spec.ssm_n_head, h))
            put(f"{b}.ssm_norm.weight", norm(spec.ssm_d_state))
            put(f"{b}.ssm_out.weight", mat(h, value_dim))
        else:
            put(f"{b}.attn_q.weight", mat(2 * spec.n_head * hd, h))  # queries and their gates
            put(f"{b}.attn_k.weight", mat(spec.n_head_kv * hd, h))
            put(f"{b}.attn_v.weight", mat(spec.n_head_kv * hd, h))
            put(f"{b}.attn_output.weight", mat(h, spec.n_head * hd))
            put(f"{b}.attn_q_norm.weight", norm(hd))
            put(f"{b}.attn_k_norm.weight", norm(hd))
        put(f"{b}.ffn_gate_inp.weight", mat(spec.n_expert, h))
        put(f"{b}.ffn_gate_exps.weight", stack(spec.n_expert, spec.n_ff_exp, h))
        put(f"{b}.ffn_up_exps.weight", stack(spec.n_expert, spec.n_ff_exp, h))
        put(f"{b}.ffn_down_exps.weight", stack(spec.n_expert, h, spec.n_ff_exp))
        put(f"{b}.ffn_gate_inp_shexp.weight", (0.1 * rng.standard_normal(h)).astype(np.float32))
        put(f"{b}.ffn_gate_shexp.weight", mat(spec.n_ff_shexp, h))
        put(f"{b}.ffn_up_shexp.weight", mat(spec.n_ff_shexp, h))
        put(f"{b}.ffn_down_shexp.weight", mat(h, spec.n_ff_shexp))
        if kind == "N":
            put(f"{b}.nextn.eh_proj.weight", mat(h, 2 * h))
            put(f"{b}.nextn.enorm.weight", norm(h))
            put(f"{b}.nextn.hnorm.weight", norm(h))
            put(f"{b}.nextn.shared_head_norm.weight", norm(h))
    finish_gguf(w)
    return p


RECURRENT_OUT = {"nemotron_h_moe": "ssm_out.weight", "bailingmoe3": "attn_output.weight", "qwen3next": "ssm_out.weight"}
ZEROED = ("attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight")


def cycle_overrides(
    spec: TinyHybridSpec,
    margin: float = 4.0,
    state: float = 0.05,
    head_misses: str = "",
    seed: int = 0,
    noise: float = 0.0,
) -> dict[str, np.ndarray]:
    """Overrides that make a tiny hybrid the letter cycle with a NextN head that agrees but after ``head_misses``.

    The embedding, the trunk's head and the NextN norms are the glm4moe cycle's (``tiny_mtp.cycle_glm4moe_tensors``);
    every attention and FFN output is zero, each recurrent layer's output projection random at scale ``state``.
    ``noise`` blurs the trunk's head, which the NextN block shares: with a small ``margin`` a sampling test's target
    spreads over several tokens, and the head, which drops the recurrent state, is right often, not always.
    """
    from local_eagle.testing.tiny_pair import CYCLE

    h = spec.n_embd
    glm = TinyGlm4MoeSpec(n_layer=1, n_embd=h, extra_tokens=spec.extra_tokens)
    cycle = cycle_glm4moe_tensors(glm, margin=margin, noise=noise, seed=seed)
    out = {name: cycle[name] for name in ("token_embd.weight", "output.weight", "output_norm.weight")}
    shapes = _tensor_shapes(spec)
    rng = np.random.default_rng(seed + 1)
    for name, shape in shapes.items():
        if not name.startswith("blk."):
            continue
        i, _, part = name.partition(".")[2].partition(".")
        recurrent = int(i) < spec.n_layer and spec.layers[int(i)] == "M"
        if recurrent and part == RECURRENT_OUT[spec.arch]:
            out[name] = (state * rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
        elif part in ZEROED:
            out[name] = np.zeros(shape, dtype=np.float32)
    nextn = spec.n_layer
    eh = cycle["blk.1.nextn.eh_proj.weight"].copy()
    for letter in head_misses:
        col = CYCLE.index(ord(letter) + 3)
        eh[:, col] = 0.0
        eh[(col + 1) % len(CYCLE), col] = 1.0
    out[f"blk.{nextn}.nextn.eh_proj.weight"] = eh
    for part in ("enorm", "hnorm"):
        out[f"blk.{nextn}.nextn.{part}.weight"] = cycle[f"blk.1.nextn.{part}.weight"]
    head_norm = {
        "nemotron_h_moe": "nextn.shared_head_norm.weight",
        "bailingmoe3": "layer_output_norm.weight",
        "qwen3next": "nextn.shared_head_norm.weight",
    }
    out[f"blk.{nextn}.{head_norm[spec.arch]}"] = np.ones(h, dtype=np.float32)
    return out


def _tensor_shapes(spec: TinyHybridSpec) -> dict[str, tuple[int, ...]]:
    """The numpy shape of every tensor the writer puts, from a throwaway write (the writers are the one source)."""
    import tempfile

    from gguf import GGUFReader

    with tempfile.TemporaryDirectory() as d:
        path = write_tiny_hybrid_mtp(Path(d) / "shapes.gguf", spec)
        r = GGUFReader(path)
        shapes = {t.name: tuple(int(x) for x in reversed(t.shape)) for t in r.tensors}
        del r
    return shapes


def write_cycle_hybrid_mtp(
    path: str | os.PathLike[str],
    spec: TinyHybridSpec,
    margin: float = 4.0,
    state: float = 0.05,
    head_misses: str = "",
    seed: int = 0,
    noise: float = 0.0,
) -> Path:
    """A tiny hybrid whose NextN head agrees with its target but after ``head_misses`` (:func:`cycle_overrides`):
    drafts are accepted in part, so a rejection rolls the recurrent state back by some rows, not all."""
    overrides = cycle_overrides(spec, margin, state, head_misses, seed, noise)
    return write_tiny_hybrid_mtp(path, spec, seed=seed, overrides=overrides)


def write_hybrid_pair(d: Path, arch: str) -> tuple[Path, Path]:
    """The (random, cycle) pair the hybrid families' tests share: every draft of the random head rejected, and the
    cycle's head naming the letter two ahead after C and J (rollbacks of some rows, not all)."""
    spec = TinyHybridSpec(arch)
    return write_tiny_hybrid_mtp(d / "random.gguf", spec, seed=3), write_cycle_hybrid_mtp(
        d / "cycle.gguf", spec, head_misses="CJ"
    )

"""A tiny generated ``deepseek4`` (DeepSeek V4) target with one NextN (MTP) block, random f32 weights.

What its loader reads (``src/models/deepseek4.cpp`` ``load_arch_hparams`` / ``load_arch_tensors``): q LoRA and a
single shared K/V row per token (``attn_kv``, MQA) with attention sinks, a grouped low-rank output
(``attn_output_a`` / ``_b``), 4 hyper-connection streams mixed by Sinkhorn (``hc_*``, ``output_hc_*``), MoE blocks
with sqrt-softplus routing, and per block a compression ratio: 0 (sliding window only), 4 (compressed sparse
attention, with the lightning indexer that picks the compressed positions) or 128 (heavily compressed attention).
The compressors keep a running state per sequence that the DSV4 cache snapshots for rollback
(``src/llama-kv-cache-dsv4.cpp``). The head reads the target's hyper-connection state, ``n_embd_out`` = 4 x
``n_embd`` wide.

The key rows are 128 wide and the indexer's 64: a key as wide as the indexer's makes every cache of the model,
the MTP context's included, build a Hadamard rotation, and the MTP context's cache (sliding-window layers only)
then has no head width to size it from, which divides by zero (``llama_kv_cache::build_input_k_rot``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, Keys, LlamaFileType

from local_eagle.gguf import keys as K
from local_eagle.testing.tiny import add_byte_tokenizer, byte_vocab, finish_gguf, random_f32

SQRT_SOFTPLUS = 4  # LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS, the only routing the loader takes


@dataclass(frozen=True)
class TinyDsv4Spec:
    ratios: tuple[int, ...] = (0, 4, 128)  # one trunk block per compression ratio
    n_embd: int = 64
    n_head: int = 2
    head_dim: int = 128
    q_lora_rank: int = 32
    n_rot: int = 16
    o_groups: int = 2
    o_lora_rank: int = 16
    hc_mult: int = 4  # the graph asserts 4 streams
    n_swa: int = 16
    indexer_n_head: int = 2
    indexer_head_dim: int = 64
    indexer_top_k: int = 8
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-6
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def write_tiny_deepseek4_mtp(
    path: str | os.PathLike[str], spec: TinyDsv4Spec | None = None, seed: int = 0, mtp: bool = True
) -> Path:
    """A random-weight f32 ``deepseek4`` GGUF whose last block is a NextN (MTP) block (``mtp=False``: the trunk)."""
    s = spec or TinyDsv4Spec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(s.extra_tokens)
    n_vocab, h, hd, a = len(tokens), s.n_embd, s.head_dim, "deepseek4"
    hc_dim, hc_mix = s.hc_mult * h, (2 + s.hc_mult) * s.hc_mult
    ratios = list(s.ratios) + ([0] if mtp else [])
    n_layer = len(s.ratios)
    mat, norm = random_f32(rng)

    def small(*shape: int) -> np.ndarray:
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)

    def stack(n: int, rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((n, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    p = Path(path)
    w = GGUFWriter(p, a)
    w.add_name("tiny-deepseek4-mtp" if mtp else "tiny-deepseek4")
    w.add_file_type(LlamaFileType.ALL_F32)
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(h)
    w.add_block_count(len(ratios))
    w.add_feed_forward_length(4 * h)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(1)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(s.n_rot)
    w.add_rope_freq_base(s.rope_theta)
    w.add_layer_norm_rms_eps(s.eps)
    w.add_q_lora_rank(s.q_lora_rank)
    w.add_sliding_window(s.n_swa)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_uint32(Keys.LLM.EXPERT_GATING_FUNC.format(arch=a), SQRT_SOFTPLUS)
    # keys the installed gguf-py does not name yet (src/llama-arch.cpp LLM_KV_*)
    w.add_float32(K.KEY_DSV4_SWIGLU_CLAMP_EXP.format(arch=a), 10.0)
    w.add_uint32(K.KEY_DSV4_INDEXER_HEAD_COUNT.format(arch=a), s.indexer_n_head)
    w.add_uint32(K.KEY_DSV4_INDEXER_KEY_LENGTH.format(arch=a), s.indexer_head_dim)
    w.add_uint32(K.KEY_DSV4_INDEXER_TOP_K.format(arch=a), s.indexer_top_k)
    w.add_uint32(K.KEY_DSV4_OUTPUT_GROUP_COUNT.format(arch=a), s.o_groups)
    w.add_uint32(K.KEY_DSV4_OUTPUT_LORA_RANK.format(arch=a), s.o_lora_rank)
    w.add_float32(K.KEY_DSV4_COMPRESS_ROPE_FREQ_BASE.format(arch=a), 160000.0)
    w.add_array(K.KEY_DSV4_COMPRESS_RATIOS.format(arch=a), ratios)
    w.add_uint32(K.KEY_DSV4_HC_COUNT.format(arch=a), s.hc_mult)
    w.add_uint32(K.KEY_DSV4_HC_SINKHORN_ITERATIONS.format(arch=a), 3)
    w.add_float32(K.KEY_DSV4_HC_EPSILON.format(arch=a), 1e-6)
    w.add_uint32(K.KEY_DSV4_HASH_LAYER_COUNT.format(arch=a), 0)
    if mtp:
        w.add_nextn_predict_layers(1)
    add_byte_tokenizer(w, tokens, scores, types)

    put = w.add_tensor
    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    put("output_hc_fn.weight", mat(s.hc_mult, hc_dim))
    put("output_hc_base.weight", small(s.hc_mult))
    put("output_hc_scale.weight", np.ones(1, np.float32))
    for i, ratio in enumerate(ratios):
        b = f"blk.{i}"
        put(f"{b}.attn_norm.weight", norm(h))
        put(f"{b}.attn_sinks.weight", small(s.n_head))
        put(f"{b}.attn_q_a.weight", mat(s.q_lora_rank, h))
        put(f"{b}.attn_q_a_norm.weight", norm(s.q_lora_rank))
        put(f"{b}.attn_q_b.weight", mat(s.n_head * hd, s.q_lora_rank))
        put(f"{b}.attn_kv.weight", mat(hd, h))
        put(f"{b}.attn_kv_a_norm.weight", norm(hd))
        put(f"{b}.attn_output_a.weight", mat(s.o_lora_rank * s.o_groups, s.n_head * hd // s.o_groups))
        put(f"{b}.attn_output_b.weight", mat(h, s.o_groups * s.o_lora_rank))
        for part in ("attn", "ffn"):
            put(f"{b}.hc_{part}_fn.weight", mat(hc_mix, hc_dim))
            put(f"{b}.hc_{part}_base.weight", small(hc_mix))
            put(f"{b}.hc_{part}_scale.weight", np.ones(3, np.float32))
        if ratio:
            width = (2 if ratio == 4 else 1) * hd
            put(f"{b}.attn_compressor_kv.weight", mat(width, h))
            put(f"{b}.attn_compressor_gate.weight", mat(width, h))
            put(f"{b}.attn_compressor_ape.weight", small(ratio, width))
            put(f"{b}.attn_compressor_norm.weight", norm(hd))
        if ratio == 4:
            ihd = s.indexer_head_dim
            put(f"{b}.indexer.proj.weight", mat(s.indexer_n_head, h))
            put(f"{b}.indexer.attn_q_b.weight", mat(s.indexer_n_head * ihd, s.q_lora_rank))
            put(f"{b}.indexer_compressor_kv.weight", mat(2 * ihd, h))
            put(f"{b}.indexer_compressor_gate.weight", mat(2 * ihd, h))
            put(f"{b}.indexer_compressor_ape.weight", small(4, 2 * ihd))
            put(f"{b}.indexer_compressor_norm.weight", norm(ihd))
        put(f"{b}.ffn_norm.weight", norm(h))
        put(f"{b}.ffn_gate_inp.weight", mat(s.n_expert, h))
        put(f"{b}.exp_probs_b.bias", small(s.n_expert))
        put(f"{b}.ffn_gate_exps.weight", stack(s.n_expert, s.n_ff_exp, h))
        put(f"{b}.ffn_up_exps.weight", stack(s.n_expert, s.n_ff_exp, h))
        put(f"{b}.ffn_down_exps.weight", stack(s.n_expert, h, s.n_ff_exp))
        put(f"{b}.ffn_gate_shexp.weight", mat(s.n_ff_exp, h))
        put(f"{b}.ffn_up_shexp.weight", mat(s.n_ff_exp, h))
        put(f"{b}.ffn_down_shexp.weight", mat(h, s.n_ff_exp))
        if i >= n_layer:
            put(f"{b}.nextn.eh_proj.weight", mat(h, 2 * h))
            put(f"{b}.nextn.enorm.weight", norm(h))
            put(f"{b}.nextn.hnorm.weight", norm(h))
            put(f"{b}.nextn.shared_head_norm.weight", norm(h))
    finish_gguf(w)
    return p

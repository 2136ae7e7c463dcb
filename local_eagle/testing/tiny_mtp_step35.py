"""A tiny generated ``step35`` (Step 3.5) target with several chained MTP (NextN) heads, for the chained drafter.

``step35`` is the family whose NextN blocks are chained (``src/models/step35.cpp``): ``block_count`` counts the trunk
and ``nextn_predict_layers`` NextN blocks after it, every one required when ``load_mtp`` is set, and the MTP graph
runs the block ``n_layer + nextn_layer_offset``. The trunk mixes sliding-window and full attention
(``attention.sliding_window_pattern``, one flag per block, NextN blocks full attention as the converter pads them,
``conversion/step3.py``), a dense first block and MoE blocks with a shared expert; the target stages its last hidden
state before ``output_norm``. Random f32 weights, the byte vocabulary of ``testing.tiny``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import ExpertGatingFuncType

from local_eagle.testing.tiny import add_byte_tokenizer, byte_vocab, finish_gguf, random_f32, tiny_gguf_writer
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, cycle_glm4moe_tensors


@dataclass(frozen=True)
class TinyStep35Spec:
    n_layer: int = 2  # trunk blocks: the first dense and sliding-window, the rest MoE and full attention
    n_nextn: int = 2  # chained NextN heads after the trunk
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ff_shexp: int = 32
    n_swa: int = 512  # the window; longer than the tests' contexts, so it masks nothing there
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-5
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def write_tiny_step35_mtp(
    path: str | os.PathLike[str],
    spec: TinyStep35Spec | None = None,
    seed: int = 0,
    overrides: dict[str, np.ndarray] | None = None,
) -> Path:
    """A random-weight f32 ``step35`` GGUF whose last ``spec.n_nextn`` blocks are chained NextN heads, each with its
    own ``shared_head_{norm,head}``; ``overrides`` replaces tensors by name (the random draws stay the same)."""
    overrides = overrides or {}
    spec = spec or TinyStep35Spec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    n_all = spec.n_layer + spec.n_nextn
    mat, norm = random_f32(rng)

    def experts(rows: int, cols: int) -> np.ndarray:  # ggml {cols, rows, n_expert}
        return (rng.standard_normal((spec.n_expert, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    p = Path(path)

    def put(name: str, value: np.ndarray) -> None:
        w.add_tensor(name, overrides.get(name, value))

    w = tiny_gguf_writer(p, "step35", "tiny-step35-mtp", spec, n_all)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_sliding_window(spec.n_swa)
    w.add_sliding_window_pattern([i == 0 for i in range(n_all)])
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    w.add_expert_shared_feed_forward_length(spec.n_ff_shexp)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(1.0)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_leading_dense_block_count(1)
    w.add_nextn_predict_layers(spec.n_nextn)
    add_byte_tokenizer(w, tokens, scores, types)

    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    for i in range(n_all):
        put(f"blk.{i}.attn_norm.weight", norm(h))
        put(f"blk.{i}.attn_q_norm.weight", norm(hd))
        put(f"blk.{i}.attn_k_norm.weight", norm(hd))
        put(f"blk.{i}.attn_q.weight", mat(spec.n_head * hd, h))
        put(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
        put(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
        put(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
        put(f"blk.{i}.attn_gate.weight", mat(spec.n_head, h))  # Step 3.5's head-wise attention gate
        put(f"blk.{i}.ffn_norm.weight", norm(h))
        if i == 0:
            put(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, h))
            put(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, h))
            put(f"blk.{i}.ffn_down.weight", mat(h, spec.n_ff))
        else:
            put(f"blk.{i}.ffn_gate_inp.weight", mat(spec.n_expert, h))
            put(f"blk.{i}.exp_probs_b.bias", (0.1 * rng.standard_normal(spec.n_expert)).astype(np.float32))
            put(f"blk.{i}.ffn_gate_exps.weight", experts(spec.n_ff_exp, h))
            put(f"blk.{i}.ffn_up_exps.weight", experts(spec.n_ff_exp, h))
            put(f"blk.{i}.ffn_down_exps.weight", experts(h, spec.n_ff_exp))
            put(f"blk.{i}.ffn_gate_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"blk.{i}.ffn_up_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"blk.{i}.ffn_down_shexp.weight", mat(h, spec.n_ff_shexp))
        if i >= spec.n_layer:
            put(f"blk.{i}.nextn.eh_proj.weight", mat(h, 2 * h))  # ggml {2h, h}: [enorm(e); hnorm(h)]
            put(f"blk.{i}.nextn.enorm.weight", norm(h))
            put(f"blk.{i}.nextn.hnorm.weight", norm(h))
            put(f"blk.{i}.nextn.shared_head_norm.weight", norm(h))
            put(f"blk.{i}.nextn.shared_head_head.weight", mat(n_vocab, h, 4.0))
    finish_gguf(w)
    return p


def cycle_step35_tensors(
    spec: TinyStep35Spec | None = None, margin: float = 4.0, head_misses: tuple[str, ...] = (), seed: int = 0
) -> dict[str, np.ndarray]:
    """Overrides that make a tiny ``step35`` the letter cycle of ``testing.tiny_pair`` with heads that agree with it.

    As ``testing.tiny_mtp.cycle_glm4moe_tensors``: every attention output and FFN down projection is zero (trunk and
    NextN blocks), so the target's next token depends on the current one only (``A``..``P`` cycle, any other token is
    followed by ``P``); each NextN block's ``eh_proj`` keeps the embedding half and drops the state, so head k's row
    (``d_k``, state) names the letter after ``d_k`` whatever state the chain hands it. ``head_misses[k]`` (a string of
    letters) makes head k name the letter two ahead after those letters: drafts the target rejects, at known steps.
    """
    spec = spec or TinyStep35Spec()
    h = spec.n_embd
    glm = TinyGlm4MoeSpec(n_layer=1, n_embd=h, extra_tokens=spec.extra_tokens)
    out = {
        name: value
        for name, value in cycle_glm4moe_tensors(glm, margin=margin, seed=seed).items()
        if name in ("token_embd.weight", "output.weight", "output_norm.weight")
    }
    hd = h // spec.n_head
    for i in range(spec.n_layer + spec.n_nextn):
        out[f"blk.{i}.attn_output.weight"] = np.zeros((h, spec.n_head * hd), dtype=np.float32)
        if i == 0:
            out[f"blk.{i}.ffn_down.weight"] = np.zeros((h, spec.n_ff), dtype=np.float32)
        else:
            out[f"blk.{i}.ffn_down_exps.weight"] = np.zeros((spec.n_expert, h, spec.n_ff_exp), dtype=np.float32)
            out[f"blk.{i}.ffn_down_shexp.weight"] = np.zeros((h, spec.n_ff_shexp), dtype=np.float32)
    for k in range(spec.n_nextn):
        misses = head_misses[k] if k < len(head_misses) else ""
        head = cycle_glm4moe_tensors(glm, margin=margin, head_misses=misses, seed=seed)
        b = spec.n_layer + k
        for part in ("eh_proj", "enorm", "hnorm", "shared_head_norm", "shared_head_head"):
            out[f"blk.{b}.nextn.{part}.weight"] = head[f"blk.1.nextn.{part}.weight"]
    return out


def write_cycle_step35_mtp(
    path: str | os.PathLike[str],
    spec: TinyStep35Spec | None = None,
    margin: float = 4.0,
    head_misses: tuple[str, ...] = (),
    seed: int = 0,
) -> Path:
    """A tiny ``step35`` whose chained heads agree with its target (:func:`cycle_step35_tensors`): drafts are accepted,
    so a round keeps some of its drafts and rolls every head's cache back past the rest."""
    spec = spec or TinyStep35Spec()
    return write_tiny_step35_mtp(path, spec, seed=seed, overrides=cycle_step35_tensors(spec, margin, head_misses, seed))

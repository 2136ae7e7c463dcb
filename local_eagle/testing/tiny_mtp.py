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
    overrides: dict[str, np.ndarray] | None = None,
) -> Path:
    """A random-weight f32 ``glm4moe`` GGUF whose last ``n_nextn`` blocks are NextN (MTP) blocks.

    ``mtp=False`` writes the same trunk without the NextN blocks (``nextn_predict_layers`` absent), a
    target with no built-in head. ``overrides`` replaces tensors by name (the random draws stay the same, so the
    other tensors do too).
    """
    overrides = overrides or {}
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

    def put(name: str, value: np.ndarray) -> None:
        w.add_tensor(name, overrides.get(name, value))

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

    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    n_ff_shexp = spec.n_ff_exp * spec.n_expert_shared
    for i in range(n_all):
        put(f"blk.{i}.attn_norm.weight", norm(h))
        put(f"blk.{i}.attn_q.weight", mat(spec.n_head * hd, h))
        put(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
        put(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
        put(f"blk.{i}.attn_q.bias", (0.1 * rng.standard_normal(spec.n_head * hd)).astype(np.float32))
        put(f"blk.{i}.attn_k.bias", (0.1 * rng.standard_normal(spec.n_head_kv * hd)).astype(np.float32))
        put(f"blk.{i}.attn_v.bias", (0.1 * rng.standard_normal(spec.n_head_kv * hd)).astype(np.float32))
        put(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
        put(f"blk.{i}.post_attention_norm.weight", norm(h))
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
            put(f"blk.{i}.ffn_gate_shexp.weight", mat(n_ff_shexp, h))
            put(f"blk.{i}.ffn_up_shexp.weight", mat(n_ff_shexp, h))
            put(f"blk.{i}.ffn_down_shexp.weight", mat(h, n_ff_shexp))
        if i >= spec.n_layer:
            put(f"blk.{i}.nextn.eh_proj.weight", mat(h, 2 * h))  # ggml {2h, h}: [enorm(e); hnorm(h)]
            put(f"blk.{i}.nextn.enorm.weight", norm(h))
            put(f"blk.{i}.nextn.hnorm.weight", norm(h))
            if spec.own_head:
                put(f"blk.{i}.nextn.shared_head_norm.weight", norm(h))
                put(f"blk.{i}.nextn.shared_head_head.weight", mat(n_vocab, h, 4.0))
    finish_gguf(w)
    return p


def cycle_glm4moe_tensors(
    spec: TinyGlm4MoeSpec | None = None,
    margin: float = 4.0,
    noise: float = 0.0,
    head_noise: float = 0.0,
    head_misses: str = "",
    seed: int = 0,
    runner_up: float = 0.0,
) -> dict[str, np.ndarray]:
    """Overrides that make a tiny ``glm4moe`` the cycle target of ``testing.tiny_pair``, with a NextN head that agrees.

    Every attention output and FFN down projection is zero (trunk and NextN block), so the trunk's state is
    ``output_norm(embd(t))`` and the target's next token is a fixed function of the current one: letters ``A``..``P``
    cycle, any other token is followed by ``P``. The NextN row for position q is ``(x_q, h_{q-1})`` and must name
    ``x_{q+1}``; ``eh_proj`` keeps the ``enorm(embd(x_q))`` half and drops the state, so the head's own state is the
    normalised embedding of ``x_q`` and its head (the target's, or its own ``shared_head_head``) names the letter
    after it: exactly what the target will say. Drafting recursively on the head's own state stays right.

    ``margin`` is the logit gap before the norms' scale (``sqrt(n_embd)``), ``noise`` blurs the target's head,
    ``head_noise`` the NextN head's own; after each letter of ``head_misses`` the NextN head names the letter two
    ahead, a draft the target always rejects (greedy acceptance below 1 at known places), and with ``runner_up`` (a
    share of ``margin``) the right letter is its second choice there: a tree's sibling catches what a chain misses.
    The head's own tensors need ``spec.own_head``.
    """
    from local_eagle.testing.tiny_pair import CYCLE

    spec = spec or TinyGlm4MoeSpec()
    h, n_cycle = spec.n_embd, len(CYCLE)
    if h < n_cycle + 2:
        raise ValueError(f"the cycle needs n_embd >= {n_cycle + 2}")
    if (head_noise or head_misses) and not spec.own_head:
        raise ValueError("a NextN head that differs from the target's needs spec.own_head")
    rng = np.random.default_rng(seed)
    n_vocab = len(byte_vocab(spec.extra_tokens)[0])
    hd = spec.n_embd // spec.n_head
    embd = np.zeros((n_vocab, h), dtype=np.float32)
    others = [t for t in range(n_vocab) if t not in CYCLE]
    embd[others, h - 1] = 1.0
    embd[others, n_cycle : h - 1] = 0.5 * rng.standard_normal((len(others), h - 1 - n_cycle))
    embd[CYCLE, np.arange(n_cycle)] = 1.0

    def cycle_head(misses: str) -> np.ndarray:
        head = np.zeros((n_vocab, h), dtype=np.float32)
        for i, t in enumerate(CYCLE):
            step = 2 if chr(t - 3) in misses else 1
            head[CYCLE[(i + step) % n_cycle], i] += margin
            if step == 2:
                head[CYCLE[(i + 1) % n_cycle], i] += runner_up * margin
            head[t, h - 1] = 0.01 * (i + 1)  # tokens outside the cycle are followed by the last letter
        return head

    head = cycle_head("")
    if noise:
        head[3:] += noise * rng.standard_normal((n_vocab - 3, h)).astype(np.float32)  # specials stay silent
    out: dict[str, np.ndarray] = {
        "token_embd.weight": embd,
        "output.weight": head,
        "output_norm.weight": np.ones(h, dtype=np.float32),
    }
    n_ff_shexp = spec.n_ff_exp * spec.n_expert_shared
    for i in range(spec.n_layer + spec.n_nextn):
        out[f"blk.{i}.attn_output.weight"] = np.zeros((h, spec.n_head * hd), dtype=np.float32)
        if i == 0:
            out[f"blk.{i}.ffn_down.weight"] = np.zeros((h, spec.n_ff), dtype=np.float32)
        else:
            out[f"blk.{i}.ffn_down_exps.weight"] = np.zeros((spec.n_expert, h, spec.n_ff_exp), dtype=np.float32)
            out[f"blk.{i}.ffn_down_shexp.weight"] = np.zeros((h, n_ff_shexp), dtype=np.float32)
        if i >= spec.n_layer:
            out[f"blk.{i}.nextn.eh_proj.weight"] = np.concatenate(
                [np.eye(h, dtype=np.float32), np.zeros((h, h), dtype=np.float32)], axis=1
            )
            out[f"blk.{i}.nextn.enorm.weight"] = np.ones(h, dtype=np.float32)
            out[f"blk.{i}.nextn.hnorm.weight"] = np.ones(h, dtype=np.float32)
            if spec.own_head:
                own = cycle_head(head_misses)
                if head_noise:
                    own[3:] += head_noise * rng.standard_normal((n_vocab - 3, h)).astype(np.float32)
                out[f"blk.{i}.nextn.shared_head_norm.weight"] = np.ones(h, dtype=np.float32)
                out[f"blk.{i}.nextn.shared_head_head.weight"] = own
    return out


def write_cycle_glm4moe_mtp(
    path: str | os.PathLike[str],
    spec: TinyGlm4MoeSpec | None = None,
    margin: float = 4.0,
    noise: float = 0.0,
    head_noise: float = 0.0,
    head_misses: str = "",
    seed: int = 0,
    runner_up: float = 0.0,
) -> Path:
    """A tiny ``glm4moe`` whose NextN head agrees with its target (``cycle_glm4moe_tensors``): high acceptance, so
    drafting with the model's own head can be compared with llama.cpp's ``draft-mtp`` on equal terms."""
    spec = spec or TinyGlm4MoeSpec()
    overrides = cycle_glm4moe_tensors(spec, margin, noise, head_noise, head_misses, seed, runner_up)
    return write_tiny_glm4moe_mtp(path, spec, seed=seed, overrides=overrides)


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
    n_expert: int = 0  # above 0: ``qwen35moe`` (Qwen3.5 / 3.6 MoE): routed experts and a gated shared one per block
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ff_shexp: int = 64

    @property
    def arch(self) -> str:
        return "qwen35moe" if self.n_expert else "qwen35"


def write_tiny_qwen35_mtp(
    path: str | os.PathLike[str],
    spec: TinyQwen35Spec | None = None,
    seed: int = 0,
    mtp: bool = True,
    overrides: dict[str, np.ndarray] | None = None,
) -> Path:
    """A random-weight f32 ``qwen35`` GGUF (a hybrid target) whose last block is a NextN (MTP) block.

    ``overrides`` replaces tensors by name (the random draws stay the same) and adds the optional ones it names that
    are not written otherwise (``nextn.shared_head_head``).
    """
    overrides = overrides or {}
    spec = spec or TinyQwen35Spec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    n_all = spec.n_layer + (1 if mtp else 0)
    key_dim = spec.ssm_d_state * spec.ssm_n_group
    value_dim = spec.ssm_d_state * spec.ssm_dt_rank
    conv_dim = 2 * key_dim + value_dim
    mat, norm = random_f32(rng)

    def experts(rows: int, cols: int) -> np.ndarray:  # ggml {cols, rows, n_expert}
        return (rng.standard_normal((spec.n_expert, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    p = Path(path)
    written: set[str] = set()

    def put(name: str, value: np.ndarray) -> None:
        written.add(name)
        w.add_tensor(name, overrides.get(name, value))

    w = tiny_gguf_writer(p, spec.arch, f"tiny-{spec.arch}-mtp" if mtp else f"tiny-{spec.arch}", spec, n_all)
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
    if spec.n_expert:
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
    for i in range(n_all):
        recurrent = i < spec.n_layer and (i + 1) % spec.full_attention_interval != 0
        put(f"blk.{i}.attn_norm.weight", norm(h))
        put(f"blk.{i}.post_attention_norm.weight", norm(h))
        if recurrent:
            put(f"blk.{i}.attn_qkv.weight", mat(conv_dim, h))
            put(f"blk.{i}.attn_gate.weight", mat(value_dim, h))
            put(f"blk.{i}.ssm_conv1d.weight", mat(conv_dim, spec.ssm_d_conv))
            put(f"blk.{i}.ssm_dt.bias", (0.1 * rng.standard_normal(spec.ssm_dt_rank)).astype(np.float32))
            put(f"blk.{i}.ssm_a", (-np.exp(0.3 * rng.standard_normal(spec.ssm_dt_rank))).astype(np.float32))
            put(f"blk.{i}.ssm_beta.weight", mat(spec.ssm_dt_rank, h))
            put(f"blk.{i}.ssm_alpha.weight", mat(spec.ssm_dt_rank, h))
            put(f"blk.{i}.ssm_norm.weight", norm(spec.ssm_d_state))
            put(f"blk.{i}.ssm_out.weight", mat(h, value_dim))
        else:
            put(f"blk.{i}.attn_q.weight", mat(2 * spec.n_head * hd, h))  # queries and their gates
            put(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
            put(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
            put(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
            put(f"blk.{i}.attn_q_norm.weight", norm(hd))
            put(f"blk.{i}.attn_k_norm.weight", norm(hd))
        if spec.n_expert:  # qwen35moe.cpp: routed experts and a shared expert behind a sigmoid gate
            put(f"blk.{i}.ffn_gate_inp.weight", mat(spec.n_expert, h))
            put(f"blk.{i}.ffn_gate_exps.weight", experts(spec.n_ff_exp, h))
            put(f"blk.{i}.ffn_up_exps.weight", experts(spec.n_ff_exp, h))
            put(f"blk.{i}.ffn_down_exps.weight", experts(h, spec.n_ff_exp))
            put(f"blk.{i}.ffn_gate_inp_shexp.weight", mat(1, h)[0])
            put(f"blk.{i}.ffn_gate_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"blk.{i}.ffn_up_shexp.weight", mat(spec.n_ff_shexp, h))
            put(f"blk.{i}.ffn_down_shexp.weight", mat(h, spec.n_ff_shexp))
        else:
            put(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, h))
            put(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, h))
            put(f"blk.{i}.ffn_down.weight", mat(h, spec.n_ff))
        if i >= spec.n_layer:
            put(f"blk.{i}.nextn.eh_proj.weight", mat(h, 2 * h))
            put(f"blk.{i}.nextn.enorm.weight", norm(h))
            put(f"blk.{i}.nextn.hnorm.weight", norm(h))
            put(f"blk.{i}.nextn.shared_head_norm.weight", norm(h))
    for name in sorted(set(overrides) - written):
        w.add_tensor(name, overrides[name])
    finish_gguf(w)
    return p


def cycle_qwen35_tensors(
    spec: TinyQwen35Spec | None = None,
    margin: float = 4.0,
    state: float = 0.05,
    head_misses: str = "",
    seed: int = 0,
    noise: float = 0.0,
    head_noise: float = 0.0,
) -> dict[str, np.ndarray]:
    """Overrides that make a tiny ``qwen35`` the letter cycle of :func:`cycle_glm4moe_tensors`, its NextN head agreeing.

    The embedding, the heads and the NextN block's ``eh_proj`` are the glm4moe cycle's; every attention output and FFN
    down projection is zero (trunk and NextN block). The recurrent layers' ``ssm_out`` is random at scale ``state``
    (0: zero): their state then moves the target's logits a little without changing its choices, so a recurrent state
    rolled back wrong shows in the logits (the log-probabilities a generation reports) while the cycle still holds.
    ``head_misses`` as for glm4moe: the head names the letter two ahead after those letters, drafts the target rejects;
    ``noise`` and ``head_noise`` blur the trunk's head and the NextN head's own (a sampling test's blurred cycle).
    """
    spec = spec or TinyQwen35Spec()
    h = spec.n_embd
    glm = TinyGlm4MoeSpec(n_layer=1, n_embd=h, extra_tokens=spec.extra_tokens)
    cycle = cycle_glm4moe_tensors(glm, margin, noise, head_noise, head_misses, seed)
    out = {name: cycle[name] for name in ("token_embd.weight", "output.weight", "output_norm.weight")}
    rng = np.random.default_rng(seed + 1)
    hd = h // spec.n_head
    value_dim = spec.ssm_d_state * spec.ssm_dt_rank
    for i in range(spec.n_layer + 1):
        if i < spec.n_layer and (i + 1) % spec.full_attention_interval != 0:
            ssm_out = state * rng.standard_normal((h, value_dim)) / np.sqrt(value_dim)
            out[f"blk.{i}.ssm_out.weight"] = ssm_out.astype(np.float32)
        else:
            out[f"blk.{i}.attn_output.weight"] = np.zeros((h, spec.n_head * hd), dtype=np.float32)
        if spec.n_expert:
            out[f"blk.{i}.ffn_down_exps.weight"] = np.zeros((spec.n_expert, h, spec.n_ff_exp), dtype=np.float32)
            out[f"blk.{i}.ffn_down_shexp.weight"] = np.zeros((h, spec.n_ff_shexp), dtype=np.float32)
        else:
            out[f"blk.{i}.ffn_down.weight"] = np.zeros((h, spec.n_ff), dtype=np.float32)
    nextn = spec.n_layer
    for part in ("eh_proj", "enorm", "hnorm", "shared_head_norm", "shared_head_head"):
        out[f"blk.{nextn}.nextn.{part}.weight"] = cycle[f"blk.1.nextn.{part}.weight"]
    return out


def write_cycle_qwen35_mtp(
    path: str | os.PathLike[str],
    spec: TinyQwen35Spec | None = None,
    margin: float = 4.0,
    state: float = 0.05,
    head_misses: str = "",
    seed: int = 0,
    noise: float = 0.0,
    head_noise: float = 0.0,
) -> Path:
    """A tiny hybrid ``qwen35`` whose NextN head agrees with its target (:func:`cycle_qwen35_tensors`): drafts are
    accepted, so partial acceptance rolls its recurrent state back by some rows, not all."""
    spec = spec or TinyQwen35Spec()
    overrides = cycle_qwen35_tensors(spec, margin, state, head_misses, seed, noise, head_noise)
    return write_tiny_qwen35_mtp(path, spec, seed=seed, overrides=overrides)

"""Tiny generated MTP (NextN) targets of the attention families beside ``glm4moe`` that the pinned llama.cpp drafts for.

``testing.tiny_mtp`` has ``glm4moe`` and the hybrid ``qwen35``; this module writes the others whose model class builds
a ``graph_mtp`` over an attention cache (llama-cpp-python 0.3.36, ``vendor/llama.cpp/src/models/<family>.cpp``), each
with the hparams and tensors that family's loader reads:

- ``deepseek2`` (DeepSeek V3 / GLM-4.7-Flash style MLA): q and kv LoRA ranks, split ``attn_k_b`` / ``attn_v_b``, one
  KV head (the absorbed MQA form), a dense first block, MoE blocks with a sigmoid router and selection bias, one
  shared expert; the NextN block is MoE with MLA (its ``graph_mtp`` asserts ``q_lora_rank > 0`` and MLA);
- ``mimo2`` (MiMo V2): fused ``attn_qkv`` (the NextN graph asserts it), sliding-window layers by a per-layer pattern,
  MoE blocks with a sigmoid router; the NextN block is a dense, sliding-window block; its head norm is
  ``layer_output_norm`` unless it has its own head;
- ``cohere2moe``: LayerNorm (no RMS epsilon), parallel attention and FFN on one normalised input, NoPE on the full
  attention layers past the dense lead, sliding windows on the others, a logit scale, routed and shared experts
  averaged; the NextN block is a full-attention MoE block with RoPE;
- ``hy_v3`` (Hunyuan V3): q/k norms, a dense first block, MoE blocks with a sigmoid router, a selection bias named
  ``blk.N.exp_probs_b`` (no ``.bias``: the loader's name) and an ungated shared expert; the NextN block is MoE with
  ``nextn.shared_head_norm`` and the trunk's head, as the converter writes it.
- ``deepseek32`` (DeepSeek V3.2) and ``glm-dsa`` (GLM-5): ``deepseek2``'s MLA block plus the DSA "lightning
  indexer" (``indexer.{attn_q_b,attn_k,k_norm,proj}``, head count, key length, top k) that picks the positions each
  query attends to in the target; its key cache is the DSA cache's second part. The NextN graph runs dense MLA (no
  indexer) on a plain KV cache. The indexer's key length is 64: its keys go through a Hadamard rotation at least 64
  wide (``llama_kv_cache::build_input_k_rot``), which a narrower key cannot be multiplied by.

Each writes its NextN block(s) after the trunk (``block_count`` counts them, ``nextn_predict_layers`` says how
many; one unless ``n_nextn`` says more, which only ``mimo2`` and ``hy_v3`` load). With a
:class:`Cycle` the model is ``testing.tiny_pair``'s letter cycle with a head that agrees (as
``tiny_mtp.cycle_glm4moe_tensors``): every attention output and FFN down projection is zero, so each block passes its
input through and the target's next token depends on the current one only; the NextN ``eh_proj`` keeps the token's
half. The embedding rows have zero mean so a LayerNorm (``cohere2moe``) keeps them as an RMS norm does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import ExpertGatingFuncType, GGUFWriter

from local_eagle.testing.tiny import add_byte_tokenizer, byte_vocab, finish_gguf, random_f32, tiny_gguf_writer

FAMILIES = ("deepseek2", "mimo2", "cohere2moe", "hy_v3", "deepseek32", "glm-dsa")
DSA = ("deepseek32", "glm-dsa")

ZEROED = ("attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight")
"""What a cycle model zeroes: every block then adds nothing to its residual stream."""


@dataclass(frozen=True)
class TinyFamilySpec:
    """One tiny shape for the four families; the fields a family does not read are ignored."""

    arch: str
    n_layer: int = 3  # trunk blocks: the first dense, the rest MoE
    n_nextn: int = 1  # NextN blocks after the trunk: mimo2 and hy_v3 load several (MiMo V2 ships 3), the others one
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_expert_shared: int = 1
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-5
    own_head: bool = True  # nextn.shared_head_{norm,head}; False: the family's fallback norm and the trunk's head
    # deepseek2 (MLA)
    q_lora_rank: int = 32
    kv_lora_rank: int = 32
    qk_nope: int = 16
    qk_rope: int = 8
    v_head: int = 16
    # deepseek32, glm-dsa: the DSA indexer that picks the top-k positions each query attends to
    indexer_n_head: int = 2
    indexer_head_size: int = 64  # the Hadamard rotation on the indexer keys is 64 wide at least
    indexer_top_k: int = 4
    # mimo2, cohere2moe: sliding-window attention
    n_swa: int = 8
    swa_trunk: tuple[int, ...] = (1, 2)  # the trunk's sliding-window layers
    swa_nextn: bool = True  # mimo2: its converter marks the NextN blocks sliding; cohere2moe's loader never does
    logit_scale: float = 1.0  # cohere2moe
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def tiny_family_spec(arch: str, **kw) -> TinyFamilySpec:
    """The family's defaults: one KV head for MLA, the trunk's head for ``mimo2`` and ``hy_v3`` (as their real
    checkpoints), ``cohere2moe``'s NextN block at full attention."""
    if arch not in FAMILIES:
        raise ValueError(f"no tiny MTP writer for '{arch}' (have {', '.join(FAMILIES)})")
    base = {
        "deepseek2": dict(n_head_kv=1),
        "deepseek32": dict(n_head_kv=1),
        "glm-dsa": dict(n_head_kv=1),
        "mimo2": dict(own_head=False, n_expert_shared=0),  # its loader reads no shared expert
        "cohere2moe": dict(swa_nextn=False),
        "hy_v3": dict(own_head=False),
    }[arch]
    return TinyFamilySpec(arch=arch, **{**base, **kw})


@dataclass(frozen=True)
class Cycle:
    """The letter cycle with an agreeing NextN head; after each letter of ``head_misses`` the head names the letter
    two ahead (a draft the target rejects), with the right one its second choice at ``runner_up`` x ``margin``;
    ``noise`` blurs the target's head and ``head_noise`` the NextN head's own (a sampling test's head that is right
    often, not always)."""

    margin: float = 4.0
    head_misses: str = ""
    runner_up: float = 0.0
    noise: float = 0.0
    head_noise: float = 0.0


class _Tensors:
    def __init__(self, w: GGUFWriter, rng: np.random.Generator, overrides: dict[str, np.ndarray], zero: bool) -> None:
        self.w, self.rng, self.overrides, self.zero = w, rng, overrides, zero
        self.mat, self.norm = random_f32(rng)
        self.written: set[str] = set()

    def put(self, name: str, value: np.ndarray) -> None:
        if name in self.overrides:
            value = self.overrides[name]
        elif self.zero and name.endswith(ZEROED):
            value = np.zeros_like(value)
        self.written.add(name)
        self.w.add_tensor(name, value)

    def stack(self, n: int, rows: int, cols: int) -> np.ndarray:  # ggml {cols, rows, n}
        return (self.rng.standard_normal((n, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def small(self, n: int) -> np.ndarray:
        return (0.1 * self.rng.standard_normal(n)).astype(np.float32)


def _dense(t: _Tensors, i: int, s: TinyFamilySpec) -> None:
    t.put(f"blk.{i}.ffn_gate.weight", t.mat(s.n_ff, s.n_embd))
    t.put(f"blk.{i}.ffn_up.weight", t.mat(s.n_ff, s.n_embd))
    t.put(f"blk.{i}.ffn_down.weight", t.mat(s.n_embd, s.n_ff))


def _moe(t: _Tensors, i: int, s: TinyFamilySpec, probs_b: str | None) -> None:
    h = s.n_embd
    t.put(f"blk.{i}.ffn_gate_inp.weight", t.mat(s.n_expert, h))
    if probs_b:
        t.put(f"blk.{i}.{probs_b}", t.small(s.n_expert))
    t.put(f"blk.{i}.ffn_gate_exps.weight", t.stack(s.n_expert, s.n_ff_exp, h))
    t.put(f"blk.{i}.ffn_up_exps.weight", t.stack(s.n_expert, s.n_ff_exp, h))
    t.put(f"blk.{i}.ffn_down_exps.weight", t.stack(s.n_expert, h, s.n_ff_exp))
    if s.n_expert_shared:
        n_sh = s.n_ff_exp * s.n_expert_shared
        t.put(f"blk.{i}.ffn_gate_shexp.weight", t.mat(n_sh, h))
        t.put(f"blk.{i}.ffn_up_shexp.weight", t.mat(n_sh, h))
        t.put(f"blk.{i}.ffn_down_shexp.weight", t.mat(h, n_sh))


def head_norm_name(s: TinyFamilySpec, i: int) -> str:
    """The norm in front of the NextN block's logits: its own, or ``mimo2``'s converted fallback."""
    if s.own_head or s.arch != "mimo2":
        return f"blk.{i}.nextn.shared_head_norm.weight"
    return f"blk.{i}.layer_output_norm.weight"


def _nextn(t: _Tensors, i: int, s: TinyFamilySpec, n_vocab: int) -> None:
    h = s.n_embd
    t.put(f"blk.{i}.nextn.eh_proj.weight", t.mat(h, 2 * h))  # ggml {2h, h}: [enorm(e); hnorm(h)]
    t.put(f"blk.{i}.nextn.enorm.weight", t.norm(h))
    t.put(f"blk.{i}.nextn.hnorm.weight", t.norm(h))
    t.put(head_norm_name(s, i), t.norm(h))
    if s.own_head:
        t.put(f"blk.{i}.nextn.shared_head_head.weight", t.mat(n_vocab, h, 4.0))


def _qkv(t: _Tensors, i: int, s: TinyFamilySpec) -> None:
    hd = s.n_embd // s.n_head
    t.put(f"blk.{i}.attn_q.weight", t.mat(s.n_head * hd, s.n_embd))
    t.put(f"blk.{i}.attn_k.weight", t.mat(s.n_head_kv * hd, s.n_embd))
    t.put(f"blk.{i}.attn_v.weight", t.mat(s.n_head_kv * hd, s.n_embd))
    t.put(f"blk.{i}.attn_output.weight", t.mat(s.n_embd, s.n_head * hd))


def _deepseek2_block(t: _Tensors, i: int, s: TinyFamilySpec) -> None:
    h, k_mla = s.n_embd, s.qk_nope + s.qk_rope
    t.put(f"blk.{i}.attn_norm.weight", t.norm(h))
    t.put(f"blk.{i}.attn_q_a_norm.weight", t.norm(s.q_lora_rank))
    t.put(f"blk.{i}.attn_kv_a_norm.weight", t.norm(s.kv_lora_rank))
    t.put(f"blk.{i}.attn_q_a.weight", t.mat(s.q_lora_rank, h))
    t.put(f"blk.{i}.attn_q_b.weight", t.mat(s.n_head * k_mla, s.q_lora_rank))
    t.put(f"blk.{i}.attn_kv_a_mqa.weight", t.mat(s.kv_lora_rank + s.qk_rope, h))
    t.put(f"blk.{i}.attn_k_b.weight", t.stack(s.n_head, s.kv_lora_rank, s.qk_nope))  # ggml {nope, kv_lora, n_head}
    t.put(f"blk.{i}.attn_v_b.weight", t.stack(s.n_head, s.v_head, s.kv_lora_rank))  # ggml {kv_lora, v, n_head}
    t.put(f"blk.{i}.attn_output.weight", t.mat(h, s.n_head * s.v_head))
    t.put(f"blk.{i}.ffn_norm.weight", t.norm(h))
    if s.arch in DSA:
        t.put(f"blk.{i}.indexer.k_norm.weight", t.norm(s.indexer_head_size))
        t.put(f"blk.{i}.indexer.k_norm.bias", t.small(s.indexer_head_size))
        t.put(f"blk.{i}.indexer.proj.weight", t.mat(s.indexer_n_head, h))
        t.put(f"blk.{i}.indexer.attn_k.weight", t.mat(s.indexer_head_size, h))
        t.put(f"blk.{i}.indexer.attn_q_b.weight", t.mat(s.indexer_n_head * s.indexer_head_size, s.q_lora_rank))
    if i == 0:
        _dense(t, i, s)
    else:
        _moe(t, i, s, "exp_probs_b.bias")


def _mimo2_block(t: _Tensors, i: int, s: TinyFamilySpec) -> None:
    h, hd = s.n_embd, s.n_embd // s.n_head
    t.put(f"blk.{i}.attn_qkv.weight", t.mat((s.n_head + 2 * s.n_head_kv) * hd, h))
    t.put(f"blk.{i}.attn_output.weight", t.mat(h, s.n_head * hd))
    t.put(f"blk.{i}.attn_norm.weight", t.norm(h))
    t.put(f"blk.{i}.ffn_norm.weight", t.norm(h))
    if i == 0 or i >= s.n_layer:  # the NextN graph asserts a dense FFN
        _dense(t, i, s)
    else:
        _moe(t, i, s, "exp_probs_b.bias")


def _cohere2moe_block(t: _Tensors, i: int, s: TinyFamilySpec) -> None:
    t.put(f"blk.{i}.attn_norm.weight", t.norm(s.n_embd))
    _qkv(t, i, s)
    if i == 0:
        _dense(t, i, s)
    else:
        _moe(t, i, s, None)


def _hy_v3_block(t: _Tensors, i: int, s: TinyFamilySpec) -> None:
    hd = s.n_embd // s.n_head
    t.put(f"blk.{i}.attn_norm.weight", t.norm(s.n_embd))
    _qkv(t, i, s)
    t.put(f"blk.{i}.attn_q_norm.weight", t.norm(hd))
    t.put(f"blk.{i}.attn_k_norm.weight", t.norm(hd))
    t.put(f"blk.{i}.ffn_norm.weight", t.norm(s.n_embd))
    if i == 0:
        _dense(t, i, s)
    else:
        _moe(t, i, s, "exp_probs_b")  # hy_v3's loader asks for the name without a suffix


BLOCKS = {"deepseek2": _deepseek2_block, "mimo2": _mimo2_block, "cohere2moe": _cohere2moe_block,
          "hy_v3": _hy_v3_block, "deepseek32": _deepseek2_block, "glm-dsa": _deepseek2_block}  # fmt: skip


def _keys(w: GGUFWriter, s: TinyFamilySpec, n_all: int) -> None:
    hd = s.n_embd // s.n_head
    if s.arch == "cohere2moe":
        w.add_layer_norm_eps(s.eps)  # LayerNorm, as Cohere's checkpoints
        w.add_logit_scale(s.logit_scale)
    else:
        w.add_layer_norm_rms_eps(s.eps)
    w.add_rope_freq_base(s.rope_theta)
    mla = s.arch in ("deepseek2", *DSA)
    w.add_rope_dimension_count(s.qk_rope if mla else hd)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    if s.arch != "mimo2":
        w.add_expert_shared_count(s.n_expert_shared)
        w.add_leading_dense_block_count(1)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    if s.arch != "mimo2" and s.arch != "cohere2moe":
        w.add_expert_weights_scale(1.0)
    if s.arch in DSA:
        w.add_indexer_head_count(s.indexer_n_head)
        w.add_indexer_key_length(s.indexer_head_size)
        w.add_indexer_top_k(s.indexer_top_k)
    if mla:
        w.add_q_lora_rank(s.q_lora_rank)
        w.add_kv_lora_rank(s.kv_lora_rank)
        w.add_key_length(s.kv_lora_rank + s.qk_rope)  # the absorbed MQA form's K row: compressed kv and its rope part
        w.add_value_length(s.kv_lora_rank)
        w.add_key_length_mla(s.qk_nope + s.qk_rope)
        w.add_value_length_mla(s.v_head)
    if s.arch in ("mimo2", "cohere2moe"):
        w.add_sliding_window(s.n_swa)
        nextn = s.swa_nextn and s.arch == "mimo2"
        w.add_sliding_window_pattern([i in s.swa_trunk if i < s.n_layer else nextn for i in range(n_all)])
    if s.arch == "hy_v3":
        w.add_expert_shared_feed_forward_length(s.n_ff_exp * s.n_expert_shared)


def write_tiny_family_mtp(
    path: str | os.PathLike[str],
    spec: TinyFamilySpec | str,
    seed: int = 0,
    mtp: bool = True,
    cycle: Cycle | None = None,
) -> Path:
    """A random-weight f32 GGUF of ``spec.arch`` whose last block is a NextN (MTP) block (``mtp=False``: the trunk
    alone); with ``cycle`` the letter-cycle target whose head agrees (:func:`cycle_tensors`)."""
    spec = tiny_family_spec(spec) if isinstance(spec, str) else spec
    if cycle is not None and (cycle.head_misses or cycle.head_noise) and not spec.own_head:
        raise ValueError("a NextN head that differs from the target's needs spec.own_head")
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h = len(tokens), spec.n_embd
    if spec.n_nextn > 1 and spec.arch not in ("mimo2", "hy_v3"):
        raise ValueError(f"the pinned {spec.arch} MTP graph asserts a single NextN block")
    n_all = spec.n_layer + (spec.n_nextn if mtp else 0)
    overrides = cycle_tensors(spec, cycle, seed) if cycle is not None else {}
    p = Path(path)
    name = f"tiny-{spec.arch}" + ("-mtp" if mtp else "") + ("-cycle" if cycle else "")
    w = tiny_gguf_writer(p, spec.arch, name, spec, n_all)
    _keys(w, spec, n_all)
    if mtp:
        w.add_nextn_predict_layers(spec.n_nextn)
    add_byte_tokenizer(w, tokens, scores, types)
    t = _Tensors(w, rng, overrides, zero=cycle is not None)
    t.put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    t.put("output_norm.weight", t.norm(h))
    t.put("output.weight", t.mat(n_vocab, h, 4.0))
    for i in range(n_all):
        BLOCKS[spec.arch](t, i, spec)
        if i >= spec.n_layer:
            _nextn(t, i, spec, n_vocab)
    unknown = set(overrides) - t.written
    if unknown and mtp:
        raise ValueError(f"overrides name tensors the {spec.arch} writer does not write: {sorted(unknown)}")
    finish_gguf(w)
    return p


def cycle_tensors(spec: TinyFamilySpec, cycle: Cycle, seed: int = 0) -> dict[str, np.ndarray]:
    """The tensors besides the zeroed projections (:data:`ZEROED`) that make ``spec`` the letter cycle.

    Letters ``A``..``P`` embed as unit vectors less their mean, the other tokens as a fixed direction plus noise, also
    less their mean; the trunk's head names the next letter (``P`` after any other token), the NextN block's
    ``eh_proj`` is ``[I, 0]`` (the token's half, the state dropped), so its row ``(x_q, h_{q-1})`` names ``x_{q+1}``,
    the target's next token, and stays right on its own state.
    """
    from local_eagle.testing.tiny_pair import CYCLE

    h, n_cycle = spec.n_embd, len(CYCLE)
    if h < n_cycle + 2:
        raise ValueError(f"the cycle needs n_embd >= {n_cycle + 2}")
    rng = np.random.default_rng(seed)
    n_vocab = len(byte_vocab(spec.extra_tokens)[0])
    embd = np.zeros((n_vocab, h), dtype=np.float32)
    others = [t for t in range(n_vocab) if t not in CYCLE]
    embd[others, h - 1] = 1.0
    embd[others, n_cycle : h - 1] = 0.5 * rng.standard_normal((len(others), h - 1 - n_cycle))
    embd[others, n_cycle:] -= embd[others, n_cycle:].mean(axis=1, keepdims=True)
    embd[CYCLE, np.arange(n_cycle)] = 1.0
    embd[CYCLE] -= 1.0 / h

    def blurred(head: np.ndarray, noise: float) -> np.ndarray:
        if noise:
            head[3:] += noise * rng.standard_normal((n_vocab - 3, h)).astype(np.float32)  # specials stay silent
        return head

    out = {
        "token_embd.weight": embd,
        "output.weight": blurred(_cycle_head(n_vocab, h, cycle.margin, "", 0.0), cycle.noise),
        "output_norm.weight": np.ones(h, dtype=np.float32),
    }
    ones = np.ones(h, dtype=np.float32)
    for il in range(spec.n_layer, spec.n_layer + spec.n_nextn):
        out[f"blk.{il}.nextn.eh_proj.weight"] = np.concatenate([np.eye(h), np.zeros((h, h))], axis=1).astype(np.float32)
        out[f"blk.{il}.nextn.enorm.weight"] = out[f"blk.{il}.nextn.hnorm.weight"] = out[head_norm_name(spec, il)] = ones
        if spec.own_head:
            own = _cycle_head(n_vocab, h, cycle.margin, cycle.head_misses, cycle.runner_up)
            out[f"blk.{il}.nextn.shared_head_head.weight"] = blurred(own, cycle.head_noise)
    return out


def _cycle_head(n_vocab: int, h: int, margin: float, misses: str, runner_up: float) -> np.ndarray:
    from local_eagle.testing.tiny_pair import CYCLE

    n_cycle = len(CYCLE)
    head = np.zeros((n_vocab, h), dtype=np.float32)
    for i, t in enumerate(CYCLE):
        step = 2 if chr(t - 3) in misses else 1
        head[CYCLE[(i + step) % n_cycle], i] += margin
        if step == 2:
            head[CYCLE[(i + 1) % n_cycle], i] += runner_up * margin
        head[t, h - 1] = 0.01 * (i + 1)  # tokens outside the cycle are followed by the last letter
    return head


def write_cycle_family_mtp(
    path: str | os.PathLike[str], spec: TinyFamilySpec | str, cycle: Cycle | None = None, seed: int = 0, **kw
) -> Path:
    """``write_tiny_family_mtp`` with a :class:`Cycle` (default: a head that never misses); ``kw`` edits the spec."""
    spec = tiny_family_spec(spec) if isinstance(spec, str) else spec
    return write_tiny_family_mtp(path, replace(spec, **kw), seed=seed, cycle=cycle or Cycle())

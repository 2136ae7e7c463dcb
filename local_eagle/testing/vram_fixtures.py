"""Header-only ("shape") GGUF files: the real layout of a model, with no weights written.

The VRAM planner reads nothing but GGUF headers, and llama.cpp's dry-run load (``no_alloc``)
reads nothing else either, so a file that holds a model's exact keys and tensor table and a
sparse, all-zero data section is enough to compare the two at any size, even 8B-parameter
shapes, in milliseconds and without disk space. The tests build their matrix with these
writers and the RTX 4090 table in docs/fit.md uses the published shapes below.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter, Keys, TokenType

from local_eagle.gguf.keys import KEY_TARGET_HIDDEN, KEY_TARGET_LAYERS

Q = GGMLQuantizationType

# Types whose rows must be whole blocks; smaller rows fall back to F16 like llama-quantize does.
_FALLBACK = Q.F16


@dataclass(frozen=True)
class ShapeSpec:
    """A decoder-only transformer as llama.cpp sees it. ``head_dim`` 0 means ``n_embd // n_head``.

    ``wtype`` is the type of the 2-D weights; ``mix`` names a llama-quantize recipe instead
    ("q4_k_m"), and norms stay F32 as in every real conversion.
    """

    arch: str = "llama"
    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 0
    n_ff: int = 512
    n_vocab: int = 1024
    n_ctx_train: int = 131072
    tied: bool = False
    n_swa: int = 0
    swa_pattern: int = 0
    wtype: Q = Q.F16
    mix: str | None = None
    name: str = "shape"
    tokenizer: bool = True  # False: only {arch}.vocab_size (enough for the planner, not for llama.cpp)

    @property
    def hd(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


@dataclass(frozen=True)
class DrafterShape:
    """An EAGLE 3 drafter for a target of hidden size ``target_hidden`` and vocabulary ``n_vocab``."""

    target_hidden: int = 256
    n_vocab: int = 1024
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    draft_vocab: int | None = None
    own_embeddings: bool = False
    own_head: bool = True
    target_layers: tuple[int, int, int] = (1, 2, 3)
    wtype: Q = Q.F16
    name: str = "drafter"


def _tokenizer(w: GGUFWriter, n_vocab: int, full: bool = True) -> None:
    """An SPM vocabulary of ``n_vocab`` pieces: 3 specials, 256 bytes, then filler pieces."""
    if not full:
        w.add_uint32(Keys.LLM.VOCAB_SIZE.format(arch=w.arch), n_vocab)
        return
    n_fill = max(0, n_vocab - 259)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [f"\u2581t{i}" for i in range(n_fill)]
    tokens = tokens[:n_vocab]
    types = ([TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256)[:n_vocab]
    types += [TokenType.NORMAL] * (n_vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(n_vocab)])
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def _fits(t: Q, ne0: int) -> bool:
    return ne0 % GGML_QUANT_SIZES[t][0] == 0


def _q4_k_m(name: str, il: int, n_layer: int, tied: bool) -> Q:
    """llama-quantize's Q4_K_M choice for a llama-like tensor (src/llama-quant.cpp)."""
    more = il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return Q.Q6_K
    if name.endswith("attn_v.weight") or name.endswith("ffn_down.weight"):
        return Q.Q6_K if more else Q.Q4_K
    return Q.Q4_K


class _Tensors:
    """Collects (name, numpy-order shape, type) and writes them as a sparse data section."""

    def __init__(self, spec_wtype: Q, mix: str | None, n_layer: int, tied: bool = False) -> None:
        self.items: list[tuple[str, tuple[int, ...], Q]] = []
        self.wtype = spec_wtype
        self.mix = mix
        self.n_layer = n_layer
        self.tied = tied

    def norm(self, name: str, n: int) -> None:
        self.items.append((name, (n,), Q.F32))

    def mat(self, name: str, rows: int, cols: int, il: int = -1) -> None:
        t = _q4_k_m(name, il, self.n_layer, self.tied) if self.mix == "q4_k_m" else self.wtype
        if not _fits(t, cols):
            t = _FALLBACK
        self.items.append((name, (rows, cols), t))

    def raw(self, name: str, shape: tuple[int, ...], t: Q) -> None:
        self.items.append((name, shape, t))

    def write(self, w: GGUFWriter, path: Path) -> Path:
        for name, shape, t in self.items:
            block, size = GGML_QUANT_SIZES[t]
            n = int(np.prod(shape))
            w.add_tensor_info(name, shape, np.dtype(np.float32), n // block * size, raw_dtype=t)
        w.write_header_to_file(path)
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        assert w.fout is not None
        f = w.fout[0]
        f.flush()
        start = GGUFWriter.ggml_pad(f.tell(), w.data_alignment)
        total = sum(GGUFWriter.ggml_pad(ti.nbytes, w.data_alignment) for ti in w.tensors[0].values())
        f.truncate(start + total)
        w.close()
        return path


def _llm_keys(w: GGUFWriter, a: str, n_ctx: int, n_embd: int, n_layer: int, n_ff: int, n_head: int, n_head_kv: int,
              hd: int, *, rope_base: float, eps: float) -> None:  # fmt: skip
    """The shape keys a llama-style GGUF (target or eagle3 drafter) carries, in the order llama.cpp's writers add
    them."""
    w.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=a), n_ctx)
    w.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=a), n_embd)
    w.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=a), n_layer)
    w.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a), n_ff)
    w.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=a), n_head)
    w.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=a), n_head_kv)
    w.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=a), hd)
    w.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=a), hd)
    w.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=a), hd)
    w.add_float32(Keys.Rope.FREQ_BASE.format(arch=a), rope_base)
    w.add_float32(Keys.Attention.LAYERNORM_RMS_EPS.format(arch=a), eps)


def write_shape_gguf(path: str | os.PathLike[str], spec: ShapeSpec) -> Path:
    """A target GGUF with ``spec``'s exact keys and tensor table and a sparse zero data section."""
    p = Path(path)
    a = spec.arch
    hd = spec.hd
    w = GGUFWriter(p, a)
    w.add_name(spec.name)
    _llm_keys(w, a, spec.n_ctx_train, spec.n_embd, spec.n_layer, spec.n_ff, spec.n_head, spec.n_head_kv, hd,
              rope_base=10000.0, eps=1e-6)  # fmt: skip
    if spec.n_swa:
        w.add_uint32(Keys.Attention.SLIDING_WINDOW.format(arch=a), spec.n_swa)
        if spec.swa_pattern:
            w.add_uint32(Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=a), spec.swa_pattern)
    _tokenizer(w, spec.n_vocab, spec.tokenizer)

    t = _Tensors(spec.wtype, spec.mix, spec.n_layer, spec.tied)
    t.mat("token_embd.weight", spec.n_vocab, spec.n_embd)
    t.norm("output_norm.weight", spec.n_embd)
    if not spec.tied:
        t.mat("output.weight", spec.n_vocab, spec.n_embd)
    q, kv = spec.n_head * hd, spec.n_head_kv * hd
    for i in range(spec.n_layer):
        b = f"blk.{i}"
        t.norm(f"{b}.attn_norm.weight", spec.n_embd)
        t.mat(f"{b}.attn_q.weight", q, spec.n_embd, i)
        t.mat(f"{b}.attn_k.weight", kv, spec.n_embd, i)
        t.mat(f"{b}.attn_v.weight", kv, spec.n_embd, i)
        t.mat(f"{b}.attn_output.weight", spec.n_embd, q, i)
        if a == "qwen2":
            t.norm(f"{b}.attn_q.bias", q)
            t.norm(f"{b}.attn_k.bias", kv)
            t.norm(f"{b}.attn_v.bias", kv)
        if a in ("qwen3", "gemma3"):
            t.norm(f"{b}.attn_q_norm.weight", hd)
            t.norm(f"{b}.attn_k_norm.weight", hd)
        if a == "gemma3":
            t.norm(f"{b}.post_attention_norm.weight", spec.n_embd)
            t.norm(f"{b}.post_ffw_norm.weight", spec.n_embd)
        t.norm(f"{b}.ffn_norm.weight", spec.n_embd)
        t.mat(f"{b}.ffn_gate.weight", spec.n_ff, spec.n_embd, i)
        t.mat(f"{b}.ffn_up.weight", spec.n_ff, spec.n_embd, i)
        t.mat(f"{b}.ffn_down.weight", spec.n_embd, spec.n_ff, i)
    return t.write(w, p)


def write_drafter_gguf(path: str | os.PathLike[str], d: DrafterShape, tokenizer: bool = True) -> Path:
    """An ``eagle3`` drafter GGUF with the keys and tensors the pinned llama.cpp loads."""
    p = Path(path)
    a = "eagle3"
    hd = d.n_embd // d.n_head
    w = GGUFWriter(p, a)
    w.add_name(d.name)
    _llm_keys(w, a, 131072, d.n_embd, 1, d.n_ff, d.n_head, d.n_head_kv, hd, rope_base=500000.0, eps=1e-5)
    w.add_uint32(Keys.LLM.VOCAB_SIZE.format(arch=a), d.n_vocab)
    w.add_key_value(KEY_TARGET_LAYERS, list(d.target_layers), GGUFValueType.ARRAY, GGUFValueType.INT32)
    w.add_uint32(KEY_TARGET_HIDDEN, d.target_hidden)
    if tokenizer:
        _tokenizer(w, d.n_vocab)

    t = _Tensors(d.wtype, None, 1)
    n_draft = d.draft_vocab or d.n_vocab
    if d.draft_vocab:
        t.raw("d2t", (n_draft,), Q.I64)
    t.mat("fc.weight", d.n_embd, 3 * d.target_hidden)
    if d.own_embeddings:
        t.mat("token_embd.weight", d.n_vocab, d.n_embd)
    t.norm("output_norm.weight", d.n_embd)
    if d.own_head:
        t.mat("output.weight", n_draft, d.n_embd)
    q, kv = d.n_head * hd, d.n_head_kv * hd
    t.norm("blk.0.attn_norm.weight", d.n_embd)
    t.norm("blk.0.attn_norm_2.weight", d.n_embd)
    t.mat("blk.0.attn_q.weight", q, 2 * d.n_embd)
    t.mat("blk.0.attn_k.weight", kv, 2 * d.n_embd)
    t.mat("blk.0.attn_v.weight", kv, 2 * d.n_embd)
    t.mat("blk.0.attn_output.weight", d.n_embd, q)
    t.norm("blk.0.ffn_norm.weight", d.n_embd)
    t.mat("blk.0.ffn_gate.weight", d.n_ff, d.n_embd)
    t.mat("blk.0.ffn_up.weight", d.n_ff, d.n_embd)
    t.mat("blk.0.ffn_down.weight", d.n_embd, d.n_ff)
    return t.write(w, p)


def write_mamba_gguf(
    path: str | os.PathLike[str], n_layer: int = 2, n_embd: int = 256, d_state: int = 16, d_conv: int = 4,
    n_vocab: int = 1024,
) -> Path:  # fmt: skip
    """A Mamba (v1) GGUF: recurrent layers only, whose memory is a per-sequence state, not a KV cache."""
    p = Path(path)
    a, d_inner, dt_rank = "mamba", 2 * n_embd, max(1, n_embd // 16)
    w = GGUFWriter(p, a)
    w.add_name("mamba-shape")
    w.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=a), 1 << 20)
    w.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=a), n_embd)
    w.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=a), n_layer)
    w.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a), 0)
    w.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=a), 0)
    w.add_uint32(Keys.SSM.CONV_KERNEL.format(arch=a), d_conv)
    w.add_uint32(Keys.SSM.INNER_SIZE.format(arch=a), d_inner)
    w.add_uint32(Keys.SSM.STATE_SIZE.format(arch=a), d_state)
    w.add_uint32(Keys.SSM.TIME_STEP_RANK.format(arch=a), dt_rank)
    w.add_float32(Keys.Attention.LAYERNORM_RMS_EPS.format(arch=a), 1e-5)
    _tokenizer(w, n_vocab)
    t = _Tensors(Q.F16, None, n_layer)
    t.mat("token_embd.weight", n_vocab, n_embd)
    t.norm("output_norm.weight", n_embd)
    t.mat("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        t.norm(f"{b}.attn_norm.weight", n_embd)
        t.mat(f"{b}.ssm_in.weight", 2 * d_inner, n_embd)
        t.norm(f"{b}.ssm_conv1d.weight", d_conv * d_inner)
        t.items[-1] = (f"{b}.ssm_conv1d.weight", (d_inner, d_conv), Q.F32)
        t.norm(f"{b}.ssm_conv1d.bias", d_inner)
        t.mat(f"{b}.ssm_x.weight", dt_rank + 2 * d_state, d_inner)
        t.raw(f"{b}.ssm_dt.weight", (d_inner, dt_rank), Q.F32)
        t.norm(f"{b}.ssm_dt.bias", d_inner)
        t.raw(f"{b}.ssm_a", (d_inner, d_state), Q.F32)
        t.norm(f"{b}.ssm_d", d_inner)
        t.mat(f"{b}.ssm_out.weight", n_embd, d_inner)
    return t.write(w, p)


def write_mla_gguf(
    path: str | os.PathLike[str], n_layer: int = 2, n_embd: int = 256, n_head: int = 4, kv_lora: int = 64,
    rope: int = 32, nope: int = 32, v_head: int = 32, n_ff: int = 512, n_vocab: int = 1024,
) -> Path:  # fmt: skip
    """A DeepSeek-V2-style GGUF with multi-head latent attention: the cache holds only the
    compressed latent plus the RoPE part of K (``key_length`` = kv_lora + rope, one KV head)."""
    p = Path(path)
    a = "deepseek2"
    w = GGUFWriter(p, a)
    w.add_name("mla-shape")
    w.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=a), 163840)
    w.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=a), n_embd)
    w.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=a), n_layer)
    w.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a), n_ff)
    w.add_uint32(Keys.LLM.LEADING_DENSE_BLOCK_COUNT.format(arch=a), n_layer)
    w.add_uint32(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH.format(arch=a), 0)
    w.add_uint32(Keys.LLM.EXPERT_SHARED_COUNT.format(arch=a), 0)
    w.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=a), n_head)
    w.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=a), 1)
    w.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=a), kv_lora + rope)
    w.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=a), kv_lora)
    w.add_uint32(Keys.Attention.KEY_LENGTH_MLA.format(arch=a), nope + rope)
    w.add_uint32(Keys.Attention.VALUE_LENGTH_MLA.format(arch=a), v_head)
    w.add_uint32(Keys.Attention.Q_LORA_RANK.format(arch=a), 0)
    w.add_uint32(Keys.Attention.KV_LORA_RANK.format(arch=a), kv_lora)
    w.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=a), rope)
    w.add_float32(Keys.Attention.LAYERNORM_RMS_EPS.format(arch=a), 1e-6)
    _tokenizer(w, n_vocab)
    t = _Tensors(Q.F16, None, n_layer)
    t.mat("token_embd.weight", n_vocab, n_embd)
    t.norm("output_norm.weight", n_embd)
    t.mat("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        t.norm(f"{b}.attn_norm.weight", n_embd)
        t.norm(f"{b}.attn_kv_a_norm.weight", kv_lora)
        t.mat(f"{b}.attn_q.weight", n_head * (nope + rope), n_embd)
        t.mat(f"{b}.attn_kv_a_mqa.weight", kv_lora + rope, n_embd)
        t.raw(f"{b}.attn_k_b.weight", (n_head, kv_lora, nope), Q.F16)
        t.raw(f"{b}.attn_v_b.weight", (n_head, v_head, kv_lora), Q.F16)
        t.mat(f"{b}.attn_output.weight", n_embd, n_head * v_head)
        t.norm(f"{b}.ffn_norm.weight", n_embd)
        t.mat(f"{b}.ffn_gate.weight", n_ff, n_embd)
        t.mat(f"{b}.ffn_up.weight", n_ff, n_embd)
        t.mat(f"{b}.ffn_down.weight", n_embd, n_ff)
    return t.write(w, p)


# --- published shapes (config.json of each model; Q4_K_M per llama-quantize's recipe) ---------------

LLAMA31_8B = ShapeSpec(
    arch="llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, n_vocab=128256,
    n_ctx_train=131072, mix="q4_k_m", name="Llama-3.1-8B-Instruct Q4_K_M",
)  # fmt: skip
LLAMA31_8B_EAGLE3 = DrafterShape(
    target_hidden=4096, n_vocab=128256, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336,
    draft_vocab=32000, own_embeddings=False, own_head=True, target_layers=(2, 16, 29), wtype=Q.F16,
    name="EAGLE3-LLaMA3.1-Instruct-8B f16",
)  # fmt: skip
QWEN3_8B = ShapeSpec(
    arch="qwen3", n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=12288, n_vocab=151936,
    n_ctx_train=40960, mix="q4_k_m", name="Qwen3-8B Q4_K_M",
)  # fmt: skip
QWEN3_8B_EAGLE3 = DrafterShape(
    target_hidden=4096, n_vocab=151936, n_embd=4096, n_head=32, n_head_kv=8, n_ff=12288,
    draft_vocab=32000, own_embeddings=True, own_head=True, target_layers=(2, 18, 33), wtype=Q.F16,
    name="AngelSlim Qwen3-8B EAGLE3 f16",
)  # fmt: skip
GEMMA3_12B = ShapeSpec(
    arch="gemma3", n_layer=48, n_embd=3840, n_head=16, n_head_kv=8, head_dim=256, n_ff=15360, n_vocab=262208,
    n_ctx_train=131072, tied=True, n_swa=1024, mix="q4_k_m", name="gemma-3-12b-it Q4_K_M",
)  # fmt: skip
GEMMA3_12B_EAGLE3 = DrafterShape(
    target_hidden=3840, n_vocab=262208, n_embd=3840, n_head=16, n_head_kv=8, n_ff=15360,
    draft_vocab=32000, own_embeddings=False, own_head=True, target_layers=(2, 24, 45), wtype=Q.F16,
    name="gemma-3-12b EAGLE3 (hypothetical, same shapes) f16",
)  # fmt: skip

FIT_TABLE_ROWS: list[tuple[ShapeSpec, DrafterShape | None, dict[str, object]]] = [
    (LLAMA31_8B, None, {}),
    (LLAMA31_8B, LLAMA31_8B_EAGLE3, {}),
    (QWEN3_8B, QWEN3_8B_EAGLE3, {}),
    (GEMMA3_12B, None, {}),
    (GEMMA3_12B, None, {"swa_full": False}),
]
FIT_TABLE_CONTEXTS = (8192, 32768, 131072)


def fit_table(workdir: str | os.PathLike[str]) -> str:
    """docs/fit.md's RTX 4090 table: predicted VRAM per component for common pairs (markdown, GiB)."""
    from local_eagle.vram import GiB, MemoryConfig, make_plan, read_shape
    from local_eagle.vram.gpus import budget

    d = Path(workdir)
    b = budget("rtx4090")
    rows = [
        "| model (+ drafter) | context | target weights | target KV | target compute | drafter total "
        "| overhead | total, f16 KV | fits? | total, q8_0 KV | fits? |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]

    def g(n: int) -> str:
        return f"{n / GiB:.2f}"

    for spec, dspec, extra in FIT_TABLE_ROWS:
        t = read_shape(write_shape_gguf(d / f"{spec.arch}.gguf", replace(spec, tokenizer=False)))
        dr = None
        if dspec is not None:
            dp = write_drafter_gguf(d / f"{spec.arch}-eagle3.gguf", dspec, tokenizer=False)
            dr = read_shape(dp, "drafter GGUF")
        label = spec.name + (f" + {dspec.name}" if dspec else "")
        if extra.get("swa_full") is False:
            label += " (--no-swa-full)"
        for ctx in FIT_TABLE_CONTEXTS:
            s = replace(MemoryConfig(n_ctx=ctx, n_gpu_layers=-1), **extra)  # type: ignore[arg-type]
            p = make_plan(t, dr, s, b)
            q = make_plan(t, dr, replace(s, type_k="q8_0", type_v="q8_0"), b)
            dtot = sum(p.component(k).gpu for k in ("draft_weights", "draft_kv", "draft_compute")) if dr else 0
            rows.append(
                f"| {label} | {ctx // 1024}K | {g(p.component('target_weights').gpu)} | "
                f"{g(p.component('target_kv').gpu)} | {g(p.component('target_compute').gpu)} | "
                f"{g(dtot) if dr else '-'} | {g(p.component('overhead').gpu)} | {g(p.total_gpu)} | "
                f"{'yes' if p.fits else 'no'} | {g(q.total_gpu)} | {'yes' if q.fits else 'no'} |"
            )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - regenerates the docs/fit.md table
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(fit_table(tmp), end="")

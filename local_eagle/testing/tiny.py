"""Tiny models generated on the spot: a llama-architecture target GGUF and EAGLE drafters.

They let the tests and ``local-eagle selfcheck`` exercise the whole path (checkpoint -> GGUF ->
llama.cpp vs the torch reference) on a CPU in seconds, with nothing downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from gguf import GGUFWriter, LlamaFileType, TokenType

if TYPE_CHECKING:
    from local_eagle.reference import Eagle3Drafter


@dataclass(frozen=True)
class TinyTargetSpec:
    n_layer: int = 6
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 1024
    rope_theta: float = 10000.0
    eps: float = 1e-5
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def byte_vocab(extra: tuple[str, ...]) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocabulary: 3 specials, 256 byte tokens, a few whole pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(extra)
    scores = [0.0] * 259 + [-float(i + 1) for i in range(len(extra))]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    types += [TokenType.NORMAL] * len(extra)
    return tokens, scores, [int(t) for t in types]


def add_byte_tokenizer(w: GGUFWriter, tokens: list[str], scores: list[float], types: list[int]) -> None:
    """The vocabulary size and the SentencePiece-style tokenizer keys of the byte vocabulary (BOS added, no EOS)."""
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


class TinyShape(Protocol):
    """What every tiny family's spec says of its shape (the block count aside: some add NextN blocks)."""

    @property
    def n_ctx(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_ff(self) -> int: ...
    @property
    def n_head(self) -> int: ...
    @property
    def n_head_kv(self) -> int: ...


def random_f32(rng: np.random.Generator) -> tuple[Callable[..., np.ndarray], Callable[[int], np.ndarray]]:
    """The tiny writers' random f32 weights drawn from ``rng``: ``mat(rows, cols, scale=1.0)``, a matrix scaled by
    ``scale / sqrt(cols)``, and ``norm(n)``, a norm weight near 1."""

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    return mat, norm


def tiny_gguf_writer(path: Path, arch: str, name: str, spec: TinyShape, n_layer: int) -> GGUFWriter:
    """A writer for an all-f32 tiny ``arch`` GGUF with the keys every tiny family starts with: name, file type,
    context length, widths, ``n_layer`` blocks and the head counts."""
    w = GGUFWriter(path, arch)
    w.add_name(name)
    w.add_file_type(LlamaFileType.ALL_F32)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    return w


def finish_gguf(w: GGUFWriter) -> None:
    """Write the header, the keys and the tensors added to ``w``, and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tiny_target(
    path: str | os.PathLike[str],
    spec: TinyTargetSpec | None = None,
    seed: int = 0,
    overrides: dict[str, np.ndarray] | None = None,
) -> Path:
    """A random-weight f32 llama GGUF with a byte-level vocabulary; llama.cpp runs it as a target.

    ``overrides`` replaces named tensors (same shapes) to build targets with known behaviour.
    """
    spec = spec or TinyTargetSpec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.n_embd // spec.n_head
    mat, norm = random_f32(rng)

    p = Path(path)
    overrides = overrides or {}
    w = tiny_gguf_writer(p, "llama", "tiny-llama", spec, spec.n_layer)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.eps)
    add_byte_tokenizer(w, tokens, scores, types)

    def put(name: str, value: np.ndarray) -> None:
        w.add_tensor(name, np.ascontiguousarray(overrides.get(name, value), dtype=np.float32))

    put("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5).astype(np.float32))
    put("output_norm.weight", norm(h))
    put("output.weight", mat(n_vocab, h, 4.0))
    for i in range(spec.n_layer):
        put(f"blk.{i}.attn_norm.weight", norm(h))
        put(f"blk.{i}.attn_q.weight", mat(spec.n_head * hd, h))
        put(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
        put(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
        put(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
        put(f"blk.{i}.ffn_norm.weight", norm(h))
        put(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, h))
        put(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, h))
        put(f"blk.{i}.ffn_down.weight", mat(h, spec.n_ff))
    finish_gguf(w)
    return p


def make_drafter(
    target_vocab: int,
    target_hidden: int,
    target_layers: list[int],
    *,
    eagle31: bool = True,
    norm_before_fc: bool = False,
    norm_before_residual: bool = False,
    own_embeddings: bool = True,
    own_lm_head: bool = True,
    draft_vocab: int | None = None,
    hidden: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    seed: int = 0,
) -> Eagle3Drafter:
    """A random EAGLE 3 (or 3.1) drafter; norm weights are perturbed so every norm matters."""
    import torch

    from local_eagle.reference import DrafterConfig, Eagle3Drafter

    n_draft = draft_vocab or target_vocab
    cfg = DrafterConfig(
        hidden_size=hidden,
        intermediate_size=n_ff,
        num_attention_heads=n_head,
        num_key_value_heads=n_head_kv,
        head_dim=hidden // n_head,
        vocab_size=target_vocab,
        draft_vocab_size=n_draft,
        target_hidden_size=target_hidden,
        target_layers=list(target_layers),
        rms_norm_eps=1e-5,
        norm_before_residual=norm_before_residual,
        norm_before_fc=norm_before_fc,
        fc_norm=eagle31,
        norm_output=eagle31,
        own_embeddings=own_embeddings,
        own_lm_head=own_lm_head,
    )
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Eagle3Drafter(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".fc_norm." in name or name.startswith("fc_norm"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif name == "embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        if n_draft < target_vocab:
            ids = torch.sort(torch.randperm(target_vocab, generator=g)[:n_draft]).values
        else:
            ids = torch.arange(target_vocab)
        model.set_draft_vocab(ids)
    return model


def target_head_weights(target_path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """The target's token embeddings and output head, for a reference drafter that shares them."""
    from local_eagle.gguf import open_gguf, tensor_f32

    reader = open_gguf(target_path, "target GGUF")
    names = {t.name for t in reader.tensors}
    embd = tensor_f32(reader, "token_embd.weight")
    head = tensor_f32(reader, "output.weight") if "output.weight" in names else embd
    return embd, head


@dataclass(frozen=True)
class TinyGemma3Spec:
    """Shape of a tiny Gemma 3: like the real ones, head_dim != n_embd / n_head and one global layer in six.

    With the default pattern (no ``sliding_window_pattern`` key, as the upstream converter
    writes it) layer il uses the sliding window unless il % 6 == 5; eight layers put a global
    layer below the last ones.
    """

    n_layer: int = 8
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 1
    head_dim: int = 32
    n_ff: int = 128
    n_ctx: int = 1024
    sliding_window: int = 8
    rope_theta: float = 1_000_000.0
    eps: float = 1e-6
    extra_tokens: tuple[str, ...] = ("\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581and")


def write_tiny_gemma3_target(path: str | os.PathLike[str], spec: TinyGemma3Spec | None = None, seed: int = 0) -> Path:
    """A random-weight f32 ``gemma3`` GGUF (sliding-window attention, q/k norms, post-attention and
    post-FFN norms) with the byte vocabulary: a target whose graph has no native layer-input staging."""
    spec = spec or TinyGemma3Spec()
    rng = np.random.default_rng(seed)
    tokens, scores, types = byte_vocab(spec.extra_tokens)
    n_vocab, h, hd = len(tokens), spec.n_embd, spec.head_dim
    mat, norm = random_f32(rng)  # GGUF holds Gemma's norm weights already shifted by +1 (see the upstream converter)

    p = Path(path)
    w = tiny_gguf_writer(p, "gemma3", "tiny-gemma3", spec, spec.n_layer)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_sliding_window(spec.sliding_window)
    add_byte_tokenizer(w, tokens, scores, types)
    w.add_add_space_prefix(False)
    # the graph multiplies embeddings by sqrt(n_embd)
    w.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, h)) * 0.5 / np.sqrt(h)).astype(np.float32))
    w.add_tensor("output_norm.weight", norm(h))
    for i in range(spec.n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm(h))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(spec.n_head * hd, h))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(spec.n_head_kv * hd, h))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(spec.n_head_kv * hd, h))
        w.add_tensor(f"blk.{i}.attn_q_norm.weight", norm(hd))
        w.add_tensor(f"blk.{i}.attn_k_norm.weight", norm(hd))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(h, spec.n_head * hd))
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", norm(h))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm(h))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(spec.n_ff, h))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(spec.n_ff, h))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(h, spec.n_ff))
        w.add_tensor(f"blk.{i}.post_ffw_norm.weight", norm(h))
    finish_gguf(w)
    return p

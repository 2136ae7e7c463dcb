"""Torch reference of the DFlash block drafter: the oracle the ``dflash`` GGUF on llama.cpp is checked against.

Written from the DFlash maths (z-lab's ``DFlashDraftModel``), not from llama.cpp's graph:

* context: the target's hidden states at ``target_layers``, concatenated per position, fused as
  ``g = hidden_norm(fc(h))``; each layer ``l`` keeps ``K = rope(k_norm(Wk_l g))`` and ``V = Wv_l g``
  for those positions (no input norm on ``g``);
* block: the tokens ``[last, <mask> ...]`` embedded with the target's embeddings go through the
  Qwen3 layers, every block position attending to all context positions and all block positions
  (no causal mask), with per-head q/k RMS norms and rotate-half RoPE at the positions given;
* out: the final norm and the target's head give one row of logits per block position;
* DSpark (a Markov head, ``markov_head.markov_w1`` [vocab, r] / ``markov_w2`` [vocab, r], and optionally a
  confidence head, ``confidence_head.proj``): block row i's logits get ``w2 w1[prev]``, ``prev`` the anchor for
  the first drafted row and the previous row's biased argmax after it; the confidence is
  ``sigmoid(proj . [h_i; w1[prev]] + b)``, ``h_i`` the row's hidden state after the final norm. This part is
  transcribed from llama.cpp's graph (``build_dspark_markov_head``): no DSpark training source was read, so it
  checks the read of what llama.cpp computes, not DSpark's maths.

Weights are read under the checkpoint's own names (``converters.dflash_gguf`` canonical names), so
a tiny generated checkpoint feeds this and the converter alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class DFlashShape:
    """What the reference needs of a DFlash config.json (``converters.dflash_gguf.read_dflash_config``)."""

    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float
    rope_theta: float

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> DFlashShape:
        return cls(
            n_layer=cfg["num_hidden_layers"],
            n_head=cfg["num_attention_heads"],
            n_head_kv=cfg["num_key_value_heads"],
            head_dim=cfg["head_dim"],
            eps=cfg["rms_norm_eps"],
            rope_theta=cfg["rope_theta"],
        )


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE (Hugging Face Qwen3) over the last dimension; ``x`` is [n, heads, head_dim]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)[:, None, :]
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + half * sin


class DFlashReference:
    """A DFlash drafter in float64 torch, paired with the target's embeddings and head."""

    def __init__(
        self, shape: DFlashShape, weights: dict[str, np.ndarray], embeddings: np.ndarray, head: np.ndarray
    ) -> None:
        self.s = shape
        self.w = {
            k.removeprefix("model."): torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in weights.items()
        }
        self.embd = torch.from_numpy(np.asarray(embeddings, dtype=np.float64))
        self.head = torch.from_numpy(np.asarray(head, dtype=np.float64))
        self.k_ctx: list[torch.Tensor] = [
            torch.zeros(0, shape.n_head_kv, shape.head_dim, dtype=torch.float64)
        ] * shape.n_layer
        self.v_ctx: list[torch.Tensor] = list(self.k_ctx)

    def reset(self) -> None:
        """Forget every context position (a new sequence)."""
        self.k_ctx = [t[:0] for t in self.k_ctx]
        self.v_ctx = [t[:0] for t in self.v_ctx]

    def _layer(self, i: int, name: str) -> torch.Tensor:
        return self.w[f"layers.{i}.{name}"]

    def fuse(self, features: np.ndarray) -> torch.Tensor:
        """``hidden_norm(fc(h))`` for rows of concatenated target hidden states."""
        h = torch.from_numpy(np.asarray(features, dtype=np.float64))
        return _rms(h @ self.w["fc.weight"].T, self.w["hidden_norm.weight"], self.s.eps)

    def add_context(self, features: np.ndarray, positions: np.ndarray) -> None:
        """Append the K/V that these context positions put in every layer's cache."""
        g = self.fuse(features)
        pos = torch.as_tensor(np.asarray(positions))
        s = self.s
        for i in range(s.n_layer):
            k = (g @ self._layer(i, "self_attn.k_proj.weight").T).view(-1, s.n_head_kv, s.head_dim)
            k = _rope(_rms(k, self._layer(i, "self_attn.k_norm.weight"), s.eps), pos, s.rope_theta)
            v = (g @ self._layer(i, "self_attn.v_proj.weight").T).view(-1, s.n_head_kv, s.head_dim)
            self.k_ctx[i] = torch.cat([self.k_ctx[i], k])
            self.v_ctx[i] = torch.cat([self.v_ctx[i], v])

    def block_logits(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Logits [len(tokens), n_vocab] of one block, every position seeing the whole context and block."""
        return (self._block_hidden(tokens, positions) @ self.head.T).numpy()

    def dspark_block(
        self, tokens: np.ndarray, positions: np.ndarray, anchor_first: bool = True
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """A DSpark block: (logits with the Markov bias [len(tokens), n_vocab], each row's confidence or None
        without a confidence head). Anchor-first, every row is drafted (row 0 follows the anchor); otherwise row 0
        is the anchor's own, left unbiased, and its confidence is not defined (NaN)."""
        if "d2t" in self.w:
            raise ValueError("the DSpark reference takes a full-vocabulary drafter (no d2t)")
        h = self._block_hidden(tokens, positions)
        logits = h @ self.head.T
        w1, w2 = self.w["markov_head.markov_w1.weight"], self.w["markov_head.markov_w2.weight"]
        proj, bias = self.w.get("confidence_head.proj.weight"), self.w.get("confidence_head.proj.bias")
        conf = torch.full((len(tokens),), float("nan"), dtype=torch.float64)
        prev = int(tokens[0])
        for i in range(0 if anchor_first else 1, len(tokens)):
            logits[i] = logits[i] + w2 @ w1[prev]
            if proj is not None:
                z = proj @ torch.cat([h[i], w1[prev]])
                conf[i] = torch.sigmoid(z + bias if bias is not None else z)[0]
            prev = int(logits[i].argmax())
        return logits.numpy(), (conf.numpy() if proj is not None else None)

    def _block_hidden(self, tokens: np.ndarray, positions: np.ndarray) -> torch.Tensor:
        """The block's hidden states after the final norm [len(tokens), n_embd]."""
        s = self.s
        x = self.embd[torch.as_tensor(np.asarray(tokens, dtype=np.int64))]
        pos = torch.as_tensor(np.asarray(positions))
        n = x.shape[0]
        rep = s.n_head // s.n_head_kv
        for i in range(s.n_layer):
            xn = _rms(x, self._layer(i, "input_layernorm.weight"), s.eps)
            q = (xn @ self._layer(i, "self_attn.q_proj.weight").T).view(n, s.n_head, s.head_dim)
            k = (xn @ self._layer(i, "self_attn.k_proj.weight").T).view(n, s.n_head_kv, s.head_dim)
            v = (xn @ self._layer(i, "self_attn.v_proj.weight").T).view(n, s.n_head_kv, s.head_dim)
            q = _rope(_rms(q, self._layer(i, "self_attn.q_norm.weight"), s.eps), pos, s.rope_theta)
            k = _rope(_rms(k, self._layer(i, "self_attn.k_norm.weight"), s.eps), pos, s.rope_theta)
            keys = torch.cat([self.k_ctx[i], k]).repeat_interleave(rep, dim=1)  # [m, heads, d]
            vals = torch.cat([self.v_ctx[i], v]).repeat_interleave(rep, dim=1)
            att = torch.einsum("nhd,mhd->hnm", q, keys) / s.head_dim**0.5
            out = torch.einsum("hnm,mhd->nhd", att.softmax(-1), vals).reshape(n, -1)
            x = x + out @ self._layer(i, "self_attn.o_proj.weight").T
            xn = _rms(x, self._layer(i, "post_attention_layernorm.weight"), s.eps)
            gate = F.silu(xn @ self._layer(i, "mlp.gate_proj.weight").T)
            x = x + (gate * (xn @ self._layer(i, "mlp.up_proj.weight").T)) @ self._layer(i, "mlp.down_proj.weight").T
        return _rms(x, self.w["norm.weight"], s.eps)

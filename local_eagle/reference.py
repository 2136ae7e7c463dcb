"""Torch reference implementation of the EAGLE 3 / 3.1 drafter.

Written from the maths (docs/architecture.md, "EAGLE 3.1 on llama.cpp"), not from llama.cpp,
so that the tests can use it as the oracle for the llama.cpp path; drafter training
(``local-eagle train``) trains this same module. Parameter names follow the original EAGLE-3
checkpoints (``midlayer.*``), which ``converters.formats`` treats as the canonical names.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DrafterConfig:
    """Shape and flags of one drafter; the same fields the converter reads from a checkpoint."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    target_layers: list[int] = field(default_factory=lambda: [2, 4, 5])
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    own_embeddings: bool = True
    own_lm_head: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm computed in fp32 whatever the input dtype, as EAGLE 3.1 prescribes."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """HF-style (rotate-half) rotary embedding; x is [B, heads, T, head_dim]."""
    head_dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    return x * cos + rotate_half(x) * sin


@dataclass
class KVCache:
    """Keys and values of the drafter's single layer, with the position of every entry."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    pos: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> None:
        if self.k is None:
            self.k, self.v, self.pos = k, v, pos
        else:
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
            self.pos = torch.cat((self.pos, pos))

    def remove_from(self, p: int) -> None:
        """Drop every entry at position >= p (a KV-cache rollback)."""
        if self.pos is None:
            return
        keep = self.pos < p
        self.k, self.v, self.pos = self.k[:, :, keep], self.v[:, :, keep], self.pos[keep]


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d_in = 2 * cfg.hidden_size
        self.q_proj = nn.Linear(d_in, cfg.num_attention_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(d_in, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(d_in, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        cfg = self.cfg
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        q = rope(q, positions, cfg.rope_theta)
        k = rope(k, positions, cfg.rope_theta)
        cache.append(k, v, positions)
        rep = cfg.num_attention_heads // cfg.num_key_value_heads
        keys = cache.k.repeat_interleave(rep, dim=1)
        values = cache.v.repeat_interleave(rep, dim=1)
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(cfg.head_dim)
        visible = cache.pos[None, :] <= positions[:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        out = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ values
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)


class Eagle3Drafter(nn.Module):
    """One EAGLE-3 decoder layer plus the feature projection; EAGLE 3.1 when the flags are on."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        if cfg.fc_norm and cfg.norm_before_fc:
            raise ValueError("fc_norm and norm_before_fc are mutually exclusive")
        self.cfg = cfg
        ht = cfg.target_hidden_size
        if cfg.own_embeddings:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        if cfg.fc_norm:
            self.fc_norm = nn.ModuleList(RMSNorm(ht, cfg.rms_norm_eps) for _ in range(3))
        if cfg.norm_before_fc:
            self.input_norm = RMSNorm(3 * ht, cfg.rms_norm_eps)
        self.fc = nn.Linear(3 * ht, cfg.hidden_size, bias=False)
        self.midlayer = MidLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.own_lm_head:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))

    def set_draft_vocab(self, target_ids: torch.Tensor) -> None:
        """Fix the draft vocabulary to these absolute target ids (stored as d2t offsets)."""
        target_ids = target_ids.to(torch.int64)
        self.d2t.copy_(target_ids - torch.arange(len(target_ids)))
        self.t2d.zero_()
        self.t2d[target_ids] = True

    def draft_to_target(self) -> torch.Tensor:
        return self.d2t + torch.arange(len(self.d2t))

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """Fuse the three captured target states ([..., 3*H_target]) into g ([..., H])."""
        cfg = self.cfg
        if cfg.fc_norm:
            chunks = features.split(cfg.target_hidden_size, dim=-1)
            features = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks, strict=True)], dim=-1)
        elif cfg.norm_before_fc:
            features = self.input_norm(features)
        return self.fc(features)

    def decode(
        self,
        tokens: torch.Tensor,
        g: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        embed_weight: torch.Tensor | None = None,
        lm_head_weight: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder pass over rows (token[P+1], g[P]) at positions P.

        tokens [B, T], g [B, T, H], positions [T]. Returns (draft-vocab logits, prenorm state).
        ``embed_weight`` / ``lm_head_weight`` stand in for the target's when the drafter has none.
        """
        cfg, layer = self.cfg, self.midlayer
        emb_w = self.embed_tokens.weight if cfg.own_embeddings else embed_weight
        e = layer.input_layernorm(F.embedding(tokens, emb_w))
        g_norm = layer.hidden_norm(g)
        residual = g_norm if cfg.norm_before_residual else g
        x = torch.cat((e, g_norm), dim=-1)
        h = layer.self_attn(x, positions, cache) + residual
        h = layer.mlp(layer.post_attention_layernorm(h)) + h
        y = self.norm(h)
        head_w = self.lm_head.weight if cfg.own_lm_head else lm_head_weight
        return y @ head_w.T, h

    def feedback(self, prenorm: torch.Tensor) -> torch.Tensor:
        """The state fed to the next draft step: post-norm under EAGLE 3.1's norm_output."""
        return self.norm(prenorm) if self.cfg.norm_output else prenorm

    def full_vocab_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Scatter draft-vocab logits into the target vocabulary (-inf elsewhere), as llama.cpp does."""
        if draft_logits.shape[-1] == self.cfg.vocab_size and not self.d2t.any():
            return draft_logits
        out = torch.full((*draft_logits.shape[:-1], self.cfg.vocab_size), float("-inf"), dtype=draft_logits.dtype)
        out[..., self.draft_to_target()] = draft_logits
        return out


def ttt_forward(
    model: Eagle3Drafter,
    tokens: torch.Tensor,
    features: torch.Tensor,
    depth: int,
    embed_weight: torch.Tensor | None = None,
    lm_head_weight: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Training-time test: ``depth`` chained draft steps for every position at once.

    tokens [T + depth] are the sequence's tokens (teacher-forced), features [T, 3*H_target]
    the target's captured states. Depth j's row for base position p reads token[p + 1 + j] at
    position p + j and, for j > 0, the feedback state of depth j - 1; it attends to the real
    rows 0..p and to its own chain (depths 1..j of base p), exactly what the inference loop's
    cache holds at that draft step. Returns the draft-vocab logits of each depth, [T, V_draft].
    """
    cfg, layer = model.cfg, model.midlayer
    att = layer.self_attn
    n = features.shape[0]
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    rep = nh // nkv
    emb_w = model.embed_tokens.weight if cfg.own_embeddings else embed_weight
    head_w = model.lm_head.weight if cfg.own_lm_head else lm_head_weight
    base = torch.arange(n)
    causal = base[None, :] <= base[:, None]  # [query p, key q]: real rows 0..p
    g = model.project(features)
    keys0 = values0 = None
    chain_k: list[torch.Tensor] = []
    chain_v: list[torch.Tensor] = []
    out = []
    for j in range(depth):
        x_tok = tokens[1 + j : 1 + j + n]
        e = layer.input_layernorm(F.embedding(x_tok, emb_w))
        g_norm = layer.hidden_norm(g)
        residual = g_norm if cfg.norm_before_residual else g
        x = torch.cat((e, g_norm), dim=-1)
        pos = base + j
        q = rope(att.q_proj(x).view(n, nh, hd).transpose(0, 1), pos, cfg.rope_theta)
        k = rope(att.k_proj(x).view(n, nkv, hd).transpose(0, 1), pos, cfg.rope_theta)
        v = att.v_proj(x).view(n, nkv, hd).transpose(0, 1)
        k, v = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)
        if j == 0:
            keys0, values0 = k, v
        else:
            chain_k.append(k)
            chain_v.append(v)
        scores = (q @ keys0.transpose(-1, -2)) / math.sqrt(hd)  # [heads, p, q]
        scores = scores.masked_fill(~causal, float("-inf"))
        diag = [(q * ck).sum(-1, keepdim=True) / math.sqrt(hd) for ck in chain_k]  # [heads, p, 1]
        w = torch.softmax(torch.cat([scores, *diag], dim=-1).float(), dim=-1).to(q.dtype)
        attn = w[..., :n] @ values0
        for i, cv in enumerate(chain_v):
            attn = attn + w[..., n + i : n + i + 1] * cv
        h = att.o_proj(attn.transpose(0, 1).reshape(n, nh * hd)) + residual
        h = layer.mlp(layer.post_attention_layernorm(h)) + h
        out.append(model.norm(h) @ head_w.T)
        g = model.feedback(h)
    return out

"""A tiny target with known behaviour and a drafter built to predict it.

The target is a "cycle" bigram model: attention and MLP outputs are zero, so every layer's
input is the current token's embedding and the next token depends on the current one only.
Sixteen letters ``A``..``P`` have orthogonal embeddings and follow each other in a cycle; any
other token is followed by ``P``. The drafter maps the state of letter a to the state of the
letter after it with an MLP lookup, and reads logits through the target's own head, so every
draft step is right once generation is inside the cycle. It exists to prove the accept path
of the loop; ``noise`` makes both models imperfect for the sampling tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.testing.tiny import TinyTargetSpec, byte_vocab, write_tiny_target

if TYPE_CHECKING:
    from local_eagle.reference import Eagle3Drafter

SPEC = TinyTargetSpec()
CYCLE = [3 + ord(c) for c in "ABCDEFGHIJKLMNOP"]  # byte tokens <0x41>..<0x50>
N_VOCAB = len(byte_vocab(SPEC.extra_tokens)[0])
LAYERS = [1, 3, 4]
BETA = 2.0
EOS = 2


def _unit(i: int, n: int = SPEC.n_embd) -> np.ndarray:
    v = np.zeros(n, dtype=np.float32)
    v[i] = 1.0
    return v


def cycle_target_tensors(
    margin: float = 4.0, noise: float = 0.0, seed: int = 0, eos_after: str | None = None
) -> dict[str, np.ndarray]:
    """Tensors of the cycle target.

    ``margin`` is the logit gap (before the final norm's 8x), ``noise`` blurs the head, and
    ``eos_after`` makes that letter be followed by the end-of-sequence token instead.
    """
    rng = np.random.default_rng(seed)
    h = SPEC.n_embd
    embd = np.zeros((N_VOCAB, h), dtype=np.float32)
    others = [t for t in range(N_VOCAB) if t not in CYCLE]
    embd[others, h - 1] = 1.0
    embd[others, len(CYCLE) : h - 1] = 0.5 * rng.standard_normal((len(others), h - 1 - len(CYCLE)))
    for i, t in enumerate(CYCLE):
        embd[t] = _unit(i)
    head = np.zeros((N_VOCAB, h), dtype=np.float32)
    for i, t in enumerate(CYCLE):
        head[CYCLE[(i + 1) % len(CYCLE)]] += margin * _unit(i)
        head[t, h - 1] = 0.01 * (i + 1)  # tokens outside the cycle are followed by the last letter
    if noise:
        head[3:] += noise * rng.standard_normal((N_VOCAB - 3, h)).astype(np.float32)  # specials stay silent
    if eos_after is not None:
        i = CYCLE.index(3 + ord(eos_after))
        head[EOS] = 2 * margin * _unit(i)
    out: dict[str, np.ndarray] = {
        "token_embd.weight": embd,
        "output.weight": head,
        "output_norm.weight": np.ones(h, dtype=np.float32),
    }
    for i in range(SPEC.n_layer):
        out[f"blk.{i}.attn_output.weight"] = np.zeros((h, h), dtype=np.float32)
        out[f"blk.{i}.ffn_down.weight"] = np.zeros((h, SPEC.n_ff), dtype=np.float32)
    return out


def write_cycle_target(
    path: str | os.PathLike[str],
    margin: float = 4.0,
    noise: float = 0.0,
    seed: int = 0,
    eos_after: str | None = None,
) -> Path:
    return write_tiny_target(path, SPEC, seed=seed, overrides=cycle_target_tensors(margin, noise, seed, eos_after))


def make_cycle_drafter(eagle31: bool = True, noise: float = 0.0, seed: int = 0) -> Eagle3Drafter:
    """An EAGLE 3 / 3.1 drafter (shared embeddings and head, no d2t) that follows the cycle.

    g = fc(features) represents the current letter a; the MLP writes the next letter's unit
    vector and cancels the residual, so the prenorm state represents the next letter, whose
    logits through the target head name the letter after that: exactly the target's next token.
    """
    import torch

    from local_eagle.testing.tiny import make_drafter

    h = SPEC.n_embd
    model = make_drafter(
        N_VOCAB, h, LAYERS, eagle31=eagle31, own_embeddings=False, own_lm_head=False, n_ff=64, seed=seed
    )
    act = 8.0 * (8.0 * BETA) / (1.0 + np.exp(-8.0 * BETA))  # silu(8*beta) * 8: a unit's output for its letter
    n = len(CYCLE)
    fc = np.zeros((h, 3 * h), dtype=np.float32)
    gate = np.zeros((64, h), dtype=np.float32)
    up = np.zeros((64, h), dtype=np.float32)
    down = np.zeros((h, 64), dtype=np.float32)
    # 3.1: g = 8 u_a (the FC norm scales a unit vector to RMS 1); 3: g = act u_a so that prenorm feeds back unchanged
    g_scale = 8.0 if eagle31 else act
    fc[:n, :n] = np.eye(n) * (1.0 if eagle31 else act)
    for i in range(n):
        gate[i, i] = BETA
        up[i, i] = 1.0
        down[(i + 1) % n, i] = 1.0
        down[i, i] = -g_scale / act
    sd = {
        "fc.weight": fc,
        "midlayer.mlp.gate_proj.weight": gate,
        "midlayer.mlp.up_proj.weight": up,
        "midlayer.mlp.down_proj.weight": down,
        "midlayer.self_attn.o_proj.weight": np.zeros((h, h), dtype=np.float32),
    }
    rng = np.random.default_rng(seed + 1)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, value in sd.items():
            if noise and name != "midlayer.self_attn.o_proj.weight":
                value = value + noise * rng.standard_normal(value.shape).astype(np.float32)
            params[name].copy_(torch.from_numpy(value))
        for name, p in params.items():
            if name.endswith("norm.weight") or name.startswith("fc_norm"):
                p.fill_(1.0)
    return model


def training_inputs(d: Path, n_prompts: int, extra: tuple[dict, ...] = ()) -> tuple[Path, Path, Path]:
    """``(folder, target GGUF, prompts JSONL)`` for the training tests: a cycle target and prompts of random letter
    strings; the same seed gives the same prompts in every test module."""
    import json

    target = write_cycle_target(d / "target.gguf")
    rng = np.random.default_rng(0)
    alpha = list("ABCDEFGHIJKLMNOPabcxyz ")
    prompts = d / "prompts.jsonl"
    with prompts.open("w") as f:
        for _ in range(n_prompts):
            f.write(json.dumps({"prompt": "".join(rng.choice(alpha, size=rng.integers(3, 12)))}) + "\n")
        for row in extra:
            f.write(json.dumps(row) + "\n")
    return d, target, prompts

"""A tiny target and a tiny DFlash drafter that agree, generated on the spot: greedy block drafts are accepted.

The random pair of ``tiny.py`` / ``tiny_dflash.py`` almost never agrees (a 265-token vocabulary, random heads), so
both local-eagle and llama.cpp's ``draft-dflash`` accept nothing and "tokens per target call" reads 1.0 on each.
This pair accepts by construction, on any implementation of the llama / DFlash graphs:

- **Reserved channels.** Channel 0 of every token's embedding carries a large constant ``A``; channel ``1 + j``
  carries ``A`` for the j-th token of ``cycle`` only. No layer writes them: the rows of these channels in every
  ``attn_output`` / ``ffn_down`` (the drafter's ``o_proj`` / ``down_proj``) are zero, so the residual stream keeps
  them as the input token's embedding put them, whatever the (random) layers compute elsewhere.
- **Readout.** The final norm (the target's ``output_norm``, the drafter's ``norm``) weighs these channels only, so
  after it the logits are a positive multiple (``1 / rms``) of ``head @ reserved``: the head (``output.weight``,
  which the drafter borrows, as it borrows ``token_embd``) maps "channel 0 alone" to ``cycle[0]`` and "channel 0
  and channel 1 + j" to ``cycle[j + 1]`` (cyclically).
- **So.** The target's next token depends on its last token only: ``cycle[j] -> cycle[j + 1]``, anything else
  ``-> cycle[0]``. The drafter's block rows are ``<mask>`` (not in ``cycle``): every draft is ``cycle[0]``.

With ``cycle="x"`` the target writes ``xxxx...`` and every draft is accepted (tokens per target call = k + 1); with
``cycle="xy"`` it writes ``xyxy...``, a round after ``y`` accepts its first draft (``x``) and rejects the second,
a round after ``x`` accepts none: partial acceptance, the same on any faithful implementation.

**DFlash2** (``TinyDFlash2Spec``) drafts by a walk over a lattice instead of each row's argmax: a row's candidates
are the top-k of its logits, and the score of candidate ``j`` after predecessor ``i`` is ``successor[j] .
(predecessor[i] * gate)`` plus candidate ``j``'s own logit (dflash.cpp ``build_dflash2_selector``); the walk takes
the best-scoring successor of the previous pick. Two things keep the agreement:

- the selector's hidden projection is zero, so ``gate`` is zero and every pairwise term with it (the codebooks stay
  random and are still gathered): a row's scores are its candidates' logits, whatever the predecessor, and the walk
  picks the row's top logit, ``cycle[0]``, the unique maximum (every other token's logit is lower);
- the dynamic convolutions (``build_dflash2_conv``) are depthwise: a channel of their output mixes only that channel
  over the block's earlier rows, and they act on the attention / MLP branches only (their input and their output,
  never the residual stream). The branches' outputs are zero on the reserved channels (the zero rows above), a
  convolution of zeros is zero, so the convolutions stay random and the reserved channels stay the token's.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from local_eagle.testing.tiny import TinyTargetSpec, byte_vocab, random_f32, write_tiny_target
from local_eagle.testing.tiny_dflash import (
    TinyDFlash2Spec,
    TinyDFlashSpec,
    TinyDSparkSpec,
    dflash2_state_dict,
    dflash_state_dict,
    dspark_state_dict,
)

SPEC = TinyTargetSpec()
N_VOCAB = len(byte_vocab(SPEC.extra_tokens)[0])
A = 8.0  # the reserved channels' value: well above the random embeddings' 0.5 (their rms is what the norm divides)


def cycle_tokens(cycle: str) -> list[int]:
    """The byte tokens of ``cycle`` (``<0xNN>`` is token ``3 + NN``)."""
    if not cycle or len(set(cycle)) != len(cycle) or not cycle.isascii():
        raise ValueError(f"cycle must be distinct ASCII characters, got {cycle!r}")
    return [3 + ord(c) for c in cycle]


def reserved(cycle: str) -> list[int]:
    """The channels no layer writes: 0 (constant) and one per cycle token."""
    return list(range(1 + len(cycle)))


def readout_norm(cycle: str, n_embd: int = SPEC.n_embd) -> np.ndarray:
    """A final norm weight that reads the reserved channels only."""
    w = np.zeros(n_embd, dtype=np.float32)
    w[reserved(cycle)] = 1.0
    return w


def agree_target_tensors(cycle: str = "x", seed: int = 0, spec: TinyTargetSpec = SPEC) -> dict[str, np.ndarray]:
    """The target's tensors that make it follow ``cycle`` (the rest stays ``write_tiny_target``'s random)."""
    toks = cycle_tokens(cycle)
    rng = np.random.default_rng(seed + 100)
    mat, _ = random_f32(rng)
    h = spec.n_embd
    ch = reserved(cycle)
    embd = (rng.standard_normal((N_VOCAB, h)) * 0.5).astype(np.float32)
    embd[:, ch] = 0.0
    embd[:, 0] = A
    for j, t in enumerate(toks):
        embd[t, 1 + j] = A
    head = np.zeros((N_VOCAB, h), dtype=np.float32)
    head[:, 0] = -1.0  # channel 0 alone: every token -1 but cycle[0] +1
    head[toks[0], 0] = 1.0
    for j in range(len(toks)):
        nxt = toks[(j + 1) % len(toks)]
        head[toks[0], 1 + j] -= 2.0  # after cycle[j], cycle[0] drops to -1 ...
        head[nxt, 1 + j] += 3.0  # ... and cycle[j + 1] rises to +2 (cycle[0] itself to 2 when it is next)
    out = {"token_embd.weight": embd, "output.weight": head, "output_norm.weight": readout_norm(cycle, h)}
    for i in range(spec.n_layer):
        wo, down = mat(h, spec.n_head * (h // spec.n_head)), mat(h, spec.n_ff)
        wo[ch], down[ch] = 0.0, 0.0
        out[f"blk.{i}.attn_output.weight"], out[f"blk.{i}.ffn_down.weight"] = wo, down
    return out


def write_agree_target(path: str | os.PathLike[str], cycle: str = "x", seed: int = 0,
                       spec: TinyTargetSpec = SPEC) -> Path:  # fmt: skip
    """The tiny llama target (``TinyTargetSpec``, or a wider ``spec``) that writes ``cycle`` over and over after any
    prompt."""
    return write_tiny_target(path, spec, seed=seed, overrides=agree_target_tensors(cycle, seed, spec))


def agree_drafter_state_dict(spec: TinyDFlashSpec, cycle: str = "x", seed: int = 0) -> dict[str, np.ndarray]:
    """A DFlash (or, for a ``TinyDSparkSpec`` / ``TinyDFlash2Spec``, DSpark / DFlash2) checkpoint's weights whose
    block rows keep the reserved channels of their input token and read only them: every mask row predicts
    ``cycle[0]``.

    (A DSpark drafter adds its Markov head's bias to the logits: it is zeroed here, so it adds nothing. A DFlash2
    drafter's selector adds pairwise scores to its candidates' logits: its hidden projection is zeroed, so they are
    all zero and its walk takes each row's top logit; see the module docstring.)"""
    if isinstance(spec, TinyDSparkSpec):
        sd = dspark_state_dict(spec, seed)
        for k in list(sd):
            if k.startswith("markov_head."):
                sd[k] = np.zeros_like(sd[k])
    elif isinstance(spec, TinyDFlash2Spec):
        sd = dflash2_state_dict(spec, seed)
        gate = "candidate_selector.hidden_projection.weight"
        sd[gate] = np.zeros_like(sd[gate])
    else:
        sd = dflash_state_dict(spec, seed)
    ch = reserved(cycle)
    for i in range(spec.n_layer):
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            w = sd[f"layers.{i}.{name}"].copy()
            w[ch] = 0.0
            sd[f"layers.{i}.{name}"] = w
    sd["norm.weight"] = readout_norm(cycle, spec.n_embd)
    return sd


def write_agree_pair(
    directory: str | os.PathLike[str],
    cycle: str = "x",
    spec: TinyDFlashSpec | None = None,
    seed: int = 0,
    outtype: str = "f32",
    target_spec: TinyTargetSpec = SPEC,
) -> tuple[Path, Path]:
    """``(target.gguf, drafter.gguf)`` in ``directory``: the agreeing target and its DFlash (DSpark, DFlash2: by
    ``spec``'s class) drafter, converted by local-eagle's converter (``converters.dflash_gguf``), as a published
    checkpoint would be (``spec.n_embd`` must be ``target_spec.n_embd``)."""
    from converters.dflash_gguf import convert_dflash
    from local_eagle.testing.tiny_dflash import write_dflash_checkpoint

    spec = spec or TinyDFlashSpec(block_size=5)
    if spec.mask_token_id in cycle_tokens(cycle):
        spec = replace(spec, mask_token_id=N_VOCAB - 1)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    target = write_agree_target(d / f"agree-{cycle}-target.gguf", cycle, seed, target_spec)
    ckpt = write_dflash_checkpoint(
        d / f"agree-{cycle}-ckpt", spec, state_dict=agree_drafter_state_dict(spec, cycle, seed)
    )
    name = "dflash"
    if isinstance(spec, (TinyDSparkSpec, TinyDFlash2Spec)):
        name = "dspark" if isinstance(spec, TinyDSparkSpec) else "dflash2"
    draft = convert_dflash(ckpt, target, d / f"agree-{cycle}-{name}.gguf", outtype=outtype).outfile
    return target, draft

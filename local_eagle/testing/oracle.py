"""Check the llama.cpp drafter against the torch reference on the same inputs.

Both sides get identical target features and tokens: a prefill of ``n_prompt`` rows and then
chained draft steps fed with the drafter's own feedback state, as in speculative decoding.
The chained tokens are the llama.cpp side's argmax, fed to both, so every step is comparable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from local_eagle.llamacpp.bindings import Context, ContextOptions, Model
from local_eagle.runtime.drafter import Drafter


@dataclass
class StepComparison:
    step: int
    max_abs_diff: float
    logit_scale: float
    argmax_equal: bool

    @property
    def rel_diff(self) -> float:
        return self.max_abs_diff / max(self.logit_scale, 1e-12)


def run_llama(
    drafter: Drafter, features: np.ndarray, tokens: np.ndarray, n_steps: int
) -> tuple[list[np.ndarray], list[int]]:
    """Draft logits of the last prefill row and the chained steps after it, plus the chosen tokens."""
    n = len(features)
    g = drafter.encode(features)
    logits, pre = drafter.decode(tokens[1 : n + 1], g, np.arange(n))
    out = [logits[-1]]
    chosen = []
    state = pre[-1]
    for s in range(1, n_steps):
        tok = int(np.argmax(out[-1]))
        chosen.append(tok)
        lg, pr = drafter.decode(np.array([tok]), drafter.feedback(state)[None, :], np.array([n - 1 + s]))
        out.append(lg[0])
        state = pr[0]
    chosen.append(int(np.argmax(out[-1])))
    return out, chosen


def run_reference(
    model,  # local_eagle.reference.Eagle3Drafter
    features: np.ndarray,
    tokens: np.ndarray,
    chosen: list[int],
    target_embd: np.ndarray | None,
    target_head: np.ndarray | None,
) -> list[np.ndarray]:
    import torch

    from local_eagle.reference import KVCache

    n = len(features)
    cache = KVCache()
    emb = torch.from_numpy(target_embd.copy()) if target_embd is not None else None
    head = torch.from_numpy(target_head.copy()) if target_head is not None else None
    with torch.no_grad():
        f = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))[None]
        g = model.project(f)
        toks = torch.from_numpy(tokens[1 : n + 1].astype(np.int64))[None]
        lg, pre = model.decode(toks, g, torch.arange(n), cache, emb, head)
        out = [model.full_vocab_logits(lg[0, -1]).numpy()]
        state = pre[:, -1:]
        for s in range(1, len(chosen)):
            tok = torch.tensor([[chosen[s - 1]]])
            lg, pre = model.decode(tok, model.feedback(state), torch.tensor([n - 1 + s]), cache, emb, head)
            out.append(model.full_vocab_logits(lg[0, -1]).numpy())
            state = pre
    return out


def compare(
    drafter_gguf: str | os.PathLike[str],
    target_gguf: str | os.PathLike[str],
    reference_model,
    n_prompt: int = 12,
    n_steps: int = 3,
    seed: int = 0,
    feature_scale: float = 4.0,
) -> list[StepComparison]:
    """Run both implementations on the same random features/tokens and compare draft logits."""
    from local_eagle.testing.tiny import target_head_weights

    target_model = Model(target_gguf, what="target")
    target_ctx = Context(target_model, ContextOptions(n_ctx=256, n_batch=64, n_ubatch=64))
    drafter = Drafter(drafter_gguf, target_ctx, ContextOptions(n_ctx=256, n_batch=64, n_ubatch=64))
    try:
        rng = np.random.default_rng(seed)
        cfg = reference_model.cfg
        # per-chunk scales differ so the FC norm visibly changes the result
        scales = np.repeat(np.array([feature_scale, 1.0, feature_scale * 3]), cfg.target_hidden_size)
        features = (rng.standard_normal((n_prompt, 3 * cfg.target_hidden_size)) * scales).astype(np.float32)
        tokens = rng.integers(3, target_model.n_vocab, size=n_prompt + 1).astype(np.int32)
        ours, chosen = run_llama(drafter, features, tokens, n_steps)
        embd, head = target_head_weights(target_gguf)
        if not cfg.own_lm_head and cfg.draft_vocab_size != cfg.vocab_size:
            head = head[reference_model.draft_to_target().numpy()]  # what the converter packs
        ref = run_reference(
            reference_model,
            features,
            tokens,
            chosen,
            None if cfg.own_embeddings else embd,
            None if cfg.own_lm_head else head,
        )
    finally:
        drafter.close()
        target_ctx.close()
        target_model.close()
    result = []
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        finite = np.isfinite(b)
        if not np.array_equal(finite, np.isfinite(a)):
            diff = float("inf")
        else:
            diff = float(np.max(np.abs(a[finite] - b[finite])))
        scale = float(np.max(np.abs(b[finite])))
        result.append(StepComparison(i + 1, diff, scale, int(np.argmax(a)) == int(np.argmax(b))))
    return result


# Relative tolerance of the draft logits per weight type; q8_0 is judged by the argmax alone.
TOLERANCE = {"f32": 1e-3, "f16": 2e-2, "bf16": 5e-2}


def agrees(outtype: str, c: StepComparison) -> bool:
    if outtype in TOLERANCE:
        return c.rel_diff <= TOLERANCE[outtype]
    return c.argmax_equal

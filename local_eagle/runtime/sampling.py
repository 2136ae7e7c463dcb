"""Logit processing and lossless speculative verification, as pure numpy functions.

The same ``probabilities`` function turns target and draft logits into distributions, so
rejection sampling (Leviathan et al. 2023; Chen et al. 2023) keeps the output distribution
equal to sampling from the target alone; greedy verification keeps it token-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """llama.cpp's sampler settings; ``temperature <= 0`` means greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


GREEDY = SamplingParams(temperature=0.0)


def apply_repeat_penalty(logits: np.ndarray, history: np.ndarray, penalty: float, last_n: int) -> np.ndarray:
    """llama.cpp's repeat penalty over the last ``last_n`` tokens (divide positive, multiply negative)."""
    if penalty == 1.0 or last_n == 0 or len(history) == 0:
        return logits
    # a token seen twice is penalised once: both reads see the logit before, both writes store the same value (no
    # np.unique, whose first call imports numpy.ma, 8 ms inside a round)
    recent = history[-last_n:] if last_n > 0 else history
    out = logits.copy()
    vals = out[recent]
    out[recent] = np.where(vals > 0, vals / penalty, vals * penalty)
    return out


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution llama.cpp's default chain samples from: top-k, top-p, min-p, then temperature.

    Returns float64 probabilities over the whole vocabulary (zeros outside the kept set).
    """
    x = np.asarray(logits, dtype=np.float64)
    n = x.shape[-1]
    finite = np.isfinite(x)
    n_finite = int(finite.sum())
    k = n_finite if params.top_k <= 0 else min(params.top_k, n_finite)
    if k <= 0:
        raise ValueError("no finite logits to sample from")
    idx = np.argpartition(-np.where(finite, x, -np.inf), k - 1)[:k] if k < n else np.arange(n)
    idx = idx[np.argsort(-x[idx], kind="stable")]
    vals = x[idx]
    keep = len(idx)
    if params.top_p < 1.0 and keep > 1:
        p = np.exp(vals - vals[0])
        p /= p.sum()
        cum = np.cumsum(p)
        keep = min(keep, int(np.searchsorted(cum, params.top_p)) + 1)
    if params.min_p > 0.0 and keep > 1:
        p = np.exp(vals[:keep] - vals[0])
        keep = max(1, int(np.sum(p >= params.min_p)))
    idx, vals = idx[:keep], vals[:keep]
    t = params.temperature if params.temperature > 0 else 1.0
    w = np.exp((vals - vals[0]) / t)
    out = np.zeros(n, dtype=np.float64)
    out[idx] = w / w.sum()
    return out


def choose(
    logits: np.ndarray, history: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> tuple[int, np.ndarray | None]:
    """The token the target alone would pick, and the distribution it was drawn from (None when greedy)."""
    processed = apply_repeat_penalty(logits, history, params.repeat_penalty, params.repeat_last_n)
    if params.greedy:
        return int(np.argmax(processed)), None
    distribution = probabilities(processed, params)
    return sample(distribution, rng), distribution


def top_probability(logits: np.ndarray) -> float:
    """The softmax probability of the most likely token: how sure the drafter is of its next draft."""
    highest = np.max(logits)
    if np.isfinite(highest) and np.isfinite(np.min(logits)):  # every entry finite: the same sum without the mask's copy
        return 1.0 / np.sum(np.exp(logits - highest))
    return 1.0 / np.sum(np.exp(logits[np.isfinite(logits)] - highest))


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token; inverse-CDF on the cumulative sum (no per-call allocation of the vocab)."""
    cum = np.cumsum(probs)
    return int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), len(probs) - 1))

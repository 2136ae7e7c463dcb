"""The sampling tests' one statistic: observed sequences against an exact distribution."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine
    from local_eagle.runtime.sampling import SamplingParams


def chisquare_pvalue(counts: dict, joint: dict, n: int) -> float:
    """Pearson's chi-square p-value of ``counts`` (``n`` draws) against the probabilities ``joint``; outcomes
    expected fewer than 5 times are merged, so that the approximation holds."""
    from scipy import stats

    keys = sorted(joint)
    obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
    exp = np.array([joint[k] for k in keys]) * n
    assert sum(counts.values()) == n and set(counts) <= set(joint)
    rare = exp < 5
    if rare.any():
        obs = np.append(obs[~rare], obs[rare].sum())
        exp = np.append(exp[~rare], exp[rare].sum())
    return float(stats.chisquare(obs, exp).pvalue)


def target_joint(engine: Engine, prompt: str, sampling: SamplingParams, n: int = 2) -> dict[tuple[int, ...], float]:
    """The exact distribution of the first ``n`` tokens sampled from the target alone (every branch decoded on the
    engine's target context, which the next generation resets): what a speculative run's draws must follow."""
    from local_eagle.runtime.sampling import probabilities

    toks = engine.tokenize(prompt)
    ctx, n_prompt = engine.ctx, len(toks)
    ctx.clear()
    ctx.decode(toks, np.arange(n_prompt), np.arange(n_prompt) == n_prompt - 1)
    joint: dict[tuple[int, ...], float] = {}

    def extend(prefix: tuple[int, ...], prob: float, dist: np.ndarray) -> None:
        for t in np.nonzero(dist)[0]:
            seq = (*prefix, int(t))
            if len(seq) == n:
                joint[seq] = prob * dist[t]
                continue
            ctx.remove_from(n_prompt + len(prefix))
            ctx.decode(np.array([t], dtype=np.int32), np.array([n_prompt + len(prefix)]), True)
            extend(seq, prob * dist[t], probabilities(ctx.logits(0, engine.n_vocab), sampling))

    extend((), 1.0, probabilities(ctx.logits(n_prompt - 1, engine.n_vocab), sampling))
    return joint

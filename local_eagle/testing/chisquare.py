"""The sampling tests' one statistic: observed sequences against an exact distribution."""

from __future__ import annotations

import numpy as np


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

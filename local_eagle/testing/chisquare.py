"""The sampling tests' one statistic: observed sequences against an exact distribution."""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    engine's target context, which the next generation resets): what a speculative run's draws must follow.

    A model that cannot branch a cached prefix (recurrent, hybrid, deepseek4) decodes the prompt and the branch's
    prefix again, in the same calls as the first time: a removal reaching back past the last call's rows (a
    sibling's after a deeper branch) was not refused but left the state wrong (tiny nemotron_h_moe, three tokens:
    probabilities off by 0.06), and a checkpoint family refuses any removal."""
    from local_eagle.runtime.sampling import probabilities

    toks = engine.tokenize(prompt)
    ctx, n_prompt = engine.ctx, len(toks)
    replay = engine.model.branching_refusal() is not None
    ctx.clear()
    ctx.decode(toks, np.arange(n_prompt), np.arange(n_prompt) == n_prompt - 1)
    joint: dict[tuple[int, ...], float] = {}

    def extend(prefix: tuple[int, ...], prob: float, dist: np.ndarray) -> None:
        for t in np.nonzero(dist)[0]:
            seq = (*prefix, int(t))
            if len(seq) == n:
                joint[seq] = prob * dist[t]
                continue
            if not replay:
                ctx.remove_from(n_prompt + len(prefix))
            else:
                ctx.clear()
                ctx.decode(toks, np.arange(n_prompt), np.arange(n_prompt) == n_prompt - 1)
                for i, u in enumerate(prefix):
                    ctx.decode(np.array([u], dtype=np.int32), np.array([n_prompt + i]), True)
            ctx.decode(np.array([t], dtype=np.int32), np.array([n_prompt + len(prefix)]), True)
            extend(seq, prob * dist[t], probabilities(ctx.logits(0, engine.n_vocab), sampling))

    extend((), 1.0, probabilities(ctx.logits(n_prompt - 1, engine.n_vocab), sampling))
    return joint


@dataclass(frozen=True)
class SamplingCheck:
    """A sampling test's outcome: the chi-square p-value and the drafted and accepted totals, which show that
    drafts were both kept and rejected (and rolled back) while the distribution held."""

    pvalue: float
    drafted: int
    accepted: int
    counts: dict[tuple[int, ...], int]


def sampling_check(
    engine: Engine, prompt: str, sampling: SamplingParams, n: int, n_tokens: int = 3, max_tokens: int = 6, **kw
) -> SamplingCheck:
    """The first ``n_tokens`` of ``n`` seeded generations (seeds 0..n-1) against the target alone's exact joint
    distribution; ``kw`` goes to ``generate`` (``draft_max``, ``adaptive``, ``tree``). ``max_tokens`` above
    ``n_tokens`` lets the first round draft in full (a round drafts no more than the tokens left) and a round after a
    rejection's rollback produce the tokens checked."""
    joint = target_joint(engine, prompt, sampling, n_tokens)
    counts: dict[tuple[int, ...], int] = {}
    drafted = accepted = 0
    for seed in range(n):
        res = engine.generate(prompt, max_tokens=max_tokens, sampling=replace(sampling, seed=seed), **kw)
        key = tuple(res.tokens[:n_tokens])
        counts[key] = counts.get(key, 0) + 1
        drafted += res.stats.drafted_tokens
        accepted += res.stats.accepted_tokens
    return SamplingCheck(chisquare_pvalue(counts, joint, n), drafted, accepted, counts)


def seeded_contingency(
    runs: list[tuple[Engine, int]], prompt: str, sampling: SamplingParams, n: int, n_tokens: int = 2
) -> tuple[np.ndarray, float]:
    """Two samples of the first ``n_tokens`` over seeds 0..n-1, one per ``(engine, draft_max)`` of ``runs`` (fixed
    lengths): their contingency table, outcomes seen fewer than 5 times in all left out, and its chi-square p-value
    (the same distribution or not, where no exact joint is at hand)."""
    from scipy import stats

    counts: list[dict[tuple[int, ...], int]] = []
    for engine, k in runs:
        seen: dict[tuple[int, ...], int] = {}
        for seed in range(n):
            res = engine.generate(prompt, max_tokens=n_tokens, draft_max=k, adaptive=False,
                                  sampling=replace(sampling, seed=seed))  # fmt: skip
            key = tuple(res.tokens[:n_tokens])
            seen[key] = seen.get(key, 0) + 1
        counts.append(seen)
    keys = sorted(set().union(*counts))
    table = np.array([[c.get(key, 0) for key in keys] for c in counts], dtype=float)
    table = table[:, table.sum(axis=0) >= 5]
    return table, float(stats.chi2_contingency(table).pvalue) if table.shape[1] >= 2 else float("nan")

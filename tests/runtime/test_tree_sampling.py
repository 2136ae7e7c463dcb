"""Speculative sampling over draft trees on llama.cpp: the emitted tokens are distributed as the target's own."""

from __future__ import annotations

import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.chisquare import chisquare_pvalue, target_joint

SP = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
PROMPT = "xyzA"


@pytest.fixture(scope="module")
def noisy_pair(sampling_pair):
    """The chain's sampling test pair (runtime/test_sampling.py): a blurred cycle, drafts right often, not always."""
    target, draft = sampling_pair
    eng = Engine(target, draft, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, tree_nodes=16, tree_width=3))
    yield eng
    eng.close()


def test_tree_sampling_matches_the_target_distribution(noisy_pair):
    """Three tokens: the first from the prompt, the next two through a tree round (siblings tried in turn, the
    residual resampled, a bonus after a full accept); their joint is the target's (chi-square)."""
    eng = noisy_pair
    joint = target_joint(eng, PROMPT, SP, 3)
    n = 2500
    counts: dict[tuple[int, ...], int] = {}
    drafted = accepted = 0
    for seed in range(n):
        sp = SamplingParams(**{**SP.__dict__, "seed": seed})
        res = eng.generate(PROMPT, max_tokens=4, sampling=sp, tree=TreeShape(8, 3, 3))
        key = tuple(res.tokens[:3])
        counts[key] = counts.get(key, 0) + 1
        drafted += res.stats.drafted_tokens
        accepted += res.stats.accepted_tokens
    assert 0 < accepted < drafted
    assert chisquare_pvalue(counts, joint, n) > 1e-3


def test_adaptive_tree_sampling_matches_the_target_distribution(noisy_pair):
    """The draft-shape policy's trees (only nodes that could pay expanded, depth quotas from the previous round's
    priced tree) on GPU-like costs, a tree every round: the joint of three tokens is still the target's. (Whether a
    round is a tree is decided before it, from earlier rounds, so forcing it keeps the test about the pricing.)"""
    from local_eagle.testing.costs import FrozenOverhead, deciding_on

    class EveryRound(FrozenOverhead):
        def prefer_tree(self, policy) -> bool:
            return True

    eng = noisy_pair
    joint = target_joint(eng, PROMPT, SP, 3)
    shape = TreeShape(8, 3, 3)
    with deciding_on(eng, [1.0 + 0.01 * r for r in range(16)], 5e-5, EveryRound(shape)):
        n = 2500
        counts: dict[tuple[int, ...], int] = {}
        trees = 0
        for seed in range(n):
            sp = SamplingParams(**{**SP.__dict__, "seed": seed})
            res = eng.generate(PROMPT, max_tokens=4, sampling=sp, draft_max=3, adaptive=True, tree=shape)
            key = tuple(res.tokens[:3])
            counts[key] = counts.get(key, 0) + 1
            trees += any(t.drafted > 1 for t, _ in res.spec_stats.trace_trees)
        assert trees > 0.1 * n, trees  # the rest priced down to one node or none: this pair is rarely right
        assert chisquare_pvalue(counts, joint, n) > 1e-3

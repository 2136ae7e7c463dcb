"""Sampling maths (pure) and the distribution of speculative sampling on llama.cpp."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import (
    SamplingParams,
    apply_repeat_penalty,
    probabilities,
    sample,
)
from local_eagle.runtime.tree import VerifyTree, walk_greedy, walk_sampling
from local_eagle.testing.chisquare import target_joint
from local_eagle.testing.costs import FrozenCosts


def test_probabilities_top_k_top_p_min_p_temperature():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    p = probabilities(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(p, [0.5, 0.2, 0.15, 0.1, 0.05])
    p = probabilities(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(p, [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0])
    # top-p keeps the smallest prefix reaching p: 0.5+0.2 = 0.7 >= 0.7
    p = probabilities(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0))
    np.testing.assert_allclose(p, [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0])
    # min-p is relative to the top token: 0.15 / 0.5 = 0.3 >= 0.3, 0.1 / 0.5 < 0.3
    p = probabilities(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.3))
    np.testing.assert_allclose(p, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85)
    # temperature applies after the filters
    p = probabilities(logits, SamplingParams(temperature=0.5, top_k=2, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(p, np.array([0.25, 0.04, 0, 0, 0]) / 0.29)


def test_probabilities_ignore_minus_infinity():
    logits = np.array([-np.inf, 1.0, -np.inf, 0.0])
    p = probabilities(logits, SamplingParams(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0))
    assert p[0] == 0 and p[2] == 0
    np.testing.assert_allclose(p[[1, 3]], np.exp([1.0, 0.0]) / np.exp([1.0, 0.0]).sum())


def test_repeat_penalty_matches_llama_cpp_rule():
    logits = np.array([2.0, -2.0, 1.0, 0.5])
    out = apply_repeat_penalty(logits, np.array([0, 1, 1]), 2.0, 64)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 0.5])
    assert apply_repeat_penalty(logits, np.array([0, 1]), 2.0, 1)[0] == 2.0  # only the last token counts


def verify_greedy(drafts: np.ndarray, target_argmax: np.ndarray) -> int:
    """A chain's greedy accept: the walk over the tree with one branch."""
    path, nxt = walk_greedy(VerifyTree.chain(0, [int(x) for x in drafts]), target_argmax)
    assert nxt == target_argmax[len(path)]
    return len(path)


def verify_stochastic(drafts: np.ndarray, q: list, p: list, rng: np.random.Generator) -> tuple[int, int]:
    """A chain's rejection sampling: the walk over the tree with one branch (q[r], p[r]: at row r)."""
    path, nxt = walk_sampling(VerifyTree.chain(0, [int(x) for x in drafts]), p.__getitem__, q.__getitem__, rng)
    return len(path), nxt


def test_verify_greedy():
    assert verify_greedy(np.array([5, 6, 7]), np.array([5, 6, 7, 8])) == 3
    assert verify_greedy(np.array([5, 9, 7]), np.array([5, 6, 7, 8])) == 1
    assert verify_greedy(np.array([], dtype=np.int64), np.array([4])) == 0


def test_sample_follows_the_distribution():
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    counts = np.bincount([sample(p, rng) for _ in range(20000)], minlength=4)
    assert counts[1] == 0
    assert stats.chisquare(counts[[0, 2, 3]], 20000 * p[[0, 2, 3]]).pvalue > 1e-3


def test_rejection_sampling_one_position_gives_p():
    """x ~ q, accept with min(1, p/q), else residual: the emitted token is distributed as p."""
    rng = np.random.default_rng(1)
    p = np.array([0.05, 0.4, 0.3, 0.2, 0.05])
    q = np.array([0.4, 0.1, 0.1, 0.0, 0.4])
    p_next = np.full(5, 0.2)
    n = 40000
    firsts = np.empty(n, dtype=int)
    accepted = 0
    for i in range(n):
        x = sample(q, rng)
        n_acc, nxt = verify_stochastic(np.array([x]), [q], [p, p_next], rng)
        accepted += n_acc
        firsts[i] = x if n_acc == 1 else nxt
    counts = np.bincount(firsts, minlength=5)
    assert stats.chisquare(counts, n * p).pvalue > 1e-3
    expected_accept = np.minimum(p, q).sum()
    assert abs(accepted / n - expected_accept) < 0.02


def test_rejection_sampling_chain_gives_joint_p():
    """Two drafted positions with context-dependent p: the joint of the first two emitted tokens is p."""
    rng = np.random.default_rng(2)
    v = 3
    p1 = np.array([0.5, 0.3, 0.2])
    p2 = {a: rng.dirichlet(np.ones(v)) for a in range(v)}
    q1 = np.array([0.2, 0.2, 0.6])
    q2 = {a: rng.dirichlet(np.ones(v)) for a in range(v)}
    n = 30000
    counts = np.zeros((v, v))
    for _ in range(n):
        d1 = sample(q1, rng)
        d2 = sample(q2[d1], rng)
        n_acc, nxt = verify_stochastic(np.array([d1, d2]), [q1, q2[d1]], [p1, p2[d1], np.full(v, 1 / v)], rng)
        if n_acc == 0:
            a = nxt
            b = sample(p2[a], rng)  # the next round would sample the second token from the target
        elif n_acc == 1:
            a, b = d1, nxt
        else:
            a, b = d1, d2
        counts[a, b] += 1
    expected = np.array([[p1[a] * p2[a][b] for b in range(v)] for a in range(v)]) * n
    assert stats.chisquare(counts.ravel(), expected.ravel()).pvalue > 1e-3


@pytest.fixture(scope="module")
def noisy_pair(tmp_path_factory):
    from converters import convert, write_checkpoint
    from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

    d = tmp_path_factory.mktemp("sampling")
    target = write_cycle_target(d / "t.gguf", margin=0.25, noise=0.1, seed=4)
    m = make_cycle_drafter(True, noise=0.05, seed=5)
    ckpt = write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt")
    draft = convert(ckpt, target, d / "d.gguf", outtype="f32").outfile
    eng = Engine(target, draft, EngineOptions(n_ctx=256, n_batch=32, n_threads=1))
    yield eng
    eng.close()


def test_speculative_sampling_matches_target_distribution(noisy_pair):
    eng = noisy_pair
    sp = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    prompt = "xyzA"
    joint = target_joint(eng, prompt, sp)
    keys = sorted(joint)
    n = 3000
    counts = dict.fromkeys(keys, 0)
    drafted = accepted = 0
    for seed in range(n):
        # three tokens, so the round after the first token drafts; the first two are compared
        res = eng.generate(prompt, max_tokens=3, sampling=SamplingParams(**{**sp.__dict__, "seed": seed}), draft_max=4)
        counts[tuple(res.tokens[:2])] += 1
        drafted += res.stats.drafted_tokens
        accepted += res.stats.accepted_tokens
    assert 0 < accepted < drafted  # both acceptance and rejection-resampling were exercised
    obs = np.array([counts[k] for k in keys], dtype=float)
    exp = np.array([joint[k] for k in keys]) * n
    # merge rare cells so the chi-square approximation holds
    rare = exp < 5
    if rare.any():
        obs = np.append(obs[~rare], obs[rare].sum())
        exp = np.append(exp[~rare], exp[rare].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3


@pytest.fixture(scope="module")
def confident_pair(tmp_path_factory):
    """A pair whose drafts are accepted often enough (margin 0.75) that the adaptive policy drafts in some
    rounds and not in others, and rejects some of what it drafts."""
    from converters import convert, write_checkpoint
    from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

    d = tmp_path_factory.mktemp("adaptive-sampling")
    target = write_cycle_target(d / "t.gguf", margin=0.75, noise=0.1, seed=4)
    m = make_cycle_drafter(True, noise=0.05, seed=5)
    ckpt = write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt")
    draft = convert(ckpt, target, d / "d.gguf", outtype="f32").outfile
    eng = Engine(target, draft, EngineOptions(n_ctx=256, n_batch=32, n_threads=1))
    yield eng
    eng.close()


def test_adaptive_speculative_sampling_matches_target_distribution(confident_pair):
    """Draft lengths chosen by the policy (from the drafter's confidence and past rounds only) keep p.

    The decision to draft must not depend on the token sampled from q (that would bias the accepted
    drafts); the policy reads the top of q and what earlier rounds cost and kept, nothing else.
    """
    eng = confident_pair
    sp = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    prompt = "xyzA"

    def run(seed: int, max_tokens: int):
        sps = SamplingParams(**{**sp.__dict__, "seed": seed})
        return eng.generate(prompt, max_tokens=max_tokens, sampling=sps, draft_max=4, adaptive=True)

    # an offloaded model's costs, fixed, in a policy of their own: what it learns next does not depend on this
    # machine's timings (a policy that measured its costs first drafted every round on some loads, on others not)
    eng.lengths.decide_on(FrozenCosts([1.0, 1.3, 1.6, 1.9, 2.2], draft_step=1e-4), 4)
    for seed in range(1, 8):  # learns this pair's acceptance
        run(seed, 64)
    joint = target_joint(eng, prompt, sp)
    keys = sorted(joint)
    n = 3000
    counts = dict.fromkeys(keys, 0)
    drafted = accepted = idle = 0
    for seed in range(n):
        res = run(10_000 + seed, 3)
        counts[tuple(res.tokens[:2])] += 1
        drafted += res.stats.drafted_tokens
        accepted += res.stats.accepted_tokens
        idle += res.spec_stats.trace_drafted[0] == 0  # the round after the first token (the only one that may draft)
    assert 0 < accepted < drafted and 0 < idle < n  # drafted in some rounds, not in others; rejections resampled
    obs = np.array([counts[k] for k in keys], dtype=float)
    exp = np.array([joint[k] for k in keys]) * n
    rare = exp < 5
    if rare.any():
        obs = np.append(obs[~rare], obs[rare].sum())
        exp = np.append(exp[~rare], exp[rare].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_recent_history_is_the_window_the_penalty_reads() -> None:
    """Generation.recent_history hands the penalty only its last repeat_last_n tokens (all for -1): the same
    penalised logits as the whole history gives, without converting it every drafter step."""
    from types import SimpleNamespace

    from local_eagle.runtime.rounds import Generation

    rng = np.random.default_rng(0)
    history = [int(t) for t in rng.integers(0, 50, 300)]
    logits = rng.normal(size=50).astype(np.float32)
    for last_n in (-1, 1, 16, 64, 400):
        gen = SimpleNamespace(penalized=True, history=history, sampling=SamplingParams(repeat_penalty=1.3,
                                                                                    repeat_last_n=last_n))
        for drafts in ([], [3], list(range(20))):
            window = Generation.recent_history(gen, 7, drafts)
            whole = np.asarray(history + [7] + drafts)
            assert last_n <= 0 or len(window) <= last_n
            assert np.array_equal(apply_repeat_penalty(logits, window, 1.3, last_n),
                                  apply_repeat_penalty(logits, whole, 1.3, last_n))

"""The draft-verify loop under a grammar: the output is the target alone's under the same grammar."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.grammar import GrammarSpec
from local_eagle.runtime.sampling import SamplingParams, probabilities
from local_eagle.testing.chisquare import chisquare_pvalue

SP = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
GRAMMARS = [
    GrammarSpec.regex("PQR[A-Z]{3,40}"),  # forced tokens first, then the target's own letters
    GrammarSpec.regex("([A-H][I-P])+X?"),  # the target's cycle half of the time: drafts refused by the mask
    GrammarSpec.lark('start: "{" NAME ": " NUM "}"\nNAME: /[A-P]{2,8}/\nNUM: /[0-9]{1,3}/'),
]


@pytest.fixture(scope="module")
def noisy(sampling_pair):
    target, draft = sampling_pair
    single = Engine(target, draft, EngineOptions(n_ctx=256, n_batch=64, n_threads=1))
    parallel = Engine(target, draft, EngineOptions(n_ctx=256, n_batch=64, n_threads=1, parallel=3, adaptive=True))
    yield single, parallel
    parallel.close()
    single.close()


@pytest.mark.parametrize("grammar", GRAMMARS, ids=["forced", "refusing", "lark"])
def test_greedy_under_a_grammar_is_the_target_alone_under_it(noisy, grammar):
    single, parallel = noisy
    for prompt in ("xyzA", "PAB", "hello"):
        base = single.generate(prompt, max_tokens=40, draft_max=0, grammar=grammar)
        assert base.tokens, prompt
        constraint = single.grammar(grammar).matcher()
        assert constraint.validate(base.tokens) == len(base.tokens)  # the output follows the grammar
        for kw in (dict(draft_max=3), dict(draft_max=6, adaptive=True), dict(draft_max=4, adaptive=False)):
            spec = single.generate(prompt, max_tokens=40, grammar=grammar, **kw)
            assert spec.tokens == base.tokens, (prompt, kw)
            assert spec.stats.stop_reason == base.stats.stop_reason
        out: list = [None] * 3

        def go(i: int, prompt: str = prompt, out: list = out) -> None:
            out[i] = parallel.generate(prompt, max_tokens=40, draft_max=3, adaptive=i != 1, grammar=grammar)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert [r.tokens for r in out] == [base.tokens] * 3, prompt


def test_forced_tokens_join_the_draft_and_are_kept(noisy):
    single, _ = noisy
    grammar = GRAMMARS[0]
    res = single.generate("xyzA", max_tokens=20, draft_max=2, adaptive=False, grammar=grammar)
    assert res.text.startswith("PQR")
    assert res.stats.accepted_tokens >= 3  # P, Q and R were verified as drafts and kept
    assert res.stats.forced_tokens >= 1 and res.stats.grammar_seconds > 0  # R, without a drafter call
    assert res.stats.to_dict()["forced_tokens"] == res.stats.forced_tokens


def test_a_cut_in_the_middle_is_a_length_stop(noisy):
    single, _ = noisy
    res = single.generate("xyzA", max_tokens=4, draft_max=3, grammar=GRAMMARS[2])
    assert res.stats.stop_reason == "length" and len(res.tokens) == 4


def _constrained_joint(eng: Engine, grammar: GrammarSpec, prompt: str, n: int) -> dict[tuple[int, ...], float]:
    """The exact distribution of the first ``n`` tokens when the target alone samples under ``grammar``."""
    toks = eng.tokenize(prompt)
    ctx, n_prompt = eng.ctx, len(toks)
    ctx.clear()
    ctx.decode(toks, np.arange(n_prompt), np.arange(n_prompt) == n_prompt - 1)
    joint: dict[tuple[int, ...], float] = {}

    def dist(logits: np.ndarray, state) -> np.ndarray:
        return probabilities(state.apply(np.array(logits, dtype=np.float32)), SP)

    def extend(prefix: tuple[int, ...], prob: float, state, p: np.ndarray) -> None:
        for t in np.nonzero(p)[0]:
            seq = (*prefix, int(t))
            if eng.model.is_eog(int(t)):  # the output ends here: what a generation reports is the tokens before it
                joint[prefix] = joint.get(prefix, 0.0) + prob * p[t]
                continue
            if len(seq) == n:
                joint[seq] = prob * p[t]
                continue
            nxt = state.copy()
            nxt.consume(int(t))
            ctx.remove_from(n_prompt + len(prefix))
            ctx.decode(np.array([t], dtype=np.int32), np.array([n_prompt + len(prefix)]), True)
            extend(seq, prob * p[t], nxt, dist(ctx.logits(0, eng.n_vocab), nxt))

    start = eng.grammar(grammar).matcher()
    extend((), 1.0, start, dist(ctx.logits(n_prompt - 1, eng.n_vocab), start))
    return joint


def test_sampling_under_a_grammar_is_the_constrained_target_distribution(noisy):
    """Three tokens, two of them through drafts masked by the grammar: their joint is the constrained target's
    (chi-square); the same counts against a joint with a little mass moved are told apart (the test has power)."""
    single, _ = noisy
    grammar = GRAMMARS[1]
    joint = _constrained_joint(single, grammar, "xyzA", 3)
    n = 2500
    counts: dict[tuple[int, ...], int] = {}
    drafted = accepted = 0
    for seed in range(n):
        sp = SamplingParams(**{**SP.__dict__, "seed": seed})
        res = single.generate("xyzA", max_tokens=4, sampling=sp, draft_max=3, adaptive=False, grammar=grammar)
        key = tuple(res.tokens[:3])
        counts[key] = counts.get(key, 0) + 1
        drafted += res.stats.drafted_tokens
        accepted += res.stats.accepted_tokens
    assert 0 < accepted < drafted
    assert chisquare_pvalue(counts, joint, n) > 1e-3
    ranked = sorted(joint, key=joint.get, reverse=True)
    biased = dict(joint)
    shift = min(0.05, biased[ranked[1]])
    biased[ranked[0]] += shift
    biased[ranked[1]] -= shift
    assert chisquare_pvalue(counts, biased, n) < 1e-3

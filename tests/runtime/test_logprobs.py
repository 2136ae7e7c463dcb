"""Log-probabilities from the target's own verification logits, and unconstrained drafts under a grammar."""

from __future__ import annotations

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.grammar import GrammarSpec
from local_eagle.runtime.rounds import token_logprob
from local_eagle.runtime.sampling import SamplingParams


@pytest.fixture(scope="module")
def engine(sampling_pair):
    target, draft = sampling_pair
    with Engine(target, draft, EngineOptions(n_ctx=256, n_batch=64, n_threads=1)) as eng:
        yield eng


def test_token_logprob_is_a_log_softmax():
    logits = np.array([2.0, 1.0, -np.inf, 0.0], dtype=np.float32)
    lp = token_logprob(logits, 1, 2)
    p = np.exp([2.0, 1.0, 0.0])
    p /= p.sum()
    assert lp.logprob == pytest.approx(np.log(p[1]), abs=1e-6)
    assert [t for t, _ in lp.top] == [0, 1] and lp.top[0][1] == pytest.approx(np.log(p[0]), abs=1e-6)


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.8, top_k=3, seed=3)])
def test_logprobs_are_the_target_alones_whatever_was_drafted(engine, sampling):
    base = engine.generate("xyzA", max_tokens=30, draft_max=0, sampling=sampling, logprobs=3)
    spec = engine.generate("xyzA", max_tokens=30, draft_max=4, adaptive=False, sampling=SamplingParams(
        temperature=sampling.temperature, top_k=sampling.top_k, seed=sampling.seed), logprobs=3)  # fmt: skip
    assert base.logprobs is not None and len(base.logprobs) == len(base.tokens) == 30
    assert [lp.token for lp in base.logprobs] == base.tokens
    if sampling.greedy:
        assert spec.tokens == base.tokens and spec.stats.accepted_tokens > 10
        for a, b in zip(base.logprobs, spec.logprobs, strict=True):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-3)  # batches, 1-row decodes: CPUs round apart
            assert [t for t, _ in a.top] == [t for t, _ in b.top]
            assert a.top[0][0] == a.token  # greedy picks the likeliest
    assert all(lp.logprob <= 0.0 and len(lp.top) == 3 for lp in spec.logprobs)


def test_no_logprobs_unless_asked_and_a_bad_count_is_refused(engine):
    assert engine.generate("xyzA", max_tokens=5, draft_max=2).logprobs is None
    with pytest.raises(LocalEagleError, match="top logprobs"):
        engine.generate("xyzA", max_tokens=5, logprobs=99)


def test_unconstrained_drafts_under_a_grammar_keep_the_output_and_waste_more(engine):
    grammar = GrammarSpec.regex("([A-H][I-P])+X?")
    base = engine.generate("xyzA", max_tokens=40, draft_max=0, grammar=grammar)
    aware = engine.generate("xyzA", max_tokens=40, draft_max=4, adaptive=False, grammar=grammar)
    blind = engine.generate("xyzA", max_tokens=40, draft_max=4, adaptive=False, grammar=grammar, draft_grammar=False)
    assert aware.tokens == base.tokens == blind.tokens
    assert aware.stats.acceptance_length > blind.stats.acceptance_length

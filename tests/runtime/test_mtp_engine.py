"""A target with its own MTP head speculates with it when no drafter is named, through the same loop, losslessly."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import MtpDrafter
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.chisquare import sampling_check
from local_eagle.testing.tiny_mtp import (
    TinyGlm4MoeSpec,
    write_cycle_glm4moe_mtp,
    write_tiny_glm4moe_mtp,
    write_tiny_qwen35_mtp,
)

OPTS = EngineOptions(n_ctx=256, n_batch=32, n_threads=1)
PROMPTS = [np.array(p, dtype=np.int32) for p in ([1, 5, 9, 13, 2], [3, 3, 3], [7, 1, 30, 12, 8, 4, 4])]


@pytest.fixture(scope="module")
def glm(tmp_path_factory) -> Path:
    return write_tiny_glm4moe_mtp(tmp_path_factory.mktemp("mtp-engine") / "glm.gguf", TinyGlm4MoeSpec(), seed=3)


def test_the_head_drafts_by_default_and_the_output_is_the_target_alones(glm):
    with Engine(glm, None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.mtp_refusal is None
        for prompt in PROMPTS:
            base = eng.generate(prompt, max_tokens=30, draft_max=0)
            for kw in (dict(draft_max=2), dict(draft_max=4), dict(draft_max=3, adaptive=True)):
                res = eng.generate(prompt, max_tokens=30, **kw)
                assert res.tokens == base.tokens, (prompt, kw)
            fixed = eng.generate(prompt, max_tokens=30, draft_max=3)
            assert fixed.stats.drafted_tokens > 0  # the head drafted, the target judged
            sp = SamplingParams(temperature=0.8, top_k=5, seed=7)
            assert eng.generate(prompt, max_tokens=20, draft_max=0, sampling=sp).tokens == eng.generate(
                prompt, max_tokens=20, draft_max=0, sampling=sp).tokens  # fmt: skip


def test_parallel_sequences_share_the_head(glm):
    with Engine(glm, None, OPTS) as single:
        base = [single.generate(p, max_tokens=30, draft_max=0).tokens for p in PROMPTS]
    with Engine(glm, None, EngineOptions(n_ctx=256, n_batch=64, n_threads=1, parallel=3)) as eng:
        out: list = [None] * 3

        def go(i: int) -> None:
            out[i] = eng.generate(PROMPTS[i], max_tokens=30, draft_max=3, adaptive=False)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert [r.tokens for r in out] == base
        assert all(r.stats.drafted_tokens > 0 for r in out)


def test_off_when_asked(glm, tmp_path):
    with Engine(glm, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, mtp=False)) as eng:
        assert eng.drafter is None and eng.model.n_layer_nextn == 1
    with Engine(glm, None, OPTS) as eng:  # an attention cache drops any suffix: no snapshots, no cap
        assert eng.rollback_bound is None and eng.ctx.n_rs_seq == 0 and "KV cache" in (eng.mtp_note or "")
    hybrid = write_tiny_qwen35_mtp(tmp_path / "qwen35.gguf", seed=3)  # drafts too: tests/runtime/test_mtp_hybrid.py
    with Engine(hybrid, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, mtp=False)) as eng:
        assert eng.drafter is None and eng.mtp_refusal is None and eng.ctx.n_rs_seq == 0
        assert eng.generate(PROMPTS[0], max_tokens=8, draft_max=3).stats.generated_tokens == 8


def test_a_family_without_an_mtp_graph_is_refused_before_llama_cpp_asserts(glm, monkeypatch):
    from local_eagle.llamacpp.model import Model
    from local_eagle.runtime.mtp import mtp_refusal

    monkeypatch.setattr(Model, "arch", lambda self: "llama")  # NextN layers in a family llama.cpp drafts none for
    with Engine(glm, None, OPTS) as eng:
        assert eng.drafter is None and "no MTP graph" in (eng.mtp_refusal or "")
        assert mtp_refusal(eng.model) == eng.mtp_refusal


@pytest.fixture(scope="module")
def cycle(tmp_path_factory) -> Path:
    """A glm4moe whose NextN head agrees with its target (the letter cycle), so drafts are accepted."""
    return write_cycle_glm4moe_mtp(tmp_path_factory.mktemp("mtp-cycle") / "cycle.gguf")


def test_a_head_that_agrees_with_its_target_is_accepted(cycle, tmp_path):
    letters = ["xyzA", "hello", "DEF", "P"]
    with Engine(cycle, None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter)
        for prompt in letters:
            base = eng.generate(prompt, max_tokens=40, draft_max=0)
            assert base.tokens[-16:] == sorted(base.tokens[-16:], key=lambda t: (t - base.tokens[-16]) % 16)  # cycling
            for k in (2, 3):
                res = eng.generate(prompt, max_tokens=40, draft_max=k, adaptive=False)
                assert res.tokens == base.tokens, (prompt, k)
                assert res.stats.acceptance_length > 0.9 * (k + 1), (prompt, k, res.stats.acceptance_length)
            # the policy may find drafting not worth its cost on this tiny model: the output alone is checked
            assert eng.generate(prompt, max_tokens=40, draft_max=3, adaptive=True).tokens == base.tokens
    missing = write_cycle_glm4moe_mtp(tmp_path / "misses.gguf", head_misses="CJ")  # wrong after C and J
    with Engine(missing, None, OPTS) as eng:
        base = eng.generate("xyzA", max_tokens=48, draft_max=0)
        res = eng.generate("xyzA", max_tokens=48, draft_max=3, adaptive=False)
        assert res.tokens == base.tokens
        assert 0 < res.stats.accepted_tokens < res.stats.drafted_tokens and res.stats.acceptance_length > 1.8


def test_sampling_with_the_head_keeps_the_targets_distribution(tmp_path):
    """A blurred cycle whose head is right often, not always: accepted and resampled drafts, the target's joint."""
    path = write_cycle_glm4moe_mtp(tmp_path / "blurred.gguf", margin=0.75, noise=0.1, head_noise=0.1, seed=4)
    sp = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    with Engine(path, None, OPTS) as eng:
        check = sampling_check(eng, "xyzA", sp, 1500, n_tokens=2, max_tokens=3, draft_max=3, adaptive=False)
    assert 0 < check.accepted < check.drafted
    assert check.pvalue > 1e-3

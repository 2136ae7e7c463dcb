"""A target with its own MTP head speculates with it when no drafter is named, through the same loop, losslessly."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import MtpDrafter
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_tiny_glm4moe_mtp, write_tiny_qwen35_mtp

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


def test_off_when_asked_and_where_the_cache_cannot_roll_back(glm, tmp_path):
    with Engine(glm, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, mtp=False)) as eng:
        assert eng.drafter is None and eng.model.n_layer_nextn == 1
    hybrid = write_tiny_qwen35_mtp(tmp_path / "qwen35.gguf", seed=3)
    with Engine(hybrid, None, OPTS) as eng:  # recurrent layers: a rejected draft cannot be dropped yet
        assert eng.drafter is None and eng.mtp_refusal
        assert eng.generate(PROMPTS[0], max_tokens=8, draft_max=3).stats.generated_tokens == 8


def test_a_family_without_an_mtp_graph_is_refused_before_llama_cpp_asserts(glm, monkeypatch):
    from local_eagle.llamacpp.model import Model
    from local_eagle.runtime.mtp import mtp_refusal

    monkeypatch.setattr(Model, "arch", lambda self: "llama")  # NextN layers in a family llama.cpp drafts none for
    with Engine(glm, None, OPTS) as eng:
        assert eng.drafter is None and "no MTP graph" in (eng.mtp_refusal or "")
        assert mtp_refusal(eng.model) == eng.mtp_refusal

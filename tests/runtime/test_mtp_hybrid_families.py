"""The other hybrid MTP families draft with their own head, losslessly: ``nemotron_h_moe`` (Mamba 2) and
``bailingmoe3`` (Kimi delta attention), on tiny generated models (``testing.tiny_mtp_hybrid``).

llama.cpp writes their recurrent-state snapshots by code of their own (``build_mamba2_layer``; bailingmoe3's short
convolutions and ``build_recurrent_attn``), so each is checked as ``test_mtp_hybrid`` checks qwen35: a partial removal
restores the state a fresh context reaches on the kept rows only, and the engine's output with the head drafting is
the target's alone. The random models reject almost every draft (every drafted row rolled back, every round); the
letter-cycle ones accept them but after C and J (rollbacks of some rows, not all).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LlamaError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import CHECKED_ROLLBACK_ARCHS, RS_ROLLBACK_ARCHS, MtpDrafter
from local_eagle.testing.greedy import logprob_gap
from local_eagle.testing.mtp_hybrid import BLURRED, CTX, OPTS, PROMPTS, TOL, check_sampling
from local_eagle.testing.tiny_mtp_hybrid import (
    CHECKPOINT_FAMILIES,
    HYBRID_FAMILIES,
    TinyHybridSpec,
    write_cycle_hybrid_mtp,
    write_hybrid_pair,
)


@pytest.fixture(scope="module", params=HYBRID_FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(random, cycle) tiny models of one family; the cycle's head names the letter two ahead after C and J."""
    return write_hybrid_pair(tmp_path_factory.mktemp(f"mtp-{request.param}"), request.param)


def test_every_family_is_checked() -> None:
    assert set(HYBRID_FAMILIES) <= CHECKED_ROLLBACK_ARCHS
    assert not set(CHECKPOINT_FAMILIES) & RS_ROLLBACK_ARCHS  # test_mtp_checkpoint


def test_snapshots_roll_the_recurrent_state_back(family: tuple[Path, Path]) -> None:
    """With ``n_rs_seq`` a partial removal of up to that many positions restores the family's recurrent state: the
    next logits equal a context that decoded the kept rows only; a state that kept a rejected row is far off."""
    model = Model(family[0], n_gpu_layers=0)
    snap = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 4}))
    ref = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 4}))
    try:
        assert snap.n_rs_seq == 4
        prompt = np.array([1, 5, 9, 13, 2])
        for ctx in (snap, ref):
            ctx.decode(prompt, np.arange(5), True)
        rng = np.random.default_rng(0)
        n_past, rolled, history = 5, 0, list(prompt)
        for _ in range(24):
            k = int(rng.integers(1, 5))
            rows = rng.integers(3, model.n_vocab, k + 1)
            snap.decode(rows, n_past + np.arange(k + 1), True)
            kept = int(rng.integers(0, k + 1))
            snap.remove_from(n_past + 1 + kept)
            rolled += k - kept
            ref.decode(rows[: kept + 1], n_past + np.arange(kept + 1), True)
            assert np.abs(snap.logits(kept, model.n_vocab) - ref.logits(kept, model.n_vocab)).max() < TOL
            history.extend(rows[: kept + 1])
            n_past += kept + 1
        assert rolled > 10
        snap.decode(np.array([7]), np.array([n_past]), True)
        ref.decode(np.array([7]), np.array([n_past]), True)
        after = snap.logits(0, model.n_vocab)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() < TOL
        ref.clear()
        dirty = np.array([*history, 11, 7])  # one rejected row left in the state
        for s in range(0, len(dirty), 32):
            ref.decode(dirty[s : s + 32], np.arange(s, min(s + 32, len(dirty))), False)
        last = len(dirty) - 1
        ref.remove_from(last)
        ref.decode(dirty[last:], np.array([last]), True)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() > 20 * TOL
        snap.decode(np.array([1, 2, 3, 4, 5, 6]), n_past + 1 + np.arange(6), True)
        with pytest.raises(LlamaError):
            snap.remove_from(n_past + 2)  # 5 positions: one more than the snapshots
    finally:
        for ctx in (snap, ref):
            ctx.close()
        model.close()


def test_drafts_with_its_head_losslessly(family: tuple[Path, Path]) -> None:
    with Engine(family[0], None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.mtp_refusal is None
        assert eng.ctx.n_rs_seq == eng.rollback_bound == OPTS.rollback
        assert "recurrent" in (eng.mtp_note or "")
        for prompt in PROMPTS:
            base = eng.generate(prompt, max_tokens=30, draft_max=0, logprobs=3)
            for k in (1, 2, 3, 4):
                res = eng.generate(prompt, max_tokens=30, draft_max=k, adaptive=False, logprobs=3)
                assert res.tokens == base.tokens, (prompt, k)
                assert res.stats.drafted_tokens > res.stats.accepted_tokens
                assert logprob_gap(res.logprobs, base.logprobs) < TOL
            assert eng.generate(prompt, max_tokens=30, draft_max=4, adaptive=True).tokens == base.tokens
    with Engine(family[0], None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, rollback=0)) as eng:
        assert eng.drafter is None and "rollback 0" in (eng.mtp_refusal or "")


def test_partial_acceptance_on_the_cycle(family: tuple[Path, Path]) -> None:
    with Engine(family[1], None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter)
        for prompt in ("xyzA", "DEF"):
            base = eng.generate(prompt, max_tokens=40, draft_max=0, logprobs=3)
            for k in (1, 2, 3, 4):
                res = eng.generate(prompt, max_tokens=40, draft_max=k, adaptive=False, logprobs=3)
                assert res.tokens == base.tokens, (prompt, k)
                st = res.stats
                assert 0 < st.accepted_tokens < st.drafted_tokens and st.acceptance_length > 1.5, (prompt, k)
                assert logprob_gap(res.logprobs, base.logprobs) < TOL


@pytest.mark.parametrize("arch", HYBRID_FAMILIES)
def test_sampling_keeps_the_targets_distribution(arch: str, tmp_path: Path) -> None:
    """Rejection sampling with every rejected draft's rows rolled back by the family's snapshots: on a blurred cycle
    (a small margin, a noisy head, a recurrent state the head does not see) drafts are kept and rejected, and the
    first three tokens follow the target alone's joint distribution (chi-square over 1200 seeds)."""
    check = check_sampling(write_cycle_hybrid_mtp(tmp_path / "blurred.gguf", TinyHybridSpec(arch), **BLURRED))
    assert 0 < check.accepted < check.drafted and check.pvalue > 1e-3, check

"""A hybrid target (qwen35 and qwen35moe: gated-delta-net layers beside attention) drafts with its own MTP head,
losslessly.

Its recurrent state cannot drop positions by itself; the target context keeps llama.cpp's per-token snapshots
(``n_rs_seq``) and a rejected draft's rows are rolled back to them (``runtime.mtp``, docs/mtp.md). The random tiny
qwen35 rejects almost every draft (rollback of every drafted row, every round); the letter-cycle one accepts them but
after C and J (rollbacks of some rows, not all).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import MtpDrafter, rollback_refusal
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.greedy import logprob_gap
from local_eagle.testing.mtp_hybrid import BLURRED, CTX, OPTS, PROMPTS, TOL, check_sampling
from local_eagle.testing.tiny_mtp import TinyQwen35Spec, write_cycle_qwen35_mtp, write_tiny_qwen35_mtp

SPECS = {"qwen35": TinyQwen35Spec(), "qwen35moe": TinyQwen35Spec(n_expert=4)}  # Qwen3.5 / 3.6, dense and MoE


@pytest.fixture(scope="module", params=sorted(SPECS))
def hybrid(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SPECS[request.param]
    return write_tiny_qwen35_mtp(tmp_path_factory.mktemp("mtp-hybrid") / f"{spec.arch}.gguf", spec, seed=3)


@pytest.fixture(scope="module", params=sorted(SPECS))
def cycle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The letter cycle on a qwen35 whose head names the letter two ahead after C and J: partial acceptance."""
    spec = SPECS[request.param]
    return write_cycle_qwen35_mtp(tmp_path_factory.mktemp("mtp-hybrid-cycle") / f"{spec.arch}.gguf", spec,
                                  head_misses="CJ")  # fmt: skip


def test_snapshots_roll_the_recurrent_state_back(hybrid: Path) -> None:
    """llama.cpp's facts the engine relies on: with ``n_rs_seq`` a partial ``seq_rm`` of up to that many trailing
    positions restores the recurrent state exactly; without, or further, or twice before a decode, it is refused."""
    model = Model(hybrid, n_gpu_layers=0)
    snap = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 3}))
    ref = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 3}))
    plain = Context(model, CTX)
    try:
        assert (snap.n_rs_seq, plain.n_rs_seq) == (3, 0)
        prompt = np.array([1, 5, 9, 13, 2])
        for ctx in (snap, ref, plain):
            ctx.decode(prompt, np.arange(5), True)
        plain.decode(np.array([4, 5]), np.array([5, 6]), True)
        with pytest.raises(LlamaError):
            plain.remove_from(6)  # a recurrent state without snapshots cannot drop its last position
        rng = np.random.default_rng(0)
        n_past, rolled = 5, 0
        history = list(prompt)
        for _ in range(24):
            k = int(rng.integers(1, 4))
            rows = rng.integers(3, model.n_vocab, k + 1)
            snap.decode(rows, n_past + np.arange(k + 1), True)
            kept = int(rng.integers(0, k + 1))  # drafts accepted by fiat
            snap.remove_from(n_past + 1 + kept)
            rolled += k - kept
            assert snap.pos_max() == n_past + kept
            ref.decode(rows[: kept + 1], n_past + np.arange(kept + 1), True)  # the kept rows only
            gap = np.abs(snap.logits(kept, model.n_vocab) - ref.logits(kept, model.n_vocab)).max()
            assert gap < TOL
            history.extend(rows[: kept + 1])
            n_past += kept + 1
        assert rolled > 10
        snap.decode(np.array([7]), np.array([n_past]), True)
        ref.decode(np.array([7]), np.array([n_past]), True)
        after = snap.logits(0, model.n_vocab)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() < TOL
        # a state that had kept one rejected row would be far off: the comparison above can tell
        ref.clear()
        dirty = np.array([*history, 11, 7])
        for s in range(0, len(dirty), 32):
            ref.decode(dirty[s : s + 32], np.arange(s, min(s + 32, len(dirty))), False)
        last = len(dirty) - 1
        ref.remove_from(last)  # the last row again, now with its logits (one position: below the snapshots)
        ref.decode(dirty[last:], np.array([last]), True)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() > 20 * TOL
        # at most n_rs_seq positions, once per decode
        snap.decode(np.array([1, 2, 3, 4]), n_past + 1 + np.arange(4), True)
        with pytest.raises(LlamaError):
            snap.remove_from(n_past + 1)  # 4 positions: one more than the snapshots
        snap.remove_from(n_past + 3)
        with pytest.raises(LlamaError):
            snap.remove_from(n_past + 2)  # the pending rollback is single-use
    finally:
        for ctx in (snap, ref, plain):
            ctx.close()
        model.close()


def test_a_hybrid_target_drafts_with_its_head_losslessly(hybrid: Path) -> None:
    with Engine(hybrid, None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.mtp_refusal is None
        assert eng.ctx.n_rs_seq == eng.rollback_bound == OPTS.rollback
        assert eng.drafter.ctx.n_rs_seq == 0  # the head's own cache is plain attention
        assert "recurrent" in (eng.mtp_note or "") and "n_rs_seq=8" in (eng.mtp_note or "")
        for prompt in PROMPTS:
            base = eng.generate(prompt, max_tokens=30, draft_max=0, logprobs=3)
            for k in (1, 2, 3):
                res = eng.generate(prompt, max_tokens=30, draft_max=k, adaptive=False, logprobs=3)
                assert res.tokens == base.tokens, (prompt, k)
                assert res.stats.drafted_tokens > res.stats.accepted_tokens  # rejections, rolled back
                assert logprob_gap(res.logprobs, base.logprobs) < TOL  # the target's state is its own
            assert eng.generate(prompt, max_tokens=30, draft_max=3, adaptive=True).tokens == base.tokens
        sp = SamplingParams(temperature=0.8, top_k=5, seed=7)
        assert eng.generate(PROMPTS[0], max_tokens=20, draft_max=3, adaptive=False, sampling=sp).stats.drafted_tokens


def test_chains_are_capped_at_the_snapshots(hybrid: Path) -> None:
    with Engine(hybrid, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, rollback=2)) as eng:
        base = eng.generate(PROMPTS[2], max_tokens=24, draft_max=0)
        res = eng.generate(PROMPTS[2], max_tokens=24, draft_max=6, adaptive=False)
        assert res.tokens == base.tokens
        assert res.spec_stats is not None and max(res.spec_stats.trace_drafted) == 2
        assert "at most 2 drafts" in (eng.mtp_note or "")
    with Engine(hybrid, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, rollback=0)) as eng:
        assert eng.drafter is None and "rollback 0" in (eng.mtp_refusal or "")


def test_partial_acceptance_on_the_cycle(cycle: Path) -> None:
    with Engine(cycle, None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter)
        for prompt in ("xyzA", "hello", "DEF"):
            base = eng.generate(prompt, max_tokens=40, draft_max=0, logprobs=3)
            for k in (1, 2, 3):
                res = eng.generate(prompt, max_tokens=40, draft_max=k, adaptive=False, logprobs=3)
                assert res.tokens == base.tokens, (prompt, k)
                st = res.stats
                assert 0 < st.accepted_tokens < st.drafted_tokens and st.acceptance_length > 1.5, (prompt, k)
                assert logprob_gap(res.logprobs, base.logprobs) < TOL


@pytest.mark.parametrize("name", sorted(SPECS))
def test_sampling_keeps_the_targets_distribution(name: str, tmp_path: Path) -> None:
    """Rejection sampling with every rejected draft's rows rolled back by the snapshots: on a blurred cycle (a small
    margin, noisy heads, a recurrent state the head does not see) drafts are kept and rejected, and the first three
    tokens follow the target alone's joint distribution (chi-square over 1200 seeds, as the attention families')."""
    path = write_cycle_qwen35_mtp(tmp_path / "blurred.gguf", SPECS[name], head_noise=0.1, **BLURRED)
    check = check_sampling(path)
    assert 0 < check.accepted < check.drafted and check.pvalue > 1e-3, check


def test_families_still_refused(hybrid: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hybrid families whose snapshots llama.cpp does not keep (and no checkpoint rollback here was checked on), or
    whose snapshot code nothing here has checked."""
    with Engine(hybrid, None, OPTS) as eng:
        for arch, why in (("falcon-h1", "keeps no recurrent-state snapshots"), ("kimi-k3", "not checked")):
            monkeypatch.setattr(Model, "arch", lambda self, a=arch: a)
            assert why in (rollback_refusal(eng.model, 8) or "")
        monkeypatch.undo()
        assert rollback_refusal(eng.model, 8) is None
    with pytest.raises(LocalEagleError, match="cannot hold 2 sequences"):
        Engine(hybrid, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, parallel=2))


def test_verbose_says_how_the_state_rolls_back(hybrid: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from local_eagle.cli.loading import note_mtp

    with Engine(hybrid, None, OPTS) as eng:
        note_mtp(eng, verbose=False)
        assert capsys.readouterr().err == ""
        note_mtp(eng, verbose=True)
        said = " ".join(capsys.readouterr().err.split())
        assert "own MTP (NextN) head" in said and "recurrent" in said and "snapshots (n_rs_seq=8)" in said
    with Engine(hybrid, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, rollback=0)) as eng:
        note_mtp(eng, verbose=True)
        assert "does not draft" in " ".join(capsys.readouterr().err.split())

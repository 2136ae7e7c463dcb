"""A hybrid target llama.cpp keeps no recurrent-state snapshots for (``qwen3next``) drafts with its own head, its
rounds rolled back by checkpoints as ``speculative-simple`` does (``use_ckpt_tgt``): the recurrent state saved before
each verify with a draft, restored on a partial acceptance, the kept rows decoded again.

On the tiny ``qwen3next`` of ``testing.tiny_mtp_hybrid``: the restore is exact (the next logits those of a context
that decoded the kept rows only), and the engine's output with the head drafting is the target's alone, on the random
model (every draft rejected) and on its letter cycle (some kept, some not).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.llamacpp.lib import C
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime import mtp as runtime_mtp
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import MtpDrafter
from local_eagle.runtime.rounds import Generation
from local_eagle.testing.greedy import logprob_gap
from local_eagle.testing.mtp_hybrid import BLURRED, CTX, OPTS, PROMPTS, TOL, check_sampling
from local_eagle.testing.tiny_mtp_hybrid import (
    CHECKPOINT_FAMILIES,
    TinyHybridSpec,
    write_cycle_hybrid_mtp,
    write_hybrid_pair,
)
from local_eagle.units import GiB
from local_eagle.vram import read_shape, shapes
from local_eagle.vram.memory import rs_snapshots
from local_eagle.vram.settings import MemoryConfig


@pytest.fixture(scope="module", params=CHECKPOINT_FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(random, cycle) tiny models; the cycle's head names the letter two ahead after C and J."""
    return write_hybrid_pair(tmp_path_factory.mktemp(f"mtp-ckpt-{request.param}"), request.param)


class _Replays:
    """Counts the rounds rolled back by a checkpoint (``Generation.replay``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        replay = Generation.replay

        def counted(gen: Generation, last_token: int, kept: list[int]) -> None:
            self.n += 1
            replay(gen, last_token, kept)

        monkeypatch.setattr(Generation, "replay", counted)


def test_the_planner_mirrors_the_runtime(family: tuple[Path, Path]) -> None:
    assert shapes.CHECKPOINT_ROLLBACK_ARCHS == runtime_mtp.CHECKPOINT_ROLLBACK_ARCHS
    assert not runtime_mtp.CHECKPOINT_ROLLBACK_ARCHS & runtime_mtp.RS_ROLLBACK_ARCHS
    shape = read_shape(family[0])
    assert shapes.mtp_refusal(shape, 8) is None
    assert rs_snapshots(shape, MemoryConfig(draft_max=4, mtp=True)) == 0  # llama.cpp grants none: one host copy instead


def test_a_checkpoint_rolls_the_recurrent_state_back(family: tuple[Path, Path]) -> None:
    """No snapshots (``n_rs_seq`` clamped to 0, a partial removal refused); a checkpoint saved before a verify,
    restored and the kept rows decoded again gives the next logits of a context that decoded the kept rows only,
    while a state that kept one rejected row is far off. The checkpoint holds the recurrent part alone."""
    model = Model(family[0], n_gpu_layers=0)
    snap = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 4}))
    ref = Context(model, CTX)
    try:
        assert snap.n_rs_seq == 0
        prompt = np.array([1, 5, 9, 13, 2])
        for ctx in (snap, ref):
            ctx.decode(prompt, np.arange(5), True)
        full = int(C.llama_state_seq_get_size_ext(snap.ptr, 0, 0))
        assert len(snap.checkpoint()) < full  # PARTIAL_ONLY: the attention cells are not in it
        snap.decode(np.array([7, 8]), np.array([5, 6]), True)
        with pytest.raises(LlamaError):
            snap.remove_from(6)  # no snapshot to roll back to
        snap.clear()
        snap.decode(prompt, np.arange(5), True)
        rng = np.random.default_rng(0)
        n_past, rolled, history = 5, 0, list(prompt)
        for _ in range(24):
            k = int(rng.integers(1, 5))
            rows = rng.integers(3, model.n_vocab, k + 1)
            saved = snap.checkpoint()
            snap.decode(rows, n_past + np.arange(k + 1), True)
            kept = int(rng.integers(0, k + 1))
            verified = snap.logits(kept, model.n_vocab)
            if kept < k:
                snap.restore(saved)
                snap.remove_from(n_past)
                snap.decode(rows[: kept + 1], n_past + np.arange(kept + 1), False)
                rolled += k - kept
            assert snap.pos_max() == n_past + kept
            ref.decode(rows[: kept + 1], n_past + np.arange(kept + 1), True)
            assert np.abs(verified - ref.logits(kept, model.n_vocab)).max() < TOL
            history.extend(rows[: kept + 1])
            n_past += kept + 1
        assert rolled > 10
        snap.decode(np.array([7]), np.array([n_past]), True)
        ref.decode(np.array([7]), np.array([n_past]), True)
        after = snap.logits(0, model.n_vocab)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() < 1e-4
        ref.clear()
        dirty = np.array([*history, 11, 7])  # one rejected row left in the state
        for s in range(0, len(dirty), 32):
            e = min(s + 32, len(dirty))
            ref.decode(dirty[s:e], np.arange(s, e), e == len(dirty))
        assert np.abs(after - ref.logits(len(dirty) - 1 - (len(dirty) - 1) // 32 * 32, model.n_vocab)).max() > 20 * TOL
    finally:
        for ctx in (snap, ref):
            ctx.close()
        model.close()


def test_drafts_with_its_head_losslessly(family: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The head drafts by default; every draft of the random head is rejected and rolled back by a checkpoint, and
    the output and log-probabilities are the target's alone (the head turned off, and ``draft_max`` 0). The kept
    rows ride with the next verify until more than ``draft_max + 1`` wait, then take a call of their own."""
    with Engine(family[0], None, replace_opts(mtp=False)) as off:
        bases = [off.generate(prompt, max_tokens=30, draft_max=0, logprobs=3) for prompt in PROMPTS]
    replays = _Replays(monkeypatch)
    with Engine(family[0], None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.mtp_refusal is None
        assert eng.checkpoints and eng.rollback_bound is None and eng.ctx.n_rs_seq == 0
        note = eng.mtp_note or ""
        assert "checkpoint" in note and "decodes the kept rows again" in note and "next round's verify" in note
        for prompt, base in zip(PROMPTS, bases, strict=True):
            assert eng.generate(prompt, max_tokens=30, draft_max=0, logprobs=3).tokens == base.tokens
            for k in (1, 2, 3, 4):
                before, calls = replays.n, eng.ctx.n_calls
                res = eng.generate(prompt, max_tokens=30, draft_max=k, adaptive=False, logprobs=3)
                assert res.tokens == base.tokens, (prompt, k)
                assert res.stats.drafted_tokens > res.stats.accepted_tokens and replays.n > before
                own = eng.ctx.n_calls - calls - 1 - res.stats.target_calls  # the prompt's call, the verifies
                assert 0 < own <= (replays.n - before) // (k + 1), (prompt, k, own)
                assert logprob_gap(res.logprobs, base.logprobs) < TOL
            assert eng.generate(prompt, max_tokens=30, draft_max=4, adaptive=True).tokens == base.tokens


def replace_opts(**kw: object) -> EngineOptions:
    return EngineOptions(**{**OPTS.__dict__, **kw})


def test_partial_acceptance_on_the_cycle(family: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds that keep some drafts and reject others: restored and replayed, the output still the target's; the
    kept rows ride with the next verify, so the target calls are the verifies alone."""
    replays = _Replays(monkeypatch)
    with Engine(family[1], None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.checkpoints
        for prompt in ("xyzA", "DEF"):
            base = eng.generate(prompt, max_tokens=40, draft_max=0, logprobs=3)
            for k in (1, 2, 3, 4):
                before, calls = replays.n, eng.ctx.n_calls
                res = eng.generate(prompt, max_tokens=40, draft_max=k, adaptive=False, logprobs=3)
                assert res.tokens == base.tokens, (prompt, k)
                st = res.stats
                assert 0 < st.accepted_tokens < st.drafted_tokens and st.acceptance_length > 1.5, (prompt, k)
                assert replays.n > before
                calls = eng.ctx.n_calls - calls - 1  # the prompt's one call
                assert calls == st.target_calls, (prompt, k)  # no rejecting rounds in a row here
                assert len(res.tokens) / calls > 1.5, (prompt, k, calls)
                assert logprob_gap(res.logprobs, base.logprobs) < TOL


def test_chains_only(family: tuple[Path, Path]) -> None:
    """One state per sequence, one checkpoint per round: no trees (chains instead), no parallel sequences."""
    with pytest.raises(LocalEagleError, match="cannot hold 2 sequences"):
        Engine(family[0], None, replace_opts(parallel=2))
    with Engine(family[0], None, replace_opts(tree_nodes=4)) as eng:
        assert eng.checkpoints and not eng.trees and eng.tree_refusal
        base = eng.generate(PROMPTS[0], max_tokens=20, draft_max=0).tokens
        assert eng.generate(PROMPTS[0], max_tokens=20, draft_max=3, adaptive=True).tokens == base


@pytest.mark.parametrize("case", [(512, 512, True, 8), (2048, 64, False, 1)])
def test_fit_prices_the_head_without_snapshots(family: tuple[Path, Path], case: tuple[int, int, bool, int]) -> None:
    """``fit`` prices the head (its weights, KV) and one recurrent state, no snapshots, as llama.cpp allocates them,
    and says the rollback is by checkpoint."""
    from local_eagle import vram
    from local_eagle.vram.measure import measure
    from local_eagle.vram.report import measure_rows, predict_for_backend

    ctx, ub, fa, bound = case
    shape = read_shape(family[0])
    s = MemoryConfig(n_ctx=ctx, n_ubatch=ub, flash_attn=fa, n_gpu_layers=0, mtp=True, draft_max=bound)
    m = measure(family[0], s)
    assert m.n_rs_seq == rs_snapshots(shape, s) == 0
    rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
    for label in ("target weights", "target KV cache", "target recurrent state", "MTP head weights", "MTP KV cache"):
        assert rows[label].predicted == rows[label].measured > 0, (label, rows[label])
    budget = vram.GPUBudget("test", 8 * GiB, 8 * GiB, "manual", 0)
    notes = vram.make_plan(shape, None, s, budget).notes
    assert any("roll back by a checkpoint" in n for n in notes) and not any("n_rs_seq" in n for n in notes)


@pytest.mark.parametrize("arch", CHECKPOINT_FAMILIES)
def test_sampling_keeps_the_targets_distribution(arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rejection sampling with every partial acceptance restored from a checkpoint: on a blurred cycle (a small
    margin, a noisy head, a recurrent state the head does not see) drafts are kept and rejected, and the first three
    tokens follow the target alone's joint distribution (chi-square over 1200 seeds, as the attention families')."""
    replays = _Replays(monkeypatch)
    check = check_sampling(write_cycle_hybrid_mtp(tmp_path / "blurred.gguf", TinyHybridSpec(arch), **BLURRED))
    assert 0 < check.accepted < check.drafted and replays.n > 0 and check.pvalue > 1e-3, (check, replays.n)

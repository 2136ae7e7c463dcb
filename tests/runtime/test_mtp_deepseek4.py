"""deepseek4 (DeepSeek V4) drafts with its own MTP head, losslessly, on tiny generated models
(``testing.tiny_mtp_dsv4``).

Its blocks compress the KV stream by 4 (with the lightning indexer) and by 128, each compressor keeping a running
state per sequence that the DSV4 cache snapshots for rollback (``n_rs_seq``); the runs below go past position 128,
so the 128-fold compressor emits a block too. The head reads the target's 4 hyper-connection streams
(``runtime.mtp.state_width``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.identity import NEAR_TIE, check_identity
from local_eagle.runtime.mtp import MtpDrafter, state_width
from local_eagle.runtime.rounds import GenerationResult
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.chisquare import sampling_check
from local_eagle.testing.greedy import logprob_gap
from local_eagle.testing.tiny_mtp_dsv4 import TinyDsv4Spec, write_tiny_deepseek4_mtp

OPTS = EngineOptions(n_ctx=512, n_batch=32, n_threads=1)
PROMPTS = [np.array(p, dtype=np.int32) for p in ([1, 5, 9, 13, 2], [3, 3, 3], [7, 1, 30, 12, 8, 4, 4])]
CTX = ContextOptions(n_ctx=512, n_batch=32, n_ubatch=32, n_threads=1)
TOL = 2e-2  # the same rows decoded in batches of 3 against one by one differ by up to 1.3e-2 in these logits


@pytest.fixture(scope="module")
def dsv4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_deepseek4_mtp(tmp_path_factory.mktemp("mtp-dsv4") / "deepseek4.gguf", seed=3)


@pytest.fixture(scope="module")
def dsv4_all(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The indexer keeps every compressed block: with 8 of them, a verify batch's float noise can flip which it keeps
    near a tie (a log-probability then moves by ~1 while the greedy tokens stay the same), which says nothing of the
    rollback; the snapshot test above runs the selecting indexer."""
    spec = TinyDsv4Spec(indexer_top_k=64)
    return write_tiny_deepseek4_mtp(tmp_path_factory.mktemp("mtp-dsv4-all") / "deepseek4.gguf", spec, seed=3)


def test_snapshots_roll_the_compressor_state_back(dsv4: Path) -> None:
    """A partial removal of up to ``n_rs_seq`` positions restores the compressors' state, past both ratios'
    boundaries: the next logits equal a context that decoded the kept rows only; a kept rejected row is far off."""
    model = Model(dsv4, n_gpu_layers=0)
    snap = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 3}))
    ref = Context(model, ContextOptions(**{**CTX.__dict__, "n_rs_seq": 3}))
    try:
        assert snap.n_rs_seq == 3 and model.branching_refusal() is not None
        prompt = np.array([1, 5, 9, 13, 2])
        for ctx in (snap, ref):
            ctx.decode(prompt, np.arange(5), True)
        rng = np.random.default_rng(0)
        n_past, rolled, history = 5, 0, list(prompt)
        while n_past < 160:
            k = int(rng.integers(1, 4))
            rows = rng.integers(3, model.n_vocab, k + 1)
            snap.decode(rows, n_past + np.arange(k + 1), True)
            kept = int(rng.integers(0, k + 1))
            snap.remove_from(n_past + 1 + kept)
            rolled += k - kept
            ref.decode(rows[: kept + 1], n_past + np.arange(kept + 1), True)
            assert np.abs(snap.logits(kept, model.n_vocab) - ref.logits(kept, model.n_vocab)).max() < TOL, n_past
            history.extend(rows[: kept + 1])
            n_past += kept + 1
        assert rolled > 50
        snap.decode(np.array([7]), np.array([n_past]), True)
        ref.decode(np.array([7]), np.array([n_past]), True)
        after = snap.logits(0, model.n_vocab)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() < TOL
        ref.clear()
        dirty = np.array([*history, 11, 7])  # one rejected row left in
        for s in range(0, len(dirty), 32):
            ref.decode(dirty[s : s + 32], np.arange(s, min(s + 32, len(dirty))), False)
        last = len(dirty) - 1
        ref.remove_from(last)
        ref.decode(dirty[last:], np.array([last]), True)
        assert np.abs(after - ref.logits(0, model.n_vocab)).max() > 20 * TOL
    finally:
        for ctx in (snap, ref):
            ctx.close()
        model.close()


def _same_or_near_tie(eng: Engine, prompt: np.ndarray, base: GenerationResult, res: GenerationResult) -> bool:
    """True where the tokens are the target alone's; else the first difference must be a near-tie (its top two
    logits within the float noise of a verify batch, replayed both ways: ``runtime.identity``), and False."""
    if res.tokens == base.tokens:
        return True
    check = check_identity(eng, prompt, base, res)
    assert check.verdict == NEAR_TIE, check
    return False


def test_drafts_with_its_head_losslessly(dsv4: Path, dsv4_all: Path) -> None:
    """Greedy output the target alone's at draft_max 1-4 over 150 tokens, every rejected draft rolled back, and the
    target's log-probabilities (top 3) its own. On the CPU a DSV4 verify batch does not give a single row's logits
    bit for bit (batches of 3 against single rows: up to 1.3e-2), so a top two within that of each other may part
    the runs: there the difference must be a near-tie."""
    with Engine(dsv4, None, OPTS) as eng:
        base = eng.generate(PROMPTS[1], max_tokens=150, draft_max=0)
        for k in (1, 3):
            res = eng.generate(PROMPTS[1], max_tokens=150, draft_max=k, adaptive=False)
            assert _same_or_near_tie(eng, PROMPTS[1], base, res)
    with Engine(dsv4_all, None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.mtp_refusal is None
        assert eng.ctx.n_rs_seq == eng.rollback_bound == OPTS.rollback
        assert eng.drafter.n_embd == state_width(eng.model) == 4 * eng.model.n_embd
        accepted = identical = 0
        for prompt in PROMPTS:
            base = eng.generate(prompt, max_tokens=150, draft_max=0, logprobs=3)
            for k in (1, 2, 3, 4):
                res = eng.generate(prompt, max_tokens=150, draft_max=k, adaptive=False, logprobs=3)
                assert res.stats.drafted_tokens > res.stats.accepted_tokens
                accepted += res.stats.accepted_tokens
                if _same_or_near_tie(eng, prompt, base, res):
                    identical += 1
                    assert logprob_gap(res.logprobs, base.logprobs, same_alternatives=False) < TOL
        assert identical >= 8 and accepted > 0  # some rounds kept a draft and rolled the rest back


def test_sampling_keeps_the_targets_distribution(dsv4_all: Path) -> None:
    """Rejection sampling with every rejected draft's rows rolled back by the compressors' snapshots. deepseek4 has
    no letter cycle, so the random head's drafts are kept rarely (a few in 1200 generations) and rejected in nearly
    every round; the first three tokens follow the target alone's joint distribution (chi-square over 1200 seeds). A
    verify batch's logits differ from single rows' by up to 1.3e-2 on the CPU, far below what 1200 draws resolve."""
    sp = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    with Engine(dsv4_all, None, OPTS) as eng:
        check = sampling_check(eng, "xyzA", sp, 1200, max_tokens=4, draft_max=3, adaptive=False)
    assert 0 < check.accepted < check.drafted and check.pvalue > 1e-3, check

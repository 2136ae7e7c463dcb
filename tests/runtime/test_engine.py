"""The draft-verify loop on llama.cpp: lossless against the target alone, accept path, rollback, stops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from converters import convert, write_checkpoint
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import (
    STOP_CANCELLED,
    STOP_CONTEXT,
    STOP_EOS,
    STOP_LENGTH,
    STOP_STRING,
    Engine,
    EngineOptions,
    GenerationResult,
)
from local_eagle.runtime.feed import IDLE_CONTEXT, PROBE_CONTEXT
from local_eagle.runtime.identity import DIVERGENT, IDENTICAL, KERNEL_NOISE, NEAR_TIE, check_identity, classify
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.costs import FrozenCosts, deciding_on
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.tiny import make_drafter, write_tiny_target
from local_eagle.testing.tiny_pair import LAYERS, N_VOCAB, SPEC, make_cycle_drafter, write_cycle_target

OPTS = EngineOptions(n_ctx=512, n_batch=64, n_threads=1)


def _drafter_gguf(model, target: Path, out: Path) -> Path:
    ckpt = write_checkpoint(model.state_dict(), model.cfg.to_dict(), out.with_suffix(".ckpt"))
    return convert(ckpt, target, out, outtype="f32").outfile


@pytest.fixture(scope="session")
def pairs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("pairs")
    random_target = write_tiny_target(d / "random-target.gguf", SPEC, seed=5)
    cycle = write_cycle_target(d / "cycle-target.gguf")
    noisy = write_cycle_target(d / "noisy-target.gguf", noise=0.35, seed=2)
    eos = write_cycle_target(d / "eos-target.gguf", eos_after="H")

    def rnd(e31: bool) -> object:
        return make_drafter(N_VOCAB, SPEC.n_embd, LAYERS, eagle31=e31, draft_vocab=128, seed=11)

    return {
        "random-3.1": (random_target, _drafter_gguf(rnd(True), random_target, d / "r31.gguf")),
        "random-3": (random_target, _drafter_gguf(rnd(False), random_target, d / "r3.gguf")),
        "cycle-3.1": (cycle, _drafter_gguf(make_cycle_drafter(True), cycle, d / "c31.gguf")),
        "cycle-3": (cycle, _drafter_gguf(make_cycle_drafter(False), cycle, d / "c3.gguf")),
        "noisy-3.1": (noisy, _drafter_gguf(make_cycle_drafter(True, noise=0.05, seed=3), noisy, d / "n31.gguf")),
        "noisy-3": (noisy, _drafter_gguf(make_cycle_drafter(False, noise=0.02, seed=4), noisy, d / "n3.gguf")),
        "eos": (eos, _drafter_gguf(make_cycle_drafter(True), eos, d / "e31.gguf")),
    }


_engines: dict[tuple[str, int], Engine] = {}


@pytest.fixture
def engine(pairs):
    def get(name: str, n_batch: int = OPTS.n_batch, n_ctx: int = OPTS.n_ctx) -> Engine:
        key = (name, n_batch, n_ctx)
        if key not in _engines:
            target, draft = pairs[name]
            _engines[key] = Engine(target, draft, EngineOptions(n_ctx=n_ctx, n_batch=n_batch, n_threads=1))
        return _engines[key]

    return get


def prompts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    alphabet = list("ABCDEFGHIJKLMNOP") + list("abcxyz ,.!?") + ["é", "ß", "→", "日本"]
    return ["".join(rng.choice(alphabet, size=rng.integers(1, 24))) for _ in range(n)]


@pytest.mark.parametrize("name", ["noisy-3.1", "noisy-3"])
def test_greedy_is_lossless_30_prompts(engine, name):
    eng = engine(name)
    settings = [(1, 0.0), (3, 0.0), (6, 0.0), (4, 0.5)]
    accepted = rejected = 0
    for prompt in prompts(30, seed=hash(name) % 1000):
        base = eng.generate(prompt, max_tokens=64, draft_max=0)
        assert base.stats.generated_tokens == 64
        for k, p_min in settings:
            spec = eng.generate(prompt, max_tokens=64, draft_max=k, draft_p_min=p_min)
            assert_greedy_identical(eng, prompt, base, spec, (prompt, k, p_min))
            accepted += spec.stats.accepted_tokens
            rejected += spec.stats.drafted_tokens - spec.stats.accepted_tokens
    # both paths of the loop were exercised
    assert accepted > 500 and rejected > 100, (accepted, rejected)


@pytest.mark.parametrize("name", ["random-3.1", "random-3", "cycle-3.1", "cycle-3"])
def test_greedy_is_lossless_other_pairs(engine, name):
    eng = engine(name)
    for prompt in prompts(8, seed=7):
        base = eng.generate(prompt, max_tokens=64, draft_max=0)
        for k in (1, 3, 6):
            assert_greedy_identical(eng, prompt, base, eng.generate(prompt, max_tokens=64, draft_max=k), (prompt, k))


@pytest.mark.parametrize("name", ["cycle-3.1", "cycle-3"])
def test_accept_path_acceptance_length(engine, name):
    eng = engine(name)
    res = eng.generate("hello", max_tokens=64, draft_max=4)
    st = res.stats
    assert st.acceptance_length > 2.0
    assert st.acceptance_length > 4.0  # the cycle drafter is right once inside the cycle
    assert min(st.acceptance_per_position) > 0.8
    assert st.target_calls < 20


def test_draft_p_min_stops_drafting(engine):
    eng = engine("random-3.1")
    free = eng.generate("abc", max_tokens=32, draft_max=4, draft_p_min=0.0)
    strict = eng.generate("abc", max_tokens=32, draft_max=4, draft_p_min=0.99)
    assert strict.tokens == free.tokens
    assert strict.stats.drafted_tokens < free.stats.drafted_tokens


def _fresh_last_logits(target: Path, tokens: np.ndarray) -> np.ndarray:
    """Logits of the last row after a fresh prefill of ``tokens`` in a new context."""
    fresh = Engine(target, None, OPTS)
    try:
        fresh.ctx.decode(tokens, np.arange(len(tokens)), np.arange(len(tokens)) == len(tokens) - 1)
        return fresh.ctx.logits(len(tokens) - 1, fresh.n_vocab).copy()
    finally:
        fresh.close()


@pytest.mark.parametrize("name", ["random-3.1", "noisy-3"])
def test_rollback_leaves_the_target_cache_as_a_fresh_prefill(engine, pairs, name):
    """After rejections and rollbacks the target's cache holds exactly the kept tokens.

    A 1-row decode and a many-row prefill run different CPU kernels (AVX2, AVX-512, AMX differ
    too), so they agree only to about 1e-3 of the logits' spread; a cache row left over from a
    rejected draft moves the logits by far more than that (the control below)."""
    eng = engine(name)
    for text in prompts(40, seed=9):
        res = eng.generate(text, max_tokens=40, draft_max=6)
        st = res.stats
        if st.drafted_tokens > st.accepted_tokens and (st.accepted_tokens > 0 or name.startswith("random")):
            break  # rejections to roll back (after partial accepts where the drafter can get some right)
    else:
        pytest.fail("no prompt produced rejections")
    kept = np.concatenate([eng.tokenize(text), np.array(res.tokens[:-1], dtype=np.int32)])
    n_kept = len(kept)
    assert eng.ctx.pos_max() == n_kept - 1
    eng.ctx.decode(np.array([res.tokens[-1]]), np.array([n_kept]), True)
    after_loop = eng.ctx.logits(0, eng.n_vocab)
    everything = np.concatenate([kept, np.array([res.tokens[-1]], dtype=np.int32)])
    target = pairs[name][0]
    reference = _fresh_last_logits(target, everything)
    tolerance = 2e-3 * float(reference.max() - reference.min())
    assert np.abs(after_loop - reference).max() <= tolerance
    if name.startswith("random"):  # the cycle targets read only the last token, so a stale row cannot show
        stale = everything.copy()
        stale[-3] = (stale[-3] + 7) % eng.n_vocab  # a rejected draft kept in place of an accepted token
        assert np.abs(_fresh_last_logits(target, stale) - reference).max() > 10 * tolerance


def test_stop_string_is_not_emitted(engine):
    eng = engine("cycle-3.1")
    for k in (0, 4):
        res = eng.generate("hi", max_tokens=64, draft_max=k, stop=["FG"])
        assert res.text == "PABCDE"
        assert res.stats.stop_reason == STOP_STRING


def test_stream_pieces_add_up_and_hold_back_stop_prefixes(engine):
    eng = engine("cycle-3.1")
    s = eng.stream("hi", max_tokens=64, draft_max=4, stop=["KLX"])
    pieces = list(s)
    assert "".join(pieces) == s.result.text
    assert s.result.stats.stop_reason == STOP_LENGTH
    assert len(s.result.tokens) == 64


def test_max_tokens(engine):
    eng = engine("cycle-3.1")
    for n in (1, 2, 5, 17):
        res = eng.generate("hi", max_tokens=n, draft_max=6)
        assert len(res.tokens) == n and res.stats.stop_reason == STOP_LENGTH


def test_eos_stops_without_emitting(engine):
    eng = engine("eos")
    for k in (0, 4):
        res = eng.generate("hi", max_tokens=64, draft_max=k)
        assert res.text == "PABCDEFGH"
        assert res.stats.stop_reason == STOP_EOS


def test_context_full_is_a_stop_reason(engine):
    eng = engine("cycle-3.1", n_ctx=64)
    base = eng.generate("hello", max_tokens=500, draft_max=0)
    spec = eng.generate("hello", max_tokens=500, draft_max=6)
    assert base.stats.stop_reason == spec.stats.stop_reason == STOP_CONTEXT
    assert spec.tokens == base.tokens
    assert len(base.tokens) + len(eng.tokenize("hello")) == eng.n_ctx + 1


def test_prompt_longer_than_the_context_is_a_clear_error(engine):
    eng = engine("cycle-3.1", n_ctx=64)
    with pytest.raises(LocalEagleError, match="more than the context"):
        eng.generate("x" * (eng.n_ctx + 10), max_tokens=4)


def test_prompt_longer_than_one_ubatch(engine):
    small = engine("noisy-3.1", n_batch=16)
    big = engine("noisy-3.1", n_batch=256)
    prompt = "".join(prompts(10, seed=3))[:150]
    assert len(small.tokenize(prompt)) > 3 * 16
    want = big.generate(prompt, max_tokens=48, draft_max=0).tokens
    a = small.generate(prompt, max_tokens=48, draft_max=4)
    b = big.generate(prompt, max_tokens=48, draft_max=4)
    assert a.tokens == want and b.tokens == want
    # the drafter saw the same prefill features whatever the chunking
    assert a.stats.accepted_per_position == b.stats.accepted_per_position


def test_a_cancelled_prefill_stops_between_chunks(engine):
    eng = engine("cycle-3.1", n_batch=16)
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 2  # after two chunks

    s = eng.stream("x" * 100, max_tokens=8, cancelled=cancelled)
    assert list(s) == [] and s.result.text == "" and s.result.stats.stop_reason == STOP_CANCELLED
    assert len(asked) == 3
    assert eng.generate("hi", max_tokens=4, draft_max=4, cancelled=lambda: False).text == "PABC"  # unharmed


def test_sampling_with_seed_is_reproducible(engine):
    eng = engine("noisy-3.1")
    sp = SamplingParams(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0, seed=42)
    a = eng.generate("hi", max_tokens=32, sampling=sp, draft_max=4)
    b = eng.generate("hi", max_tokens=32, sampling=sp, draft_max=4)
    assert a.tokens == b.tokens


def test_no_drafter_is_plain_decoding(pairs):
    target, _ = pairs["cycle-3.1"]
    with Engine(target, None, OPTS) as eng:
        res = eng.generate("hi", max_tokens=20, draft_max=4)
    assert res.text == "PABCDEFGHIJKLMNOPABC"
    assert res.stats.target_calls == 19 and res.stats.drafted_tokens == 0


def test_gemma3_target_through_the_callback_capture(tmp_path):
    """An architecture without native capture runs the loop losslessly (eval-callback features)."""
    from local_eagle.testing.tiny import TinyGemma3Spec, write_tiny_gemma3_target

    spec = TinyGemma3Spec()
    target = write_tiny_gemma3_target(tmp_path / "gemma3.gguf", spec)
    model = make_drafter(N_VOCAB, spec.n_embd, [2, 4, 5], eagle31=True, draft_vocab=100, seed=2)
    draft = _drafter_gguf(model, target, tmp_path / "d.gguf")
    with Engine(target, draft, EngineOptions(n_ctx=256, n_batch=16, n_threads=1)) as eng:
        assert eng.capture.mode == "callback"
        for prompt in prompts(4, seed=1):
            base = eng.generate(prompt, max_tokens=40, draft_max=0)
            for k in (1, 4):
                assert eng.generate(prompt, max_tokens=40, draft_max=k).tokens == base.tokens


def test_repeat_penalty_is_applied_identically(engine):
    """The penalty sees the same history in drafting and verifying as it would decoding alone."""
    eng = engine("noisy-3.1")
    sp = SamplingParams(temperature=0.0, repeat_penalty=1.5, repeat_last_n=16)
    changed = False
    for prompt in prompts(6, seed=21):
        base = eng.generate(prompt, max_tokens=48, sampling=sp, draft_max=0)
        changed |= base.tokens != eng.generate(prompt, max_tokens=48, draft_max=0).tokens
        for k in (2, 5):
            assert eng.generate(prompt, max_tokens=48, sampling=sp, draft_max=k).tokens == base.tokens
    assert changed  # the penalty does change the greedy output here


def test_thread_counts_are_clamped_to_the_cores(pairs):
    """100000 threads once crashed llama.cpp; more threads than cores never helps."""
    import os

    from local_eagle.llamacpp.model import usable_threads

    cores = os.cpu_count() or 1
    assert usable_threads(0) == cores and usable_threads(10**5) == cores and usable_threads(1) == 1
    eng = Engine(pairs["random-3.1"][0], None, EngineOptions(n_ctx=64, n_batch=16, n_threads=100000))
    try:
        assert len(eng.generate("ab", max_tokens=2).tokens) == 2
    finally:
        eng.close()


def test_drafts_never_outgrow_the_batch(engine):
    """verify decodes the last token and the drafts as one batch: a draft limit of n_batch or more is cut to fit."""
    eng = engine("cycle-3.1", n_batch=4)
    base = eng.generate("hello", max_tokens=40, draft_max=0)
    spec = eng.generate("hello", max_tokens=40, draft_max=8)
    assert spec.tokens == base.tokens
    assert spec.stats.acceptance_length > 3.0 and len(spec.stats.acceptance_per_position) == 8


# --- the adaptive path -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["noisy-3.1", "noisy-3", "random-3.1", "cycle-3.1", "cycle-3"])
def test_adaptive_greedy_is_lossless(engine, name):
    """Idle rounds, probes, windowed catch-ups and deep chains: exactly the target's tokens, every time.

    On these f32 models with one thread a verify batch computes a row bit for bit as a 1-row decode,
    so no near-tie can excuse a difference here."""
    eng = engine(name)
    drafted = catch_ups = 0
    for prompt in prompts(12, seed=31):
        base = eng.generate(prompt, max_tokens=64, draft_max=0)
        for k in (3, 6):
            spec = eng.generate(prompt, max_tokens=64, draft_max=k, adaptive=True)
            check = check_identity(eng, prompt, base, spec)
            assert check.verdict == IDENTICAL, (prompt, k, check)
            assert spec.text == base.text and spec.stats.adaptive
            drafted += spec.stats.drafted_tokens
            catch_ups += spec.stats.catch_ups
    assert eng.policy is not None and drafted > 0 and catch_ups > 0


@pytest.mark.parametrize("name", ["cycle-3.1", "cycle-3"])
def test_adaptive_follows_the_costs_deep_on_a_gpu_and_not_at_all_on_a_cpu(engine, name):
    """The engine drafts what its policy decides: deep chains where a verify of 7 rows costs about one decode
    and drafts are right (the cycle pair), nothing where every row costs a full decode. Costs are frozen at
    those of such machines, since on these tiny models the drafter costs as much as the target."""
    eng = engine(name)
    with deciding_on(eng, [1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12], 5e-5) as policy:
        for _ in range(3):  # learns that this drafter is right
            eng.generate("hello", max_tokens=64, draft_max=6, adaptive=True)
        st = eng.generate("hello", max_tokens=64, draft_max=6, adaptive=True).stats
        assert st.draft_lengths[6] >= 0.7 * sum(st.draft_lengths), st.draft_lengths
        assert st.acceptance_length > 4.0 and min(st.acceptance_per_position) > 0.8
        assert st.policy is not None and len(st.policy["verify_ms"]) == 7
        policy.costs = FrozenCosts([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], draft_step=2e-4)
        policy.replan()
        st = eng.generate("hello", max_tokens=64, draft_max=6, adaptive=True).stats
        assert st.draft_lengths[0] >= 0.8 * sum(st.draft_lengths), st.draft_lengths


def test_adaptive_idle_policy_skips_the_drafter_and_catches_up_in_one_bounded_call(engine):
    """A drafter that is never right: rounds draft nothing, the drafter runs only for rare probes, and each
    probe's catch-up decodes at most a window of the rows queued since the last one."""
    eng = engine("random-3.1")
    for prompt in prompts(6, seed=41):
        eng.generate(prompt, max_tokens=64, draft_max=4, adaptive=True)
    st = eng.generate("abcdef", max_tokens=64, draft_max=4, adaptive=True).stats
    rounds = sum(st.draft_lengths)
    assert st.draft_lengths[0] >= 0.85 * rounds and st.probes <= 3
    assert st.catch_ups == st.draft_steps == st.probes  # one drafter call per probe, none otherwise
    assert st.catch_up_rows <= st.catch_ups * IDLE_CONTEXT


def test_an_idle_policy_pauses_the_callback_capture_and_stays_lossless(tmp_path):
    """Where drafting does not pay (every verify row costs a decode, a random drafter), the engine stops
    recording the target's features except in the rounds before a probe, whose catch-up still sees a full
    window of rows; the output stays the target's."""
    from local_eagle.testing.tiny import TinyGemma3Spec, write_tiny_gemma3_target

    spec = TinyGemma3Spec()
    target = write_tiny_gemma3_target(tmp_path / "gemma3.gguf", spec)
    model = make_drafter(N_VOCAB, spec.n_embd, [2, 4, 5], eagle31=True, draft_vocab=100, seed=3)
    draft = _drafter_gguf(model, target, tmp_path / "d.gguf")
    with Engine(target, draft, EngineOptions(n_ctx=512, n_batch=16, n_threads=1)) as eng:
        assert eng.capture.can_pause
        with deciding_on(eng, [1.0, 2.0, 3.0, 4.0, 5.0], 2e-4) as policy:
            policy.probe_idle_max = 0  # no text could make drafting pay: keep probing at the usual cap all the same
            policy.replan()
            captured = rounds = probes = 0
            for prompt in prompts(6, seed=43):
                base = eng.generate(prompt, max_tokens=120, draft_max=0)
                spec = eng.generate(prompt, max_tokens=120, draft_max=4, adaptive=True)
                assert spec.tokens == base.tokens
                st = spec.stats
                captured, rounds, probes = captured + st.captured_rounds, rounds + st.target_calls, probes + st.probes
                # every probe saw a whole window: the short one, since probes cannot pay at these costs
                assert st.catch_up_rows == st.catch_ups * PROBE_CONTEXT
            assert policy.hopeless
    assert probes > 0 and captured < 0.5 * rounds, (captured, rounds, probes)


def test_engine_option_makes_adaptive_the_default(engine):
    eng = engine("cycle-3.1")
    assert not eng.generate("hi", max_tokens=8, draft_max=4).stats.adaptive
    eng.options.adaptive = True
    try:
        assert eng.generate("hi", max_tokens=8, draft_max=4).stats.adaptive
        assert not eng.generate("hi", max_tokens=8, draft_max=4, adaptive=False).stats.adaptive
    finally:
        eng.options.adaptive = False


def test_fixed_drafting_drafts_the_bound_every_round(engine):
    st = engine("random-3.1").generate("abc", max_tokens=33, draft_max=3).stats
    assert st.draft_lengths[3] == st.target_calls - st.draft_lengths[2] - st.draft_lengths[1] - st.draft_lengths[0]
    assert st.draft_lengths[3] >= st.target_calls - 3  # shorter only where max_tokens leaves less room


# --- greedy identity, told honestly ----------------------------------------------------------------


def test_classify_tells_a_near_tie_from_a_divergence():
    single = np.array([2.0, 1.99, -3.0, -6.0])
    batched = single + np.array([0.0, 0.03, 0.0, 0.0])  # the other rounding swaps the top two
    d = classify(single, batched, 0, 1)
    assert d.near_tie and d.reproduced and d.gap_single == pytest.approx(0.01) and d.noise == pytest.approx(0.03)
    assert not classify(single, batched, 0, 2).near_tie  # the batch did not pick the token the run emitted
    far = single + np.array([0.0, 0.0, 5.5, 0.0])  # a token far from the top moved: not float noise
    assert not classify(single, far, 0, 2).near_tie
    wide = single + np.array([0.0, 1.0, 0.0, 0.0])  # the gap is under the noise, the noise over KERNEL_NOISE
    assert 1.0 > KERNEL_NOISE * 8.0 and not classify(single, wide, 0, 1).near_tie


def test_check_identity_calls_a_wrong_token_a_divergence(engine):
    eng = engine("noisy-3.1")
    prompt = "ABCD xyz"
    base = eng.generate(prompt, max_tokens=32, draft_max=0)
    spec = eng.generate(prompt, max_tokens=32, draft_max=4)
    assert check_identity(eng, prompt, base, spec).verdict == IDENTICAL
    tokens = list(spec.tokens)
    tokens[12] = (tokens[12] + 1) % N_VOCAB  # what a loop that corrupted its cache might emit
    wrong = GenerationResult(spec.text, tokens, spec.stats, spec.spec_stats)
    check = check_identity(eng, prompt, base, wrong)
    assert check.verdict == DIVERGENT and check.verdict != NEAR_TIE
    d = check.divergence
    assert d.index == 12 and not d.reproduced and d.target_token == base.tokens[12]
    assert d.noise <= 1e-3 * d.scale  # the replays agree: the batch computed what a 1-row decode does


def test_a_run_that_stopped_first_is_judged_by_the_end_token_it_chose(engine):
    eng = engine("eos")
    base = eng.generate("ABC", max_tokens=32, draft_max=0)
    spec = eng.generate("ABC", max_tokens=32, draft_max=4)
    assert len(base.tokens) < 32 and check_identity(eng, "ABC", base, spec).verdict == IDENTICAL
    # a speculative run that went on where the target alone chose its end token
    past = GenerationResult(spec.text, [*spec.tokens, spec.tokens[-1]], spec.stats, spec.spec_stats)
    check = check_identity(eng, "ABC", base, past)
    assert check.verdict == DIVERGENT and check.divergence is not None
    assert check.divergence.index == len(base.tokens) and eng.model.is_eog(check.divergence.target_token)
    # runs cut at different lengths chose no token there: nothing to weigh
    short = eng.generate("ABC", max_tokens=3, draft_max=0)
    assert check_identity(eng, "ABC", short, spec).divergence is None

"""Several generations in one engine (runtime.batch): each output is the target alone's, whatever shares the batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from converters import convert, write_checkpoint
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.batch import Batcher
from local_eagle.runtime.engine import STOP_LENGTH, STOP_STRING, Engine, EngineOptions, GenerationResult
from local_eagle.runtime.feed import DrafterFeed
from local_eagle.runtime.policy.batch import BatchPolicy
from local_eagle.runtime.policy.draftcost import Window
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.greedy import kernels_vary_by_batch
from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1)


@pytest.fixture(scope="module")
def noisy_pair(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("batch-pair")
    target = write_cycle_target(d / "noisy-target.gguf", noise=0.35, seed=2)
    m = make_cycle_drafter(True, noise=0.05, seed=3)
    ckpt = write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt")
    return target, convert(ckpt, target, d / "draft.gguf", outtype="f32").outfile


@pytest.fixture(scope="module")
def engines(noisy_pair):
    target, draft = noisy_pair
    single = Engine(target, draft, OPTS)
    parallel = Engine(target, draft, EngineOptions(n_ctx=256, n_batch=64, n_threads=1, parallel=4, adaptive=True))
    yield single, parallel
    parallel.close()
    single.close()


PROMPTS = ["ABCD", "hello", "PAB", "xyz, 日本", "MNOP MNOP", "a", "DDDDDD", "?!"]


def at_once(engine: Engine, prompts: list[str], **kw) -> list[GenerationResult]:
    """Every prompt's generation started together, each from its own thread (as a server's requests)."""
    out: list[GenerationResult | BaseException | None] = [None] * len(prompts)

    def go(i: int) -> None:
        try:
            out[i] = engine.generate(prompts[i], **kw)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in out:
        if isinstance(r, BaseException):
            raise r
    assert all(isinstance(r, GenerationResult) for r in out)
    return out  # type: ignore[return-value]


@pytest.mark.parametrize("kw", [dict(draft_max=0), dict(draft_max=3, adaptive=False), dict(draft_max=4)])
def test_each_sequence_is_the_target_alone(engines, kw):
    single, parallel = engines
    base = [single.generate(p, max_tokens=40, draft_max=0).tokens for p in PROMPTS]
    results = at_once(parallel, PROMPTS, max_tokens=40, **kw)
    for prompt, want, got in zip(PROMPTS, base, results, strict=True):
        assert got.tokens == want, (prompt, kw)
        assert got.stats.generated_tokens == 40
    if kw.get("adaptive") is False:
        assert sum(r.stats.accepted_tokens for r in results) > 100  # the drafts were verified in shared calls


def test_the_batch_policy_reports_itself(engines, monkeypatch):
    _, parallel = engines
    at_once(parallel, PROMPTS[:1], max_tokens=2, draft_max=4)  # the batcher exists
    gather(monkeypatch, 4)
    results = at_once(parallel, PROMPTS[:4], max_tokens=24, draft_max=4)
    policy = results[0].stats.to_dict()["policy"]
    assert policy["kind"] == "batch" and policy["call_ms"]


def test_sampling_with_a_seed_matches_the_target_alone(engines):
    if kernels_vary_by_batch():  # the H100 run of 2026-11-26: one of 4 draws parted at its 4th token
        pytest.skip("a seeded draw repeats only where kernels round alike at every batch shape: on a GPU the "
                    "distribution tests (test_sampling, test_tree_sampling) check sampling")
    single, parallel = engines
    sampling = [SamplingParams(temperature=0.9, top_k=20, seed=s) for s in range(4)]
    base = [
        single.generate(p, max_tokens=30, draft_max=0, sampling=s).tokens
        for p, s in zip(PROMPTS[:4], sampling, strict=True)
    ]
    out: list[list[int]] = [[] for _ in range(4)]

    def go(i: int) -> None:
        out[i] = parallel.generate(PROMPTS[i], max_tokens=30, draft_max=0, sampling=sampling[i]).tokens

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == base


def test_more_requests_than_sequences_queue_and_free_their_cells(engines):
    single, parallel = engines
    prompts = PROMPTS * 2  # 16 requests on 4 sequences
    lengths = [5 + 3 * i for i in range(len(prompts))]
    base = [single.generate(p, max_tokens=n, draft_max=0).tokens for p, n in zip(prompts, lengths, strict=True)]
    out: list[GenerationResult | None] = [None] * len(prompts)

    def go(i: int) -> None:
        out[i] = parallel.generate(prompts[i], max_tokens=lengths[i], draft_max=3)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [r.tokens for r in out] == base
    assert all(r.stats.stop_reason == STOP_LENGTH for r in out)
    assert all(parallel.ctx.pos_max(s) < 0 for s in range(4))  # every sequence's cells were freed
    assert sorted(parallel.batcher.free) == [0, 1, 2, 3]


def test_a_stream_closed_early_leaves_the_others_alone(engines):
    single, parallel = engines
    want = single.generate("PAB", max_tokens=60, draft_max=0).tokens
    early = parallel.stream("hello", max_tokens=200, draft_max=3)
    it = iter(early)
    next(it)
    result: list[GenerationResult] = []
    t = threading.Thread(target=lambda: result.append(parallel.generate("PAB", max_tokens=60, draft_max=3)))
    t.start()
    next(it)
    early.close()
    t.join(timeout=60)
    assert result[0].tokens == want
    assert sorted(parallel.batcher.free) == [0, 1, 2, 3]


def test_stop_strings_hold_per_sequence(engines):
    single, parallel = engines
    text = single.generate("PAB", max_tokens=30, draft_max=0).text
    stop = text[5:8]
    results = at_once(parallel, ["PAB", "PAB"], max_tokens=30, draft_max=3, stop=[stop])
    for r in results:
        assert r.stats.stop_reason == STOP_STRING and r.text == text[: text.index(stop)]


def test_parallel_out_of_range_is_refused(noisy_pair):
    with pytest.raises(LocalEagleError, match="parallel must be"):
        Engine(*noisy_pair, EngineOptions(n_ctx=64, parallel=0))


def test_each_sequence_gets_the_whole_context(engines):
    _, parallel = engines
    assert parallel.n_ctx >= 256 and parallel.ctx.n_ctx >= 4 * 256
    np.testing.assert_equal(parallel.ctx.n_seq_max, 4)


class _CallsByRows(BatchPolicy):
    """A batch of 4 whose calls cost in proportion to their rows (a CPU), whatever this machine measures: drafting
    never pays, so it drafts only its probes, every few rounds. Records each probe round's drafts per sequence."""

    def __init__(self) -> None:
        super().__init__(probe_every=5)
        self.calls[4] = Window(16)  # 4 sequences' calls only: with no call of twice the rows, probes stay frequent
        for _ in range(2):
            self.calls[4].add(0.04)
        self.probe_rounds: list[list[int]] = []
        self.drafted_rounds = 0
        self._probe = False  # the last chosen round was a probe

    def choose(self, n: int, k_max: int) -> int:
        self._probe = False
        k = super().choose(n, k_max)
        self._probe = self.probing
        return k

    def observe(self, rows, seconds, drafted, accepted, **timings) -> None:  # learns nothing: the costs stay
        self.drafted_rounds += any(drafted)
        if self._probe:
            self.probe_rounds.append(list(drafted))


def test_an_idle_batch_probes_with_drafts(engines, monkeypatch):
    """A probe drafts one token a sequence from the window of rows recorded for it in the rounds before. It took
    the window of a drafting batch (16 rows) instead of that of the rows recorded (4): no feed was ready, so no
    probe ever drafted, and the batch kept estimating acceptance from its prior alone."""
    single, parallel = engines
    at_once(parallel, PROMPTS[:1], max_tokens=2, draft_max=4)  # the batcher exists
    base = [single.generate(p, max_tokens=40, draft_max=0).tokens for p in PROMPTS[:4]]
    policy, kept = _CallsByRows(), parallel.batcher.policy
    parallel.batcher.policy = policy
    gather(monkeypatch, 4)
    try:
        results = at_once(parallel, PROMPTS[:4], max_tokens=40, draft_max=4)
    finally:
        parallel.batcher.policy = kept
    assert [r.tokens for r in results] == base
    assert len(policy.probe_rounds) >= 2
    assert all(sum(drafted) > 0 for drafted in policy.probe_rounds), policy.probe_rounds
    assert policy.drafted_rounds == len(policy.probe_rounds)  # nothing but probes drafted


def gather(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The batcher runs no round until ``n`` requests have come: a tiny model's 40 tokens take ~40 ms, so threads
    that start late could find the first requests done, and the batch would never hold them all."""
    turn, gathered = Batcher._turn, []

    def gathered_turn(self: Batcher) -> None:
        if gathered:
            return turn(self)
        deadline = time.monotonic() + 30
        while len(self.active) + len(self.waiting) < n and time.monotonic() < deadline:
            time.sleep(0.001)
        gathered.append(True)  # no round this time: the loop admits those waiting, then turns

    monkeypatch.setattr(Batcher, "_turn", gathered_turn)


class _AlwaysProbing(BatchPolicy):
    """A batch that probes every round (drafting never pays, probes are all it drafts)."""

    def choose(self, n: int, k_max: int) -> int:
        self.probing, self.last_k = True, min(1, k_max)
        return self.last_k

    def observe(self, *args, **kwargs) -> None:
        pass


def test_a_request_admitted_after_a_probe_does_not_decode_its_prompt_for_the_drafter(engines, monkeypatch):
    """A prompt's rows are decoded for the drafter at admission only where the batch drafts: after a probe they
    wait like any other (each costs the drafter a row, while every sequence in flight waits for the call)."""
    single, parallel = engines
    prompts = PROMPTS * 2  # 16 requests on 4 sequences: admitted as others finish, right after probe rounds
    lengths = [6 + 3 * i for i in range(len(prompts))]
    base = [single.generate(p, max_tokens=n, draft_max=0).tokens for p, n in zip(prompts, lengths, strict=True)]
    flushed: list[int] = []
    flush = DrafterFeed.flush
    monkeypatch.setattr(DrafterFeed, "flush", lambda self: flushed.append(self.pending) or flush(self))
    at_once(parallel, PROMPTS[:1], max_tokens=2, draft_max=4)  # the batcher exists
    kept, parallel.batcher.policy = parallel.batcher.policy, _AlwaysProbing()
    gather(monkeypatch, 4)
    flushed.clear()
    out: list[GenerationResult | None] = [None] * len(prompts)

    def go(i: int) -> None:
        out[i] = parallel.generate(prompts[i], max_tokens=lengths[i], draft_max=4)

    try:
        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        parallel.batcher.policy = kept
    assert [r.tokens for r in out] == base
    assert flushed == []
    assert sum(r.stats.drafted_tokens for r in out) > 0  # the probes drafted

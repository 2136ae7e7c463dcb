"""Chained MTP heads (``step35``): a tiny generated Step 3.5 target with 2 and 3 NextN heads, drafted one head a step.

- the drafts of :class:`ChainedMtpDrafter`, fed by the loop's feed, are those of a transcription of llama.cpp's
  ``draft-mtp`` with ``chain_heads`` (``common/speculative.cpp``) driven side by side on one target, whatever number
  of drafts each round keeps;
- every step's logits equal head ``i``'s on a fresh MTP context that decodes the whole history at once (the heads'
  caches are right after partial acceptance);
- the engine drafts with the heads by default, chains of at most as many drafts as heads, greedy output the target
  alone's; trees are refused for them.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.feed import DrafterFeed
from local_eagle.runtime.mtp import MtpCapture, head_offset, mtp_refusal
from local_eagle.runtime.mtp_chain import ChainedMtpDrafter
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.tiny_mtp_step35 import TinyStep35Spec, write_cycle_step35_mtp, write_tiny_step35_mtp

OPTS = ContextOptions(n_ctx=256, n_batch=32, n_ubatch=32, n_threads=1)
ENGINE = EngineOptions(n_ctx=256, n_batch=32, n_threads=1)
PROMPTS = ["the a and the tea eat", "and the a tea", "eat the tea and a"]
LETTERS = ["ABC", "HIJ", "MNOP"]


@pytest.fixture(scope="module", params=[2, 3])
def step35(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp(f"step35-{request.param}")
    return write_tiny_step35_mtp(d / "step35.gguf", TinyStep35Spec(n_nextn=request.param), seed=3)


@pytest.fixture(scope="module")
def model(step35: Path):
    m = Model(step35, n_gpu_layers=0, load_mtp=True)
    yield m
    m.close()


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three heads that agree with the letter-cycle target, head 1 wrong after C and head 2 after J."""
    d = tmp_path_factory.mktemp("step35-cycle")
    return write_cycle_step35_mtp(d / "cycle.gguf", TinyStep35Spec(n_nextn=3), head_misses=("", "C", "J"))


def test_loads_its_chained_heads(model: Model) -> None:
    assert model.arch() == "step35" and model.n_layer_nextn in (2, 3)
    assert model.n_layer == TinyStep35Spec().n_layer
    assert mtp_refusal(model) is None
    target = Context(model, OPTS)
    drafter = ChainedMtpDrafter(target, OPTS)
    try:  # each head is its own block: the same row gives other logits on each
        h = np.random.default_rng(0).standard_normal((1, model.n_embd)).astype(np.float32)
        rows = []
        for head in range(model.n_layer_nextn):
            drafter.ctx.clear()
            head_offset(drafter.ctx, head)
            drafter.ctx.decode(np.array([262]), np.array([0]), True, h)
            rows.append(drafter.ctx.logits(0, model.n_vocab))
        head_offset(drafter.ctx, 0)
        assert all(not np.allclose(rows[0], r, atol=1e-2) for r in rows[1:])
        with pytest.raises(LocalEagleError, match="chains only"):
            drafter.decode_branches(np.array([262]), h, np.array([0]), [[0]], None)
    finally:
        drafter.close()
        target.close()


class _ReferenceChainedMtp:
    """common/speculative.cpp's common_speculative_impl_draft_mtp with chain_heads, transcribed: process() decodes
    the batch once per head after seq_rm from its first position, draft() runs step i on head i over the whole
    prefix [id_last, d_1 .. d_i] after seq_rm from pos0, accept(n_accepted) keeps the target's state."""

    def __init__(self, model: Model, target: Context) -> None:
        self.model, self.target = model, target
        self.n_heads = model.n_layer_nextn
        self.ctx = Context(model, ContextOptions(n_ctx=OPTS.n_ctx, n_batch=OPTS.n_batch, n_ubatch=OPTS.n_ubatch,
                                                 n_threads=OPTS.n_threads, mtp=True), ctx_other=target)  # fmt: skip
        self.ctx.set_embeddings_nextn(True, True)
        self.pending = np.zeros(model.n_embd, np.float32)
        self.verify_h = np.zeros((0, model.n_embd), np.float32)

    def process(self, tokens: np.ndarray, positions: np.ndarray) -> None:
        n = len(tokens)
        h_tgt = self.target.embeddings_nextn(n, self.model.n_embd)
        embd = np.vstack([self.pending[None, :], h_tgt[:-1]])
        for head in range(self.n_heads):
            self.ctx.remove_from(int(positions[0]))
            head_offset(self.ctx, head)
            self.ctx.decode(tokens, positions, False, embd)
        head_offset(self.ctx, 0)
        self.verify_h = h_tgt
        self.pending = h_tgt[-1].copy()

    def draft(self, id_last: int, pos0: int, n_max: int) -> list[int]:
        n_max = min(n_max, self.n_heads)
        result: list[int] = []
        chain_h = [self.pending.copy()]
        batch_tokens = [id_last]
        i = 0
        while True:
            self.ctx.remove_from(pos0)
            head_offset(self.ctx, i)
            n = len(batch_tokens)
            self.ctx.decode(np.array(batch_tokens), np.arange(pos0, pos0 + n), np.arange(n) == n - 1, np.stack(chain_h))
            token = int(np.argmax(self.ctx.logits(n - 1, self.model.n_vocab)))  # top-k 10, its first candidate
            h = self.ctx.embeddings_nextn_ith(n - 1, self.model.n_embd)
            result.append(token)
            if len(result) >= n_max:
                break
            chain_h.append(h)
            batch_tokens.append(token)
            i += 1
        head_offset(self.ctx, 0)
        return result

    def accept(self, n_accepted: int) -> None:
        self.pending = self.verify_h[min(n_accepted, len(self.verify_h) - 1)].copy()


def _fresh_head_logits(fresh: Context, head: int, tokens: list[int], states: np.ndarray) -> np.ndarray:
    """Head ``head``'s logits for the last of ``tokens`` (MTP positions 0..), every row decoded at once."""
    fresh.clear()
    head_offset(fresh, head)
    n = len(tokens)
    fresh.decode(np.array(tokens), np.arange(n), np.arange(n) == n - 1, states)
    head_offset(fresh, 0)
    return fresh.logits(n - 1, fresh.model.n_vocab)


def _run(
    model: Model, prompt: np.ndarray, n_rounds: int, accept_rule, check_fresh: bool = False, lengths=None
) -> tuple[list, list]:
    """Both drafters side by side on one target: each round's drafts from the reference and from the chained
    drafter (fed as runtime.rounds feeds a drafter), then one verification of the reference's drafts that both see.
    ``check_fresh``: every step's logits against head i on a fresh context fed the whole history; ``lengths(r)``:
    round r's drafts (default: one per head)."""
    target = Context(model, OPTS)
    capture = MtpCapture(model)
    capture.attach(target)
    ref = _ReferenceChainedMtp(model, target)
    drafter = ChainedMtpDrafter(target, OPTS)
    fresh = Context(model, ContextOptions(n_ctx=256, n_batch=128, n_ubatch=128, n_threads=1, mtp=True),
                    ctx_other=target) if check_fresh else None  # fmt: skip
    feed = DrafterFeed(drafter, capture.width, window=10_000)
    ours, theirs = [], []
    try:
        n = len(prompt)
        target.decode(prompt, np.arange(n), np.arange(n) == n - 1)
        features = capture.features(n)
        states = [np.zeros(model.n_embd, np.float32), *features]  # the head's row q pairs with the target's h[q-1]
        ref.process(prompt, np.arange(n))
        last = int(np.argmax(target.logits(n - 1, model.n_vocab)))
        drafter.prime(int(prompt[0]))
        feed.push(0, np.append(prompt[1:], last), features)
        feed.flush()
        n_past, history = n, [int(x) for x in prompt]
        for r in range(n_rounds):
            n_max = lengths(r) if lengths is not None else model.n_layer_nextn
            want = ref.draft(last, n_past, n_max)
            ref.ctx.remove_from(n_past)
            logits, state, _ = feed.catch_up()
            steps = [(logits[0], state)]
            got = [int(np.argmax(logits[0]))]
            while len(got) < n_max:
                position = np.array([n_past + len(got) - 1])
                logits, state = drafter.decode(np.array([got[-1]]), drafter.feedback(state), position)
                steps.append((logits[0], state))
                got.append(int(np.argmax(logits[0])))
            if fresh is not None:
                row_tokens = [*history, last, *got[:-1]]
                row_states = [*states[: n_past + 1], *[s[1][0] for s in steps[:-1]]]
                for i, (row, _) in enumerate(steps):
                    k = n_past + 1 + i
                    want_row = _fresh_head_logits(fresh, i, row_tokens[:k], np.stack(row_states[:k]))
                    np.testing.assert_allclose(row, want_row, rtol=1e-3, atol=1e-3)
            theirs.append(want)
            ours.append(got)
            rows = np.array([last, *want], dtype=np.int32)
            target.decode(rows, np.arange(n_past, n_past + len(rows)), True)
            verified = capture.features(len(rows))
            ref.process(rows, np.arange(n_past, n_past + len(rows)))
            greedy = [int(np.argmax(target.logits(i, model.n_vocab))) for i in range(len(rows))]
            n_acc = accept_rule(r, want, greedy)
            accepted = [*want[:n_acc], greedy[n_acc]]
            ref.accept(n_acc)
            new_past = n_past + 1 + n_acc
            history += [last, *want[:n_acc]]
            states += list(verified[: n_acc + 1])
            target.remove_from(new_past)
            ref.ctx.remove_from(new_past)
            drafter.remove_from(n_past)
            feed.push(n_past, accepted, verified[: n_acc + 1])
            last, n_past = accepted[-1], new_past
    finally:
        drafter.close()
        ref.ctx.close()
        if fresh is not None:
            fresh.close()
        target.close()
    return ours, theirs


def _greedy(r: int, drafts: list[int], greedy: list[int]) -> int:
    n = 0
    while n < len(drafts) and drafts[n] == greedy[n]:
        n += 1
    return n


def test_greedy_drafts_match_llamacpp_draft_mtp(model: Model) -> None:
    prompt = model.tokenize("the a and the tea eat")
    ours, theirs = _run(model, prompt, n_rounds=6, accept_rule=_greedy)
    assert ours == theirs
    assert all(len(d) == model.n_layer_nextn for d in ours)


def test_partial_acceptance_keeps_every_heads_cache(model: Model) -> None:
    """Accepting 0 .. n drafts by fiat (the next token is the target's at that row): the drafts stay llama.cpp's, and
    every step's logits are head i's over the whole history decoded afresh."""
    prompt = model.tokenize("and the a tea")
    n = model.n_layer_nextn
    ours, theirs = _run(model, prompt, n_rounds=2 * (n + 1), accept_rule=lambda r, d, g: r % (n + 1), check_fresh=True)
    assert ours == theirs
    assert len({tuple(x) for x in ours}) > 1
    # chains shorter than the heads (a head that drafts nothing in a round), each keeping 0 .. all of its drafts
    ours, theirs = _run(model, prompt, n_rounds=3 * n, accept_rule=lambda r, d, g: (r // n) % (len(d) + 1),
                        check_fresh=True, lengths=lambda r: 1 + r % n)  # fmt: skip
    assert ours == theirs
    assert sorted({len(x) for x in ours}) == list(range(1, n + 1))


def test_a_step_past_the_last_head_is_refused(model: Model) -> None:
    target = Context(model, OPTS)
    capture = MtpCapture(model)
    capture.attach(target)
    drafter = ChainedMtpDrafter(target, OPTS)
    try:
        prompt = model.tokenize("the tea")
        n = len(prompt)
        target.decode(prompt, np.arange(n), True)
        drafter.prime(int(prompt[0]))
        logits, state = drafter.decode_last(prompt[1:], capture.features(n - 1), np.arange(n - 1))
        token = int(np.argmax(logits[0]))
        for i in range(1, model.n_layer_nextn):
            logits, state = drafter.decode(np.array([token]), drafter.feedback(state), np.array([n - 2 + i]))
            token = int(np.argmax(logits[0]))
        with pytest.raises(LocalEagleError, match="at most that many drafts"):
            drafter.decode(np.array([token]), drafter.feedback(state), np.array([n - 2 + model.n_layer_nextn]))
    finally:
        drafter.close()
        target.close()


def _alone(path: Path, prompts: list[str], max_tokens: int) -> list[list[int]]:
    with Engine(path, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, mtp=False)) as eng:
        return [eng.generate(p, max_tokens=max_tokens).tokens for p in prompts]


def test_engine_drafts_with_the_chained_heads_by_default(step35: Path) -> None:
    """Greedy output the target alone's (drafting or ``draft_max=0``), fixed and adaptive, chains capped at heads."""
    base = _alone(step35, PROMPTS, 24)
    with Engine(step35, None, ENGINE) as eng:
        assert isinstance(eng.drafter, ChainedMtpDrafter) and eng.mtp_refusal is None
        n = eng.model.n_layer_nextn
        assert f"at most {n} drafts" in (eng.mtp_note or "")
        assert [eng.generate(p, max_tokens=24, draft_max=0).tokens for p in PROMPTS] == base
        for draft_max in (1, n, 8):
            out = [eng.generate(p, max_tokens=24, draft_max=draft_max, adaptive=False) for p in PROMPTS]
            assert [r.tokens for r in out] == base
            assert sum(r.stats.drafted_tokens for r in out) > 0
            longest = max(max((k for k, c in enumerate(r.stats.draft_lengths) if c), default=0) for r in out)
            assert longest == min(draft_max, n)
        out = [eng.generate(p, max_tokens=24, draft_max=4, adaptive=True) for p in PROMPTS]
        assert [r.tokens for r in out] == base


def test_cycle_heads_are_accepted_and_output_is_the_targets(cycle: Path) -> None:
    """On the letter cycle the heads agree: most drafts kept, head 1's and head 2's misses rejected at known steps,
    the output the target alone's; a tree asked for drafts chains (``tree_refusal``)."""
    base = _alone(cycle, LETTERS, 40)
    opts = EngineOptions(n_ctx=256, n_batch=32, n_threads=1, tree_nodes=8)
    with Engine(cycle, None, opts) as eng:
        assert "chained MTP heads" in (eng.tree_refusal or "")
        out = [eng.generate(p, max_tokens=40, draft_max=3, adaptive=False) for p in LETTERS]
        assert [r.tokens for r in out] == base
        drafted = sum(r.stats.drafted_tokens for r in out)
        accepted = sum(r.stats.accepted_tokens for r in out)
        assert 0.5 * drafted < accepted < drafted
        tree = [eng.generate(p, max_tokens=40, tree=TreeShape(8, 3, 2)) for p in LETTERS]
        assert [r.tokens for r in tree] == base


def _record_drafts(eng: Engine) -> list[tuple[int, int]]:
    """(loop position, the head's greedy token) of every row whose logits the drafter hands back; (-1, number of
    sequences) for each call that drafted a step for several at once."""
    seen: list[tuple[int, int]] = []
    drafter = eng.drafter
    decode_rows = drafter.decode_rows

    def recording(tokens, g, positions, seqs, wanted):
        logits, state = decode_rows(tokens, g, positions, seqs, wanted)
        seen.extend((int(np.asarray(positions)[w]), int(np.argmax(row))) for w, row in zip(wanted, logits, strict=True))
        if len(set(seqs)) > 1 and len(seqs) == len(set(seqs)):
            seen.append((-1, len(seqs)))
        return logits, state

    drafter.decode_rows = recording
    return seen


def test_parallel_sequences_draft_as_one_alone(step35: Path) -> None:
    """Three generations at once share the MTP context (a unified cache, one draft step for all on one head): each
    drafts what it drafts alone, its output the target alone's."""
    base = _alone(step35, PROMPTS, 30)
    with Engine(step35, None, ENGINE) as single:
        alone = _record_drafts(single)
        for p in PROMPTS:
            single.generate(p, max_tokens=30, draft_max=3, adaptive=False)
    with Engine(step35, None, EngineOptions(n_ctx=256, n_batch=64, n_threads=1, parallel=3)) as eng:
        together = _record_drafts(eng)
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
    steps_together = [x for x in together if x[0] == -1]
    assert steps_together  # draft steps of several sequences in one call
    assert len(alone) > 100 and sorted(x for x in together if x[0] >= 0) == sorted(alone)


def test_agreeing_heads_give_one_token_per_head_and_one_more(tmp_path: Path) -> None:
    """Heads that agree with the letter cycle: every draft kept, so a target call yields k + 1 tokens (k drafts, at
    most one per head) but for the first and last rounds; a longer draft_max is capped at the heads."""
    path = write_cycle_step35_mtp(tmp_path / "cycle.gguf", TinyStep35Spec(n_nextn=3))
    prompts = ["A", "F", "M"]
    base = _alone(path, prompts, 64)
    with Engine(path, None, ENGINE) as eng:
        for k in (1, 2, 3, 8):
            out = [eng.generate(p, max_tokens=64, draft_max=k, adaptive=False) for p in prompts]
            assert [r.tokens for r in out] == base
            calls = sum(r.stats.target_calls for r in out)
            per_call = sum(len(r.tokens) - 1 for r in out) / calls
            assert per_call > 0.95 * (min(k, 3) + 1), (k, per_call)
            assert all(r.stats.accepted_tokens == r.stats.drafted_tokens for r in out)


def test_sampling_drafts_with_the_heads(cycle: Path) -> None:
    """Sampling: the heads' draft distributions go through the loop's rejection sampling; the cycle target is sharp
    enough that a sample is its greedy token, so the output is the greedy one and most drafts are kept."""
    base = _alone(cycle, LETTERS, 40)
    with Engine(cycle, None, ENGINE) as eng:
        out = [
            eng.generate(p, max_tokens=40, draft_max=3, adaptive=False,
                         sampling=SamplingParams(temperature=0.8, top_k=5, seed=7))
            for p in LETTERS
        ]  # fmt: skip
    assert [r.tokens for r in out] == base
    assert sum(r.stats.accepted_tokens for r in out) > 0.5 * sum(r.stats.drafted_tokens for r in out) > 0

"""A DFlash block drafter through the engine's one round (``runtime.chain.draft_block``): the output is the
target's own, greedy and sampling, alone, in a batch and under a grammar; one drafter call a round."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.chisquare import seeded_contingency
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.tiny_dflash import TinyDFlashSpec, write_block_gguf

SPEC = TinyDFlashSpec(block_size=5, target_layers=(1, 3, 4))
OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=0)
PROMPTS = ["The quick brown fox", "def add(a, b):", "1, 2, 3, 4,"]


@pytest.fixture(scope="module")
def dflash_gguf(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> Path:
    d = tmp_path_factory.mktemp("block-engine")
    return write_block_gguf(d, target_gguf, SPEC)


@pytest.fixture(scope="module")
def engines(target_gguf: Path, dflash_gguf: Path):
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dflash_gguf, OPTS) as block:
        yield alone, block


def test_greedy_block_rounds_emit_the_target_alone_tokens(engines) -> None:
    alone, block = engines
    drafted = 0
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=24, draft_max=0)
        for k in (1, 4, 8):  # 8: more than a block of 5 gives (4 drafts), clamped
            spec = block.generate(prompt, max_tokens=24, draft_max=k, adaptive=False)
            assert_greedy_identical(block, prompt, base, spec, (prompt, k))
            stats = spec.spec_stats
            assert stats.drafted_tokens > 0 and max(stats.trace_drafted) <= min(k, SPEC.block_size - 1)
            assert stats.draft_steps == stats.rounds - stats.trace_drafted.count(0)  # one drafter call a round
            drafted += stats.drafted_tokens
    assert drafted > 0


def test_adaptive_block_rounds_stay_identical(engines) -> None:
    alone, block = engines
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=32, draft_max=0)
        spec = block.generate(prompt, max_tokens=32, draft_max=4, adaptive=True)
        assert_greedy_identical(block, prompt, base, spec, prompt)


def test_sampling_block_rounds_keep_the_target_distribution(target_gguf: Path, dflash_gguf: Path) -> None:
    """The second token's distribution over seeds, speculative against alone (chi-square), at a temperature
    that spreads it; each draft is drawn from its block row's processed distribution and rejection-sampled."""
    sampling = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dflash_gguf, OPTS) as block:
        table, pvalue = seeded_contingency([(alone, 0), (block, 4)], "1, 2,", sampling, 300)
    assert table.shape[1] >= 2
    assert pvalue > 1e-3


def test_a_batch_of_block_sequences_emits_each_alone_output(target_gguf: Path, dflash_gguf: Path) -> None:
    import threading
    from dataclasses import replace

    with Engine(target_gguf, None, OPTS) as alone:
        bases = [alone.generate(p, max_tokens=20, draft_max=0).tokens for p in PROMPTS]
    with Engine(target_gguf, dflash_gguf, replace(OPTS, parallel=3)) as batch:
        got: dict[int, list[int]] = {}

        def run(i: int) -> None:
            got[i] = batch.generate(PROMPTS[i], max_tokens=20, draft_max=3, adaptive=False).tokens

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [got[i] for i in range(len(PROMPTS))] == bases


def test_accepted_block_drafts_feed_the_next_block(engines, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the block's rows arranged to hold the target's next tokens (a wrong one at every seventh position), the
    rounds accept long prefixes and partial ones, the drafter is fed only the kept rows (``push`` refuses a row
    twice or out of order), and the output stays the target's."""
    from local_eagle.runtime import dflash

    alone, block = engines
    prompt = PROMPTS[1]
    base = alone.generate(prompt, max_tokens=40, draft_max=0)
    truth = [*block.tokenize(prompt).tolist(), *base.tokens]
    propose = dflash.BlockDrafter.propose

    def arranged(self, last_token: int, n_past: int, seq: int = 0, n_draft: int | None = None) -> dflash.Block:
        got = propose(self, last_token, n_past, seq, n_draft)
        for i, row in enumerate(got.logits):
            p = n_past + 1 + i
            if p < len(truth):
                row[truth[p] if p % 7 else (truth[p] + 1) % len(row)] = row.max() + 10.0
        return got

    monkeypatch.setattr(dflash.BlockDrafter, "propose", arranged)
    spec = block.generate(prompt, max_tokens=40, draft_max=4, adaptive=False)
    assert_greedy_identical(block, prompt, base, spec)
    stats = spec.spec_stats
    assert stats.accepted_per_position[3] > 0 and stats.accepted_tokens < stats.drafted_tokens
    assert stats.rounds < len(spec.tokens) / 2


def test_block_rounds_under_a_grammar_emit_the_constrained_target_tokens(engines) -> None:
    """A block's rows are masked by the grammar as a chain's steps are (forced tokens join without a drafter
    row): the output is the target's own under the same grammar."""
    from local_eagle.runtime.grammar import GrammarSpec

    alone, block = engines
    for grammar in (GrammarSpec.regex("[a-z ]{4,30}"), GrammarSpec.regex("x = [0-9]{2,12};")):
        base = alone.generate(PROMPTS[0], max_tokens=24, draft_max=0, grammar=grammar)
        spec = block.generate(PROMPTS[0], max_tokens=24, draft_max=4, adaptive=False, grammar=grammar)
        assert spec.tokens == base.tokens, grammar
        assert spec.spec_stats.drafted_tokens > 0

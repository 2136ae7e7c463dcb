"""The engine drafting DSpark blocks (``runtime.dflash``, llama.cpp's ``draft-dspark``): anchor-first blocks of up
to ``block_size`` drafts, the Markov head's bias in the drafter's graph; the target alone's output greedy, its
distribution sampling, trees, a reduced draft vocabulary, the bonus-anchor layout, and ``draft_p_min`` cut at the
confidence head."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.chisquare import seeded_contingency
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.tiny_dflash import TinyDSparkSpec, write_block_gguf

SPEC = TinyDSparkSpec(block_size=5, target_layers=(1, 3, 4))
OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=0)
PROMPTS = ["The quick brown fox", "def add(a, b):", "1, 2, 3, 4,"]


def _convert(folder: Path, target: Path, spec: TinyDSparkSpec) -> Path:
    return write_block_gguf(folder, target, spec)


@pytest.fixture(scope="module")
def dspark_gguf(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> Path:
    return _convert(tmp_path_factory.mktemp("dspark-engine"), target_gguf, SPEC)


@pytest.fixture(scope="module")
def engines(target_gguf: Path, dspark_gguf: Path):
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dspark_gguf, OPTS) as block:
        yield alone, block


def _greedy(alone: Engine, block: Engine, ks: tuple[int, ...], n_max: int) -> None:
    drafted = 0
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=24, draft_max=0)
        for k in ks:
            spec = block.generate(prompt, max_tokens=24, draft_max=k, adaptive=False)
            assert_greedy_identical(block, prompt, base, spec, (prompt, k))
            stats = spec.spec_stats
            assert max(stats.trace_drafted) <= min(k, n_max)
            assert stats.draft_steps == stats.rounds - stats.trace_drafted.count(0)  # one drafter call a round
            drafted += stats.drafted_tokens
    assert drafted > 0


def test_an_anchor_first_dspark_block_drafts_a_whole_block(engines) -> None:
    """block_size drafts (draft-dspark's n_draft_max), the anchor's row the first, read off a pass of that many."""
    _, block = engines
    spec = block.drafter.spec
    assert spec.dspark and spec.sample_from_anchor and spec.n_draft_max == SPEC.block_size
    _greedy(*engines, (1, 5, 8), SPEC.block_size)  # 8: clamped to the block's 5


def test_greedy_dspark_rounds_with_a_full_block_reach_the_block(engines) -> None:
    alone, block = engines
    res = block.generate(PROMPTS[0], max_tokens=40, draft_max=5, adaptive=False)
    assert max(res.spec_stats.trace_drafted) == SPEC.block_size
    assert_greedy_identical(block, PROMPTS[0], alone.generate(PROMPTS[0], max_tokens=40, draft_max=0), res, "full")


@pytest.mark.parametrize(
    "variant",
    [{"extra_config": {"sample_from_anchor": False}}, {"draft_vocab": 200}, {"confidence_head": False}],
    ids=["bonus-anchor", "d2t", "no-confidence"],
)
def test_dspark_variants_emit_the_target_alone_tokens(variant: dict, tmp_path: Path, target_gguf: Path) -> None:
    """Without sample_from_anchor the block is DFlash's layout (block_size - 1 drafts from rows 1..); a reduced
    draft vocabulary's logits (and Markov bias) are scattered to the target's in the graph."""
    spec = replace(SPEC, **variant)
    gguf = _convert(tmp_path, target_gguf, spec)
    n_max = SPEC.block_size - 1 if "extra_config" in variant else SPEC.block_size
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, gguf, OPTS) as block:
        assert block.drafter.spec.dspark and block.drafter.spec.n_draft_max == n_max
        _greedy(alone, block, (n_max,), n_max)


def test_adaptive_dspark_rounds_stay_identical(engines) -> None:
    alone, block = engines
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=32, draft_max=0)
        spec = block.generate(prompt, max_tokens=32, draft_max=5, adaptive=True)
        assert_greedy_identical(block, prompt, base, spec, prompt)


def test_draft_p_min_with_a_dspark_drafter_cuts_at_its_head_and_stays_identical(engines) -> None:
    """draft-dspark cuts at p_min by the confidence head (``test_dspark_confidence`` checks the cut round by round);
    the output is the target alone's whatever it cuts, fixed or adaptive."""
    alone, block = engines
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=24, draft_max=0)
        for adaptive in (False, True):
            spec = block.generate(prompt, max_tokens=24, draft_max=5, adaptive=adaptive, draft_p_min=0.5)
            assert_greedy_identical(block, prompt, base, spec, (prompt, adaptive))


def test_sampling_dspark_rounds_keep_the_target_distribution(target_gguf: Path, dspark_gguf: Path) -> None:
    """The second token's distribution over seeds, speculative against alone (chi-square): each draft drawn from its
    own block row (the Markov chain in the graph followed the greedy path), rejection-sampled against it."""
    sampling = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dspark_gguf, OPTS) as block:
        table, pvalue = seeded_contingency([(alone, 0), (block, 5)], "1, 2,", sampling, 300)
    assert table.shape[1] >= 2
    assert pvalue > 1e-3


def test_greedy_dspark_trees_emit_the_target_alone_tokens(target_gguf: Path, dspark_gguf: Path) -> None:
    """A tree grows off the block's rows as DFlash's does (row d predicts depth d + 1 in both layouts)."""
    opts = replace(OPTS, tree_nodes=12, tree_width=3)
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dspark_gguf, opts) as block:
        assert block.trees and block.tree_refusal is None
        for prompt in PROMPTS:
            base = alone.generate(prompt, max_tokens=24, draft_max=0)
            spec = block.generate(prompt, max_tokens=24, draft_max=5)
            assert_greedy_identical(block, prompt, base, spec, prompt)

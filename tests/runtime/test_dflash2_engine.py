"""The engine drafting DFlash2 blocks (``runtime.dflash``, llama.cpp's ``draft-dflash`` with a selector): the
selector lattice's greedy walk drafts; the target alone's output greedy (several k, adaptive, ``draft_p_min`` cut
as draft-dflash cuts it), sampling and trees refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.tiny_dflash import TinyDFlash2Spec, write_block_gguf

SPEC = TinyDFlash2Spec(block_size=5, target_layers=(1, 3, 4))
OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=0)
PROMPTS = ["The quick brown fox", "def add(a, b):", "1, 2, 3, 4,"]


@pytest.fixture(scope="module")
def dflash2_gguf(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> Path:
    folder = tmp_path_factory.mktemp("dflash2-engine")
    return write_block_gguf(folder, target_gguf, SPEC)


@pytest.fixture(scope="module")
def engines(target_gguf: Path, dflash2_gguf: Path):
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dflash2_gguf, OPTS) as block:
        yield alone, block


def test_a_dflash2_block_is_the_selector_walk(engines) -> None:
    """block_size - 1 drafts at most; each row's logits are its k scores on its k candidates, the walk's token their
    argmax, and the chain's confidence (their softmax at it) is draft-dflash's p_min quantity."""
    alone, block = engines
    spec = block.drafter.spec
    assert spec.dflash2 and spec.selector_top_k == SPEC.selector_top_k and spec.n_draft_max == SPEC.block_size - 1
    tokens = alone.tokenize(PROMPTS[0])
    block.drafter.remove_from(0)  # an empty cache: the block attends to itself only
    b = block.drafter.propose(int(tokens[-1]), 0, n_draft=4)
    assert b.selected is not None and len(b.selected) == 4
    assert (np.isfinite(b.logits).sum(axis=-1) == SPEC.selector_top_k).all()
    np.testing.assert_array_equal(b.tokens, b.logits.argmax(axis=-1))
    p = b.top_p()
    assert ((p > 0) & (p <= 1)).all()
    cut = float(np.sort(p)[len(p) // 2])
    assert len(b.drafts(p_min=cut)) == int(np.argmax(p < cut)) if (p < cut).any() else len(p)


def _greedy(alone: Engine, block: Engine, ks: tuple[int, ...], **kw) -> int:
    drafted = 0
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=24, draft_max=0)
        for k in ks:
            spec = block.generate(prompt, max_tokens=24, draft_max=k, adaptive=False, **kw)
            assert_greedy_identical(block, prompt, base, spec, (prompt, k))
            stats = spec.spec_stats
            assert max(stats.trace_drafted) <= min(k, SPEC.block_size - 1)
            assert stats.draft_steps == stats.rounds - stats.trace_drafted.count(0)  # one drafter call a round
            drafted += stats.drafted_tokens
    return drafted


def test_greedy_dflash2_rounds_emit_the_target_alone_tokens(engines) -> None:
    assert _greedy(*engines, (1, 2, 4, 7)) > 0  # 7: clamped to block_size - 1


def test_greedy_dflash2_rounds_with_draft_p_min_stay_identical(engines) -> None:
    """The chain cuts at the first row whose selector softmax is below p_min, as draft-dflash's walk breaks."""
    _greedy(*engines, (4,), draft_p_min=0.3)


def test_adaptive_dflash2_rounds_stay_identical(engines) -> None:
    alone, block = engines
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=32, draft_max=0)
        spec = block.generate(prompt, max_tokens=32, draft_max=4, adaptive=True)
        assert_greedy_identical(block, prompt, base, spec, prompt)


def test_sampling_with_a_dflash2_drafter_is_refused_in_one_line(engines) -> None:
    _, block = engines
    with pytest.raises(LocalEagleError, match="DFlash2 drafter") as e:
        block.generate(PROMPTS[0], max_tokens=4, draft_max=4, sampling=SamplingParams(temperature=0.8, seed=1))
    assert "\n" not in str(e.value)


def test_dflash2_trees_are_refused_in_one_line_and_chains_drafted(target_gguf: Path, dflash2_gguf: Path) -> None:
    opts = replace(OPTS, tree_nodes=12, tree_width=3)
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dflash2_gguf, opts) as block:
        assert not block.trees and "DFlash2" in block.tree_refusal and "\n" not in block.tree_refusal
        for prompt in PROMPTS[:2]:
            base = alone.generate(prompt, max_tokens=16, draft_max=0)
            spec = block.generate(prompt, max_tokens=16, draft_max=4, tree=TreeShape(12, 4, 3), adaptive=False)
            assert_greedy_identical(block, prompt, base, spec, prompt)

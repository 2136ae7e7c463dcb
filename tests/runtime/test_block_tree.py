"""Trees drawn from a DFlash block (``runtime.blocktree``): grown best first over the product of the block's rows,
verified in one target call, the target's own output greedy and sampling; chains under a grammar or in a batch."""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from local_eagle.runtime.blocktree import grow_block
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import DraftTree, TreeShape
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.tiny_dflash import TinyDFlashSpec, write_block_gguf

SPEC = TinyDFlashSpec(block_size=8, target_layers=(1, 3, 4))
OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=0, tree_nodes=16, tree_width=4)
PROMPTS = ["The quick brown fox", "def add(a, b):", "1, 2, 3, 4,"]


# --- the builder, without a model -------------------------------------------------------------------------------


def _rows(rng: np.random.Generator, depth: int, k: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rows = []
    for _ in range(depth):
        p = np.sort(rng.dirichlet(np.ones(k + 3)))[::-1][:k]  # distinct, decreasing: no ties between paths
        rows.append((rng.choice(100, size=k, replace=False), np.log(p), p))
    return rows


def _slot_path(tree: DraftTree, node: int) -> tuple[int, ...]:
    path = []
    while node > 0:
        path.append(tree.ranks[node])
        node = tree.parents[node]
    return tuple(path[::-1])


@pytest.mark.parametrize("seed", range(4))
def test_grow_block_takes_the_most_probable_prefixes_of_the_rows_product(seed: int) -> None:
    """Every prefix of slots (s_1 .. s_d) scores the sum of its rows' log-probabilities; the tree holds the n best
    of them, best first, each node's token its slot's in its depth's row, and reads a row only once a node reaches
    its depth."""
    rng = np.random.default_rng(seed)
    depth, k = 4, 3
    rows = _rows(rng, depth, k)
    scores = {
        path: sum(float(rows[d][1][s]) for d, s in enumerate(path))
        for n in range(1, depth + 1)
        for path in itertools.product(range(k), repeat=n)
    }
    best = sorted(scores, key=lambda path: -scores[path])
    for n in (1, 2, 5, 13, 40, len(scores), len(scores) + 5):
        asked: list[int] = []
        tree = DraftTree(7)

        def row(d: int, asked: list[int] = asked) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            asked.append(d)
            return rows[d]

        order = grow_block(tree, depth, n, row)
        assert [_slot_path(tree, node) for node in order] == best[:n]
        for node in order:
            d, slot = tree.depths[node] - 1, tree.ranks[node]
            assert tree.tokens[node] == rows[d][0][slot]
            assert tree.probs[node] == pytest.approx(rows[d][2][slot])
        assert len(asked) == len(set(asked)) and max(asked) < depth  # once per depth, at most the block's
        assert max(asked) <= max(len(path) for path in best[:n])  # only under chosen nodes
        assert n > 1 or asked == [0]
        full = DraftTree(7)
        _grow_all(full, rows)
        assert [_slot_path(full, node) for node in full.order(n)] == best[:n]  # order() on the whole tree agrees


def _grow_all(tree: DraftTree, rows: list) -> None:
    frontier = [0]
    for d in range(len(rows)):
        nxt = []
        for node in frontier:
            nxt += tree.add_children(node, *rows[d])
        frontier = nxt


def test_grow_block_stops_at_the_block_depth_and_with_a_row_of_few_candidates() -> None:
    rows = [
        (np.array([5, 6]), np.log([0.6, 0.3]), np.array([0.6, 0.3])),
        (np.array([9]), np.log([0.9]), np.array([0.9])),
    ]
    tree = DraftTree(0)
    order = grow_block(tree, 2, 50, rows.__getitem__)
    assert sorted(_slot_path(tree, n) for n in order) == [(0,), (0, 0), (1,), (1, 0)]
    assert max(tree.depths) == 2


# --- in the engine ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dflash_gguf(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> Path:
    d = tmp_path_factory.mktemp("block-tree")
    return write_block_gguf(d, target_gguf, SPEC)


@pytest.fixture(scope="module")
def engines(target_gguf: Path, dflash_gguf: Path):
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, dflash_gguf, OPTS) as block:
        yield alone, block


def test_an_engine_opened_for_trees_drafts_them_from_a_block(engines) -> None:
    _, block = engines
    assert block.tree_refusal is None and block.trees
    assert block.drafter.ctx.n_seq_max == 1  # no branch sequences: the tree is read off one pass


@pytest.mark.parametrize("shape", [TreeShape(8, 4, 3), TreeShape(16, 7, 4), TreeShape(3, 7, 4)])
def test_greedy_block_trees_emit_the_target_alone_tokens(engines, shape: TreeShape) -> None:
    alone, block = engines
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=24, draft_max=0)
        spec = block.generate(prompt, max_tokens=24, tree=shape, adaptive=False)
        assert_greedy_identical(block, prompt, base, spec, (prompt, shape))
        stats = spec.spec_stats
        trees = [t for t, _ in stats.trace_trees]
        assert trees and max(t.drafted for t in trees) == shape.nodes
        assert max(int(t.depths.max()) for t in trees) <= min(shape.depth, SPEC.block_size - 1)
        assert max(len(t.leaves()) for t in trees) > 1
        assert stats.draft_steps == stats.rounds - stats.trace_drafted.count(0)  # one drafter call a round


def test_the_identity_check_replays_block_tree_verifies(engines) -> None:
    from local_eagle.runtime.identity import IDENTICAL, check_identity

    alone, block = engines
    prompt = PROMPTS[0]
    base = alone.generate(prompt, max_tokens=24, draft_max=0)
    spec = block.generate(prompt, max_tokens=24, tree=TreeShape(8, 4, 3), adaptive=False)
    assert spec.spec_stats.trace_trees and check_identity(block, prompt, base, spec).verdict == IDENTICAL


def test_a_width_one_block_tree_is_the_blocks_chain(engines) -> None:
    _, block = engines
    for prompt in PROMPTS:
        chain = block.generate(prompt, max_tokens=24, draft_max=4, adaptive=False)
        tree = block.generate(prompt, max_tokens=24, tree=TreeShape(4, 4, 1), adaptive=False)
        assert tree.tokens == chain.tokens
        assert tree.spec_stats.trace_drafted == chain.spec_stats.trace_drafted
        assert tree.spec_stats.trace_accepted == chain.spec_stats.trace_accepted


def _arrange(monkeypatch: pytest.MonkeyPatch, truth: list[int], second_every: int) -> None:
    """Block rows that hold the target's next token: first at most positions, second (behind a wrong first) at
    every ``second_every``-th, where a chain stops and a tree goes on through the sibling."""
    from local_eagle.runtime import dflash

    propose = dflash.BlockDrafter.propose

    def arranged(self, last_token: int, n_past: int, seq: int = 0, n_draft: int | None = None) -> dflash.Block:
        got = propose(self, last_token, n_past, seq, n_draft)
        for i, row in enumerate(got.logits):
            p = n_past + 1 + i
            if p < len(truth):
                top = row.max()
                if p % second_every:
                    row[truth[p]] = top + 10.0
                else:
                    row[(truth[p] + 1) % len(row)] = top + 10.0
                    row[truth[p]] = top + 9.9
        return got

    monkeypatch.setattr(dflash.BlockDrafter, "propose", arranged)


def test_a_block_tree_accepts_through_siblings_where_the_chain_stops(engines, monkeypatch) -> None:
    """The drafter's second choice right at every third position: the chain stops there, the tree accepts the
    sibling and goes on; more tokens per target call at the same verify rows, the drafter fed only the accepted
    path's rows (``push`` refuses a row twice or out of order), the output the target's."""
    alone, block = engines
    prompt = PROMPTS[1]
    base = alone.generate(prompt, max_tokens=48, draft_max=0)
    _arrange(monkeypatch, [*block.tokenize(prompt).tolist(), *base.tokens], 3)
    chain = block.generate(prompt, max_tokens=48, draft_max=7, adaptive=False)
    tree = block.generate(prompt, max_tokens=48, tree=TreeShape(7, 7, 2), adaptive=False)
    assert_greedy_identical(block, prompt, base, chain)
    assert_greedy_identical(block, prompt, base, tree)
    assert tree.stats.acceptance_length > 1.3 * chain.stats.acceptance_length  # 4.27 against 2.94
    siblings = [r for t, path in tree.spec_stats.trace_trees for r in path if t.children[t.parents[r]][0] != r]
    assert siblings  # accepted second choices


def test_greedy_block_trees_with_a_repeat_penalty_stay_identical(engines) -> None:
    alone, block = engines
    sampling = SamplingParams(temperature=0.0, repeat_penalty=1.3, repeat_last_n=16)
    for prompt in PROMPTS:
        base = alone.generate(prompt, max_tokens=24, draft_max=0, sampling=sampling)
        spec = block.generate(prompt, max_tokens=24, tree=TreeShape(8, 4, 3), adaptive=False, sampling=sampling)
        assert_greedy_identical(block, prompt, base, spec, prompt)
        assert spec.spec_stats.trace_trees


def test_sampling_block_trees_keep_the_target_distribution(engines, monkeypatch) -> None:
    """Three tokens, the last two through a tree round whose depths' candidates are drawn once from the block's
    rows, here arranged to favour tokens the target may pick there (rows independent of each other, as a block's
    are): siblings tried in turn, the residual resampled; the joint is the target's (chi-square)."""
    from local_eagle.runtime import dflash
    from local_eagle.testing.chisquare import sampling_check, target_joint

    alone, block = engines
    sp = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = PROMPTS[2]
    joint = target_joint(block, prompt, sp, 3)
    n_prompt = len(block.tokenize(prompt))
    likely = [sorted({key[i] for key in joint}) for i in range(3)]
    propose = dflash.BlockDrafter.propose

    def arranged(self, last_token: int, n_past: int, seq: int = 0, n_draft: int | None = None) -> dflash.Block:
        got = propose(self, last_token, n_past, seq, n_draft)
        if n_past == n_prompt:  # the first round: row i drafts output token i + 1
            for i, row in enumerate(got.logits[:2]):
                row[likely[i + 1]] += 2.0 + row.max() - row[likely[i + 1]].min()
        return got

    monkeypatch.setattr(dflash.BlockDrafter, "propose", arranged)
    check = sampling_check(block, prompt, sp, 1500, n_tokens=3, max_tokens=4, tree=TreeShape(8, 3, 3),
                           adaptive=False)  # fmt: skip
    assert 0 < check.accepted < check.drafted, check
    assert check.pvalue > 1e-3, check


def test_sampling_block_trees_are_reproducible_with_a_seed_and_keep_the_penalty(engines) -> None:
    _, block = engines
    sampling = SamplingParams(temperature=1.0, repeat_penalty=1.2, seed=11)
    runs = [block.generate(PROMPTS[0], max_tokens=20, tree=TreeShape(8, 4, 3), adaptive=False, sampling=sampling)
            for _ in range(2)]  # fmt: skip
    assert runs[0].tokens == runs[1].tokens and runs[0].spec_stats.trace_trees


def test_block_trees_under_a_grammar_draft_chains_with_the_constrained_target_tokens(engines) -> None:
    from local_eagle.runtime.grammar import GrammarSpec

    alone, block = engines
    grammar = GrammarSpec.regex("[a-z ]{4,30}")
    base = alone.generate(PROMPTS[0], max_tokens=24, draft_max=0, grammar=grammar)
    spec = block.generate(PROMPTS[0], max_tokens=24, tree=TreeShape(8, 4, 3), adaptive=False, grammar=grammar)
    assert spec.tokens == base.tokens
    assert spec.spec_stats.drafted_tokens > 0 and not spec.spec_stats.trace_trees


def test_a_batch_of_block_sequences_asked_for_trees_drafts_chains(target_gguf: Path, dflash_gguf: Path) -> None:
    with Engine(target_gguf, None, OPTS) as alone:
        bases = [alone.generate(p, max_tokens=16, draft_max=0).tokens for p in PROMPTS]
    with Engine(target_gguf, dflash_gguf, replace(OPTS, parallel=3)) as batch:
        assert not batch.trees
        got: dict[int, list[int]] = {}

        def run(i: int) -> None:
            got[i] = batch.generate(PROMPTS[i], max_tokens=16, tree=TreeShape(8, 4, 3), adaptive=False).tokens

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [got[i] for i in range(len(PROMPTS))] == bases


def test_adaptive_block_trees_where_rows_are_cheap_and_chains_where_they_cost(engines, monkeypatch) -> None:
    """The cost policy prices a block's tree as an EAGLE tree's, with no drafter call per level: on GPU-like
    costs it drafts trees, on costs proportional to rows none; the output is the target's either way."""
    from local_eagle.runtime.policy.shapes import TreeChoice
    from local_eagle.testing.costs import deciding_on

    alone, block = engines
    prompt = PROMPTS[1]
    base = alone.generate(prompt, max_tokens=48, draft_max=0)
    _arrange(monkeypatch, [*block.tokenize(prompt).tolist(), *base.tokens], 4)  # a drafter right often
    shape = TreeShape(16, 7, 4)
    for ratios, trees_wanted in [([1.0 + 0.01 * r for r in range(18)], True), (list(range(1, 19)), False)]:
        with deciding_on(block, ratios, 5e-5, TreeChoice(shape, later_calls=False)):
            spec = block.generate(prompt, max_tokens=48, draft_max=7, adaptive=True, tree=shape)
        assert_greedy_identical(block, prompt, base, spec, ratios[1])
        trees = len(spec.spec_stats.trace_trees)
        assert (trees > 0.5 * spec.stats.target_calls) if trees_wanted else trees == 0, (ratios[1], trees)

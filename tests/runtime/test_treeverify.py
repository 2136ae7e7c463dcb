"""A draft tree verified in one target decode computes each row as a plain decode of its path would."""

from __future__ import annotations

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.tree import DraftTree, VerifyTree
from local_eagle.runtime.treeverify import PrefixTags, TreeBatch
from local_eagle.testing.tiny import write_tiny_target
from local_eagle.testing.tiny_pair import N_VOCAB, SPEC

PROMPT = np.array([5, 70, 71, 72, 40, 90, 33, 101, 102, 7], dtype=np.int32)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_tiny_target(tmp_path_factory.mktemp("tv") / "t.gguf", SPEC, seed=5)
    m = Model(path)
    yield m
    m.close()


def _context(model: Model, n_seq_max: int = 1) -> Context:
    return Context(model, ContextOptions(n_ctx=256, n_batch=64, n_ubatch=64, n_threads=1, n_seq_max=n_seq_max))


def _plain_last(model: Model, tokens: np.ndarray) -> np.ndarray:
    ctx = _context(model)
    try:
        ctx.decode(tokens, np.arange(len(tokens)), np.arange(len(tokens)) == len(tokens) - 1)
        return ctx.logits(len(tokens) - 1, N_VOCAB)
    finally:
        ctx.close()


def _random_tree(seed: int, n: int) -> VerifyTree:
    rng = np.random.default_rng(seed)
    tree = DraftTree(int(PROMPT[-1]))
    frontier = [0]
    for _ in range(4):
        nxt = []
        for node in frontier:
            k = int(rng.integers(1, 4))
            tokens = rng.choice(np.arange(3, N_VOCAB), size=k, replace=False)
            nxt += tree.add_children(node, tokens, np.sort(np.log(rng.random(k)))[::-1])
        frontier = nxt
    return tree.select(n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_tree_row_is_its_path_decoded_alone(model, seed):
    tree = _random_tree(seed, 20)
    assert len(tree.leaves()) > 2
    ctx = _context(model, n_seq_max=32)
    try:
        prefix = PROMPT[:-1]
        ctx.decode(prefix, np.arange(len(prefix)), False)
        tags = PrefixTags()
        batch = TreeBatch(tree, len(prefix), tags=tags)
        batch.decode(ctx)
        rows = np.stack([ctx.logits(r, N_VOCAB) for r in range(len(tree))])
        worst = 0.0
        for r in range(len(tree)):
            want = _plain_last(model, np.concatenate([PROMPT, tree.path_tokens(r)]).astype(np.int32))
            tol = 2e-3 * float(want.max() - want.min())
            worst = max(worst, float(np.abs(rows[r] - want).max()) / tol)
        assert worst <= 1.0, worst
        # the control: a row that also saw a sibling's cell would move by far more than that tolerance
        deep = next(r for r in range(len(tree)) if tree.depths[r] >= 2)
        path = tree.path_tokens(deep)
        wrong = np.concatenate([PROMPT, [path[0] + 1], path]).astype(np.int32)
        want = _plain_last(model, np.concatenate([PROMPT, path]).astype(np.int32))
        assert np.abs(_plain_last(model, wrong) - want).max() > 10 * 2e-3 * float(want.max() - want.min())

        # keep one accepted path (on a leaf that is not sequence 0): the cache is then that path alone
        leaves = tree.leaves()
        accepted = int(tree.parents[leaves[-1]]) if tree.depths[leaves[-1]] > 1 else leaves[-1]
        batch.keep(ctx, accepted)
        kept = np.concatenate([PROMPT, tree.path_tokens(accepted)]).astype(np.int32)
        assert ctx.pos_max() == len(kept) - 1
        for seq in range(1, batch.n_leaves):  # a leaf's sequence holds the prefix alone, for the next tree
            assert ctx.pos_max(seq) == len(prefix) - 1 and tags.upto[seq] == len(prefix)
        ctx.decode(np.array([9], dtype=np.int32), np.array([len(kept)]), True)
        after = ctx.logits(0, N_VOCAB)
        want = _plain_last(model, np.append(kept, 9).astype(np.int32))
        assert np.abs(after - want).max() <= 2e-3 * float(want.max() - want.min())
        # and the next tree verifies from there
        nxt = TreeBatch(_random_tree(seed + 10, 8), len(kept) + 1, tags=tags)
        nxt.tree.tokens[0] = 11
        nxt.decode(ctx)
        for r in range(len(nxt.tree)):
            want = _plain_last(model, np.concatenate([kept, [9, 11], nxt.tree.path_tokens(r)]).astype(np.int32))
            assert np.abs(ctx.logits(r, N_VOCAB) - want).max() <= 2e-3 * float(want.max() - want.min())
    finally:
        ctx.close()


def test_a_chain_is_sequence_zero_alone(model):
    tree = VerifyTree.chain(int(PROMPT[-1]), [20, 21, 22])
    ctx = _context(model)
    try:
        prefix = PROMPT[:-1]
        ctx.decode(prefix, np.arange(len(prefix)), False)
        batch = TreeBatch(tree, len(prefix))
        assert batch.n_leaves == 1
        batch.decode(ctx)
        batch.keep(ctx, 2)
        assert ctx.pos_max() == len(prefix) + 2
    finally:
        ctx.close()


def test_too_many_leaves_is_a_clear_error(model):
    tree = _random_tree(0, 20)
    ctx = _context(model, n_seq_max=2)
    try:
        with pytest.raises(LocalEagleError, match="leaves needs a context"):
            TreeBatch(tree, 0, tags=PrefixTags()).decode(ctx)
    finally:
        ctx.close()


@pytest.mark.parametrize("seed", [3, 4])
def test_rounds_of_trees_and_chains_keep_the_prefix_shared(model, seed):
    """Trees of more and fewer leaves, chains between them, accepted paths on any leaf: every verified row is its
    path decoded alone, and the leaf sequences hold the prefix alone between rounds (PrefixTags), never a row of
    an earlier tree."""
    rng = np.random.default_rng(seed)
    ctx = _context(model, n_seq_max=32)
    tags = PrefixTags()
    try:
        kept = PROMPT[:-1].copy()
        ctx.decode(kept, np.arange(len(kept)), False)
        last = int(PROMPT[-1])
        for round_ in range(8):
            if round_ % 3 == 2:  # a chain on sequence 0
                tree = VerifyTree.chain(last, [int(t) for t in rng.integers(3, N_VOCAB, 2)])
            else:
                tree = _random_tree(seed * 100 + round_, int(rng.integers(6, 20)))
                tree.tokens[0] = last
            batch = TreeBatch(tree, len(kept), tags=tags)
            batch.decode(ctx)
            for r in range(len(tree)):
                want = _plain_last(model, np.concatenate([kept, [last], tree.path_tokens(r)]).astype(np.int32))
                assert np.abs(ctx.logits(r, N_VOCAB) - want).max() <= 2e-3 * float(want.max() - want.min()), (round_, r)
            accepted = int(rng.integers(0, len(tree)))
            batch.keep(ctx, accepted)
            kept = np.concatenate([kept, [last], tree.path_tokens(accepted)]).astype(np.int32)
            last = int(rng.integers(3, N_VOCAB))
            assert ctx.pos_max() == len(kept) - 1
            for seq, upto in tags.upto.items():
                assert ctx.pos_max(seq) == upto - 1 and upto <= len(kept)
    finally:
        ctx.close()

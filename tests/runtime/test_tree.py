"""Draft trees as pure maths: growing, best-N selection, sequence ids, greedy and sampling walks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.tree import DraftTree, TreeShape, VerifyTree, children_slots, walk_greedy, walk_sampling


def _tree() -> DraftTree:
    """root -> a (0.6), b (0.3), c (0.1); a -> d (0.55), e (0.35); b -> f (0.9); d -> g (0.8)."""
    t = DraftTree(100)
    a, b, c = t.add_children(0, [1, 2, 3], np.log([0.6, 0.3, 0.1]))
    d, e = t.add_children(a, [4, 5], np.log([0.55, 0.35]))
    (f,) = t.add_children(b, [6], np.log([0.9]))
    t.add_children(d, [7], np.log([0.8]))
    return t


def test_nodes_parents_depths_scores():
    t = _tree()
    assert t.tokens == [100, 1, 2, 3, 4, 5, 6, 7]
    assert t.parents == [-1, 0, 0, 0, 1, 1, 2, 4]
    assert t.depths == [0, 1, 1, 1, 2, 2, 2, 3]
    assert t.scores[7] == pytest.approx(np.log(0.6 * 0.55 * 0.8))
    assert t.ranks == [0, 0, 1, 2, 0, 1, 0, 0]
    assert t.frontier(2, 2) == [4, 6]  # d: 0.33, f: 0.27, e: 0.21
    with pytest.raises(AssertionError):
        t.add_children(1, [9], [0.0])


def test_rows_put_the_first_choice_chain_first():
    v = _tree().select(100)
    assert v.nodes[:4] == [0, 1, 4, 7]  # root, a, d, g: the cells kept when the first choices are accepted
    assert v.nodes[4:] == [2, 3, 5, 6]


def test_best_n_selection_is_the_n_best_and_connected():
    t = _tree()
    # cumulative: a .6, d .33, b .3, f .27, g .264, e .21, c .1
    best = [1, 4, 2, 6, 7, 5]
    for n in range(1, 7):
        want = set(best[:n])
        v = t.select(n)
        assert set(v.nodes) == {0} | want, n
        assert v.drafted == n
        assert all(v.depths[v.parents[r]] == v.depths[r] - 1 for r in range(1, len(v)))
        assert all(v.parents[r] < r for r in range(1, len(v)))  # every row after its parent
        for seq in range(len(v.leaves())):  # each sequence's rows in position order (llama.cpp's rule)
            depths = [int(v.depths[r]) for r in range(len(v)) if seq in v.seq_ids()[r]]
            assert depths == sorted(depths)
    v = t.select(100)
    assert len(v) == len(t)


def test_selection_keeps_earlier_siblings_first():
    """A later slot is never verified without the earlier ones, even when its own subtree scores higher."""
    t = DraftTree(0)
    a, b = t.add_children(0, [1, 2], np.log([0.5, 0.5]))
    t.add_children(b, [3], [0.0])
    v = t.select(2)
    assert v.nodes == [0, a, b]
    t2 = DraftTree(0)
    a, b = t2.add_children(0, [1, 2], [np.log(0.4), np.log(0.9)])  # not sorted: slot scores may not be
    assert t2.select(1).nodes == [0, a]


def test_seq_ids_one_per_leaf_and_every_row_sees_its_ancestors():
    t = _tree()
    v = t.select(100)
    seqs = v.seq_ids()
    leaves = v.leaves()
    assert len(leaves) == 4  # c, e, f, g
    assert seqs[0] == [0, 1, 2, 3]
    for i, leaf in enumerate(leaves):
        assert seqs[leaf] == [i]
    # simulate llama.cpp's mask: a row sees cells holding its first seq at positions not after its own
    for r in range(len(v)):
        for first in seqs[r]:  # whichever id comes first
            seen = {c for c in range(len(v)) if first in seqs[c] and v.depths[c] <= v.depths[r]}
            assert seen == {0, *v.path(r)}, (r, first)
    # a chain is one sequence
    chain = VerifyTree.chain(9, [1, 2, 3])
    assert chain.seq_ids() == [[0]] * 4 and chain.leaves() == [3]
    assert chain.path_tokens(3) == [1, 2, 3]


def test_greedy_walk_follows_the_target():
    v = _tree().select(100)
    row = {node: r for r, node in enumerate(v.nodes)}
    choices = np.full(len(v), 42)
    choices[row[0]] = 1  # a
    choices[row[1]] = 4  # d
    choices[row[4]] = 7  # g
    choices[row[7]] = 11  # bonus after g
    path, nxt = walk_greedy(v, choices)
    assert [v.nodes[r] for r in path] == [1, 4, 7] and nxt == 11
    choices[row[0]] = 2  # b, then f rejected
    path, nxt = walk_greedy(v, choices)
    assert [v.nodes[r] for r in path] == [2] and nxt == 42
    choices[row[0]] = 50
    assert walk_greedy(v, choices) == ([], 50)


def test_children_slots_greedy_and_sampled():
    q = np.array([0.1, 0.0, 0.5, 0.15, 0.25])
    idx, logq = children_slots(q, 3)
    assert list(idx) == [2, 4, 3] and np.allclose(np.exp(logq), [0.5, 0.25, 0.15])
    idx, _ = children_slots(q, 10)
    assert list(idx) == [2, 4, 3, 0]  # never a zero-probability token
    rng = np.random.default_rng(0)
    firsts = np.bincount([children_slots(q, 2, rng)[0][0] for _ in range(20000)], minlength=5)
    assert stats.chisquare(firsts[[0, 2, 3, 4]], 20000 * q[[0, 2, 3, 4]]).pvalue > 1e-3
    # the second draw is without replacement: given the first was 2, it is q without 2, renormalised
    seconds = [s for f, s in (children_slots(q, 2, rng)[0] for _ in range(20000)) if f == 2]
    counts = np.bincount(seconds, minlength=5)
    want = np.array([0.1, 0, 0, 0.15, 0.25]) / 0.5
    assert counts[2] == 0
    assert stats.chisquare(counts[[0, 3, 4]], len(seconds) * want[[0, 3, 4]]).pvalue > 1e-3


def test_tree_shape_checks():
    assert TreeShape.for_nodes(15) == TreeShape(15, 15, 8) and TreeShape.for_nodes(63).depth == 32
    assert TreeShape.for_nodes(3).width == 3 and TreeShape(4, 4, 1).chain
    for bad in [(0, 1, 1), (256, 2, 2), (4, 0, 1), (4, 2, 0), (4, 2, 65)]:
        with pytest.raises(LocalEagleError):
            TreeShape(*bad)


# --- sampling: exactly the target's distribution ------------------------------------------------------

V = 4


def _dists(seed: int) -> tuple[dict, dict]:
    """Target and draft next-token distributions for every context of up to 2 tokens, over V tokens."""
    rng = np.random.default_rng(seed)
    contexts = [()] + [(a,) for a in range(V)] + list(itertools.product(range(V), repeat=2))
    p, q = {}, {}
    for c in contexts:
        p[c] = rng.dirichlet(np.full(V, 0.7))
        q[c] = rng.dirichlet(np.full(V, 0.7))
        q[c][rng.integers(V)] = 0.0  # the draft misses a token the target may want
        q[c] /= q[c].sum()
    return p, q


def _draft_and_walk(
    p: dict, q: dict, rng: np.random.Generator, quotas: list[int], greedy_slots: bool
) -> tuple[int, int]:
    """Grow a depth-2 tree of width 2, verify nodes per depth up to ``quotas``, emit the first two tokens."""
    tree = DraftTree(0)
    context = {0: ()}
    idx, logq = children_slots(q[()], 2, None if greedy_slots else rng)
    for node in tree.add_children(0, idx, logq):
        context[node] = (tree.tokens[node],)
    for node in tree.frontier(1, 2):
        idx, logq = children_slots(q[context[node]], 2, None if greedy_slots else rng)
        for child in tree.add_children(node, idx, logq):
            context[child] = context[node] + (tree.tokens[child],)
    v = tree.select_by_depth(quotas)
    ctx = [context[node] for node in v.nodes]
    path, nxt = walk_sampling(v, lambda r: p[ctx[r]], lambda r: q[ctx[r]], rng)
    out = [int(v.tokens[r]) for r in path] + [nxt]
    if len(out) == 1:  # the second token: what the target alone samples after the first
        out.append(int(rng.choice(V, p=p[(out[0],)])))
    return out[0], out[1]


def _joint(p: dict) -> np.ndarray:
    return np.array([[p[()][a] * p[(a,)][b] for b in range(V)] for a in range(V)]).ravel()


@pytest.mark.parametrize("quotas", [[1], [2, 1], [2, 4]])
def test_tree_sampling_gives_the_target_distribution(quotas):
    """Two tokens emitted through a sampled tree: their joint distribution is the target's (chi-square)."""
    p, q = _dists(seed=sum(quotas))
    rng = np.random.default_rng(100 + len(quotas))
    trials = 30000
    counts = np.zeros(V * V)
    for _ in range(trials):
        a, b = _draft_and_walk(p, q, rng, quotas, greedy_slots=False)
        counts[a * V + b] += 1
    want = _joint(p) * trials
    keep = want > 0
    assert stats.chisquare(counts[keep], want[keep]).pvalue > 1e-4


def test_negative_control_a_planted_bias_fails():
    """The same test catches a bias: children taken as the draft's top choices (not drawn from it) but
    verified as if drawn, which over-emits the draft's favourites."""
    p, q = _dists(seed=3)
    rng = np.random.default_rng(7)
    trials = 30000
    counts = np.zeros(V * V)
    for _ in range(trials):
        a, b = _draft_and_walk(p, q, rng, [2, 4], greedy_slots=True)
        counts[a * V + b] += 1
    want = _joint(p) * trials
    keep = want > 0
    assert stats.chisquare(counts[keep], want[keep]).pvalue < 1e-6


def test_slot_calibration_learns_acceptance_by_draft_probability():
    from local_eagle.runtime.tree import SlotCalibration

    cal = SlotCalibration()
    q = np.array([0.62, 0.2, 0.05])
    np.testing.assert_allclose(cal.rate(q), q)  # no data: the draft's own probabilities
    cal.observe([0.65] * 200, [True] * 190 + [False] * 10)  # an underconfident drafter: right 95% at 0.6-0.7
    cal.observe([0.21] * 100, [False] * 100)
    r = cal.rate(q)
    assert r[0] > 0.9 and r[1] < 0.05 and r[2] == pytest.approx(0.05)
    s = cal.logscores(np.array([0.65, 0.62, 0.25]))
    assert np.all(np.diff(s) <= 0)  # slots stay ordered


def test_outcomes_are_the_children_the_target_judged():
    v = _tree().select(100)
    row = {node: r for r, node in enumerate(v.nodes)}
    path = [row[1], row[4]]  # a, then d accepted; g (d's child) rejected
    probs, accepted = v.outcomes(path)
    judged = sorted((round(p, 6), a) for p, a in zip(probs, accepted, strict=True))
    assert judged == sorted([(0.6, True), (0.3, False), (0.1, False), (0.55, True), (0.35, False), (0.8, False)])


def test_selection_by_depth_quotas():
    t = _tree()
    v = t.select_by_depth([2, 2])
    assert v.nodes == [0, 1, 4, 2, 6]  # depth 1: a, b; depth 2: d (.33), f (.27) ahead of e (.21); a-d first
    assert v.quotas() == [2, 2]
    assert set(t.select_by_depth([1, 5, 1]).nodes) == {0, 1, 4, 5, 7}  # only a's children follow a; g after d
    assert t.select_by_depth([0, 3]).nodes == [0]  # nothing below an empty depth
    assert t.select(6).quotas() == [2, 3, 1]


def _grow(seed: int, n: int, depth: int, width: int, prune: bool) -> tuple[set, int]:
    """A tree grown by a fake drafter (q a function of the path); its n best as paths, and the rows drafted."""
    tree = DraftTree(0)
    paths = {0: ()}

    def expand(node: int) -> None:
        rng = np.random.default_rng(hash((seed, paths[node])) % 2**32)
        q = rng.dirichlet(np.full(20, 0.3))
        idx, logq = children_slots(q, width)
        for child in tree.add_children(node, idx, logq):
            paths[child] = paths[node] + (tree.tokens[child],)

    expand(0)
    rows = 0
    for d in range(1, depth):
        frontier = tree.frontier(d, width)
        if prune:
            frontier = tree.worth_expanding(frontier, n)
        rows += len(frontier)
        for node in frontier:
            expand(node)
    return {paths[i] for i in tree.select(n).nodes}, rows


@pytest.mark.parametrize("seed", range(6))
def test_pruned_growth_chooses_the_same_n_best(seed):
    """Greedy growth skips nodes that can no longer reach the n best: the same tree is verified, drafting less."""
    full, full_rows = _grow(seed, 15, 10, 6, prune=False)
    pruned, pruned_rows = _grow(seed, 15, 10, 6, prune=True)
    assert pruned == full and len(full) == 16
    assert pruned_rows < full_rows


def test_top_k_matches_argpartition_order():
    """tree.top_k's block-maxima search gives argpartition's indices in the same order, ties and NaN included."""
    from local_eagle.runtime.tree import top_k

    def reference(v: np.ndarray, k: int) -> np.ndarray:
        top = np.argpartition(-v, k - 1)[:k]
        return top[np.argsort(-v[top], kind="stable")]

    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.choice([100, 4096, 5000, 32001]))
        if trial % 4 == 0:
            v = rng.normal(size=n).astype(np.float32)
        elif trial % 4 == 1:
            v = rng.integers(0, 40, size=n).astype(np.float32)  # ties in the top k
        elif trial % 4 == 2:
            v = np.full(n, 0.25, dtype=np.float32)
            v[rng.integers(0, n, 3)] = 1.0  # a tie at the boundary of the top k
        else:
            v = rng.gumbel(size=n)
            v[rng.integers(0, n)] = np.nan
        k = int(rng.integers(1, 20))
        assert np.array_equal(top_k(v, k), reference(v, k)), (trial, n, k)
    # a flat tail under k+1 distinct values, two of them in one group (every m-th value): the floor is the tail's
    # value, so the whole row is at or above it; argpartition takes over and the answer is the same
    for k in (1, 8, 19):
        v = np.full(32000, -12.0, dtype=np.float32)
        at = [5, 5 + 32000 // 128, *rng.choice(np.arange(300, 32000), k - 1, replace=False)]
        v[at] = -np.arange(1, k + 2, dtype=np.float32) / 10
        assert np.array_equal(top_k(v, k), reference(v, k)), k

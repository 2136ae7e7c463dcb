"""The draft-shape policy's maths, without a model: which nodes pay for their rows, when a tree is tried."""

from __future__ import annotations

import numpy as np

from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.shapes import (
    Prices,
    TreeChoice,
    grow,
    path_values,
    prior_quotas,
    row_cost,
    verify_count,
    worth_expanding,
)
from local_eagle.runtime.tree import DraftTree, TreeShape
from local_eagle.testing.costs import FrozenCosts


def _policy(ratios: list[float], draft_step: float = 5e-5) -> DraftLengthPolicy:
    policy = DraftLengthPolicy(1e-3, 8)
    policy.costs = FrozenCosts(ratios, draft_step=draft_step)
    policy.replan()
    return policy


GPU = [1.0 + 0.01 * r for r in range(64)]  # a 64-row call 1.6x one row
CPU = [float(r) for r in range(1, 65)]  # every row a full pass


def test_verify_count_keeps_the_nodes_worth_their_rows():
    T = np.array([0.0, *[1.0 + 0.1 * r for r in range(10)]])  # each extra row costs 0.1 of the first
    values = np.array([0.9, 0.5, 0.3, 0.12, 0.08, 0.01])
    assert verify_count(values, T, rate=1.0) == 4  # 0.12 > 0.1 pays, 0.08 does not
    assert verify_count(values, T, rate=10.0) == 0  # a row costs a whole token at this rate
    assert verify_count(np.zeros(0), T, rate=1.0) == 0
    # a big first step, paid back by the nodes after it: the best prefix, not the first stop
    T2 = np.array([0.0, 1.0, 2.0, 2.05, 2.1, 2.15])
    assert verify_count(np.array([0.6, 0.5, 0.5, 0.5]), T2, rate=1.0) == 4


def test_path_values_multiply_calibrated_slots_and_extend():
    tree = DraftTree(7)
    a, b = tree.add_children(0, [1, 2], np.log([0.6, 0.3]), [0.6, 0.3])
    values = path_values(tree, lambda q: q, [])
    assert values == [1.0, 0.6, 0.3]
    (c,) = tree.add_children(a, [3], np.log([0.5]), [0.5])
    assert path_values(tree, lambda q: q, values)[c] == 0.6 * 0.5


def test_worth_expanding_drops_nodes_that_cannot_pay():
    values = [1.0, 0.5, 0.05, 0.002]
    assert worth_expanding([1, 2, 3], values, row_cost=0.01, call_cost=0.01, rate=1.0) == [1, 2]
    assert worth_expanding([1, 2, 3], values, row_cost=0.01, call_cost=1.0, rate=1.0) == []  # the call costs more
    assert worth_expanding([], values, 0.01, 0.01, 1.0) == []
    assert row_cost(np.array([0.0, 1.0, 1.5, 2.0]), 2) == 0.5


def test_grow_prices_a_tree_down_to_a_chain_where_rows_cost_a_pass():
    """The same drafter outputs grow a bushy tree on GPU prices and a short chain on CPU prices."""
    shape = TreeShape(15, 4, 3)
    rng = np.random.default_rng(0)
    slot = np.array([0.7, 0.2, 0.05])

    def make() -> tuple[DraftTree, callable]:
        tree = DraftTree(0)
        tree.add_children(0, [1, 2, 3], np.log(slot), slot)

        def expand(depth: int, frontier: list[int]) -> None:
            for node in frontier:
                p = np.sort(rng.dirichlet([4, 1, 0.3]))[::-1]
                tree.add_children(node, [1, 2, 3], np.log(p), p)

        return tree, expand

    sizes = {}
    for name, ratios in (("gpu", GPU), ("cpu", CPU)):
        T = np.array([0.0, *ratios])
        rate = 1.5 if name == "gpu" else 1.0
        prices = Prices(lambda q: q, T, rate, row_cost(T, 15), 0.02)
        tree, expand = make()
        order, expected = grow(tree, shape, 15, expand, greedy=True, prices=prices)
        assert expected >= 1.0
        sizes[name] = len(order)
        assert len(set(order)) == len(order) and all(tree.parents[i] in (0, *order) for i in order)  # connected
    assert sizes["gpu"] >= 8 and sizes["cpu"] <= 1, sizes
    tree, expand = make()
    assert len(grow(tree, shape, 15, expand, greedy=True, prices=None)[0]) == 15  # a fixed tree verifies its n best


def test_trees_are_never_tried_where_rows_cost_a_full_pass():
    choice = TreeChoice(TreeShape(63, 8, 8))
    policy = _policy(CPU)
    assert choice.ceiling(policy) < policy.rate
    for _ in range(5000):
        assert not choice.prefer_tree(policy)
        choice.chose_chain()


def test_trees_are_tried_where_rows_are_cheap_and_kept_while_they_beat_the_chain():
    choice = TreeChoice(TreeShape(63, 8, 8), explore_first=16)
    policy = _policy(GPU)
    assert choice.ceiling(policy) > policy.rate
    assert choice.prefer_tree(policy)  # nothing learnt yet: try one
    choice.observe(policy, tokens=5, rows=30, calls=6, call=5e-5)
    assert choice.tree_rate(policy) > policy.rate
    assert all(choice.prefer_tree(policy) for _ in range(10))


def test_a_losing_tree_is_retried_ever_more_rarely():
    choice = TreeChoice(TreeShape(63, 8, 8), explore_first=16, explore_max=256)
    policy = _policy(GPU)
    tried = []
    for r in range(3000):
        if choice.prefer_tree(policy):
            tried.append(r)
            choice.observe(policy, tokens=1, rows=40, calls=7, call=5e-4)  # a tree that never pays
        else:
            choice.chose_chain()
    gaps = np.diff(tried)
    assert list(gaps[:5]) == [33, 65, 129, 257, 257], gaps[:6]  # 16, 32, ... rounds of chains between tries, capped
    assert len(tried) < 20


def test_sampling_trees_start_from_a_tree_not_a_chain():
    q = prior_quotas(TreeShape(15, 8, 4), 15)
    assert sum(q) == 15 and q[0] > 1 and len(q) > 1
    assert prior_quotas(TreeShape(3, 1, 3), 3) == [3]
    assert prior_quotas(TreeShape(5, 5, 1), 5) == [1, 1, 1, 1, 1]

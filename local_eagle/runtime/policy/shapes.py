"""Which draft shape a round runs, and how big: nothing or a chain (the draft-length policy), or a tree.

A tree pays where a target call of many rows costs little more than one (a GPU): its off-path nodes are
alternatives, each accepted less often than the drafter's first choice, and each costs a verify row. So the
choice is made on the measured costs, like the chain's stopping rule (``runtime.policy.draftlen``) and with the same
objective, tokens per second over the long run (Dinkelbach's parametrisation: a node is worth its row when its
chance of being on the accepted path exceeds ``rate`` times the row's cost, ``rate`` being the best long-run
tokens per second found so far):

- before a round, :meth:`TreeChoice.prefer_tree`: a tree, or the policy's chain, from what trees yielded in
  earlier rounds, never where even a perfect tree would lose (a CPU whose calls cost in proportion to rows);
- while drafting, :func:`worth_expanding`: only frontier nodes whose children could pay for their rows, and
  no drafter call at all when none could pay for the call;
- after drafting, :func:`verify_count`: how many of the best nodes to verify.

A node's chance of being on the accepted path is the product of its ancestors' and its own slot acceptance,
the policy's calibration (:class:`~local_eagle.runtime.policy.draftlen.AcceptanceModel`) applied to each slot's draft
probability; the tree's rounds feed that calibration too. Every decision reads the drafter's outputs and
earlier rounds only, never the target's output at the positions the round verifies, so output stays lossless.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.tree import DraftTree, TreeShape


def path_values(tree: DraftTree, accept: Callable[[np.ndarray], np.ndarray], values: list[float]) -> list[float]:
    """Extend ``values`` (node i's chance of being on the accepted path) to the nodes added since; node 0 is 1."""
    start = len(values)
    if start == 0:
        values.append(1.0)
        start = 1
    if start < len(tree):
        a = accept(np.asarray(tree.probs[start:], dtype=np.float64))
        for i, ai in enumerate(a.tolist(), start):
            values.append(values[tree.parents[i]] * ai)
    return values


def verify_count(values: np.ndarray, T: np.ndarray, rate: float) -> int:
    """How many of ``values`` (best first, each node's chance of being on the accepted path) to verify: the N that
    maximises their sum minus ``rate`` times the target call of N + 1 rows (``T[r]``, at least N + 2 entries)."""
    n = len(values)
    gain = np.concatenate(([0.0], np.cumsum(values))) - rate * T[1 : n + 2]
    return int(np.argmax(gain))


def worth_expanding(
    frontier: list[int], values: list[float], row_cost: float, call_cost: float, rate: float
) -> list[int]:
    """The frontier nodes whose children could pay for their verify rows (a child is never likelier than its
    parent to be on the path), or none when even the best could not pay for the drafter call as well."""
    if not frontier or max(values[node] for node in frontier) <= rate * (row_cost + call_cost):
        return []
    return [node for node in frontier if values[node] > rate * row_cost]


def row_cost(T: np.ndarray, nodes: int) -> float:
    """The mean cost of a verify row beyond the first, up to ``nodes`` drafted rows."""
    return float(T[nodes + 1] - T[1]) / nodes if nodes > 0 else 0.0


@dataclass(frozen=True)
class Prices:
    """What an adaptive tree round weighs its nodes with: the calibration (slot probability to acceptance), the
    target call by rows, the rate a row must earn, a verify row's cost and a later drafter call's."""

    accept: Callable[[np.ndarray], np.ndarray]
    T: np.ndarray
    rate: float
    row: float
    call: float


def grow(
    tree: DraftTree,
    shape: TreeShape,
    n_nodes: int,
    expand: Callable[[int, list[int]], None],
    *,
    greedy: bool,
    prices: Prices | None,
) -> tuple[list[int], float | None]:
    """Grow ``tree`` (the root's children in place) depth by depth, ``expand(depth, frontier)`` adding the children
    of a level's chosen nodes in one drafter call; the nodes to verify, best first, and with ``prices`` the tokens
    the round is expected to yield (1 + their chances of being on the accepted path).

    A fixed tree verifies its ``n_nodes`` best (greedy rounds expand only nodes that could still be among them); an
    adaptive one (``prices``) expands only nodes whose children could pay for their rows and verifies as many of
    its best nodes as pay for theirs.
    """
    values: list[float] = []
    for depth in range(1, min(shape.depth, n_nodes)):
        frontier = tree.frontier(depth, shape.width)
        if greedy:
            frontier = tree.worth_expanding(frontier, n_nodes)
        if prices is not None:
            frontier = worth_expanding(
                frontier, path_values(tree, prices.accept, values), prices.row, prices.call, prices.rate
            )
        if not frontier:
            break
        expand(depth, frontier)
    return priced(tree, tree.order(n_nodes), prices, values)


def priced(
    tree: DraftTree, order: list[int], prices: Prices | None, values: list[float] | None = None
) -> tuple[list[int], float | None]:
    """``order`` (a tree's best nodes, best first) cut where a node stops paying for its verify row, and the tokens
    the round is expected to yield; uncut, and None, without ``prices`` (a fixed tree). ``values``: the nodes'
    chances of being on the accepted path computed so far (:func:`path_values`), extended here."""
    if prices is None:
        return order, None
    values = path_values(tree, prices.accept, [] if values is None else values)
    chances = np.array([values[i] for i in order])
    n = verify_count(chances, prices.T, prices.rate)
    return order[:n], 1.0 + float(chances[:n].sum())


class TreeChoice:
    """Per round, a draft tree of at most ``shape`` or the adaptive policy's chain (or nothing), whichever the
    measured costs say yields more tokens per second; learnt across answers (the engine keeps one per shape).

    A tree round's worth is the tokens it was expected to yield (its verified nodes' calibrated chances, as the
    chain's expected rate counts them: one round's realised tokens vary from 1 to its depth) and what it ran (rows
    verified, drafter calls), averaged over tree rounds and priced on the policy's current cost estimates, as the
    chain's expected rate is: the two are compared on one calibration and one set of costs.

    A tree is never tried where even a perfect one (its first-choice path accepted to ``shape.depth``, one level of
    siblings verified beside it) would lose to the policy's expected rate. Elsewhere it is tried after
    ``explore_first`` chain rounds; a tried tree that loses to the chain doubles the wait before the next try (up
    to ``explore_max`` rounds), so trying costs little where trees do not pay.
    """

    def __init__(
        self,
        shape: TreeShape,
        explore_first: int = 16,
        explore_max: int = 2048,
        memory: float = 0.9,
        later_calls: bool = True,
        max_depth: int | None = None,
    ) -> None:
        self.shape = shape
        # a block drafter's trees (runtime.blocktree): one pass drafts every depth, no call per level, and no
        # deeper than the block
        self.later_calls = later_calls
        self.max_depth = max_depth
        self.explore_first = explore_first
        self.explore_max = explore_max
        self.interval = explore_first
        self.memory = memory
        self.tokens: float | None = None  # expected tokens per tree round, averaged
        self.rows = 0.0  # rows per tree verify, averaged
        self.calls = 0.0  # drafter calls per tree round after the first, averaged
        self.call: float | None = None  # seconds per drafter call after the first, averaged
        self.since_tree = 0
        self._key: tuple = ()
        self._T = np.zeros(0)
        self._first = 0.0
        self._possible = False

    recheck = 16
    """Rounds between two readings of the cost curve: every round's would cost a chain round ~0.15 ms of host time
    (the medians of 64 row counts), a few percent of a small model's decode on a CPU."""

    def verify_costs(self, policy: DraftLengthPolicy) -> np.ndarray:
        """The target call by rows up to the shape's, read from the policy's costs every ``recheck`` rounds."""
        key = (id(policy), id(policy.costs), policy.rounds // self.recheck)
        if key != self._key:
            self._key = key
            self._T = policy.costs.verify(max(self.shape.nodes + 2, self.shape.width))
            self._possible = self.ceiling(policy) > policy.rate
            # a tree every round catches up on the last tree round's tokens
            self._first = policy.costs.catch_up(self.tokens or 1.0)
        return self._T

    def tree_rate(self, policy: DraftLengthPolicy) -> float:
        """Tokens per second of the tree rounds so far, at the current costs (0 before any)."""
        if self.tokens is None:
            return 0.0
        costs = policy.costs
        lo = max(1, int(self.rows))
        T = self.verify_costs(policy)
        verify = float(T[lo] + (self.rows - lo) * (T[lo + 1] - T[lo]))
        return self.tokens / (verify + self._first + self.calls * self.call_cost(policy) + costs.host)

    def rate(self, policy: DraftLengthPolicy) -> float:
        """The best long-run tokens per second known: what a node's row must earn (Dinkelbach's parameter)."""
        return max(policy.rate, self.tree_rate(policy))

    def call_cost(self, policy: DraftLengthPolicy) -> float:
        """A drafter call on a frontier of ``shape.width`` nodes: known in advance (another machine's costs), measured,
        else one row's scaled as the target's calls scale with rows (both are the same device's matrix products)."""
        if not self.later_calls:
            return 0.0
        w = self.shape.width
        known = policy.costs.call(w)
        if known is not None:
            return known
        if self.call is not None:
            return self.call
        T = self.verify_costs(policy)
        return policy.costs.draft_step * float(T[w] / T[1])

    def prices(self, policy: DraftLengthPolicy, n_nodes: int) -> Prices:
        T = self.verify_costs(policy)[: n_nodes + 2]
        return Prices(policy.acceptance.many, T, self.rate(policy), row_cost(T, n_nodes), self.call_cost(policy))

    def ceiling(self, policy: DraftLengthPolicy) -> float:
        """A perfect tree's tokens per second: every first choice accepted, ``depth`` deep, one level of siblings."""
        costs, shape = policy.costs, self.shape
        depth = min(shape.depth, shape.nodes, self.max_depth or shape.depth)
        n = min(shape.nodes, depth + shape.width - 1)
        T = self.verify_costs(policy)
        seconds = float(T[n + 1]) + costs.catch_up(depth + 1) + (depth - 1) * self.call_cost(policy) + costs.host
        return (depth + 1) / seconds

    def prefer_tree(self, policy: DraftLengthPolicy) -> bool:
        self.verify_costs(policy)
        if not self._possible:  # as of the last reading of the costs
            return False
        chain = policy.rate
        if self.tokens is None or self.since_tree >= self.interval:
            return True
        return self.tree_rate(policy) > chain

    def chose_chain(self) -> None:
        self.since_tree += 1

    def observe(self, policy: DraftLengthPolicy, tokens: float, rows: int, calls: int, call: float | None) -> None:
        """A tree round: its expected tokens, rows verified, drafter calls after the first and their mean seconds (None
        when it made none); ``policy`` has not learnt from the round yet (its rate is the one the tree beat)."""
        m = self.memory
        explored = self.tokens is None or self.since_tree >= self.interval
        chain = policy.rate
        if explored:  # after a spell of chains the old average is stale: the costs and the calibration moved on
            self.tokens, self.rows, self.calls = float(tokens), float(rows), float(calls)
        else:
            self.tokens = m * self.tokens + (1 - m) * tokens
            self.rows = m * self.rows + (1 - m) * rows
            self.calls = m * self.calls + (1 - m) * calls
        if call is not None:
            self.call = call if self.call is None else m * self.call + (1 - m) * call
        if self.tree_rate(policy) > chain:
            self.interval = self.explore_first
        elif explored:
            self.interval = min(self.explore_max, 2 * self.interval)
        self.since_tree = 0


def prior_quotas(shape: TreeShape, nodes: int) -> list[int]:
    """Nodes per depth for a sampling round with nothing learnt yet: the best ``nodes`` of a tree whose slots
    are accepted 60%, 20%, 10%, 5%... of the time (roughly a trained drafter's), not a chain."""
    probs = 0.6 * np.array([1.0, 1 / 3, 1 / 6, 1 / 12, 1 / 24, 1 / 48, 1 / 96, 1 / 192])[: shape.width]
    tree = DraftTree(0)
    frontier = [0]
    for _ in range(min(shape.depth, nodes)):
        nxt = []
        for node in frontier[: shape.width]:
            nxt += tree.add_children(node, list(range(len(probs))), np.log(probs), probs)
        nxt.sort(key=lambda i: -tree.scores[i])
        frontier = nxt
    return tree.verify_tree(tree.order(nodes)).quotas() or [1]

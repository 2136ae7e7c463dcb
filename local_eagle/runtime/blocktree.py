"""Draft trees from one DFlash block: every depth's candidates read off the single pass that proposes the block.

A block's rows come from one forward pass over ``[last, <mask> x n]`` (``runtime.dflash``): row d is the drafter's
distribution for the token at depth d + 1, conditioned on the anchor and the masks only, never on the token chosen
at an earlier row. So the children of *every* node at depth d are the same candidates, row d's top ``width``
(greedy) or ``width`` draws without replacement from it (sampling, Gumbel top-k), and a path's probability is the
product of its rows' probabilities. The tree is the best ``nodes`` prefixes of that product, grown best first
(:func:`grow_block`: DDTree's and JetSpec's trees), with no drafter call beyond the block's; the cost policy cuts
it as it cuts an EAGLE tree (``policy.shapes.priced``), knowing no later drafter call is paid for.

Verify, accept, commit and learn are the EAGLE tree's (``runtime.treeround``, ``runtime.treeverify``,
``tree.walk_greedy`` / ``walk_sampling``); the drafter is fed the accepted path's rows only, as after a chain.

Sampling stays lossless. Recursive rejection sampling over siblings (``tree.walk_sampling``) needs, at each node
the walk reaches, children drawn without replacement from the q it is given, in order, their number fixed
independently of the tokens drawn. Here q at a node of depth d is row d's processed distribution; its children's
draws are row d's draws, made once for the block and independent of every draw and acceptance above depth d, so
given the walk reached the node they are fresh draws from q. A node's score is a sum of slot log-probabilities
(the i-th largest of its rows' q, whatever token fills slot i), the same for every parent of a depth, so which
nodes are verified never depends on a drawn token: the ``nodes`` best may be verified as they are, without the
depth quotas an EAGLE tree needs (its nodes' distributions, and thus its scores, follow the tokens above them).
The repeat penalty reads the committed tokens only for the same reason (a row's q may not follow its path); the
target applies its own penalty along each path, so this only changes how well q matches p, not what is emitted.

Grammars and parallel sequences draft chains, as for EAGLE trees (``policy.plan.plan_draft``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.shapes import priced
from local_eagle.runtime.stats import RoundStats
from local_eagle.runtime.tree import DraftTree, VerifyTree
from local_eagle.runtime.treeround import TreeRounds, clock

if TYPE_CHECKING:
    from local_eagle.runtime.dflash import BlockDrafter

Slots = tuple[np.ndarray, np.ndarray, np.ndarray]  # tokens, slot log-scores, slot probabilities, in slot order


def grow_block(tree: DraftTree, depth: int, n: int, row: Callable[[int], Slots]) -> list[int]:
    """Grow ``tree`` (its root alone) to the ``n`` most probable prefixes of ``depth`` tokens at most, best first,
    closed under parents and earlier siblings; the nodes in that order (what ``DraftTree.order`` gives).

    ``row(d)``: the children every node at depth d gets (row d of the block: depth d + 1), asked once per depth
    and only for depths a chosen node reaches (a row's distribution costs a softmax of the whole vocabulary).
    """
    rows: dict[int, Slots] = {}

    def expand(node: int) -> None:
        d = tree.depths[node]
        if d >= depth or tree.children[node]:
            return
        if d not in rows:
            rows[d] = row(d)
        tree.add_children(node, *rows[d])

    return tree.order(n, expand)


class BlockTreeRounds(TreeRounds):
    """The tree phases of one sequence whose drafter proposes blocks (``runtime.dflash.BlockDrafter``)."""

    later_calls = False  # the block's one pass drafts every depth

    @property
    def max_depth(self) -> int:  # type: ignore[override]
        """No deeper than the block's mask rows."""
        return self.drafter.spec.n_draft_max

    def dist_key(self, tree: VerifyTree, row: int) -> int:
        """A row's children were drawn from the block row of its depth, whatever its tokens."""
        return int(tree.depths[row])

    def draft(self, last_token: int, observed: RoundStats) -> tuple[VerifyTree, dict[int, np.ndarray]]:
        """Push the queued rows, propose one block as deep as the tree, and grow the tree off its rows; the
        verify tree and the draft distribution of each depth whose row was read (sampling, or a penalty)."""
        gen = self.gen
        drafter: BlockDrafter = self.drafter  # type: ignore[assignment]
        tree = DraftTree(last_token)
        dists: dict[int, np.ndarray] = {}
        depth, n_nodes = self.budget()
        if n_nodes == 0:
            return tree.select(0), dists
        started = clock()
        _, features, positions = gen.feed.take_rows()
        drafter.push(positions, features, gen.seq)
        block = drafter.propose(last_token, gen.n_past, gen.seq, n_draft=depth)
        observed.steps, observed.catch_up_rows = 1, len(positions)
        observed.catch_up_seconds = clock() - started
        history = gen.recent_history(last_token, [])  # the committed tokens: every path shares a depth's row

        def row(d: int) -> Slots:
            tokens, logq, q = self._children(block.logits[d], lambda: history)
            if q is not None:
                dists[d] = q
            return tokens, *self._slot_scores(logq)

        policy = gen.lengths
        prices = None
        if self.choice is not None and isinstance(policy, DraftLengthPolicy):
            prices = self.choice.prices(policy, n_nodes)
        order, self.expected = priced(tree, grow_block(tree, len(block.logits), n_nodes, row), prices)
        chosen = tree.verify_tree(order)
        observed.drafted = chosen.drafted
        observed.draft_seconds = clock() - started
        return chosen, dists

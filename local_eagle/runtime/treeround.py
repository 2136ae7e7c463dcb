"""A draft-verify round over a tree: the chain's phases (draft, verify, accept, commit, learn) with branches.

*Draft* grows an EAGLE-2 dynamic tree (``runtime.tree``): the round's first drafter call is the usual catch-up,
whose last row gives the root's children; each further call decodes the best ``width`` nodes of the deepest
level as one batch, every row on its own drafter sequence holding the shared context and that node's ancestors
(copied from its parent's sequence; two alternating sets of sequence ids, so a level's parents stay intact while
its children are placed), fed its parent's post-norm state. *Verify* decodes the ``nodes`` best nodes in one
target call (``runtime.treeverify``). *Accept* walks the tree: greedy match, or recursive rejection sampling
over the siblings. *Commit* keeps the accepted path as the target's sequence 0, drops the drafter's branches
and queues the path's rows for the drafter, as a chain's commit does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.runtime.clock import clock
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.shapes import TreeChoice, grow, prior_quotas
from local_eagle.runtime.sampling import apply_repeat_penalty, probabilities
from local_eagle.runtime.stats import RoundStats
from local_eagle.runtime.tree import DraftTree, TreeShape, VerifyTree, children_slots
from local_eagle.runtime.verify import Drafted

if TYPE_CHECKING:
    from local_eagle.runtime.sequence import Sequence

NO_PENALTY = np.zeros(0, dtype=np.int64)


def drafter_sequences(width: int) -> int:
    """Sequences a drafter context needs for trees of this width: its own, and two levels of branches."""
    return 1 + 2 * width


def _capped(quotas: list[int], n: int) -> list[int]:
    out, left = [], n
    for q in quotas:
        if left <= 0:
            break
        out.append(min(q, left))
        left -= out[-1]
    return out


class TreeRounds:
    """The tree phases of one sequence (``runtime.sequence``, which keeps the state they share with chain rounds)."""

    later_calls = True  # a drafter call per level after the first (the cost policy prices them)
    max_depth: int | None = None  # the deepest tree the drafter can give (None: as deep as the shape)

    def __init__(self, gen: Sequence, shape: TreeShape) -> None:
        self.gen = gen
        self.shape = shape
        drafter = gen.drafter
        assert drafter is not None
        self.drafter = drafter
        # every draft id's logit is in the drafter's row; the repeat penalty needs whole rows (token ids)
        self.columns = None if gen.penalized else drafter.spec.draft_ids
        self.dirty: set[int] = set()  # drafter branch sequences holding rows of this round's tree
        self.start = 0  # the drafter cache position of this round's first tree row
        self.expected: float | None = None  # the priced tree's expected tokens this round
        self.calibration = gen.engine.tree_calibration  # the engine's: what earlier answers taught carries over
        # sampling: nodes per depth, from the previous round's best tree (the engine's: it carries over answers)
        self.quotas = gen.engine.tree_quotas
        # adaptive: the engine's choice between this shape and the policy's chains, learnt across answers
        choice = TreeChoice(shape, later_calls=self.later_calls, max_depth=self.max_depth)
        self.choice = gen.engine.tree_choices.setdefault(shape, choice) if gen.adaptive else None

    def wanted(self) -> bool:
        """Is this round a tree? Always when fixed; when adaptive, once the policy exists and costs favour it."""
        if self.choice is None:
            return True
        policy = self.gen.lengths
        if not isinstance(policy, DraftLengthPolicy) or not self.gen.feed.ready(self.gen.n_past):
            return False
        if self.choice.prefer_tree(policy):
            return True
        self.choice.chose_chain()
        return False

    def draft_round(self, last_token: int) -> Drafted:
        """The round's draft phase as a tree (``rounds.run_round``)."""
        started = clock()
        observed = RoundStats()
        tree, dists = self.draft(last_token, observed)
        n_vocab = self.gen.engine.n_vocab

        def draft(row: int) -> np.ndarray:
            q = dists[self.dist_key(tree, row)]
            if self.columns is None:
                return q
            full = np.zeros(n_vocab)
            full[self.columns] = q
            return full

        return Drafted(last_token, tree, observed, draft, tree_round=True, started=started)

    def dist_key(self, tree: VerifyTree, row: int) -> int:
        """Where :meth:`draft` keeps the draft distribution a verify row's children were drawn from: its node's."""
        return tree.nodes[row]

    def learn(self, drafted: Drafted, path: list[int], accepted: list[int]) -> None:
        """After the shared accept and commit: drop the drafter's branches, and let the calibration, the tree
        choice and the policy learn from the tree's outcome."""
        gen, tree, observed = self.gen, drafted.tree, drafted.observed
        judged = tree.outcomes(path)
        if self.calibration is not None:
            self.calibration.observe(*judged)
        self._drop_branches()
        if self.choice is None:
            gen.learn(observed, None, accepted[-1], clock() - drafted.started)
        else:  # the policy learns the target's cost at these rows and its calibration, not a chain it did not draft
            policy = gen.lengths
            assert isinstance(policy, DraftLengthPolicy)
            host = max(0.0, clock() - drafted.started - observed.verify_seconds - observed.draft_seconds)
            calls = observed.steps - 1
            call = (observed.draft_seconds - observed.catch_up_seconds) / calls if calls > 0 else None
            expected = len(accepted) if self.expected is None else self.expected
            self.choice.observe(policy, expected, len(tree), calls, call)
            policy.end_tree_round(judged, len(tree), verify_seconds=observed.verify_seconds, host_seconds=host,
                                  first_seconds=observed.catch_up_seconds, first_rows=observed.catch_up_rows)
        gen.spec_stats.observe(observed)
        gen.spec_stats.trace_trees.append((tree, path))
        gen.spec_stats.trace_tree_rounds.append(gen.spec_stats.rounds - 1)

    # --- draft ---------------------------------------------------------------------------------

    def _history(self, last_token: int, tree: DraftTree, node: int) -> np.ndarray:
        gen = self.gen
        if not gen.penalized:
            return np.zeros(0, dtype=np.int64)
        path = []
        while node > 0:
            path.append(tree.tokens[node])
            node = tree.parents[node]
        return gen.recent_history(last_token, path[::-1])

    def _distribution(self, row: np.ndarray, history: np.ndarray) -> np.ndarray:
        """The draft distribution at a node: the sampler's processing of its logits, or their softmax (greedy)."""
        sampling = self.gen.sampling
        row = apply_repeat_penalty(row, history, sampling.repeat_penalty, sampling.repeat_last_n)
        if not sampling.greedy:
            return probabilities(row, sampling)
        e = row - row.max()  # in place from here: the same values, one row allocated rather than three
        np.exp(e, out=e)
        e /= e.sum()
        return e

    def _expand(self, tree: DraftTree, node: int, row: np.ndarray, last_token: int, dists: dict) -> None:
        tokens, logq, q = self._children(row, lambda: self._history(last_token, tree, node))
        if q is not None:
            dists[node] = q
        self._add_children(tree, node, tokens, logq)

    def _children(
        self, row: np.ndarray, history: Callable[[], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """A node's first ``width`` children from its drafter row: (tokens, slot log-probabilities, the draft
        distribution they were drawn from, None where greedy and unpenalised: a greedy accept reads none).
        ``history``: the tokens the repeat penalty reads there, asked only when it is on."""
        gen = self.gen
        if gen.sampling.greedy and not gen.penalized:
            # the slots from the unnormalised softmax, their log-probabilities less its log-sum, one division of
            # the whole row fewer
            e = row - row.max()
            np.exp(e, out=e)
            idx, logq = children_slots(e, self.shape.width)
            logq = logq - np.log(e.sum())
            q = None
        else:
            q = self._distribution(row, history() if gen.penalized else NO_PENALTY)
            idx, logq = children_slots(q, self.shape.width, None if gen.sampling.greedy else gen.rng)
        tokens = idx if self.columns is None else self.columns[idx]
        return tokens, logq, q

    def _add_children(self, tree: DraftTree, node: int, tokens: np.ndarray, logq: np.ndarray) -> None:
        """Add a node's children in slot order, scored by their calibrated slot probabilities."""
        tree.add_children(node, tokens, *self._slot_scores(logq))

    def _slot_scores(self, logq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots' tree scores (their calibrated log-probabilities) and probabilities, from their log-probabilities."""
        probs = np.exp(logq)
        return (logq if self.calibration is None else self.calibration.logscores(probs)), probs

    def budget(self) -> tuple[int, int]:
        """This round's tree depth and node count (0 nodes: no tree this round). A tree's nodes take cache cells
        and batch rows, its depth positions: max_tokens bounds only the depth, ``max_depth`` caps it too."""
        gen = self.gen
        depth = min(self.shape.depth, gen.draft_length(self.shape.depth))
        if self.max_depth is not None:
            depth = min(depth, self.max_depth)
        n_nodes = min(self.shape.nodes, gen.engine.n_ctx - gen.n_past - 1, gen.target.n_batch - 1)
        if depth <= 0 or not gen.feed.ready(gen.n_past):
            n_nodes = 0
        return depth, n_nodes

    def draft(self, last_token: int, observed: RoundStats) -> tuple[VerifyTree, dict[int, np.ndarray]]:
        """Grow the tree and choose the nodes to verify; also each expanded node's draft distribution (over the
        drafter's columns). Only the drafter's outputs decide the tree's shape, never the target's."""
        gen = self.gen
        tree = DraftTree(last_token)
        dists: dict[int, np.ndarray] = {}
        depth, n_nodes = self.budget()
        if n_nodes == 0:
            return tree.select(0), dists
        started = clock()
        logits, prenorm, observed.catch_up_rows = gen.feed.catch_up(self.columns)
        observed.steps = 1
        self._expand(tree, 0, logits[0], last_token, dists)
        observed.catch_up_seconds = clock() - started
        prenorms = {0: prenorm[0]}
        seq_of = {0: 0}
        width, ctx, tags = self.shape.width, self.drafter.ctx, gen.feed.tags
        # the first tree row's cache position (an MTP head's cache runs one ahead of the loop's positions): every
        # branch sequence shares the cells before it with sequence 0 (PrefixTags), and holds its ancestors after it
        self.start = start = ctx.pos_max(0) + 1
        if self.drafter.prefix_seqs:  # the committed rows went into every branch sequence as they were decoded
            tags.shared(self.drafter.prefix_seqs, start)

        def expand(depth: int, frontier: list[int]) -> None:
            # alternate sets: the parents' sequences stay whole meanwhile. Every cache edit scans llama.cpp's whole
            # cache, so only the sequences this level uses get the prefix, and only one holding rows is cleared
            base = 1 + (depth % 2) * width
            seqs = range(base, base + len(frontier))
            tags.share_with(ctx, seqs, start)
            for seq, node in zip(seqs, frontier, strict=True):
                parent = seq_of[tree.parents[node]]
                if seq in self.dirty:
                    ctx.seq_remove(seq, start)  # a node's rows of two levels up
                if parent:
                    ctx.seq_copy(parent, seq, start)  # its ancestors' rows (the root's: the prefix, shared)
                seq_of[node] = seq
            self.dirty.update(seqs)
            g = self.drafter.feedback(np.stack([prenorms[tree.parents[node]] for node in frontier]))
            rows, pre = self.drafter.decode_branches(
                np.array([tree.tokens[node] for node in frontier], dtype=np.int32), g,
                np.full(len(frontier), gen.n_past + depth - 1), [[seq_of[node]] for node in frontier], self.columns,
            )  # fmt: skip
            observed.steps += 1
            observed.draft_rows += len(frontier)
            for i, node in enumerate(frontier):
                prenorms[node] = pre[i]
                self._expand(tree, node, rows[i], last_token, dists)

        policy = gen.lengths
        prices = None
        if self.choice is not None and isinstance(policy, DraftLengthPolicy):
            prices = self.choice.prices(policy, n_nodes)
        shape = TreeShape(n_nodes, depth, self.shape.width)
        order, self.expected = grow(tree, shape, n_nodes, expand, greedy=gen.sampling.greedy, prices=prices)
        best = tree.verify_tree(order)
        if gen.sampling.greedy:
            chosen = best
        else:  # depth quotas fixed before this round's draws (runtime.tree: why the n best would bias sampling)
            quotas = self.quotas.get(self.shape) or prior_quotas(self.shape, n_nodes)
            chosen = tree.select_by_depth(_capped(quotas, n_nodes))
            self.quotas[self.shape] = best.quotas() or [1]
        observed.drafted = chosen.drafted
        observed.draft_seconds = clock() - started
        return chosen, dists

    def _drop_branches(self) -> None:
        """The branches' rows go; the prefix stays shared with every branch sequence for the next tree."""
        if self.dirty:  # sequence 0 holds nothing from ``start`` on: every row there is a branch's, gone in one edit
            self.drafter.ctx.seq_remove(-1, self.start)
        self.dirty.clear()

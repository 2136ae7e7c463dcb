"""Draft trees, as pure maths: growing a tree, choosing the nodes a target call verifies, walking it.

EAGLE-2's dynamic tree: the drafter expands the most probable frontier nodes depth by depth, every node
scored by its cumulative draft probability, and the ``n`` best nodes form the tree the target verifies in
one decode. A chain is the tree with one branch.

Scores are *slot* scores: a node's i-th child scores its parent's score plus the (calibrated) log of the
i-th largest draft probability at the parent, whatever token fills the slot. Greedy drafting fills slot i with
the i-th most probable token. Sampling fills the slots with draws without replacement from the draft
distribution (Gumbel top-k). Selection keeps the tree closed under parents and earlier siblings (a node's
children verified are its first m slots), which the sibling-by-sibling acceptance needs.

Greedy verification is exact whatever the tree, so greedy rounds verify the n best nodes (:meth:`DraftTree.select`).
Recursive rejection sampling (:func:`walk_sampling`) emits exactly the target's distribution only if whether a
child is verified never depends on the token drawn for it. A node's score depends only on tokens above it, but
the global n best do not: a drawn token moves its descendants' scores, which can push other nodes in or out of
the budget. So sampling rounds choose depth by depth (:meth:`DraftTree.select_by_depth`), each depth's nodes
ranked by their own scores (tokens above them only) against a quota fixed before the round (the depths the
previous round's n best fell at), and the drafter expands the best ``width`` nodes of each depth, likewise.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.sampling import sample

MAX_SEQ = 256
"""llama.cpp's ``LLAMA_MAX_SEQ``: a tree verify uses one sequence per leaf."""

CPU_TREE_NODES = 62
"""The largest tree verified where attention runs on the CPU: 63 rows. At 64 query rows llama.cpp's CPU flash
attention (0.3.36, ``GGML_FA_TILE_Q``) switches to a tiled kernel that rounds differently from the 1-row decode
(queries in F32 rather than F16); its differences pile up in the cached rows of every round, and on the Gemma
pair a run of 64-row tree verifies parted from the target alone at a token whose logits then differed by 16% of
their range (median 1.0), against 0.5 with 63-row verifies of the same trees and 0.3 without flash attention: a
divergence in all but name. Trees do not pay on a CPU anyway; on a GPU the full size stands."""


@dataclass(frozen=True)
class TreeShape:
    """How a round's tree grows: ``depth`` drafter calls, ``width`` frontier nodes expanded per call (each
    with ``width`` children), ``nodes`` drafted nodes verified per target call."""

    nodes: int
    depth: int
    width: int

    def __post_init__(self) -> None:
        if not 1 <= self.nodes < MAX_SEQ:
            raise LocalEagleError(f"tree nodes must be between 1 and {MAX_SEQ - 1}, got {self.nodes}")
        if self.depth < 1:
            raise LocalEagleError(f"tree depth must be at least 1, got {self.depth}")
        if not 1 <= self.width <= 64:
            raise LocalEagleError(f"tree width must be between 1 and 64, got {self.width}")

    @classmethod
    def for_nodes(cls, nodes: int, depth: int | None = None, width: int | None = None) -> TreeShape:
        """A shape for ``nodes`` drafted nodes: as deep as a chain of that size (up to 32 drafter calls), so a run
        of easy tokens is followed as far as a chain would; a frontier of up to 8."""
        if depth is None:
            depth = max(1, min(nodes, 32))
        if width is None:
            width = max(1, min(8, nodes))
        return cls(nodes, depth, width)

    @property
    def chain(self) -> bool:
        return self.width == 1


def children_slots(q: np.ndarray, k: int, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` children of a node whose draft distribution is ``q``: (positions in ``q``, slot log-scores).

    Greedy (``rng`` None): the k most probable entries, most probable first. Sampling: k draws without
    replacement (Gumbel top-k, which orders them as sequential draws would). Either way slot i scores
    log of the i-th largest probability. Fewer than k when ``q`` has fewer non-zero entries.
    """
    # a greedy softmax row is positive everywhere (one reduction tells): then the support is q itself, and the
    # index array and gathered copy of a drafter's whole row (32K wide) are skipped; NaN takes the general path
    full = len(q) > 0 and bool(q.min() > 0)
    support = None if full else np.flatnonzero(q > 0)
    qs = q if support is None else q[support]
    k = min(k, len(qs))
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    sorted_top = top_k(qs, k) if k < len(qs) else np.argsort(-qs, kind="stable")
    logq = np.log(qs[sorted_top])
    if rng is None:
        return (sorted_top if support is None else support[sorted_top]), logq
    keys = np.log(qs) + rng.gumbel(size=len(qs))
    drawn = top_k(keys, k) if k < len(qs) else np.arange(len(qs))[np.argsort(-keys, kind="stable")]
    return (drawn if support is None else support[drawn]), logq


_BLOCK = 128  # top_k's block length
_BLOCKED_MIN = 4096  # rows shorter than this go straight to argpartition
_CANDIDATES_MAX = 64  # per k: more values at or above the floor than this are sorted by argpartition, not whole


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest of ``values`` (``k < len(values)``), largest first: ``argpartition``'s k, stably
    sorted.

    ``argpartition`` costs ~0.3 ms on a 32K-wide draft row here, once per expanded tree node. A long row is searched
    by group maxima instead: the k-th largest group maximum bounds the k-th largest value from below, so the values
    at or above it hold the k largest, and sorting those few is cheap. Where the k+1 largest are all distinct the
    result is unique, hence the same indices in the same order; with a tie among them (or a NaN) the argpartition
    path runs as before, so the order it gives ties stays. A group is every m-th value (a column of the row laid
    out as ``_BLOCK`` rows), not a run of neighbours: numpy takes the maxima down columns at 8 us a 32K row, along
    rows at 18.
    """
    n = len(values)
    if n >= _BLOCKED_MIN and k * _BLOCK <= n:
        m = n // _BLOCK
        maxima = values[: m * _BLOCK].reshape(_BLOCK, m).max(axis=0)
        if m * _BLOCK < n:
            maxima = np.append(maxima, values[m * _BLOCK :].max())
        if not np.isnan(maxima).any():
            floor = np.partition(maxima, len(maxima) - k)[len(maxima) - k]
            candidates = np.flatnonzero(values >= floor)
            if len(candidates) <= _CANDIDATES_MAX * k:  # else a tie at the floor (a flat tail): argpartition's turn
                order = candidates[np.argsort(-values[candidates], kind="stable")]
                head = values[order[: k + 1]]
                if bool((head[1:] < head[:-1]).all()):
                    return order[:k]
    top = np.argpartition(-values, k - 1)[:k]
    return top[np.argsort(-values[top], kind="stable")]


def _floats_or_ints(values: np.ndarray | list) -> list:
    """``values`` as a list of Python numbers (the same values ``float()``/``int()`` of each element give)."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


class SlotCalibration:
    """How often a verified child was the target's next token, by its slot's draft probability; tree scores use it.

    A drafter's probabilities need not be acceptance rates (an underconfident one makes deep nodes of an easy run
    look worse than second choices near the root). Counts come from earlier rounds only, so a round's tree never
    depends on the target's output at the positions it verifies. Before there is data a slot scores its own
    probability (a prior of ``prior`` pseudo-counts at q).
    """

    EDGES = np.array([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0])

    def __init__(self, prior: float = 4.0) -> None:
        self.prior = prior
        self.tried = np.zeros(len(self.EDGES) - 1)
        self.accepted = np.zeros(len(self.EDGES) - 1)

    def _bucket(self, q: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(self.EDGES, q, side="right") - 1, 0, len(self.tried) - 1)

    def rate(self, q: np.ndarray) -> np.ndarray:
        b = self._bucket(np.asarray(q, dtype=np.float64))
        return (self.accepted[b] + self.prior * q) / (self.tried[b] + self.prior)

    def logscores(self, q: np.ndarray) -> np.ndarray:
        """Slot log-scores for sorted slot probabilities ``q`` (non-increasing, as the slots are)."""
        r = np.minimum.accumulate(self.rate(q)) if len(q) else np.zeros(0)
        return np.log(np.maximum(r, 1e-12))

    def observe(self, q: list[float], accepted: list[bool]) -> None:
        b = self._bucket(np.asarray(q, dtype=np.float64))
        np.add.at(self.tried, b, 1.0)
        np.add.at(self.accepted, b, np.asarray(accepted, dtype=np.float64))


class DraftTree:
    """A growing tree; node 0 is the root (the round's last token, not a draft)."""

    def __init__(self, root_token: int) -> None:
        self.tokens = [int(root_token)]
        self.parents = [-1]
        self.depths = [0]
        self.scores = [0.0]
        self.ranks = [0]
        self.probs = [1.0]  # each node's slot probability (the i-th largest draft probability at its parent)
        self.children: list[list[int]] = [[]]

    def __len__(self) -> int:
        return len(self.tokens)

    def add_children(
        self,
        parent: int,
        tokens: np.ndarray | list[int],
        logscores: np.ndarray | list[float],
        probs: np.ndarray | list[float] | None = None,
    ) -> list[int]:
        """Add children to ``parent`` in slot order (scores: their slot log-scores); their ids."""
        if self.children[parent]:
            raise AssertionError(f"node {parent} already has children")
        base, depth = self.scores[parent], self.depths[parent] + 1
        if probs is None:
            probs = np.exp(np.asarray(logscores, dtype=np.float64))
        # Python numbers once per call (``tolist``): iterating numpy arrays makes a scalar object per element
        tokens, logscores, probs = _floats_or_ints(tokens), _floats_or_ints(logscores), _floats_or_ints(probs)
        if not len(tokens) == len(logscores) <= len(probs):
            raise ValueError("add_children: tokens, logscores and probs differ in length")
        first, n = len(self.tokens), len(tokens)
        ids = list(range(first, first + n))
        self.probs.extend(float(p) for p in probs[:n])
        self.tokens.extend(int(t) for t in tokens)
        self.parents.extend([parent] * n)
        self.depths.extend([depth] * n)
        self.scores.extend(base + float(s) for s in logscores)
        self.ranks.extend(range(n))
        self.children.extend([] for _ in range(n))
        self.children[parent] = ids
        return ids

    def frontier(self, depth: int, width: int) -> list[int]:
        """The ``width`` best-scored nodes at ``depth`` (ties: the earlier node), best first."""
        nodes = [i for i, d in enumerate(self.depths) if d == depth]
        nodes.sort(key=lambda i: (-self.scores[i], i))
        return nodes[:width]

    def worth_expanding(self, nodes: list[int], n: int) -> list[int]:
        """Those of ``nodes`` whose descendants could still be among the ``n`` best: a child never scores above
        its parent, so a node below the n-th best score already drafted has no descendant that would be chosen.
        Greedy rounds grow only these (fewer drafter rows, and no call at all once none is left)."""
        if len(self.scores) <= n:
            return nodes
        cut = float(np.partition(np.asarray(self.scores[1:]), len(self.scores) - 1 - n)[len(self.scores) - 1 - n])
        return [i for i in nodes if self.scores[i] >= cut]

    def order(self, n: int, expand: Callable[[int], None] | None = None) -> list[int]:
        """The ``n`` best nodes closed under parents and earlier siblings, best first: every prefix of it is
        the best tree of that size (what :meth:`select` verifies), so a policy can cut it where a node stops
        paying for its row.

        ``expand(node)``, when given, adds a node's children once it is chosen (the root's first): a tree whose
        children cost nothing to draft (a block's, ``runtime.blocktree``) grows best first, only under nodes taken.
        A child never scores above its parent, so the result is the n best of the whole tree that would grow."""
        chosen: list[int] = []
        heap: list[tuple[float, int]] = []

        def offer(node: int) -> None:
            heapq.heappush(heap, (-self.scores[node], node))

        if expand is not None:
            expand(0)
        if self.children[0]:
            offer(self.children[0][0])
        while heap and len(chosen) < n:
            _, node = heapq.heappop(heap)
            chosen.append(node)
            if expand is not None and len(chosen) < n:
                expand(node)
            if self.children[node]:
                offer(self.children[node][0])
            siblings = self.children[self.parents[node]]
            rank = self.ranks[node]
            if rank + 1 < len(siblings):
                offer(siblings[rank + 1])
        return chosen

    def select(self, n: int) -> VerifyTree:
        """The root and the ``n`` best nodes closed under parents and earlier siblings, as a verify tree."""
        return self.verify_tree(self.order(n))

    def verify_tree(self, nodes: list[int]) -> VerifyTree:
        """The root and ``nodes`` (closed under parents and earlier siblings) as a verify tree."""
        return VerifyTree.from_nodes(self, self._rows([0, *nodes]))

    def _rows(self, chosen: list[int]) -> list[int]:
        """The verify's row order: the first-slot chain from the root, then the other nodes by depth.

        Every sequence's rows stay in position order (llama.cpp requires it), and when the target accepts a
        prefix of the drafter's first choices (most rounds), the cells kept are contiguous, followed by the
        cells freed: the next rows fill those in position order, so the cache is laid out as a plain decode
        would lay it out and attention sums in the same order (a hole before kept cells makes later rows sum
        over cells in another order, float noise that can part the texts at a near-tie).
        """
        keep = set(chosen)
        main = [0]
        while self.children[main[-1]] and self.children[main[-1]][0] in keep:
            main.append(self.children[main[-1]][0])
        on_main = set(main)
        return main + sorted((i for i in chosen if i not in on_main), key=lambda i: (self.depths[i], i))

    def select_by_depth(self, quotas: list[int]) -> VerifyTree:
        """The root and, depth by depth, the best nodes (closed under parents and earlier siblings) up to that
        depth's quota; a quota a depth cannot fill passes on to the next. No choice at a depth reads a score
        below it, so no node's selection depends on its own token (or on any token at or below its depth)."""
        chosen = [0]
        carry = 0
        previous = [0]
        for quota in quotas:
            room = quota + carry
            heap: list[tuple[float, int]] = []
            for parent in previous:
                if self.children[parent]:
                    first = self.children[parent][0]
                    heapq.heappush(heap, (-self.scores[first], first))
            level = []
            while heap and len(level) < room:
                _, node = heapq.heappop(heap)
                level.append(node)
                siblings = self.children[self.parents[node]]
                rank = self.ranks[node]
                if rank + 1 < len(siblings):
                    heapq.heappush(heap, (-self.scores[siblings[rank + 1]], siblings[rank + 1]))
            carry = room - len(level)
            if not level:
                break
            chosen += level
            previous = level
        return VerifyTree.from_nodes(self, self._rows(chosen))


@dataclass
class VerifyTree:
    """The rows of one tree verify: row 0 the root, every row after its parent, each sequence's rows in position
    order (:meth:`DraftTree._rows`).

    ``parents`` and ``children`` are row indices; ``children[r]`` in slot order; ``nodes`` maps rows back to
    the draft tree's ids.
    """

    nodes: list[int]
    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    children: list[list[int]]
    probs: np.ndarray  # slot probabilities (1 for the root)

    @classmethod
    def from_nodes(cls, tree: DraftTree, nodes: list[int]) -> VerifyTree:
        row = {node: r for r, node in enumerate(nodes)}
        parents = np.array([row.get(tree.parents[i], -1) for i in nodes], dtype=np.int64)
        children: list[list[int]] = [[] for _ in nodes]
        for r in range(1, len(nodes)):
            children[parents[r]].append(r)
        for kids in children:
            kids.sort(key=lambda r: tree.ranks[nodes[r]])
        return cls(
            nodes=list(nodes),
            tokens=np.array([tree.tokens[i] for i in nodes], dtype=np.int32),
            parents=parents,
            depths=np.array([tree.depths[i] for i in nodes], dtype=np.int64),
            children=children,
            probs=np.array([tree.probs[i] for i in nodes]),
        )

    @classmethod
    def chain(cls, root: int, drafts: list[int]) -> VerifyTree:
        """The tree with one branch, built directly: every chain round verifies one."""
        rows = np.arange(len(drafts) + 1, dtype=np.int64)
        return cls(
            nodes=rows.tolist(), tokens=np.array([root, *drafts], dtype=np.int32), parents=rows - 1, depths=rows,
            children=[[r + 1] for r in range(len(drafts))] + [[]], probs=np.ones(len(rows)),
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def drafted(self) -> int:
        return len(self.tokens) - 1

    def leaves(self) -> list[int]:
        return [r for r in range(len(self)) if not self.children[r]]

    def quotas(self) -> list[int]:
        """Drafted nodes per depth (depth 1 first): the shape a later sampling round verifies."""
        return [int(n) for n in np.bincount(self.depths, minlength=1)[1:]]

    def seq_ids(self) -> list[list[int]]:
        """Each row's sequence ids: the numbers of the leaves below it (leaf i, in row order, is sequence i).

        A row attends to the cache cells of its first sequence at positions not after its own. Any leaf below
        a row has exactly the row's ancestors (and the shared prefix) at those positions, so whichever of its
        ids llama.cpp takes first, the row sees its ancestors and itself.
        """
        leaf_id = {r: i for i, r in enumerate(self.leaves())}
        seqs: list[list[int]] = [[] for _ in range(len(self))]
        for r in reversed(range(len(self))):
            if r in leaf_id:
                seqs[r].append(leaf_id[r])
            if r:
                seqs[self.parents[r]].extend(seqs[r])
        for s in seqs:
            s.sort()
        return seqs

    def path(self, row: int) -> list[int]:
        """Rows from the root's first child down to ``row`` (empty for the root)."""
        out = []
        while row > 0:
            out.append(row)
            row = int(self.parents[row])
        return out[::-1]

    def path_tokens(self, row: int) -> list[int]:
        return [int(self.tokens[r]) for r in self.path(row)]

    def outcomes(self, path: list[int]) -> tuple[list[float], list[bool]]:
        """The children the target judged (those of the root and of accepted rows): their slot probabilities and
        whether each was accepted, for :class:`SlotCalibration`."""
        on_path = {0, *path}
        judged = [r for r in range(1, len(self)) if int(self.parents[r]) in on_path]
        return [float(self.probs[r]) for r in judged], [r in on_path for r in judged]


def walk_greedy(tree: VerifyTree, choices: np.ndarray) -> tuple[list[int], int]:
    """Follow the target's choices (``choices[r]``: its token after row r) down the tree.

    Returns the accepted rows (root excluded) and the target's token after the last of them.
    """
    row, path = 0, []
    while True:
        want = int(choices[row])
        nxt = next((c for c in tree.children[row] if int(tree.tokens[c]) == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        row = nxt


def walk_sampling(
    tree: VerifyTree,
    target: Callable[[int], np.ndarray],
    draft: Callable[[int], np.ndarray],
    rng: np.random.Generator,
) -> tuple[list[int], int]:
    """Recursive rejection sampling over siblings (SpecInfer; Jeon et al. 2024 for draws without replacement).

    At a row, with p the target's distribution there (``target(row)``) and q the draft's (``draft(row)``), its
    children x_1, x_2, ... (draws without replacement from q, in order) are tried in turn: x accepted with
    probability min(1, p(x)/q(x)); on rejection p <- norm(max(0, p - q)) and q <- q with x removed,
    renormalised. An accepted child becomes the row; when every child is rejected (or there are none) the next
    token is drawn from the current p. The emitted tokens are distributed exactly as the target's own.
    """
    row, path = 0, []
    while True:
        p = target(row)
        kids = tree.children[row]
        if not kids:
            return path, sample(p, rng)
        q = np.array(draft(row), dtype=np.float64)
        accepted = None
        for child in kids:
            x = int(tree.tokens[child])
            qx, px = q[x], p[x]
            if qx > 0 and rng.random() * qx < px:
                accepted = child
                break
            residual = np.maximum(p - q, 0.0)
            total = residual.sum()
            if total <= 0:  # p == q up to rounding: a rejection had probability 0
                break
            p = residual / total
            q[x] = 0.0
            mass = q.sum()
            if mass <= 0:
                break
            q /= mass
        if accepted is None:
            return path, sample(p, rng)
        path.append(accepted)
        row = accepted

"""The one place a call's draft bound and tree become the round's: what the engine can verify decides.

A call asks for ``draft_max`` drafts a round (a chain's longest), perhaps a ``tree`` and the adaptive policy; the
engine knows which of those it can serve. :func:`plan_draft` resolves them once, before the generation starts, so
no phase rewrites the bound again: a tree where the engine verifies trees (else the chain the tree's depth gives,
or the policy's), its nodes fitted to what attention can take, the bound cut by a recurrent target's snapshots and
by chained MTP heads, and no drafting at all without a drafter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.tree import TreeShape


@dataclass(frozen=True)
class DraftLimits:
    """What an engine can draft and verify (``Engine.draft_limits``)."""

    drafter: bool  # an EAGLE drafter or an MTP head drafts
    trees: bool  # the engine was opened for trees (one sequence, a cache that branches)
    tree_nodes: int  # the engine's ``EngineOptions.tree_nodes`` and ``tree_width``
    tree_width: int
    max_tree_nodes: int  # what attention takes in one verify (``tree.CPU_TREE_NODES`` on a CPU)
    tree_refusal: str | None = None  # why this target drafts no trees (recurrent, chained heads), or None
    parallel: int = 1
    rollback_bound: int | None = None  # recurrent-state snapshots per sequence: the longest chain a round verifies
    head_bound: int | None = None  # chained MTP heads: one per draft


@dataclass(frozen=True)
class DraftPlan:
    draft_max: int  # the longest chain a round drafts (0: none)
    tree: TreeShape | None  # the tree a round may draft, or None
    adaptive: bool  # lengths (and tree or chain) chosen by the cost-aware policy


def default_tree(limits: DraftLimits, draft_max: int) -> TreeShape:
    """The tree an adaptive call may draft when it names none: as many nodes and as wide a frontier as the engine
    was opened for, as deep as the call's draft bound (its chains' longest)."""
    nodes = min(limits.tree_nodes, limits.max_tree_nodes)
    return TreeShape(nodes, max(1, draft_max), max(1, min(limits.tree_width, nodes)))


def fit_tree(limits: DraftLimits, tree: TreeShape) -> TreeShape:
    """``tree`` with at most ``max_tree_nodes`` nodes."""
    return tree if tree.nodes <= limits.max_tree_nodes else replace(tree, nodes=limits.max_tree_nodes)


def plan_draft(
    limits: DraftLimits, draft_max: int, tree: TreeShape | None, adaptive: bool, constrained: bool
) -> DraftPlan:
    """The call's draft bound, tree and adaptivity as this engine will run them. A tree on a parallel engine or
    under a grammar becomes a chain (the tree's depth, or the policy's lengths); a fixed tree verifies its nodes."""
    if draft_max < 0:
        raise LocalEagleError(f"draft max must be >= 0, got {draft_max}")
    if tree is not None and (limits.parallel > 1 or constrained):
        tree, draft_max = None, draft_max if adaptive else tree.depth
    if tree is None and adaptive and limits.trees and draft_max > 0 and not constrained:
        tree = default_tree(limits, draft_max)
    if tree is not None and limits.drafter:
        tree = fit_tree(limits, tree)
        if limits.tree_refusal is not None:
            tree, draft_max = None, draft_max if adaptive else tree.depth
        elif tree.nodes > limits.tree_nodes or tree.width > limits.tree_width:
            raise LocalEagleError(
                f"a tree of {tree.nodes} nodes and width {tree.width} needs an engine opened for it (tree_nodes "
                f"{limits.tree_nodes}, tree_width {limits.tree_width})"
            )
        elif not adaptive:
            draft_max = tree.nodes
    if limits.rollback_bound is not None:  # a longer chain's rejection would outrun the recurrent snapshots
        draft_max = min(draft_max, limits.rollback_bound)
    if limits.head_bound is not None:
        draft_max = min(draft_max, limits.head_bound)
    if not limits.drafter:
        return DraftPlan(0, None, False)
    return DraftPlan(draft_max, tree, adaptive and draft_max > 0)

"""The one resolution of a call's draft bound and tree (``policy.plan``), and the one capture rule
(``policy.rounds``): pure functions, no model."""

import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.policy.plan import DraftLimits, plan_draft
from local_eagle.runtime.policy.rounds import capture_wanted
from local_eagle.runtime.tree import TreeShape

TREES = DraftLimits(drafter=True, trees=True, tree_nodes=15, tree_width=4, max_tree_nodes=63)
CHAINS = DraftLimits(drafter=True, trees=False, tree_nodes=0, tree_width=8, max_tree_nodes=63)


def test_no_drafter_plans_no_drafting() -> None:
    plan = plan_draft(DraftLimits(False, False, 0, 8, 63), 4, TreeShape(15, 4, 4), True, False)
    assert (plan.draft_max, plan.tree, plan.adaptive) == (0, None, False)


def test_fixed_tree_verifies_its_nodes_and_adaptive_keeps_the_chain_bound() -> None:
    tree = TreeShape(15, 4, 4)
    assert plan_draft(TREES, 3, tree, False, False).draft_max == 15
    adaptive = plan_draft(TREES, 3, tree, True, False)
    assert (adaptive.draft_max, adaptive.tree, adaptive.adaptive) == (3, tree, True)


def test_adaptive_call_naming_no_tree_gets_the_engines_default() -> None:
    plan = plan_draft(TREES, 5, None, True, False)
    assert plan.tree == TreeShape(15, 5, 4)
    assert plan_draft(CHAINS, 5, None, True, False).tree is None
    assert plan_draft(TREES, 0, None, True, False) == plan_draft(CHAINS, 0, None, True, False)


@pytest.mark.parametrize("adaptive, expected", [(False, 4), (True, 2)])
def test_grammar_or_parallel_turns_a_tree_into_a_chain(adaptive: bool, expected: int) -> None:
    tree = TreeShape(15, 4, 4)
    assert plan_draft(TREES, 2, tree, adaptive, True).tree is None
    assert plan_draft(TREES, 2, tree, adaptive, True).draft_max == expected
    parallel = DraftLimits(True, False, 15, 4, 63, parallel=4)
    assert plan_draft(parallel, 2, tree, adaptive, False).draft_max == expected


def test_a_refused_tree_drafts_chains_and_bounds_cut_the_chain() -> None:
    refused = DraftLimits(True, False, 15, 4, 63, tree_refusal="recurrent", rollback_bound=3, head_bound=2)
    plan = plan_draft(refused, 8, TreeShape(15, 6, 4), False, False)
    assert (plan.tree, plan.draft_max) == (None, 2)


def test_trees_are_fitted_then_checked_against_the_engine() -> None:
    small = DraftLimits(True, True, 15, 4, 7)
    assert plan_draft(small, 3, TreeShape(15, 3, 4), False, False).tree == TreeShape(7, 3, 4)
    with pytest.raises(LocalEagleError, match="needs an engine opened for it"):
        plan_draft(TREES, 3, TreeShape(15, 3, 8), False, False)
    with pytest.raises(LocalEagleError, match="draft max must be >= 0"):
        plan_draft(TREES, -1, None, False, False)


def test_capture_rule() -> None:
    assert capture_wanted(True, False, 99, 4)
    assert capture_wanted(False, True, 99, 4)
    assert capture_wanted(False, False, 4, 4)
    assert not capture_wanted(False, False, 5, 4)

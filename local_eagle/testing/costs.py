"""Costs of another machine for the draft-length policy, so tests decide drafting independently of this CPU."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from local_eagle.runtime.policy.draftcost import CostModel, DeafCosts
from local_eagle.runtime.policy.shapes import TreeChoice

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine
    from local_eagle.runtime.policy.draftlen import DraftLengthPolicy


class FrozenCosts(DeafCosts):
    """Verify costs ``verify_ratios[r - 1]`` ms for r rows and a fixed draft step; timings of this machine
    are ignored, so the policy cannot unlearn them."""

    def __init__(self, verify_ratios: list[float], draft_step: float) -> None:
        super().__init__(1e-3, draft_step=draft_step)
        for rows, ratio in enumerate(verify_ratios, start=1):
            for _ in range(self.min_samples):
                CostModel.add_verify(self, rows, 1e-3 * ratio)

    def catch_up(self, rows: float) -> float:
        return self.draft_step  # the tiny models' drafter: one call costs the same whatever its rows


class FrozenOverhead(TreeChoice):
    """A tree's drafter calls priced by the frozen cost model, like the chains it is compared with (the tiny test
    models' drafter costs as much as their target)."""

    def call_cost(self, policy: DraftLengthPolicy) -> float:
        return policy.costs.draft_step


@contextmanager
def deciding_on(engine: Engine, ratios: list[float], draft_step: float, choice: TreeChoice | None = None) -> Iterator:
    """A fresh adaptive policy deciding on :class:`FrozenCosts` (and ``choice`` choosing its shape's trees) inside
    the block; the engine's own policy back, and what trees taught forgotten, after it.

    Fresh, not the engine's policy with its costs swapped: that one's calibration and probe schedule were learnt
    from rounds whose lengths this machine's timings chose (a loaded machine's warm-up drafted more, learnt a
    flat calibration and halved the trees a test counted), so what the block decides would still follow them."""
    holder = engine.lengths
    own = holder.policy
    try:
        policy = holder.decide_on(FrozenCosts(ratios, draft_step=draft_step), 1)  # each call sets its bound
        if choice is not None:
            engine.tree_choices[choice.shape] = choice
        yield policy
    finally:
        holder.policy = own
        engine.tree_choices.clear()
        engine.tree_quotas.clear()

"""Costs of another machine for the draft-length policy, so tests decide drafting independently of this CPU."""

from __future__ import annotations

from local_eagle.runtime.draftcost import CostModel


class FrozenCosts(CostModel):
    """Verify costs ``verify_ratios[r - 1]`` ms for r rows and a fixed draft step; timings of this machine
    are ignored, so the policy cannot unlearn them."""

    def __init__(self, verify_ratios: list[float], draft_step: float) -> None:
        super().__init__(1e-3, draft_step=draft_step)
        for rows, ratio in enumerate(verify_ratios, start=1):
            for _ in range(self.min_samples):
                super().add_verify(rows, 1e-3 * ratio)

    def add_verify(self, rows: int, seconds: float) -> None:
        pass

    def add_draft(self, steps: int, seconds: float) -> None:
        pass

    def add_first(self, seconds: float) -> None:
        pass

    def add_host(self, seconds: float) -> None:
        pass

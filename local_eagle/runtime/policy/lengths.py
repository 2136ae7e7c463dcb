"""How many tokens a round drafts: a fixed number (benchmarks), or the engine's cost-aware policy.

Both speak the protocol of :class:`~local_eagle.runtime.policy.draftlen.DraftLengthPolicy` (``begin_round``,
``extend``, ``take``, ``end_round``), so the draft phase has one loop. The adaptive policy belongs to the
:class:`~local_eagle.runtime.engine.Engine`, not to one generation: what it learnt about this machine's
costs and this drafter's calibration carries over from one answer to the next. It is built once the
target's 1-row time is measured, from the first rounds the engine runs without drafting.
"""

from __future__ import annotations

import statistics
from typing import Protocol

from local_eagle.runtime.policy.defaults import (  # noqa: F401 - the bounds the front ends read here too
    AUTO_DRAFT_MAX,
    AUTO_TREE_NODES,
    AUTO_TREE_WIDTH,
    FIXED_DRAFT_MAX,
    T1_ROUNDS,
)
from local_eagle.runtime.policy.draftcost import CostModel
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy, PolicyState


class DraftLengths(Protocol):
    """What the draft phase asks before and after each drafter step (``DraftLengthPolicy``'s protocol)."""

    probing: bool
    weighs: bool
    """Whether :meth:`take` reads the confidence it is given (else the draft phase need not compute it)."""

    def begin_round(self, cap: int | None = None, *, ready: bool = True) -> None: ...

    def extend(self) -> bool: ...

    def take(self, confidence: float) -> bool: ...

    def end_round(self, accepted: int, *, verify_seconds: float, draft_seconds: float = 0.0, draft_steps: int = 0,
                  host_seconds: float | None = None, first_seconds: float | None = None) -> None: ...  # fmt: skip

    def shadow(self, confidence: float, accepted: bool) -> None: ...


class FixedLengths:
    """Draft exactly the round's cap (``--fixed``): the behaviour benchmarks compare against."""

    probing = False
    weighs = False  # takes every draft whatever the drafter's confidence

    def __init__(self) -> None:
        self._left = 0

    def begin_round(self, cap: int | None = None, *, ready: bool = True) -> None:
        self._left = (cap or 0) if ready else 0

    def extend(self) -> bool:
        return self._left > 0

    def take(self, confidence: float) -> bool:
        self._left -= 1
        return True

    def end_round(self, accepted: int, **timings: float | int | None) -> None:
        pass

    def shadow(self, confidence: float, accepted: bool) -> None:
        pass


class PolicyHolder:
    """The engine's one adaptive policy: built from the first measured 1-row target calls, bounded per call."""

    def __init__(self) -> None:
        self.policy: DraftLengthPolicy | None = None
        self._t1: list[float] = []

    def for_bound(self, k_max: int) -> DraftLengthPolicy | None:
        """The policy with bound ``k_max`` (None while the 1-row time is not measured yet)."""
        if self.policy is not None:
            self.policy.set_k_max(k_max)
        return self.policy

    def decide_on(self, costs: CostModel, k_max: int) -> DraftLengthPolicy:
        """A policy that decides on ``costs`` (another machine's, fixed) instead of this machine's timings."""
        self.policy = DraftLengthPolicy(float(costs.verify(1)[1]), k_max)
        self.policy.costs = costs
        self.policy.replan()
        return self.policy

    def observe_t1(self, seconds: float, k_max: int) -> DraftLengthPolicy | None:
        """Record a round that verified one row; build the policy once ``T1_ROUNDS`` are known."""
        if self.policy is None:
            self._t1.append(seconds)
            if len(self._t1) >= T1_ROUNDS:
                self.policy = DraftLengthPolicy(statistics.median(self._t1), k_max)
        return self.policy


def explain(policy: dict, draft_lengths: list[int], measured: dict | None = None) -> str:
    """One line on why the policy drafted as much or as little as it did, from its estimates (``state_dict``), and
    with ``measured`` (``GenerationStats.to_dict``) what that cost in the run: drafting's share of the decode."""
    rounds = sum(draft_lengths)
    if rounds == 0:
        return "no round ran"
    drafting = 1.0 - draft_lengths[0] / rounds
    mean = sum(k * n for k, n in enumerate(draft_lengths)) / rounds
    t = policy["verify_ms"]
    costs = f"a verify of 2 rows costs {t[1] / t[0]:.2f}x a 1-token decode ({t[0]:.1f} ms)" if len(t) > 1 else ""
    rows = policy.get("catch_up_rows")
    first = f"{policy['first_step_ms']:.1f} ms"
    if rows:  # the first step of a round after a drafting round catches up on that round's rows
        first += f" after a drafting round (the drafter catching up on its {rows:.1f} rows)"
    costs += f", a round's first draft step {first} and a further draft step {policy['draft_step_ms']:.1f} ms"
    if policy.get("probe_rows"):
        costs += (f"; after an idle stretch the first step catches up on {policy['probe_rows']} rows "
                  f"({policy['probe_first_step_ms']:.1f} ms)")  # fmt: skip
    gain = policy["expected_tokens_per_second"] / policy["target_tokens_per_second"]
    expected = f"expected gain {gain:.2f}x"
    if 1.0 < gain < 1.0 + policy.get("margin", 0.0):
        expected += f", under the {policy['margin']:.0%} a plan must promise before it drafts"
    spent = _spent(measured)
    if drafting < 0.1 and policy.get("hopeless"):
        return (
            f"drafted in {drafting:.0%} of rounds: on this machine {costs}, so even a draft the target always keeps "
            f"costs more than the token it may gain, and only near-certain drafts would pay ({expected}); probes, "
            f"every {policy['probe_interval']} rounds by now (each failed one doubles the "
            f"interval), re-check the costs{spent}"
        )
    if drafting < 0.1:
        return (
            f"drafted in {drafting:.0%} of rounds: on this machine {costs}, so only near-certain drafts would pay, "
            f"and too few of this drafter's were ({expected}); probes every "
            f"{policy['probe_interval']} rounds check whether the text has become easier to predict{spent}"
        )
    return (
        f"drafted {mean:.1f} tokens per round on average, in {drafting:.0%} of rounds: {costs}, and enough "
        f"confident drafts were accepted to pay for that (expected gain {gain:.2f}x){spent}"
    )


def _spent(measured: dict | None) -> str:
    """What drafting took in the run: the drafter's seconds against the decode's, and the catch-ups' rows."""
    if not measured or not measured.get("decode_seconds"):
        return ""
    share = measured.get("drafter_seconds", 0.0) / measured["decode_seconds"]
    text = f"; in this run the drafter took {share:.0%} of the decode time"
    n = measured.get("catch_ups", 0)
    if n:
        text += f", its {n} catch-ups {measured.get('catch_up_rows', 0) / n:.1f} rows each on average"
    return text


def state_dict(state: PolicyState) -> dict:
    """The policy's estimates for statistics (JSON): times in milliseconds, rates in tokens per second."""
    return {
        "rounds": state.rounds,
        "verify_ms": [round(1000 * t, 3) for t in state.verify],
        "draft_step_ms": round(1000 * state.draft_step, 3),
        "first_step_ms": round(1000 * state.first_step, 3),
        "host_ms": round(1000 * state.host, 3),
        "expected_tokens_per_second": round(float(state.rate), 2),
        "target_tokens_per_second": round(float(state.target_rate), 2),
        "calibration": [round(float(w), 3) for w in state.calibration],
        "probe_interval": state.probe_interval,
        "idle_rounds": state.idle_rounds,
        "hopeless": bool(state.hopeless),
        "catch_up_rows": round(float(state.steady_rows), 2),
        "probe_rows": int(state.probe_rows),
        "probe_first_step_ms": round(1000 * state.probe_first_step, 3),
        "margin": round(float(state.margin), 3),
    }

"""The frozen-costs harness: what a test's adaptive run decides follows the frozen costs, not what the engine's own
policy learnt before on this machine's clock (a loaded machine's warm-up once halved the trees a test counted)."""

from __future__ import annotations

from types import SimpleNamespace

from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.lengths import PolicyHolder
from local_eagle.runtime.policy.shapes import TreeChoice
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.costs import FrozenCosts, deciding_on

GPU = [1.0 + 0.01 * r for r in range(18)]


def _engine(policy: DraftLengthPolicy | None) -> SimpleNamespace:
    """What ``deciding_on`` touches of an engine."""
    holder = PolicyHolder()
    holder.policy = policy
    return SimpleNamespace(lengths=holder, tree_choices={}, tree_quotas={})


def _learnt() -> DraftLengthPolicy:
    """An engine's policy after a warm-up on a busy CPU: ten confident drafts wrong, probes pushed far apart."""
    policy = DraftLengthPolicy(2e-3, 4)
    for _ in range(10):
        policy.shadow(0.9, False)
        policy.end_round(0, verify_seconds=9e-3, host_seconds=5e-3)
    policy.probe_interval = 3849
    return policy


def _decisions(policy: DraftLengthPolicy) -> tuple:
    s = policy.state()
    return s.rate, s.take, s.extend, s.calibration, s.probe_interval, s.idle_rounds, s.rounds, s.steady_rows


def test_the_block_decides_alike_whatever_the_engines_policy_learnt_before() -> None:
    shape = TreeShape(16, 7, 4)
    seen = []
    for own in (None, DraftLengthPolicy(1e-3, 4), _learnt()):
        engine = _engine(own)
        choice = TreeChoice(shape, later_calls=False)
        with deciding_on(engine, GPU, 5e-5, choice) as policy:  # type: ignore[arg-type]
            assert engine.lengths.policy is policy is not own and isinstance(policy.costs, FrozenCosts)
            assert engine.tree_choices == {shape: choice}
            seen.append((_decisions(policy), choice.prefer_tree(policy), choice.ceiling(policy)))
        assert engine.lengths.policy is own and engine.tree_choices == {}
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][1]  # GPU-like costs: a tree is worth trying

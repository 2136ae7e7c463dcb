"""The batch's draft length (runtime.policy.batch): pure maths and the probe schedule, no model."""

from __future__ import annotations

import numpy as np
import pytest

from local_eagle.runtime.policy.batch import (
    BatchPolicy,
    best_length,
    expected_tokens,
    line_costs,
)
from local_eagle.runtime.policy.defaults import BATCH_PROBE_FIRST as PROBE_FIRST
from local_eagle.runtime.policy.defaults import BATCH_PROBE_LAST as PROBE_LAST


def test_expected_tokens_is_one_plus_the_kept_prefix():
    a = np.array([0.5, 0.5, 0.5])
    assert expected_tokens(a, 0) == 1.0
    assert expected_tokens(a, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_calls_in_proportion_to_rows_never_pay_for_drafts():
    call = [0.0] + [0.01 * r for r in range(1, 80)]  # a small CPU: every row costs the same
    k, rates = best_length(call, 4, np.full(8, 0.8), first=0.001, step=0.001, host=0.0, k_max=8)
    assert k == 0 and rates[0] == max(rates)


def test_a_flat_call_drafts_as_deep_as_acceptance_pays():
    call = [0.0] + [0.02] * 80  # a GPU far from full: rows are free
    k, _ = best_length(call, 4, np.full(8, 0.8), first=0.001, step=0.001, host=0.0, k_max=8)
    assert k >= 4
    k_low, _ = best_length(call, 4, np.full(8, 0.05), first=0.002, step=0.002, host=0.0, k_max=8)
    assert k_low < k


def test_line_costs_keep_measurements_and_extend_them():
    assert line_costs({}, 8) is None
    one = line_costs({4: 0.04}, 8)
    assert one[4] == 0.04 and one[8] == pytest.approx(0.08)  # one count: in proportion to the rows
    two = line_costs({4: 0.04, 8: 0.05}, 16)
    assert two[8] == 0.05 and two[16] == pytest.approx(0.07)  # the line through both
    assert all(b >= a for a, b in zip(two[1:], two[2:], strict=False))


def _rounds(policy: BatchPolicy, n: int, rounds: int, cost, accept: float) -> list[int]:
    rng = np.random.default_rng(0)
    ks = []
    for _ in range(rounds):
        k = policy.choose(n, 6)
        ks.append(k)
        kept = [int(np.argmin(rng.random(k) < accept)) if k and not (rng.random(k) < accept).all() else k
                for _ in range(n)]  # fmt: skip
        policy.observe(n * (k + 1), cost(n * (k + 1)), [k] * n, kept, first=0.001, step=0.001)
    return ks


def test_on_a_cpu_the_batch_stops_drafting_and_probes_ever_more_rarely():
    policy = BatchPolicy()
    ks = _rounds(policy, 4, 400, lambda r: 0.01 * r, accept=0.6)
    assert ks[:2] == [0, 0]  # the plain call is measured first
    assert sum(k > 0 for k in ks) < 10
    assert policy.hopeless and policy.probe_every > PROBE_LAST  # even sure drafts would not pay: rare re-checks


def test_on_a_gpu_the_batch_drafts():
    policy = BatchPolicy()
    ks = _rounds(policy, 4, 200, lambda r: 0.02 + 0.0001 * r, accept=0.8)
    assert np.mean(ks[-50:]) >= 3
    assert policy.probe_every == PROBE_FIRST
    state = policy.state()
    assert state["kind"] == "batch" and state["draft_length"] == ks[-1]


def test_the_batch_explores_one_doubling_of_rows_at_a_time():
    """Calls of 2 to 4 rows cost little more than one (a line through them says 36 rows are cheap); the batch
    must not jump to 9 drafts a sequence on that line, only to calls of twice the rows measured."""
    policy = BatchPolicy()
    for rows, ms in ((2, 28.5), (3, 31.3), (4, 32.0)):
        for _ in range(3):
            policy.observe(rows, ms / 1e3, [0] * rows, [0] * rows)
    k = policy.choose(4, 8)
    assert 4 * (k + 1) <= 8

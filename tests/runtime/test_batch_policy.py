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
from local_eagle.runtime.policy.defaults import BATCH_MARGIN, BATCH_REPLAN, BATCH_STEADY
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


def test_drafting_must_promise_the_margin_over_batched_decoding():
    """The Gemma pair at 4 requests on a 2-core CPU: the rates put one draft a sequence 3-11% above no drafting, and
    the batch that drafted on that ran 0.78x (starting to draft, and newcomers' prompts decoded for the drafter,
    are not in the rates). A gain inside the margin is no gain; one well past it is."""
    call = [0.0, 0.012, 0.016, 0.020, 0.059] + [0.059 + 0.006 * r for r in range(1, 80)]
    a = np.full(8, 0.72)
    k, rates = best_length(call, 4, a, first=0.011, step=0.004, host=0.0025, k_max=1)
    assert rates[1] > rates[0] and k == 1  # no margin: the 4% wins
    k, rates = best_length(call, 4, a, first=0.011, step=0.004, host=0.0025, k_max=1, margin=BATCH_MARGIN)
    assert rates[1] < rates[0] * (1 + BATCH_MARGIN) and k == 0
    k, _ = best_length(call, 4, np.full(8, 0.95), first=0.002, step=0.001, host=0.0, k_max=1, margin=BATCH_MARGIN)
    assert k == 1  # a sure draft on a cheap catch-up clears it


def test_line_costs_keep_measurements_and_extend_them():
    assert line_costs({}, 8) is None
    one = line_costs({4: 0.04}, 8)
    assert one[4] == 0.04 and one[8] == pytest.approx(0.08)  # one count: in proportion to the rows
    two = line_costs({4: 0.04, 8: 0.05}, 16)
    assert two[8] == 0.05 and two[16] == pytest.approx(0.07)  # the line through both
    assert two[6] == pytest.approx(0.045) and two[2] == pytest.approx(0.035)  # between them, and below the first
    assert all(b >= a for a, b in zip(two[1:], two[2:], strict=False))


def test_line_costs_keep_a_knee_where_it_was_measured():
    """An Intel AMX CPU's verify (ms): 4 rows 1.38x one row, 5 rows 1.99x; a line through the counts would put 5 rows
    near 4's and 8 rows far below their measure."""
    amx = {1: 23.42, 2: 23.61, 3: 27.95, 4: 32.23, 5: 46.57, 8: 51.29, 12: 64.75, 16: 81.92}
    T = line_costs({r: ms / 1e3 for r, ms in amx.items()}, 24)
    for r, ms in amx.items():
        assert T[r] == pytest.approx(ms / 1e3)
    assert T[6] == pytest.approx((46.57 + (51.29 - 46.57) / 3) / 1e3)
    assert T[24] > T[16] + 7 * (81.92 - 64.75) / 4 / 1e3  # beyond: at least the last two counts' slope


def test_the_batch_prices_its_catch_up_by_rows():
    """A probe after an idle stretch catches every sequence up on a window of rows; a batch that drafts every round
    catches up on the last round's few. Priced by the probes' catch-ups (the median of every first call, before),
    k = 1 loses where, priced right, it pays."""
    policy = BatchPolicy()
    drafter = {4: 0.0062, 16: 0.0217}  # Intel AMX: a drafter call of 4 rows, of 16
    for i in range(6):
        policy.observe(4, 0.020, [0] * 4, [0] * 4)
        policy.observe(8, 0.024, [1] * 4, [1] * 4, drafter=[(16, drafter[16])])  # probes, all accepted
        if i < 4:
            policy.observe(8, 0.024, [1] * 4, [1] * 4, drafter=[(4, drafter[4])])  # rounds after an accepted one
    tokens = 1 + policy.acceptance(1)[0]
    assert 4 * tokens / (0.024 + drafter[16]) < 4 / 0.020 < 4 * tokens / (0.024 + policy.catch_up(4 * tokens))
    assert policy.catch_up(16) == pytest.approx(drafter[16]) and policy.catch_up(4) == pytest.approx(drafter[4])
    assert policy.catch_up(8) == pytest.approx(drafter[4] + (drafter[16] - drafter[4]) / 3)
    assert policy.choose(4, 1) == 1


def _rounds(policy: BatchPolicy, n: int, rounds: int, cost, accept: float) -> list[int]:
    rng = np.random.default_rng(0)
    ks = []
    for _ in range(rounds):
        k = policy.choose(n, 6)
        ks.append(k)
        kept = [int(np.argmin(rng.random(k) < accept)) if k and not (rng.random(k) < accept).all() else k
                for _ in range(n)]  # fmt: skip
        calls = [(n, 0.001)] * k  # the catch-up, then a row per sequence a step
        policy.observe(n * (k + 1), cost(n * (k + 1)), [k] * n, kept, drafter=calls)
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


def _amx_batch(policy: BatchPolicy | int, n: int, rounds: int, alpha: float, seed: int = 0) -> float:
    """Tokens per second of ``rounds`` batch rounds of ``n`` sequences on the Intel AMX CPU's measured costs (issue
    44), drafts kept with chance ``alpha`` at each depth; ``policy`` a BatchPolicy, or a fixed k. Each round's
    drafter catch-up decodes every sequence's rows since it last drafted: the last round's where it drafted, the
    window of 4 rows an idle batch records before a probe otherwise."""
    from local_eagle.bench.project import load_profile

    amx = load_profile("intel-amx-2core-gemma3-270m")
    rng = np.random.default_rng(seed)
    tokens = seconds = 0.0
    caught = [1] * n
    for _ in range(rounds):
        k = policy if isinstance(policy, int) else policy.choose(n, 6)
        kept = [int(np.argmin(rng.random(k) < alpha)) if k and not (rng.random(k) < alpha).all() else k
                for _ in range(n)]  # fmt: skip
        call = amx.verify(n * (k + 1)) / 1e3
        drafter = [(sum(caught), amx.drafter(sum(caught)) / 1e3)] + [(n, amx.drafter(n) / 1e3)] * (k - 1) if k else []
        tokens += sum(1 + a for a in kept)
        seconds += call + sum(s for _, s in drafter)
        if not isinstance(policy, int):
            policy.observe(n * (k + 1), call, [k] * n, kept, drafter=drafter)
        caught = [1 + a for a in kept] if k else [4] * n
    return tokens / seconds


@pytest.mark.parametrize("n", [4, 16])
@pytest.mark.parametrize("alpha", [0.7, 1.0])
def test_on_an_intel_amx_cpu_the_batch_is_never_slower_than_no_drafting(n: int, alpha: float):
    """Issue 44's bar: at 4 requests the default ran at 0.92x of no drafting there. Over an answer's worth of rounds
    (48), probes and catch-ups paid, the batch stays within 5% of no drafting. (With a drafter that is always right,
    k = 2-3 would run 1.11x at 4 requests; the batch, which learns a depth's acceptance from its rare probes with a
    uniform prior, does not find that within 400 rounds: it stays at 0.995x.)"""
    plain = _amx_batch(0, n, 48, alpha)
    runs = [_amx_batch(BatchPolicy(), n, 48, alpha, seed) for seed in range(4)]
    assert min(runs) >= 0.95 * plain, (plain, runs)
    if alpha < 1.0:  # no fixed k pays: the batch drafts nothing but its probes
        assert max(_amx_batch(k, n, 48, alpha) for k in range(1, 4)) < plain


def test_the_next_depth_past_the_largest_measured_call_is_priced_with_half_its_extra_cost():
    policy = BatchPolicy()
    for rows, ms in ((4, 6.0), (8, 9.0)):
        for _ in range(2):
            policy.observe(rows, ms / 1e3, [0] * 4, [0] * 4)
    line = policy.costs(16)  # the line through 4 and 8 rows: 0.75 ms a row beyond
    explore = policy.costs(16, 4)
    assert explore[:9] == line[:9]  # what was measured stays
    assert explore[12] == pytest.approx(9e-3 + 0.5 * 3e-3)  # the next depth (4 rows more): half its extra cost
    assert explore[16] == pytest.approx(line[16] - 0.5 * 3e-3)  # beyond it: no cheaper than the line's slope
    assert BatchPolicy().costs(16, 4) is None
    one_draft_unmeasured = BatchPolicy()
    for _ in range(2):
        one_draft_unmeasured.observe(4, 6e-3, [0] * 4, [0] * 4)
    assert one_draft_unmeasured.costs(16, 4) == one_draft_unmeasured.costs(16)  # a probe measures 2n rows first


def test_a_batch_smaller_than_the_calls_measured_prices_them_as_measured():
    policy = BatchPolicy()
    for rows in (4, 8, 16):
        for _ in range(2):
            policy.observe(rows, rows / 1e3, [0] * 4, [0] * 4)
    assert policy.costs(6, 3) == policy.costs(6)  # 3 sequences left, k = 1: nothing past the largest call


def test_a_round_whose_costs_are_unknown_is_no_probe():
    """``probing`` steers the round's feature window and admissions (``runtime.batch``): a round after a probe whose
    batch size was never measured drafts nothing and must not read as a probe."""
    policy = BatchPolicy(probe_every=1, since_draft=1)
    for _ in range(2):
        policy.observe(4, 4e-3, [0] * 4, [0] * 4)
    assert policy.choose(4, 4) == 1 and policy.probing
    assert policy.choose(3, 4) == 0 and not policy.probing


def test_the_batch_is_steady_after_drafting_rounds_in_a_row_not_after_a_probe():
    policy = BatchPolicy(since_draft=1)
    for _ in range(2):
        policy.observe(4, 4e-3, [0] * 4, [0] * 4)
        policy.observe(8, 4.1e-3, [1] * 4, [1] * 4)  # a flat call: one draft a sequence pays
    for _ in range(BATCH_STEADY - 1):
        assert policy.choose(4, 1) == 1 and not policy.steady
    assert policy.choose(4, 1) == 1 and policy.steady
    probing = BatchPolicy(probe_every=1, since_draft=1)
    for _ in range(2):
        probing.observe(4, 4e-3, [0] * 4, [0] * 4)
    for _ in range(BATCH_STEADY + 1):
        probing.since_draft = 10**6  # a probe is due every round
        assert probing.choose(4, 1) == 1 and probing.probing and not probing.steady


def test_the_batch_solves_again_only_when_its_inputs_changed_or_every_replan_rounds(monkeypatch):
    """A solve is 0.5 ms of Python beside llama.cpp's threads on a 2-core CPU (1.5% of a 4-request round there): an
    idle batch keeps its answer for ``replan`` rounds, and solves at once where the batch's size changed, a call
    size was newly measured or a probe is to be judged."""
    policy = BatchPolicy()
    solves: list[int] = []
    solve = policy._solve
    monkeypatch.setattr(policy, "_solve", lambda *a: solves.append(policy.rounds) or solve(*a))
    cpu = lambda rows: 0.01 * rows  # noqa: E731  every row costs the same: drafting never pays
    ks = _rounds(policy, 4, 200, cpu, accept=0.6)
    probes = [i + 1 for i, k in enumerate(ks) if k > 0]
    assert probes and all(r + 1 in solves for r in probes)  # each probe judged in the round after it
    late = [r for r in solves if r > 20]
    assert len(late) <= (200 - 20) // BATCH_REPLAN + len(probes) + 1
    assert all(b - a <= BATCH_REPLAN for a, b in zip(solves, solves[1:], strict=False))
    for _ in range(2):
        policy.observe(3, cpu(3), [0] * 3, [0] * 3)
    before = len(solves)
    assert policy.choose(3, 6) == 0 and len(solves) == before + 1  # a request ended: 3 sequences now
    assert policy.choose(3, 6) == 0 and len(solves) == before + 1
    for _ in range(2):  # a call size measured for the first time
        policy.observe(12, cpu(12), [3] * 3, [0] * 3)
    policy.choose(3, 6)
    assert len(solves) == before + 2

"""The draft-length policy against synthetic costs and acceptance (no model; fixed seeds)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from local_eagle.runtime.draftsim import (
    CPU,
    GPU,
    PARTIAL,
    PROFILES,
    AcceptanceProcess,
    CostProfile,
    best_fixed,
    fixed_rate,
    simulate,
)
from local_eagle.runtime.policy.defaults import LONE_MARGIN
from local_eagle.runtime.policy.draftcost import CostModel
from local_eagle.runtime.policy.draftlen import AcceptanceModel, DraftLengthPolicy, plan
from local_eagle.runtime.policy.lengths import explain, state_dict

T1 = 0.02


def test_cost_model_converges_on_noisy_timings():
    rng = np.random.default_rng(0)
    truth = {r: 0.019 * (0.3 + 0.7 * r) for r in range(1, 10)}
    cm = CostModel(0.019)
    for _ in range(400):
        r = int(rng.choice([1, 2, 3, 5]))
        spike = 3.0 if rng.random() < 0.03 else 1.0  # another process on the core
        cm.add_verify(r, truth[r] * rng.lognormal(0.0, 0.1) * spike)
        cm.add_draft(2, 2 * 0.0015 * rng.lognormal(0.0, 0.1))
        cm.add_host(0.0005 * rng.lognormal(0.0, 0.1))
    T = cm.verify(9)
    for r in (1, 2, 3, 5):
        assert T[r] == pytest.approx(truth[r], rel=0.04)
    for r in (4, 6, 9):  # never measured: the fitted line
        assert T[r] == pytest.approx(truth[r], rel=0.08)
    assert cm.draft_step == pytest.approx(0.0015, rel=0.05)
    assert cm.host == pytest.approx(0.0005, rel=0.05)
    assert np.all(np.diff(T[1:]) >= 0)


def test_cost_model_starts_pessimistic_and_one_outlier_does_not_pin_a_row():
    cm = CostModel(T1)
    np.testing.assert_allclose(cm.verify(4)[1:], [T1, 2 * T1, 3 * T1, 4 * T1])  # proportional until measured
    for _ in range(8):
        cm.add_verify(1, T1)
        cm.add_verify(2, 1.02 * T1)
    assert cm.verify(9)[9] < 1.3 * T1  # a flat target is recognised from 2-row calls
    cm.add_verify(6, 3.0 * T1)
    assert cm.verify(9)[6] < 1.2 * T1
    opt = cm.verify(9, optimism=0.5)
    assert opt[2] == pytest.approx(cm.verify(9)[2]) and opt[9] < cm.verify(9)[9]


def test_acceptance_model_prior_is_calibrated_and_learns_an_overconfident_drafter():
    am = AcceptanceModel()
    assert am(0.7) == pytest.approx(0.7)
    rng = np.random.default_rng(1)
    for t in range(400):
        u = rng.beta(1.0, 1.0)
        am.observe(u**0.5, bool(rng.random() < u), t)  # reports sqrt(u): overconfident
    am.refit(400)
    for c in (0.5, 0.8, 0.95):
        assert am(c) == pytest.approx(c**2, abs=0.08)


def test_acceptance_model_ignores_confidence_that_says_nothing():
    am = AcceptanceModel()
    rng = np.random.default_rng(2)
    for t in range(300):
        am.observe(float(rng.beta(0.95 * 2, 0.05 * 2)), bool(rng.random() < 0.1), t)
    am.refit(300)
    assert am.w[1] >= 0.0
    assert am(0.99) < 0.25


def test_plan_flat_verify_drafts_deep_on_confident_drafts():
    T = np.array([0.0, *(T1 * (1 + 0.01 * (n - 1)) for n in range(1, 10))])
    p = plan(T, 0.05 * T1, 0.0, np.full(8, 0.9), 8)
    assert p.rate > 3.0 * p.target_rate
    assert all(t < 0.3 for t in p.take[1:]) and all(e < 0.4 for e in p.extend)


def test_plan_proportional_verify_drafts_only_near_certain_tokens():
    T = np.arange(10) * T1
    assert math.isinf(plan(T, 0.05 * T1, 0.0, np.full(8, 0.99), 8).take[1])  # never pays, even when certain
    T = np.array([0.0, *(CPU.verify[n] for n in range(1, 10))])
    p = plan(T, CPU.draft_step, CPU.host, np.full(8, 0.5), 8)
    assert p.rate == p.target_rate
    assert all(math.isinf(e) for e in p.extend)  # an unseen draft (a = 0.5) is never worth a step
    assert 0.65 < p.take[1] < 0.75  # a computed one is worth a row when a > (T(2) - T(1)) / (T(1) + host)


def test_plan_starts_no_draft_for_a_gain_under_the_margin():
    T = np.array([0.0, *(T1 * (1 + 0.7 * (n - 1)) for n in range(1, 10))])  # a 2-row call costs 1.7x one row
    small, fair = np.full(8, 0.85), np.full(8, 0.9)  # ~3% and ~6% over the target alone
    p0, p5 = plan(T, 0.1 * T1, 0.0, small, 8), plan(T, 0.1 * T1, 0.0, small, 8, margin=0.05)
    assert 1.0 < p0.rate / p0.target_rate < 1.05 and p0.extend[0] < 1.0 and p0.take[1] < 1.0
    assert math.isinf(p5.extend[0]) and math.isinf(p5.take[1])
    assert p5.rate == p0.rate  # the price trees and probes are judged by is the rule's own
    p5 = plan(T, 0.1 * T1, 0.0, fair, 8, margin=0.05)
    assert p5.rate / p5.target_rate > 1.05 and p5.extend[0] < 1.0 and p5.take[1] < 1.0


def test_policy_drafts_deep_when_verify_is_flat():
    pol = DraftLengthPolicy(GPU.verify[1], 8)
    res = simulate(pol, GPU, AcceptanceProcess(0.95), 400, seed=3)
    assert res.drafted[100:].mean() > 6.5
    assert pol.take(0.999) and pol.extend()


def test_policy_drafts_nothing_on_cpu_unless_acceptance_is_near_certain():
    res = simulate(DraftLengthPolicy(CPU.verify[1], 8), CPU, AcceptanceProcess(0.5, confidence=0.9), 800, seed=4)
    assert (res.drafted[200:] > 0).mean() < 0.08 and res.speedup > 0.95  # probes, and retries as old evidence fades
    res = simulate(DraftLengthPolicy(CPU.verify[1], 8), CPU, AcceptanceProcess(0.99, concentration=20), 400, seed=4)
    assert (res.drafted[100:] > 0).mean() > 0.9 and res.speedup > 1.3
    prop = CostProfile.linear("proportional", T1, 1.0, 0.0015, 0.0005)
    for alpha in (0.5, 0.9):
        res = simulate(DraftLengthPolicy(T1, 8), prop, AcceptanceProcess(alpha, concentration=20), 800, seed=4)
        assert (res.drafted[300:] > 0).mean() < 0.05 and res.speedup > 0.95


def test_policy_stops_when_acceptance_collapses_and_resumes_through_probes():
    good, bad = AcceptanceProcess(0.95), AcceptanceProcess(0.05, confidence=0.95)  # confidently wrong in phase 2
    pol = DraftLengthPolicy(CPU.verify[1], 8)
    states = {}

    def process(r: int) -> AcceptanceProcess:
        states[r] = pol.state()
        return bad if 500 <= r < 1300 else good

    d = simulate(pol, CPU, process, 1900, seed=5).drafted
    assert d[200:500].mean() > 3.0
    assert (d[900:1300] > 0).mean() < 0.04
    assert states[1300].probe_interval >= 32 and states[1300].idle_rounds > 0
    first = 1300 + int(np.argmax(d[1300:] > 0))
    assert states[first].probing  # the first draft after the change is a probe
    assert d[1600:].mean() > 3.0


def _stopped_policy() -> DraftLengthPolicy:
    """A policy on partial-offload costs that has stopped drafting after 20 rounds of a drafter always wrong."""
    pol = DraftLengthPolicy(PARTIAL.verify[1], 4, probe_first=4, probe_warmup=0, optimism=0.0)
    for _ in range(20):
        pol.begin_round()
        n = 0
        while pol.extend() and pol.take(0.5):
            n += 1
        pol.end_round(0, verify_seconds=PARTIAL.verify[n + 1], draft_seconds=n * PARTIAL.draft_step, draft_steps=n)
    return pol


def test_probes_grow_rare_when_they_fail_and_frequent_when_they_are_accepted():
    pol = _stopped_policy()
    while not pol.state().probing:
        pol.begin_round()
        assert not pol.extend()
        pol.end_round(0, verify_seconds=PARTIAL.verify[1])
    interval = pol.state().probe_interval
    p = pol.probe_break_even()
    T, rate = pol.costs.verify(2), pol.rate
    assert 0.2 < (T[2] - T[1]) * rate < 0.5  # an extra row costs 0.3 of a decode on this machine ...
    assert p == pytest.approx((T[2] - T[1] + pol.costs.catch_up(pol.probe_rows)) * rate)  # ... the catch-up more
    pol.begin_round()
    assert pol.extend() and pol.take(0.001)
    pol.end_round(0, verify_seconds=PARTIAL.verify[2], draft_seconds=PARTIAL.draft_step, draft_steps=1)
    grown = pol.state().probe_interval
    assert grown == min(64, round(interval * 2 ** (max(p, 1 / 3) / (1 - max(p, 1 / 3)))))  # drifts 0 at rate p
    for _ in range(grown):
        pol.end_round(0, verify_seconds=PARTIAL.verify[1])
    assert pol.state().probing and pol.extend() and pol.take(0.001)
    pol.end_round(1, verify_seconds=PARTIAL.verify[2], draft_seconds=PARTIAL.draft_step, draft_steps=1)
    assert pol.state().probe_interval == grown // 2


def test_one_slow_probe_does_not_silence_probing_once_the_costs_settle():
    """Probes whose drafter start took 200 decodes (a cold start, a core taken by another job) grow the
    interval to its cap at those costs; when later first steps are fast, the next replan brings the cap, and
    with it the interval, back down, so the text is still checked for drafts that pay."""
    pol = _stopped_policy()
    slow = 200 * PARTIAL.verify[1]
    for _ in range(3):
        pol.costs.add_first(slow, 16)
    while not pol.state().probing:
        pol.begin_round()
        pol.end_round(0, verify_seconds=PARTIAL.verify[1])
    assert pol.extend() and pol.take(0.001)
    pol.end_round(0, verify_seconds=PARTIAL.verify[2], draft_seconds=slow, draft_steps=1, first_seconds=slow,
                  first_rows=16)  # fmt: skip
    stretched = pol.state().probe_interval
    assert pol.probe_rows == 16 and stretched > 1000
    for _ in range(8):
        pol.costs.add_first(PARTIAL.draft_step, 16)
    pol.replan()
    settled = pol.state().probe_interval
    assert settled == pol.probe_cap() < stretched / 10 and settled >= pol.probe_max


def test_probes_that_cannot_pay_fade_even_when_mostly_accepted():
    """On the CPU an extra verify row costs 0.7 of a decode: a probe right 70% of the time still loses a little,
    so probes must not grow frequent just because most succeed (a probe's share of rounds varies from run to
    run, 0.2% to 21% over 20 seeds: judged on the mean of six)."""
    process = AcceptanceProcess(0.7, confidence=0.5)
    runs = [simulate(DraftLengthPolicy(CPU.verify[1], 8), CPU, process, 1500, seed=seed) for seed in range(6)]
    assert np.mean([(res.drafted[300:] > 0).mean() for res in runs]) < 0.08
    assert min(res.speedup for res in runs) > 0.98


def test_fixed_mode_caps_and_k_max_zero():
    pol = DraftLengthPolicy(CPU.verify[1], 3, fixed=True)
    res = simulate(pol, CPU, AcceptanceProcess(0.2), 50, seed=6)
    assert np.all(res.drafted == 3)
    pol.begin_round(cap=1)
    assert pol.extend() and pol.take(0.0) and not pol.extend() and not pol.take(0.9)
    pol = DraftLengthPolicy(CPU.verify[1], 0)
    assert np.all(simulate(pol, CPU, AcceptanceProcess(0.99), 50, seed=6).drafted == 0)
    pol = DraftLengthPolicy(GPU.verify[1], 4, primed=True)
    assert simulate(pol, GPU, AcceptanceProcess(0.9), 50).drafted.max() <= 4


def test_a_refused_draft_ends_the_round():
    pol = DraftLengthPolicy(CPU.verify[1], 8)
    pol.begin_round()
    assert pol.extend() is False or pol.take(0.001) is False
    assert not pol.extend() and pol.drafted == 0


def test_simulate_is_deterministic():
    process = AcceptanceProcess(0.8)
    runs = [simulate(DraftLengthPolicy(PARTIAL.verify[1], 8), PARTIAL, process, 200, seed=7) for _ in "ab"]
    assert runs[0].tokens == runs[1].tokens and np.array_equal(runs[0].drafted, runs[1].drafted)


def test_fixed_rate_matches_the_formula():
    alpha, k = 0.8, 3
    tokens = 1 + alpha + alpha**2 + alpha**3
    assert fixed_rate(GPU, alpha, k) == pytest.approx(tokens / (3 * GPU.draft_step + GPU.verify[4] + GPU.host))
    assert best_fixed(CPU, 0.2, 8)[0] == 0 and best_fixed(GPU, 0.95, 8)[0] == 8


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_policy_is_within_5_percent_of_the_best_fixed_k(profile: CostProfile):
    for alpha in (0.2, 0.5, 0.8, 0.95):
        _, best = best_fixed(profile, alpha, 8)
        res = simulate(DraftLengthPolicy(profile.verify[1], 8), profile, AcceptanceProcess(alpha), 1000, seed=1)
        assert res.rate >= 0.95 * best, (profile.name, alpha, res.rate / best)
        assert res.speedup >= 0.95, (profile.name, alpha, res.speedup)


def test_rounds_until_draft_counts_down_to_the_probe_and_a_round_not_ready_keeps_it_due():
    """What the engine pauses the drafter's input by: an idle policy knows how far its next probe is, a round
    whose drafter is not ready counts as idle, and a probe that falls due then waits for a ready round."""
    pol = _stopped_policy()
    left = pol.rounds_until_draft()
    assert left == pol.state().probe_interval - pol.state().idle_rounds > 0
    for i in range(left + 3):
        pol.begin_round(ready=False)
        assert not pol.state().probing and not pol.extend()
        pol.end_round(0, verify_seconds=PARTIAL.verify[1])
        assert pol.rounds_until_draft() == max(0, left - i - 1)
    pol.begin_round()
    assert pol.state().probing and pol.extend()
    assert DraftLengthPolicy(GPU.verify[1], 4).rounds_until_draft() == 0  # drafting pays: any round may draft
    assert DraftLengthPolicy(CPU.verify[1], 4, fixed=True).rounds_until_draft() == 0


def test_probes_back_off_geometrically_where_they_cannot_pay():
    """A 2-row verify of 2.5 decodes (Gemma 3 270M on a 2-core CPU): a probe costs more than the token it may gain,
    so each failed probe doubles the interval past the budget's cap, up to ``probe_idle_max``; the cost model's
    prior alone (no 2-row verify measured yet) never says so, and flat verifies (a GPU) never do."""
    steep = CostProfile.measured("steep", 0.011, {1: 1.0, 2: 2.5, 3: 3.9}, 0.0011, 0.0001)
    pol = DraftLengthPolicy(steep.verify[1], 8, probe_idle_max=1000)
    assert not pol.probes_cannot_pay()  # the prior's proportional line is no measurement
    intervals, probes = [], 0
    for _ in range(6000):
        pol.begin_round()
        k = 0
        while pol.extend() and pol.take(0.9):
            k += 1
        probes += pol.probing and k > 0
        pol.end_round(1 if k else 0, verify_seconds=steep.verify[k + 1], draft_seconds=0.015 * k, draft_steps=k,
                      host_seconds=0.0001, first_seconds=0.015 if k else None)  # fmt: skip
        if not intervals or intervals[-1] != pol.probe_interval:
            intervals.append(pol.probe_interval)
    assert pol.probes_cannot_pay() and pol.state().probe_interval == 1000
    cap = max(pol.probe_max, math.ceil(pol.probe_break_even() / pol.probe_budget))
    grown = [b for a, b in zip(intervals, intervals[1:], strict=False) if a >= cap]
    assert grown and all(b == min(1000, 2 * a) for a, b in zip(intervals, intervals[1:], strict=False) if a >= cap)
    assert probes <= 12  # at the budget's cap alone (~300 rounds) there would be ~20
    why = explain(json.loads(json.dumps(state_dict(pol.state()))), [5990, 10])  # JSON, as bench and serve print it
    assert "costs more than the token it may gain" in why and "every 1000 rounds" in why
    assert "costs more than" not in explain(state_dict(DraftLengthPolicy(steep.verify[1], 8).state()), [990, 10])
    assert not DraftLengthPolicy(GPU.verify[1], 8).probes_cannot_pay()
    gpu = DraftLengthPolicy(GPU.verify[1], 8)
    for _ in range(8):
        gpu.costs.add_verify(2, GPU.verify[2])
    assert not gpu.probes_cannot_pay()


def test_an_idle_policy_replans_less_often():
    pol = DraftLengthPolicy(CPU.verify[1], 8, refresh_every=16, refresh_idle=64, probe_first=10**6)
    replans = []
    plan_once = pol.replan
    pol.replan = lambda: replans.append(pol.rounds) or plan_once()
    for _ in range(320):
        pol.begin_round()  # and draws nothing
        pol.end_round(0, verify_seconds=CPU.verify[1])
    assert replans[:4] == [1, 2, 4, 8] and replans[4:] == [16, 32, 48, 64, 128, 192, 256, 320]


def test_probes_do_not_bring_back_the_drafting_replan_cadence():
    """A probe is one observation: a policy that drafts nothing else keeps replanning every ``refresh_idle`` rounds
    (a replan is ~1 ms of Python, a 1-row call of an 8B target on a fast GPU), where each failed probe used to bring
    back four replans at the drafting cadence."""
    pol = DraftLengthPolicy(GPU.verify[1], 8, refresh_every=16, refresh_idle=64)
    replans, probes = [], []
    plan_once = pol.replan
    pol.replan = lambda: replans.append(pol.rounds) or plan_once()
    for _ in range(1024):
        pol.begin_round()
        if pol.extend() and pol.take(0.01):  # only a probe takes so unlikely a draft
            probes.append(pol.rounds)
        pol.end_round(0, verify_seconds=GPU.verify[1 + pol.drafted], draft_seconds=GPU.draft_step * pol.drafted,
                      draft_steps=pol.drafted)  # fmt: skip
    assert len(probes) >= 8
    assert replans[:8] == [1, 2, 4, 8, 16, 32, 48, 64] and all(r % 64 == 0 for r in replans[8:])
    assert len(replans) == 8 + (1024 - 64) // 64


def test_an_accepted_probe_brings_back_the_drafting_replan_cadence():
    """An accepted probe is evidence that drafting may pay again: the plan is solved again within ``refresh_every``
    rounds, not at the idle cadence."""
    pol = DraftLengthPolicy(GPU.verify[1], 8, refresh_every=16, refresh_idle=64)
    replans = []
    plan_once = pol.replan
    pol.replan = lambda: replans.append(pol.rounds) or plan_once()
    accepted_at = None
    while pol.rounds < 400 and accepted_at is None:
        pol.begin_round()
        drafted = pol.extend() and pol.take(0.01)
        if drafted and pol.rounds >= 200:
            accepted_at = pol.rounds
        pol.end_round(int(accepted_at is not None), verify_seconds=GPU.verify[1 + pol.drafted],
                      draft_seconds=GPU.draft_step * pol.drafted, draft_steps=pol.drafted)  # fmt: skip
    assert accepted_at is not None
    for _ in range(16):
        pol.begin_round()
        pol.end_round(0, verify_seconds=GPU.verify[1])
    assert any(accepted_at < r <= accepted_at + 16 for r in replans)


def test_an_idle_replan_solves_once(monkeypatch: pytest.MonkeyPatch):
    """Where the last plan drafted nothing, Dinkelbach starts from the target's own rate: one solve a replan, not a
    second after starting from the rate of the last 1-row time (an idle policy on a machine getting slower), and the
    plan a start from the last rate reaches."""
    from local_eagle.runtime.policy import draftlen

    pol = DraftLengthPolicy(CPU.verify[1], 8, probe_first=10**6)
    for _ in range(64):
        pol.shadow(0.9, False)  # a drafter the target never agrees with: no round pays
        pol.begin_round()
        pol.end_round(0, verify_seconds=CPU.verify[1])
    solves = []
    solve = draftlen._solve
    monkeypatch.setattr(draftlen, "_solve", lambda *a: solves.append(a[0]) or solve(*a))
    for slower in (1.01, 1.02, 1.03):
        for _ in range(200):
            pol.costs.add_verify(1, CPU.verify[1] * slower)
        last = pol._plan
        assert last.expected_tokens == 1.0
        solves.clear()
        fresh = pol.replan()
        assert len(solves) == 1 and fresh.rate < last.rate
        again = plan(pol.costs.verify(9, optimism=pol.optimism), pol.costs.draft_step, pol.costs.host,
                     pol.acceptance.many(np.full(8, 0.5)), 8, first=pol.costs.first_step, rate=last.rate)  # fmt: skip
        assert again.rate == fresh.rate and np.array_equal(again.extend, fresh.extend)


def test_quantiles_equal_numpys_linear_method() -> None:
    """The policy's own quantiles: np.quantile's floats, without its cost (or its first call's numpy.ma import)."""
    from local_eagle.runtime.policy.draftlen import quantiles

    rng = np.random.default_rng(3)
    q = (np.arange(8) + 0.5) / 8
    for n in (1, 2, 3, 8, 9, 17, 64):
        for scale in (1e-3, 1.0, 1e3):
            v = rng.random(n) * scale
            assert np.array_equal(quantiles(v, q), np.quantile(v, q))


def test_a_probes_long_catch_up_does_not_price_every_round():
    """Issue 44, as the Intel AMX CPU measured it: a 1-row call 23.4 ms, 2 rows 23.6 ms, a later draft step 2.6 ms;
    each probe after an idle stretch caught the drafter up on ~14 rows (19 ms). Priced at that catch-up, one draft
    costs 0.8 tokens and no round pays (0.99x where a chain of 1 ran 1.37x); a round after a drafting round catches
    up on its 1-3 rows (3.8 ms for 2), and drafting every round pays."""
    ms = 1e-3
    pol = DraftLengthPolicy(23.4 * ms, 8)
    for rows, seconds in ((1, 2.6), (2, 3.8), (3, 5.0), (4, 6.2)):  # the drafter's calls by rows, as bench measured
        for _ in range(4):
            pol.costs.add_draft(1, 2.6 * ms)
            pol.costs.add_first(seconds * ms, rows)
    for _ in range(4):
        for _ in range(32):
            pol.begin_round()
            pol.end_round(0, verify_seconds=23.4 * ms)
        pol.costs.add_first(19.2 * ms, 14)
        pol.costs.add_verify(2, 23.6 * ms)
        for _ in range(3):
            pol.acceptance.observe(0.9, True, pol.rounds)
        pol.acceptance.observe(0.9, False, pol.rounds)
    pol.replan()
    state = pol.state()
    assert state.first_step < 5 * ms < 19 * ms < state.probe_first_step  # steady rows, not a probe's window
    assert state.extend[0] < 1.0 and pol.rounds_until_draft() == 0  # every round drafts
    T, step = pol.costs.verify(2), pol.costs.draft_step
    one = {first: plan(T, step, 0.0, np.full(1, 0.75), 1, first=first) for first in (19.2 * ms, state.first_step)}
    assert math.isinf(one[19.2 * ms].extend[0]) and one[state.first_step].extend[0] < 1.0  # one draft, a = 0.75
    assert not pol.probes_cannot_pay() and pol.draft_break_even() < 0.3


def test_the_verify_curve_keeps_a_knee_measured_between_rows():
    """Intel AMX: 4 rows 1.38x one row, 5 rows 1.99x, 8 rows 2.19x. A line through them misprices both sides of the
    knee; the curve keeps each measured count and runs straight between them."""
    amx = {1: 23.42, 2: 23.61, 3: 27.95, 4: 32.23, 5: 46.57, 8: 51.29}
    cm = CostModel(amx[1] * 1e-3)
    for _ in range(12):
        for rows, ms in amx.items():
            cm.add_verify(rows, ms * 1e-3)
    T = cm.verify(10) * 1e3
    for rows, ms in amx.items():
        assert T[rows] == pytest.approx(ms, rel=0.01)
    assert T[6] == pytest.approx(46.57 + (51.29 - 46.57) / 3, rel=0.01)
    assert T[10] >= 51.29 + 2 * (51.29 - 46.57) / 3 - 0.01  # beyond: at least the last counts' slope


def test_the_why_line_says_what_the_first_step_catches_up_on_and_what_drafting_took():
    """demo's 'why': the steady first step with the rows it catches up on, a probe's window and its price, and, from
    the run's own statistics, the drafter's share of the decode and its catch-ups' rows."""
    ms = 1e-3
    pol = DraftLengthPolicy(23.4 * ms, 8)
    for rows, seconds in ((2, 3.8), (16, 21.7)):
        for _ in range(8):  # twice min_samples: the medians themselves
            pol.costs.add_first(seconds * ms, rows)
    pol.replan()
    policy = json.loads(json.dumps(state_dict(pol.state())))
    assert policy["probe_rows"] == 16 and policy["probe_first_step_ms"] == pytest.approx(21.7)
    measured = {"decode_seconds": 2.0, "drafter_seconds": 0.25, "catch_ups": 40, "catch_up_rows": 80}
    why = explain(policy, [10, 80, 10], measured)
    assert f"first draft step {policy['first_step_ms']:.1f} ms after a drafting round (the drafter catching up" in why
    assert "after an idle stretch the first step catches up on 16 rows (21.7 ms)" in why
    assert why.endswith("the drafter took 12% of the decode time, its 40 catch-ups 2.0 rows each on average")
    assert "the drafter took" not in explain(policy, [10, 80, 10])


def test_the_why_line_says_when_a_gain_was_under_the_margin():
    pol = DraftLengthPolicy(20e-3, 8)
    for _ in range(3):
        pol.costs.add_verify(2, 37e-3)
    pol.replan()
    policy = json.loads(json.dumps(state_dict(pol.state())))
    assert policy["margin"] == LONE_MARGIN
    policy["expected_tokens_per_second"] = 1.03 * policy["target_tokens_per_second"]
    why = explain(policy, [97, 3])
    assert f"(expected gain 1.03x, under the {LONE_MARGIN:.0%} a plan must promise before it drafts)" in why
    policy["expected_tokens_per_second"] = policy["target_tokens_per_second"]
    assert "(expected gain 1.00x)" in explain(policy, [97, 3])

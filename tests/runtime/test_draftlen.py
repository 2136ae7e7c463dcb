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
    assert 0.2 < p < 0.5  # an extra row costs 0.3 of a decode on this machine
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
    """A probe whose drafter start took 200 decodes (a cold start, a core taken by another job) grows the
    interval to its cap at those costs; when later first steps are fast, the next replan brings the cap, and
    with it the interval, back down, so the text is still checked for drafts that pay."""
    pol = _stopped_policy()
    while not pol.state().probing:
        pol.begin_round()
        pol.end_round(0, verify_seconds=PARTIAL.verify[1])
    assert pol.extend() and pol.take(0.001)
    slow = 200 * PARTIAL.verify[1]
    pol.end_round(0, verify_seconds=PARTIAL.verify[2], draft_seconds=slow, draft_steps=1, first_seconds=slow)
    stretched = pol.state().probe_interval
    assert stretched > 1000
    for _ in range(8):
        pol.costs.add_first(PARTIAL.draft_step)
    pol.replan()
    settled = pol.state().probe_interval
    assert settled == pol.probe_cap() < stretched / 10 and settled >= pol.probe_max


@pytest.mark.parametrize("seed", [8, 9])
def test_probes_that_cannot_pay_fade_even_when_mostly_accepted(seed: int):
    """On the CPU an extra verify row costs 0.7 of a decode: a probe right 70% of the time still loses a little,
    so probes must not grow frequent just because most succeed."""
    process = AcceptanceProcess(0.7, confidence=0.5)
    res = simulate(DraftLengthPolicy(CPU.verify[1], 8), CPU, process, 1500, seed=seed)
    assert (res.drafted[300:] > 0).mean() < 0.08 and res.speedup > 0.98


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


def test_quantiles_equal_numpys_linear_method() -> None:
    """The policy's own quantiles: np.quantile's floats, without its cost (or its first call's numpy.ma import)."""
    from local_eagle.runtime.policy.draftlen import quantiles

    rng = np.random.default_rng(3)
    q = (np.arange(8) + 0.5) / 8
    for n in (1, 2, 3, 8, 9, 17, 64):
        for scale in (1e-3, 1.0, 1e3):
            v = rng.random(n) * scale
            assert np.array_equal(quantiles(v, q), np.quantile(v, q))

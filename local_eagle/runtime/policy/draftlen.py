"""How many tokens to draft each round: measured costs, calibrated confidence, an optimal stopping rule.

A round runs draft steps (t_d each), verifies the last token plus the drafts in one target call of
k+1 rows (T(k+1)) and emits the accepted prefix plus one token. On a GPU T is nearly flat in the rows,
on a small CPU nearly proportional to them, and how much the drafter gets right changes with the text,
so no fixed k is right everywhere. The policy measures both and decides before each draft step, from
what the drafter knows before verification only, so the output stays lossless.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from local_eagle.runtime.policy.defaults import IDLE_CONTEXT, LONE_MARGIN
from local_eagle.runtime.policy.draftcost import CostModel

_EPS = 1e-3


class AcceptanceModel:
    """P(a draft is accepted | the drafts before it were) = sigmoid(w0 + w1 * logit(confidence)).

    Platt scaling on the drafter's own top probability: two parameters shared by all confidence levels
    learn from a few dozen observations and follow a change of text quickly, where per-bin counts would
    each need their own. The prior (0, 1) says the drafter is calibrated, with the weight of a few
    observations, so the model is usable from round 1. Observations decay geometrically with their age
    in rounds, not in observations: while the policy drafts little, old evidence fades back to the prior
    and the policy tries again, as it should when the text may have changed.
    """

    def __init__(self, *, prior: tuple[float, float] = (0.0, 1.0), prior_precision: float = 1.0,
                 decay: float = 0.995, window: int = 256) -> None:  # fmt: skip
        self.prior = np.array(prior, float)
        self.prior_precision = prior_precision
        self.decay = decay
        self.w = self.prior.copy()
        self._x = np.zeros(window)
        self._y = np.zeros(window)
        self._t = np.zeros(window)
        self._n = 0

    def __call__(self, confidence: float) -> float:
        c = min(max(confidence, _EPS), 1.0 - _EPS)
        z = self.w[0] + self.w[1] * math.log(c / (1.0 - c))
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def many(self, confidences: np.ndarray) -> np.ndarray:
        c = np.clip(confidences, _EPS, 1.0 - _EPS)
        return 1.0 / (1.0 + np.exp(-(self.w[0] + self.w[1] * np.log(c / (1.0 - c)))))

    @property
    def observations(self) -> int:
        return self._n

    def observe(self, confidence: float, accepted: bool, time: float = 0.0) -> None:
        """One verified draft; ``time`` (the round, say) is what the decay counts in."""
        i = self._n % len(self._x)
        c = min(max(confidence, _EPS), 1.0 - _EPS)
        self._x[i], self._y[i], self._t[i] = math.log(c / (1.0 - c)), float(accepted), time
        self._n += 1

    def refit(self, now: float = 0.0, iterations: int = 3) -> None:
        """Newton steps on the decayed, prior-regularised log-likelihood, from the last solution.

        The slope is kept >= 0 (more confidence never means less acceptance): when the free optimum has
        a negative slope, the intercept alone is fitted with the slope at 0.
        """
        n = min(self._n, len(self._x))
        x, y, wt = self._x[:n], self._y[:n], self.decay ** np.maximum(0.0, now - self._t[:n])
        lam, mu = self.prior_precision, self.prior

        def loss(w: np.ndarray) -> float:
            z = w[0] + w[1] * x
            return float(np.sum(wt * (np.logaddexp(0.0, z) - y * z)) + 0.5 * lam * np.sum((w - mu) ** 2))

        def newton(w: np.ndarray, free: bool) -> np.ndarray:
            f = loss(w)
            for _ in range(iterations):
                p = 1.0 / (1.0 + np.exp(-np.clip(w[0] + w[1] * x, -30.0, 30.0)))
                r, h = wt * (p - y), wt * p * (1.0 - p)
                g0, h00 = r.sum() + lam * (w[0] - mu[0]), h.sum() + lam
                if free:
                    h01, g1 = (h * x).sum(), (r * x).sum() + lam * (w[1] - mu[1])
                    h11 = (h * x * x).sum() + lam
                    step = np.array([h11 * g0 - h01 * g1, h00 * g1 - h01 * g0]) / (h00 * h11 - h01 * h01)
                else:
                    step = np.array([g0 / h00, 0.0])
                if np.abs(step).max() < 1e-6:
                    break
                for _ in range(12):  # backtrack: a full Newton step can overshoot into a flat tail
                    new = w - step
                    if (fn := loss(new)) <= f:
                        w, f = new, fn
                        break
                    step = step / 2
            return w

        w = newton(np.array([self.w[0], max(self.w[1], 1e-3)]), True)
        self.w = w if w[1] >= 0.0 else newton(np.array([self.w[0], 0.0]), False)


@dataclass(frozen=True)
class Plan:
    """The solved stopping rule: include draft n when P * a(c) > take[n]; run step n+1 when P > extend[n].

    P is the chance that every draft already in the batch is accepted. ``rate`` is the long-run tokens
    per second the rule achieves under the current estimates; it is never below ``target_rate``.
    """

    rate: float
    target_rate: float
    take: np.ndarray
    extend: np.ndarray
    expected_tokens: float
    expected_seconds: float
    margin: float = 0.0  # what the rule had to beat the target's rate by before it drafts


def _root(x: np.ndarray, f: np.ndarray) -> float:
    """The smallest x where a nondecreasing f turns positive (inf when it never does)."""
    pos = np.flatnonzero(f > 0.0)
    if len(pos) == 0:
        return math.inf
    i = int(pos[0])
    if i == 0:
        return 0.0
    return float(x[i - 1] - f[i - 1] * (x[i] - x[i - 1]) / (f[i] - f[i - 1]))


def _solve(lam: float, T: np.ndarray, t_d: float, k: int, first: float, x: np.ndarray, at: tuple):
    """Backward induction over depth for the objective tokens - lam * seconds (Dinkelbach's parametrisation).

    The tokens G and seconds C still to come from depth n on are tabulated over x, the chance that the
    n drafts so far are all accepted; gains scale with x, costs do not. The value is G - lam * C.
    """
    G, C = np.zeros_like(x), np.zeros_like(x)
    take, extend = np.full(k + 1, math.inf), np.full(max(k, 1), math.inf)
    i, f, q = at
    for n in range(k, 0, -1):
        dT = T[n + 1] - T[n]
        UG, UC = x + G, dT + C  # where continuing does not pay, G = C = 0, so U = UG - lam * UC everywhere
        take[n] = _root(x, UG - lam * UC)
        ug, uc = UG[i] + f * (UG[i + 1] - UG[i]), UC[i] + f * (UC[i + 1] - UC[i])
        keep = ug - lam * uc > 0.0
        EG, EC = (ug * keep).sum(1) / q, (uc * keep).sum(1) / q
        step = first if n == 1 else t_d
        V = EG - lam * (EC + step)
        extend[n - 1] = _root(x, V)
        go = V > 0.0
        G, C = EG * go, (EC + step) * go
    return take, extend, float(G[-1]), float(C[-1])


def plan(T: np.ndarray, t_d: float, host: float, acc: np.ndarray, k: int, *, primed: bool = False,
         first: float | None = None, rate: float | None = None, grid: int = 51,
         iterations: int = 4, margin: float = 0.0) -> Plan:  # fmt: skip
    """The rule that maximises the long-run rate E[tokens] / E[seconds] over rounds.

    The first step of a round costs ``first`` (default ``t_d``; nothing when ``primed``): an engine that
    lets its drafter idle pays for catching it up there.

    Maximising a round's own rate would stop a good round early and drag a bad one on; the renewal-reward
    optimum instead keeps drafting while the expected marginal tokens beat ``rate`` times the marginal
    seconds, where ``rate`` is that optimum itself, found by Dinkelbach's iteration (a few solves from the
    last plan's rate). ``acc`` holds acceptance chances of an unseen next draft, equally likely.

    A rule whose rate beats the target's own by less than ``margin`` starts no draft (``extend[0]`` and ``take[1]``
    are infinite) but keeps its rate, the price trees and probes are judged by: the rate leaves out costs that such a
    small gain does not cover.
    """
    x = np.linspace(0.0, 1.0, grid)
    pos = np.outer(x, np.clip(acc, 0.0, 1.0)) * (grid - 1)  # where x * a falls on the grid, for every x and a
    i = np.minimum(pos.astype(int), grid - 2)
    at = (i, pos - i, len(acc))
    t0 = T[1] + host
    lam = max(1.0 / t0, rate or 0.0)
    first = 0.0 if primed else t_d if first is None else first
    take, extend, g, c = _solve(lam, T, t_d, k, first, x, at)
    for _ in range(iterations):
        new = max(1.0 / t0, (1.0 + g) / (t0 + c))
        if abs(new - lam) <= 2e-3 * lam:
            break
        lam = new
        take, extend, g, c = _solve(lam, T, t_d, k, first, x, at)
    if lam * t0 < 1.0 + margin:
        extend[0] = take[1] = math.inf
    return Plan(lam, 1.0 / t0, take, extend, 1.0 + g, t0 + c, margin)


@dataclass(frozen=True)
class PolicyState:
    """What the policy believes and plans, for statistics, logs and tests (times in seconds)."""

    rounds: int
    fixed: bool
    rate: float
    target_rate: float
    verify: tuple[float, ...]
    draft_step: float
    first_step: float
    host: float
    calibration: tuple[float, float]
    idle_rounds: int
    probe_interval: int
    probing: bool
    take: tuple[float, ...]
    extend: tuple[float, ...]
    hopeless: bool = False  # a probe costs more than the token it may gain, at measured costs (``probes_cannot_pay``)
    steady_rows: float = 1.0  # the catch-up rows ``first_step`` is priced at: the plan's tokens per round
    probe_rows: int = 0  # the rows a probe's catch-up decodes after an idle stretch
    probe_first_step: float = 0.0  # what that catch-up costs
    margin: float = 0.0  # what the plan's rate must beat the target's by before it drafts (0 while costs are priors)


def quantiles(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.quantile(values, q)`` (its default, linear method; the same floats): the policy's replan in a live round
    takes 15 us this way, 230 us through np.quantile, whose first call also imports numpy.ma (8 ms)."""
    x = np.sort(values)
    pos = q * (len(x) - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, len(x) - 1)
    t = pos - lo
    a, b = x[lo], x[hi]
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)  # numpy's _lerp: exact at both ends


class DraftLengthPolicy:
    """Decides, draft by draft, whether drafting one more token raises the expected tokens per second.

    Per round the engine calls ``begin_round``, then before each drafter step ``extend()`` (run it?) and,
    once the step's logits give the draft's confidence (its top probability after the same logit
    processing as the target's), ``take(confidence)`` (put it in the batch?); it stops at the first
    False. ``end_round`` reports how many drafts were accepted and what the round cost. With
    ``primed`` the first step's logits come with the previous round's commit, so drafting it costs
    nothing and ``extend()`` says yes to it.

    When the policy drafts nothing for ``probe_interval`` rounds it probes: it drafts one token whatever
    its confidence, so that it notices when the text becomes predictable. An accepted probe halves the
    interval and a failed one grows it so that probes grow rare unless they are accepted more often than
    they cost (``probe_break_even``); where even a sure probe would gain less than a tenth of a token,
    every probe fails. The interval stops growing at ``probe_max`` rounds, or where failed probes would
    cost ``probe_budget`` of the time if that is later; where a probe cannot pay for itself at the measured
    costs (:meth:`probes_cannot_pay`), each failed probe doubles it up to ``probe_idle_max``.
    A policy that has drafted nothing but failed probes for ``refresh_idle`` rounds replans that often instead of
    every ``refresh_every``: a failed probe is one observation, not a return to drafting, and a replan costs about
    a 1-row call of the target on a fast GPU (~1 ms of Python).
    Outside probes it drafts only where the plan beats the target alone by ``margin`` (:func:`plan`), once three
    2-row verifies are measured: before, the cost model's prior is pessimistic and its thin plans are exploration.
    ``fixed`` drafts ``k_max`` every round (benchmarks).
    """

    weighs = True  # take() decides on the draft's confidence (and learns its calibration from it)

    def __init__(
        self,
        t1: float,
        k_max: int,
        *,
        fixed: bool = False,
        primed: bool = False,
        draft_step: float | None = None,
        host: float = 0.0,
        refresh_every: int = 16,
        probe_first: int = 8,
        probe_max: int = 64,
        probe_budget: float = 0.01,
        support: int = 8,
        confidence_window: int = 64,
        optimism: float = 0.5,
        probe_warmup: int = 16,
        probe_idle_max: int = 2048,
        refresh_idle: int = 64,
        probe_rows: int = IDLE_CONTEXT,
        margin: float = LONE_MARGIN,
    ) -> None:
        if k_max < 0:
            raise ValueError(f"k_max must be >= 0, got {k_max}")
        self.k_max = k_max
        self.fixed = fixed
        self.primed = primed
        self.costs = CostModel(t1, draft_step=draft_step, host=host)
        self.acceptance = AcceptanceModel()
        self.refresh_every = refresh_every
        self.optimism = optimism
        self.probe_max = probe_max
        self.probe_budget = probe_budget
        self.probe_interval = probe_first
        self.probe_warmup = probe_warmup
        self.probe_idle_max = probe_idle_max
        self.refresh_idle = refresh_idle
        self._hopeless = False
        self.probe_rows = probe_rows
        self.margin = margin
        self.idle_rounds = 0
        self.quiet_rounds = 0  # rounds since one drafted other than a probe: the replan cadence's
        self.rounds = 0
        self._q = (np.arange(support) + 0.5) / support
        self._seen: deque[float] = deque(self._q, maxlen=confidence_window)
        self._plan = self.replan()
        self.begin_round()

    def replan(self) -> Plan:
        """Refit the acceptance model and solve the stopping rule again (every ``refresh_every`` rounds).

        The first step is priced as the catch-up a policy drafting every round pays: the rows the last round
        committed, about the plan's own tokens per round (solved again when they move the price), not the window a
        probe decodes after an idle stretch. Priced by that long catch-up no round would ever pay, and a policy that
        stays idle only ever measures such catch-ups (an Intel AMX CPU: 19 ms for 14 rows, 3.8 ms for 2).
        """
        self.acceptance.refit(self.rounds)
        support = quantiles(np.fromiter(self._seen, float, len(self._seen)), self._q)
        acc = self.acceptance.many(support)
        k = max(self.k_max, 1)
        T = self.costs.verify(k + 1, optimism=self.optimism)
        # Dinkelbach converges from any start: from the last plan's rate, or from the target's own where that plan
        # drafted nothing (an idle policy's replans: one solve, not a second after the last 1-row time's rate)
        last = getattr(self, "_plan", None)
        costs = self.costs
        margin = self.margin if costs.samples(2) >= 3 else 0.0  # the prior's thin plans explore: it is pessimistic
        for _ in range(3):
            self._plan = plan(T, costs.draft_step, costs.host, acc, k, primed=self.primed, first=costs.first_step,
                              rate=last.rate if last and last.expected_tokens > 1.0 else None,
                              margin=margin)  # fmt: skip
            rows = max(1.0, round(self._plan.expected_tokens, 1))
            if self.primed or abs(rows - costs.steady_rows) < 0.25:
                break
            costs.steady_rows = rows
            last = self._plan
        self._hopeless = self.probes_cannot_pay()
        self.probe_interval = min(self.probe_interval, self.probe_cap())
        return self._plan

    def set_k_max(self, k_max: int) -> None:
        """Change the bound (one engine serves requests with different ones); what was learnt carries over."""
        if k_max < 0:
            raise ValueError(f"k_max must be >= 0, got {k_max}")
        if k_max != self.k_max:
            self.k_max = k_max
            self.replan()
            self.begin_round()

    def begin_round(self, cap: int | None = None, *, ready: bool = True) -> None:
        """Start a round that may draft at most ``cap`` tokens (``k_max`` by default).

        ``ready=False``: the drafter cannot draft this round (its input was paused and has not a window of
        rows yet); the round counts as idle, and a probe that is due waits for a ready round.
        """
        self._cap = self.k_max if cap is None else min(cap, self.k_max)
        self._ready = ready
        self._taken: list[float] = []
        self._chain = 1.0
        self._steps = 0
        self.probing = ready and not self.fixed and self._cap > 0 and self.idle_rounds >= self.probe_interval

    def extend(self) -> bool:
        """Run one more drafter step? Called before each step, with the drafts so far in the batch."""
        n = len(self._taken)
        if n >= self._cap or self._steps > n or not self._ready:
            return False
        go = self.fixed or (self.probing and n == 0) or (self.primed and n == 0)
        go = go or self._chain > self._plan.extend[n]
        self._steps += go
        return go

    def take(self, confidence: float) -> bool:
        """Put the draft just computed, whose top probability is ``confidence``, into the verify batch?"""
        n = len(self._taken) + 1
        self._seen.append(confidence)
        if n > self._cap:
            return False
        y = self._chain * self.acceptance(confidence)
        if not (self.fixed or (self.probing and n == 1) or y > self._plan.take[n]):
            return False
        self._taken.append(confidence)
        self._chain = y
        return True

    def rounds_until_draft(self) -> int:
        """Rounds before the next one that may draft, as far as the current plan says: 0 when the plan may
        draft any round (or drafting is fixed), else the rounds to the next probe. A replan can bring a draft
        sooner; an engine that paused its drafter's input then waits until it has a window of rows again."""
        if self.fixed or self.primed or self._plan.extend[0] < 1.0:
            return 0
        return max(0, self.probe_interval - self.idle_rounds)

    @property
    def rate(self) -> float:
        """The long-run tokens per second the current plan expects (never below the target's own)."""
        return self._plan.rate

    @property
    def drafted(self) -> int:
        return len(self._taken)

    def end_round(self, accepted: int, *, verify_seconds: float, draft_seconds: float = 0.0,
                  draft_steps: int = 0, host_seconds: float | None = None,
                  first_seconds: float | None = None, first_rows: int = 1) -> None:  # fmt: skip
        """Learn from the verified round; ``draft_steps`` counts the steps paid for this round.

        ``first_seconds``, when given, is the part of ``draft_seconds`` the first step took (the drafter's
        catch-up on ``first_rows`` rows), learnt by its rows apart from the later steps'.
        """
        taken = self._taken
        accepted = min(accepted, len(taken))
        for i, c in enumerate(taken[: accepted + 1]):
            self.acceptance.observe(c, i < accepted, self.rounds)
        self.costs.add_verify(1 + len(taken), verify_seconds)
        if first_seconds is not None and draft_steps > 0:
            self.costs.add_first(first_seconds, first_rows)
            if self.probing:
                self.probe_rows = max(1, first_rows)
            self.costs.add_draft(draft_steps - 1, max(0.0, draft_seconds - first_seconds))
        else:
            self.costs.add_draft(draft_steps, draft_seconds)
        if host_seconds is not None:
            self.costs.add_host(host_seconds)
        if self.probing:
            cost = self.probe_break_even()
            self._hopeless = self.probes_cannot_pay()
            if accepted > 0 and cost < 0.9:  # accepted, where a sure probe gains more than a tenth of a token
                self.probe_interval = max(1, self.probe_interval // 2)
            elif self._hopeless:  # probes keep showing they cannot pay: back off geometrically, bounded
                grow = max(2 * self.probe_interval, math.ceil(cost / self.probe_budget))
                self.probe_interval = min(self.probe_cap(cost), grow)
            elif self.acceptance.observations >= self.probe_warmup or cost >= 0.9:  # no warm-up for hopeless probes
                p = min(max(cost, 1.0 / 3.0), 0.95)
                grow = max(self.probe_interval + 1, round(self.probe_interval * 2.0 ** (p / (1.0 - p))))
                self.probe_interval = min(self.probe_cap(cost), grow)
        if taken:
            self.idle_rounds = 0
        elif self._cap > 0:
            self.idle_rounds += 1
        quiet = not taken or self.probing and accepted == 0  # an accepted probe brings the drafting cadence back
        self.quiet_rounds = self.quiet_rounds + 1 if quiet else 0
        self.rounds += 1
        r = self.rounds
        every = self.refresh_idle if self.quiet_rounds >= self.refresh_idle else self.refresh_every
        if not self.fixed and (r % every == 0 or (r < self.refresh_every and r & (r - 1) == 0)):
            self.replan()
        self.begin_round()

    def end_tree_round(self, judged: tuple[list[float], list[bool]], rows: int, *, verify_seconds: float,
                       host_seconds: float | None = None, first_seconds: float | None = None,
                       first_rows: int = 1) -> None:  # fmt: skip
        """Learn from a round that verified a draft tree instead of this policy's chain: the target's cost at
        its rows, and the calibration from every child the target judged (``VerifyTree.outcomes``: each slot's
        draft probability and whether it was accepted), so the chain's expected rate, which the tree is
        compared with, stays current while trees run; and the catch-up on ``first_rows`` rows, by its rows."""
        for q, ok in zip(*judged, strict=True):
            self.acceptance.observe(q, ok, self.rounds)
        self.costs.add_verify(rows, verify_seconds)
        if first_seconds is not None:
            self.costs.add_first(first_seconds, first_rows)
        if host_seconds is not None:
            self.costs.add_host(host_seconds)
        self.idle_rounds = self.quiet_rounds = 0
        self.rounds += 1
        if self.rounds % self.refresh_every == 0:
            self.replan()
        self.begin_round()

    def probe_cap(self, cost: float | None = None) -> int:
        """The longest probe interval: ``probe_max``, or where failed probes cost ``probe_budget`` of the time
        (1% of the rounds' worth when a probe costs a round: a 2-core CPU's catch-up plus a second verify row
        cost ~1.8 decodes). Replans apply it to the current costs, so one slow early probe (a cold start, a
        core taken by another job) does not silence probing after the costs it was judged by have settled."""
        cost = self.probe_break_even() if cost is None else cost
        cap = max(self.probe_max, math.ceil(cost / self.probe_budget))
        return max(cap, self.probe_idle_max) if self._hopeless else cap

    @property
    def hopeless(self) -> bool:
        """:meth:`probes_cannot_pay` as of the last replan or probe (what the probe schedule follows)."""
        return self._hopeless

    def probes_cannot_pay(self) -> bool:
        """Would even a draft the target always keeps cost more than nine tenths of the token it gains, drafting every
        round at the measured costs? (Gemma 3 270M on a 2-core AMD CPU: a 2-row verify of 2.3 decodes, its 262K-token
        output layer.) Then every probe fails, whatever the drafter gets right, and probing only re-checks the costs
        and the calibration: it can be rarer and cheaper. Judged on three measured 2-row verifies at least (one slow
        call is outvoted), never on the cost model's pessimistic prior alone, which says so for every machine."""
        if self.fixed or self.costs.samples(2) < 3:
            return False
        return bool(self.draft_break_even() >= 0.9)

    def draft_break_even(self) -> float:
        """The acceptance one draft a round needs to pay for itself while the policy drafts every round: its first
        step (the catch-up of the last round's rows) and its verify's extra row, in tokens."""
        T = self.costs.verify(2)
        first = 0.0 if self.primed else self.costs.catch_up(2)
        return (first + T[2] - T[1]) * self._plan.rate

    def probe_break_even(self) -> float:
        """The acceptance a probe needs to pay for itself: its first step (the catch-up of the window of rows an idle
        stretch leaves, ``probe_rows``) and its verify's extra row, in tokens.

        Probes halve the interval when accepted and multiply it by 2^(p/(1-p)) when not, which drifts neither
        way at a success rate of p: probing fades unless probes succeed more often than they cost. With a
        cheap extra row (a GPU) p is small and probes stay frequent; where a row costs a full decode (a small
        CPU) it is near 1, and a drafter right 70% of the time is probed rarely. Where drafting every round pays,
        the plan drafts and probes are not needed.
        """
        T = self.costs.verify(2)
        first = 0.0 if self.primed else self.costs.catch_up(self.probe_rows)
        return (first + T[2] - T[1]) * self._plan.rate

    def shadow(self, confidence: float, accepted: bool) -> None:
        """Calibrate on an undrafted token known (after the fact) to have matched or not, at no cost."""
        self.acceptance.observe(confidence, accepted, self.rounds)

    def state(self) -> PolicyState:
        p = self._plan
        return PolicyState(
            rounds=self.rounds,
            fixed=self.fixed,
            rate=p.rate,
            target_rate=p.target_rate,
            verify=tuple(self.costs.verify(self.k_max + 1)[1:].tolist()),
            draft_step=self.costs.draft_step,
            first_step=0.0 if self.primed else self.costs.first_step,
            host=self.costs.host,
            calibration=(float(self.acceptance.w[0]), float(self.acceptance.w[1])),
            idle_rounds=self.idle_rounds,
            probe_interval=self.probe_interval,
            probing=self.probing,
            take=tuple(p.take[1 : self.k_max + 1].tolist()),
            extend=tuple(p.extend[: self.k_max].tolist()),
            hopeless=self._hopeless,
            steady_rows=self.costs.steady_rows,
            probe_rows=self.probe_rows,
            probe_first_step=0.0 if self.primed else self.costs.catch_up(self.probe_rows),
            margin=p.margin,
        )

"""Synthetic hardware and drafts to run the draft-length policy against, without a model.

The tests and the docs use it to compare the policy with every fixed draft length on cost profiles
measured on real machines, with an acceptance process whose truth is known, so the policy's
expected tokens per second can be scored exactly rather than sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from local_eagle.runtime.policy.defaults import IDLE_CONTEXT
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy


@dataclass(frozen=True)
class CostProfile:
    """Seconds per target call by rows (``verify[r]``, index 0 unused), per draft step and per round."""

    name: str
    verify: tuple[float, ...]
    draft_step: float
    host: float = 0.0

    @classmethod
    def linear(cls, name: str, t1: float, slope: float, draft_step: float, host: float = 0.0, rows: int = 33):
        """T(n) = t1 * (1 + slope * (n - 1)): slope ~0 on a GPU, ~1 when every row costs a full pass."""
        return cls(name, (0.0, *(t1 * (1.0 + slope * (n - 1)) for n in range(1, rows + 1))), draft_step, host)

    @classmethod
    def measured(cls, name: str, t1: float, ratios: dict[int, float], draft_step: float, host: float = 0.0,
                 rows: int = 33):  # fmt: skip
        """Measured multiples of the 1-row time at some row counts, linear in between and beyond."""
        rs = sorted(ratios)
        xs, ys = np.array(rs, float), np.array([ratios[r] for r in rs])
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        T = [float(np.interp(n, xs, ys)) if n <= rs[-1] else ys[-1] + slope * (n - rs[-1]) for n in range(1, rows + 1)]
        return cls(name, (0.0, *(t1 * r for r in T)), draft_step, host)

    def seconds(self, rows: int, steps: int) -> float:
        return steps * self.draft_step + self.verify[rows] + self.host

    @property
    def target_rate(self) -> float:
        return 1.0 / (self.verify[1] + self.host)


#: what the policy is tested against (Gemma 3 270M on a 2-core CPU, as measured; GPU-like; partial offload)
CPU = CostProfile.measured("cpu", 0.019, {1: 1.0, 2: 1.71, 3: 2.65, 5: 3.52, 7: 4.44}, 0.0015, 0.0005)
GPU = CostProfile.linear("gpu", 0.020, 0.02, 0.0012, 0.0005)
PARTIAL = CostProfile.linear("partial", 0.060, 0.3, 0.003, 0.0005)
PROFILES = (GPU, PARTIAL, CPU)


@dataclass(frozen=True)
class AcceptanceProcess:
    """Synthetic drafts: each has a true acceptance chance u ~ Beta with mean ``alpha``.

    The drafter reports confidence u ** (1 / overconfidence), a monotone distortion the policy has to
    calibrate away; with ``confidence`` set it reports a draw from a Beta of that mean instead, which
    says nothing about u (a drafter confidently wrong on text unlike its training data).
    """

    alpha: float
    concentration: float = 2.0
    overconfidence: float = 1.5
    confidence: float | None = None

    def draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` drafts' (confidences, acceptance chances)."""
        k = self.concentration
        u = rng.beta(self.alpha * k, (1.0 - self.alpha) * k, n)
        if self.confidence is None:
            return u ** (1.0 / self.overconfidence), u
        return rng.beta(self.confidence * k, (1.0 - self.confidence) * k, n), u


@dataclass
class SimResult:
    """Expected tokens (from the true acceptance chances) and seconds, summed over rounds."""

    tokens: float
    seconds: float
    drafted: np.ndarray
    target_rate: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    @property
    def speedup(self) -> float:
        return self.rate / self.target_rate


def fixed_rate(profile: CostProfile, alpha: float, k: int, *, primed: bool = False) -> float:
    """Expected tokens/s of always drafting k with independent per-token acceptance ``alpha``."""
    tokens = sum(alpha**i for i in range(k + 1))
    steps = max(0, k - 1) if primed else k
    return tokens / profile.seconds(k + 1, steps)


def best_fixed(profile: CostProfile, alpha: float, k_max: int, *, primed: bool = False) -> tuple[int, float]:
    rates = [fixed_rate(profile, alpha, k, primed=primed) for k in range(k_max + 1)]
    k = int(np.argmax(rates))
    return k, rates[k]


def simulate(
    policy: DraftLengthPolicy,
    profile: CostProfile,
    process: AcceptanceProcess | Callable[[int], AcceptanceProcess],
    rounds: int,
    *,
    seed: int = 0,
    noise: float = 0.1,
    spikes: float = 0.02,
) -> SimResult:
    """Run ``policy`` for ``rounds`` rounds and score it by expected tokens over true seconds.

    The policy sees timings with log-normal ``noise`` and, with probability ``spikes``, a 3x outlier
    (another process on the core), and realised accept/reject outcomes; the score uses the truth.
    """
    rng = np.random.default_rng(seed)
    tokens = seconds = 0.0
    drafted = np.zeros(rounds, np.int16)
    n = max(policy.k_max, 1)
    luck = rng.random((rounds, n))
    jitter = rng.lognormal(0.0, noise, (rounds, 3)) * np.where(rng.random((rounds, 3)) < spikes, 3.0, 1.0)
    drawn = None if callable(process) else process.draw(rng, rounds * n)
    waiting = 1  # rows the drafter's next first step catches up on (at a drafter step's cost: this profile's)
    for r in range(rounds):
        if drawn is None:
            cs, us = process(r).draw(rng, n)
        else:
            cs, us = drawn[0][r * n : (r + 1) * n], drawn[1][r * n : (r + 1) * n]
        k = paid = 0
        policy.begin_round()
        caught = waiting
        while policy.extend():
            paid += not (policy.primed and k == 0)
            if not policy.take(float(cs[k])):
                break
            k += 1
        accepted = 0
        while accepted < k and luck[r, accepted] < us[accepted]:
            accepted += 1
        tokens += 1.0 + float(np.cumprod(us[:k]).sum())
        seconds += profile.seconds(k + 1, paid)
        drafted[r] = k
        policy.end_round(
            accepted,
            verify_seconds=profile.verify[k + 1] * jitter[r, 0],
            draft_seconds=paid * profile.draft_step * jitter[r, 1],
            draft_steps=paid,
            host_seconds=profile.host * jitter[r, 2],
            first_seconds=profile.draft_step * jitter[r, 1] if paid and not policy.primed else None,
            first_rows=caught,
        )
        waiting = (0 if paid else waiting) + accepted + 1
        waiting = min(waiting, IDLE_CONTEXT)
    return SimResult(tokens, seconds, drafted, profile.target_rate)


def table(rounds: int = 1000, k_max: int = 8, *, primed: bool = False, seed: int = 1, informative: bool = True):
    """(profile, alpha, best fixed k, its speedup, the policy's speedup) for the docs and the tests' bar."""
    rows = []
    for profile in PROFILES:
        for alpha in (0.2, 0.5, 0.8, 0.95):
            process = AcceptanceProcess(alpha) if informative else AcceptanceProcess(alpha, confidence=0.6)
            policy = DraftLengthPolicy(profile.verify[1], k_max, primed=primed)
            res = simulate(policy, profile, process, rounds, seed=seed)
            k, rate = best_fixed(profile, alpha, k_max, primed=primed)
            rows.append((profile.name, alpha, k, rate / profile.target_rate, res.speedup))
    return rows


if __name__ == "__main__":
    for informative in (True, False):
        for primed in (False, True):
            print(f"confidence {'informative' if informative else 'uninformative'}, first step primed: {primed}")
            print("profile  alpha  best k  fixed x  policy x  policy/fixed")
            for name, alpha, k, fixed, pol in table(primed=primed, informative=informative):
                print(f"{name:8s} {alpha:5.2f}  {k:6d}  {fixed:7.3f}  {pol:8.3f}  {pol / fixed:12.3f}")

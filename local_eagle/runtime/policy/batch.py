"""One draft length for every sequence of a round, from what a target call costs by rows and how often drafts stay.

With several sequences in a round, one target call verifies all their rows: n sequences drafting k tokens each
make a call of n(k+1) rows. On a GPU that call costs about what n rows do until the rows fill it; on a CPU it
grows with the rows. The batch is what pays, so the policy chooses k for the batch, the one that maximises the
expected tokens a second::

    rate(k) = n (1 + sum_{i<=k} prod_{j<=i} a_j) / (T(n(k+1)) + [k>0] (d_1(n E_k) + (k-1) d) + h)

with T the measured cost of a call by rows, a_j the rate at which a draft at depth j is kept when the drafts
before it were, d_1(r) the drafter's first call on r rows (every sequence's catch-up: while the batch drafts every
round, the n E_k rows the last round committed, E_k being a sequence's expected tokens a round) and d a later one
(a row per sequence: the drafter runs each step for the whole batch at once, ``runtime.chain``), h the host's
share. k = 0 is batched decoding without drafts, so once the costs are known the policy is never slower than it;
a k > 0 must promise ``BATCH_MARGIN`` more than it, since the rates leave out what starting to draft costs.
Both calls are priced by their rows as measured (:func:`line_costs`: a knee stays where it was measured), so a probe's
catch-up of a window of rows per sequence prices probes, not the rounds of a batch that drafts. While k = 0 wins a
probe drafts k = 1 every so often, because the costs and the a_j change with the machine's load and the text. Only
the drafter's past and the call's timings decide, never this round's target output, so every sequence's output
stays the target's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from local_eagle.runtime.policy.defaults import (
    BATCH_DECAY,
    BATCH_MARGIN,
    BATCH_PROBE_FIRST,
    BATCH_PROBE_LAST,
    BATCH_REPLAN,
    BATCH_STEADY,
)
from local_eagle.runtime.policy.draftcost import Window, at_rows

HOPELESS_PROBE_EVERY = 16 * BATCH_PROBE_LAST
MIN_SAMPLES = 2


def expected_tokens(acceptance: np.ndarray, k: int) -> float:
    """Tokens a sequence gains in a round with k drafts: the one the target adds, plus the kept prefix's mean."""
    return 1.0 + float(np.sum(np.cumprod(acceptance[:k]))) if k > 0 else 1.0


def best_length(
    call: list[float] | np.ndarray, n: int, acceptance: np.ndarray, first: float | Callable[[float], float],
    step: float, host: float, k_max: int, margin: float = 0.0,
) -> tuple[int, list[float]]:  # fmt: skip
    """The k in 0..k_max with the highest rate (tokens a second for the batch), and every k's rate; 0 unless that
    rate beats no drafting's by ``margin`` (a share).

    ``call[r]`` is the cost of a target call of r rows (index 0 unused), long enough for n(k_max+1) rows;
    ``acceptance[j-1]`` is a_j for j = 1..k_max; ``first``: the drafter's first call by the rows it catches up on
    (a number: whatever its rows).
    """
    catch_up = first if callable(first) else (lambda _rows: first)
    rates = []
    for k in range(k_max + 1):
        tokens = expected_tokens(acceptance, k)
        seconds = call[n * (k + 1)] + host + (catch_up(n * tokens) + (k - 1) * step if k > 0 else 0.0)
        rates.append(n * tokens / max(seconds, 1e-12))
    k = int(np.argmax(rates))
    return (k if rates[k] > rates[0] * (1.0 + margin) else 0), rates


def line_costs(samples: dict[int, float], max_rows: int) -> list[float] | None:
    """T[r] for r = 0..max_rows: measured where known, straight between measured counts, beyond the largest on the
    steeper of the last two counts' slope and the least-squares line's (in proportion to the rows from a single
    count: cautious), nondecreasing. None while nothing is measured."""
    if not samples:
        return None
    rows = np.array(sorted(samples), dtype=float)
    secs = np.maximum.accumulate(np.array([samples[int(r)] for r in rows]))
    if len(rows) == 1:
        slope = secs[0] / rows[0]
        below = slope * np.arange(max_rows + 1, dtype=float)
    else:
        slope = max(0.0, float(np.polyfit(rows, secs, 1)[0]), (secs[-1] - secs[-2]) / (rows[-1] - rows[-2]))
        first_slope = max(0.0, (secs[1] - secs[0]) / (rows[1] - rows[0]))
        below = secs[0] - first_slope * (rows[0] - np.arange(max_rows + 1, dtype=float))
    r = np.arange(max_rows + 1, dtype=float)
    out = np.where(r > rows[-1], secs[-1] + slope * (r - rows[-1]), np.interp(r, rows, secs))
    out = np.where(r < rows[0], below, out)
    out[1:] = np.maximum.accumulate(np.maximum(out[1:], 1e-9))
    out[0] = 0.0
    return out.tolist()


@dataclass
class BatchPolicy:
    """The batch's draft length: what calls cost by rows, what depths are kept, when to probe again."""

    k_cap: int = 8
    calls: dict[int, Window] = field(default_factory=dict)
    hits: np.ndarray = field(default_factory=lambda: np.zeros(8))
    tries: np.ndarray = field(default_factory=lambda: np.zeros(8))
    drafter: dict[int, Window] = field(default_factory=dict)  # the drafter's calls by rows: catch-ups, later steps
    host: Window = field(default_factory=lambda: Window(16))
    probe_every: int = BATCH_PROBE_FIRST
    since_draft: int = 0
    drafting_rounds: int = 0  # rounds in a row that drafted, probes aside (``steady``)
    rounds: int = 0
    last_k: int = 0
    probing: bool = False
    hopeless: bool = False
    last_rates: list[float] = field(default_factory=list)
    margin: float = BATCH_MARGIN  # what drafting must promise over no drafting before the batch drafts
    optimism: float = 0.5  # the share of the next depth's extra cost discounted until it is measured (``costs``)
    replan: int = BATCH_REPLAN  # rounds a solved length is kept while nothing it rests on changed (``choose``)
    _plans: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict, repr=False)
    # (n, k_max) -> (call sizes measured, round, k) of the last solve for that batch

    def acceptance(self, k_max: int) -> np.ndarray:
        """a_j for j = 1..k_max: kept over tried with a uniform prior; a depth never tried takes the deepest
        tried one's rate (deeper drafts are seldom kept more often)."""
        a = (self.hits[:k_max] + 1.0) / (self.tries[:k_max] + 2.0)
        tried = np.nonzero(self.tries[:k_max] >= 1.0)[0]
        if len(tried):
            a[tried[-1] + 1 :] = a[tried[-1]]
        return a

    def costs(self, max_rows: int, n: int = 0) -> list[float] | None:
        """The target call by rows (:func:`line_costs`); with ``n`` sequences drafting, the next depth past the
        deepest measured (its n rows past the largest call measured) has ``optimism`` of its extra cost discounted:
        the line through small calls overprices large ones where a call costs about what its first rows do (a GPU:
        8 rows 9.1 ms, 12 rows 9.0 on an H100), and a depth that is never tried is never measured. One depth at a
        time, as the lone policy explores, and only once one draft a sequence was measured (2n rows)."""
        known = {r: w.median(0.0) for r, w in self.calls.items() if len(w) >= MIN_SAMPLES}
        T = line_costs(known, max_rows)
        top = max(known, default=0)
        if T is None or n <= 0 or self.optimism <= 0.0 or top < 2 * n or top >= max_rows:
            return T
        t = np.asarray(T)
        depth = t[min(top + n, max_rows)] - t[top]
        past = np.arange(len(t)) > top
        return (t - self.optimism * np.where(past, np.minimum(t - t[top], depth), 0.0)).tolist()

    def choose(self, n: int, k_max: int) -> int:
        """The round's draft length for ``n`` sequences, at most ``k_max``.

        A solve (``_solve``) is kept for ``replan`` rounds, one for each batch size and bound (requests end and
        others take their seats: 4, 3, 4 sequences), unless a call size was newly measured (exploring the next
        depth waits for no cadence) or a probe is to be judged. A solve is 0.14 ms of Python on a quiet core and
        0.5 ms beside llama.cpp's threads on a 2-core CPU, where a 4-request round is 33 ms; on a GPU a target call
        is a few ms. What it reads changes slowly (medians of 16 calls, acceptance decaying by ``BATCH_DECAY``).
        """
        k_max = min(k_max, self.k_cap)
        measured = [r for r, w in self.calls.items() if len(w) >= MIN_SAMPLES]
        if measured:  # one doubling of the rows past the largest call measured at a time: the line fitted through
            # small calls underestimates large ones where the kernels change (a CPU: 4 rows 32 ms, 36 rows 166 ms)
            k_max = min(k_max, max(0, 2 * max(measured) // max(n, 1) - 1))
        self.rounds += 1
        probed, self.probing = self.probing, False  # a round whose costs are unknown is no probe
        plan = self._plans.get((n, k_max))
        fresh = plan is None or probed or plan[0] != len(measured) or self.rounds - plan[1] >= self.replan
        k = self._solve(n, k_max, probed, len(measured)) if fresh else plan[2]
        if k is None:  # costs unknown: no draft, and no probe
            k = 0
        elif k == 0:
            self.probing = self.rounds_until_probe() <= 0
            k = 1 if self.probing else 0
        self.since_draft = 0 if k > 0 else self.since_draft + 1
        self.drafting_rounds = self.drafting_rounds + 1 if k > 0 and not self.probing else 0
        self.last_k = k
        return k

    def _solve(self, n: int, k_max: int, probed: bool, measured: int) -> int | None:
        """``choose``'s length from the costs and acceptance as they stand, kept as the plan; None while the costs
        are unknown."""
        costs = self.costs(n * (k_max + 1), n) if k_max > 0 else None
        if costs is None or len(self.calls.get(n, ())) < MIN_SAMPLES:
            self._plans.pop((n, k_max), None)
            return None
        drafter = self.drafter_costs(n * (k_max + 1))  # one table a round: best_length reads it per k
        k, self.last_rates = best_length(
            costs, n, self.acceptance(k_max), drafter, drafter(n), self.host.median(0.0), k_max, self.margin,
        )  # fmt: skip
        if probed:  # judged with what the probe measured: one that still loses makes the next rarer
            self.probe_every = BATCH_PROBE_FIRST if k > 0 else min(BATCH_PROBE_LAST, 2 * self.probe_every)
        # where even drafts that were always kept would not pay for their rows (measured), probes cannot win:
        # they only re-measure, rarely (a CPU whose calls cost in proportion to their rows)
        self.hopeless = k == 0 and self._cannot_pay(costs, n, drafter)
        if self.hopeless:
            self.probe_every = HOPELESS_PROBE_EVERY
        self._plans[n, k_max] = (measured, self.rounds, k)
        return k

    @property
    def steady(self) -> bool:
        """Has the batch drafted for ``BATCH_STEADY`` rounds in a row? Only then is a newcomer's prompt worth decoding
        for the drafter at once: a batch that drafts a round now and then (a CPU where drafting barely pays) had every
        prompt admitted after such a round decoded, 1.2 ms a row on a 2-core CPU (8 prompts, 1.4 s of a 17 s pass at
        4 requests, for 8 drafted tokens), where the rows would wait like an idle sequence's."""
        return self.drafting_rounds >= BATCH_STEADY

    def _cannot_pay(self, costs: list[float], n: int, drafter: Callable[[float], float]) -> bool:
        """Would one draft per sequence lose even if every one were kept? Only once 2n-row calls were measured."""
        if len(self.calls.get(2 * n, ())) < MIN_SAMPLES:
            return False
        kept = np.ones(1)
        k, _ = best_length(costs, n, kept, drafter, drafter(n), self.host.median(0.0), 1, self.margin)
        return k == 0

    def catch_up(self, rows: float) -> float:
        """A drafter call on ``rows`` rows (a catch-up, or a later step's row per sequence), as measured by rows
        (:func:`line_costs`), 0 before any was measured; a batch that drafts every round measures the rows it
        needs, a probe after an idle stretch only a window of rows per sequence."""
        return self.drafter_costs(int(rows) + 1)(rows)

    def drafter_costs(self, max_rows: int) -> Callable[[float], float]:
        """:meth:`catch_up` from one table of up to ``max_rows`` rows (interpolated; the last slope beyond)."""
        known = {r: w.median(0.0) for r, w in self.drafter.items() if len(w)}
        T = line_costs(known, max(2, max_rows + 1)) if known else None
        return (lambda _rows: 0.0) if T is None else (lambda rows: at_rows(T, rows))

    def rounds_until_probe(self) -> int:
        """Rounds before the next probe while the batch does not draft (the feeds want features that early)."""
        return self.probe_every - self.since_draft

    def observe(self, rows: int, seconds: float, drafted: list[int], accepted: list[int], *,
                drafter: list[tuple[int, float]] = (), host: float | None = None) -> None:  # fmt: skip
        """One round: its call's rows and seconds, each sequence's drafts and how many were kept, and the drafter's
        calls (rows, seconds): the first every sequence's catch-up, each later one a row per sequence still going."""
        self.calls.setdefault(rows, Window(16)).add(seconds)
        self.hits *= BATCH_DECAY
        self.tries *= BATCH_DECAY
        for d, a in zip(drafted, accepted, strict=True):
            reached = min(d, a + 1)
            self.tries[:reached] += 1.0
            self.hits[:a] += 1.0
        for r, s in drafter:
            window = self.drafter.get(r)
            if window is None:
                window = self.drafter[r] = Window(16)
            window.add(s)
        if host is not None:
            self.host.add(host)

    def state(self) -> dict:
        """What the served statistics report of the batch policy."""
        return {
            "kind": "batch",
            "draft_length": self.last_k,
            "acceptance": [round(float(x), 3) for x in self.acceptance(self.k_cap)],
            "call_ms": {str(r): round(1e3 * w.median(0.0), 3) for r, w in sorted(self.calls.items())},
            "probe_every": self.probe_every,
            "hopeless": self.hopeless,
        }

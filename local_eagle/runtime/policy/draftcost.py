"""Online estimates of what a speculative round costs, from the timings the engine measures anyway.

The draft-length policy (``runtime.policy.draftlen``) needs the target call's cost for every row count it
may verify, including counts it has not tried yet, the drafter's catch-up by the rows it decodes, one later
draft step's cost and the host time per round; on a shared machine single timings are noisy and now and then
far off.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

import numpy as np


class Window:
    """The last ``size`` timings, with their sorted copy kept between additions (medians are read often)."""

    def __init__(self, size: int) -> None:
        self._xs: deque[float] = deque(maxlen=size)
        self._sorted: list[float] | None = None

    def __len__(self) -> int:
        return len(self._xs)

    def add(self, x: float) -> None:
        self._xs.append(x)
        self._sorted = None

    def median(self, default: float, *, pseudo: int = 0) -> float:
        """The median of the samples together with ``pseudo`` copies of ``default``."""
        if self._sorted is None:
            self._sorted = sorted(self._xs)
        s, m = self._sorted, pseudo
        if not s:
            return default
        i = bisect_left(s, default) if m else len(s)

        def kth(k: int) -> float:
            return s[k] if k < i else default if k < i + m else s[k - m]

        n = len(s) + m
        return 0.5 * (kth((n - 1) // 2) + kth(n // 2))


def at_rows(T: np.ndarray | list[float], rows: float) -> float:
    """``T`` (a cost by whole rows, index 0 unused) at ``rows``, straight between whole rows: a catch-up's rows are
    priced at the expected tokens of a round, not a whole number. Past the table, its last entry's slope."""
    r = max(1.0, float(rows))
    lo = min(int(r), len(T) - 2)
    return float(T[lo] + (r - lo) * (T[lo + 1] - T[lo]))


class RowCurve:
    """A call's cost by the rows it decodes, as measured: not a line on every machine.

    Every row count keeps a window of recent timings. A count measured ``min_samples`` times or more is a knot
    at its median (with as many copies of the line's value below, so that a few noisy calls do not pin it), and
    the curve runs straight between knots, so a knee (an Intel AMX CPU: 4 rows 1.4x one row, 5
    rows 2.0x) stays where it was measured. Beyond the last knot, and at counts measured fewer times, the curve
    leans on a line through the 1-row cost whose slope is the sample-weighted median of the measured counts'
    slopes (the last knots' own slope where that is steeper): a single slow call cannot move a count, two or
    three calls that agree do. The prior slope (``prior`` seconds a row, used until other counts are measured) is
    the caller's: a cost in proportion to the rows is a pessimistic start, safe on a CPU, that a GPU's first few
    multi-row calls correct.
    """

    def __init__(self, window: int = 128, min_samples: int = 4) -> None:
        self.window = window
        self.min_samples = min_samples
        self._rows: dict[int, Window] = {}
        self._added = 0
        self._table: tuple[tuple[int, float, float], np.ndarray] | None = None

    def add(self, rows: int, seconds: float) -> None:
        window = self._rows.get(rows)
        if window is None:  # not setdefault: that would build a Window every round
            window = self._rows[rows] = Window(self.window)
        window.add(seconds)
        self._added += 1

    def samples(self, rows: int) -> int:
        return len(self._rows.get(rows, ()))

    def deepest(self) -> int:
        """The largest row count measured ``min_samples`` times (1 when none is)."""
        return max((r for r, xs in self._rows.items() if len(xs) >= self.min_samples), default=1)

    def table(self, max_rows: int, one: float, prior: float) -> np.ndarray:
        """T[r] for r = 0..max_rows (T[0] = 0), nondecreasing; ``one``: the 1-row cost where none was measured. Kept
        until a timing is added: a replan reads it several times."""
        key = (self._added, one, prior)
        if self._table is None or self._table[0] != key or len(self._table[1]) <= max_rows:
            self._table = (key, self._build(max(max_rows, 16), one, prior))
        return self._table[1][: max_rows + 1].copy()

    def _build(self, max_rows: int, one: float, prior: float) -> np.ndarray:
        n = self.min_samples
        ones = self._rows.get(1)
        m1 = ones.median(one, pseudo=n) if ones else one
        multi = [(r, xs, xs.median(0.0)) for r, xs in self._rows.items() if r > 1 and xs]
        # a 1-row call never costs more than a bigger one: a 1-row time measured while the machine was busy is
        # corrected by multi-row calls even when no 1-row call runs for a while
        m1 = min([m1] + [m for _, xs, m in multi if len(xs) >= n])
        slopes = [prior] + [(m - m1) / (r - 1) for r, _, m in multi]
        fade = max(1e-3, 1.0 - sum(len(xs) for _, xs, _ in multi) / n)
        weights = [fade] + [len(xs) for _, xs, _ in multi]
        order = np.argsort(slopes)  # a weighted median, so that a row seen once, slowly, is outvoted
        cum = np.cumsum(np.array(weights)[order])
        slope = max(0.0, slopes[order[int(np.searchsorted(cum, cum[-1] / 2))]])
        # a count measured min_samples times is a knot; its median still counts min_samples copies of the line's
        # value, so that four noisy samples cannot pin it (twice as many outvote the line)
        knots = sorted([(1, m1)] + [(r, xs.median(m1 + slope * (r - 1), pseudo=n)) for r, xs, _ in multi
                                    if len(xs) >= n])  # fmt: skip
        kx = np.array([r for r, _ in knots], dtype=float)
        ky = np.maximum.accumulate(np.array([m for _, m in knots]))
        if len(knots) > 1:
            slope = max(slope, (ky[-1] - ky[-2]) / (kx[-1] - kx[-2]))
        r = np.arange(1, max_rows + 1, dtype=float)
        fit = np.where(r <= kx[-1], np.interp(r, kx, ky), ky[-1] + slope * (r - kx[-1]))
        out = np.zeros(max_rows + 1)
        out[1:] = fit
        for rows, xs, _ in multi:
            if rows <= max_rows and len(xs) < n:
                out[rows] = xs.median(float(fit[rows - 1]), pseudo=n)
        out[1:] = np.maximum.accumulate(np.maximum(out[1:], 1e-9))
        return out


class CostModel:
    """Online estimates of a round's costs: the target call by rows, the drafter's catch-up by rows, one later
    draft step, host time per round.

    Every row count keeps a window of recent timings and uses its median (:class:`RowCurve`), so a core stolen by
    another process for one call does not move the estimate. The catch-up, a round's first draft step, decodes
    every row committed since the drafter last ran: the last round's one to four while the policy drafts every
    round, a window of sixteen after an idle stretch. Its cost is learnt by those rows, so a probe's long catch-up
    prices probes, not the rounds that follow it. ``steady_rows`` is the catch-up a policy drafting every round
    pays (its tokens per round, which the policy sets from its plan).
    """

    def __init__(
        self,
        t1: float,
        *,
        draft_step: float | None = None,
        host: float = 0.0,
        prior_slope: float = 1.0,
        window: int = 128,
        min_samples: int = 4,
    ) -> None:
        if t1 <= 0:
            raise ValueError(f"the 1-row target time must be positive, got {t1}")
        self.t1 = t1
        self.prior_slope = prior_slope
        self.window = window
        self.min_samples = min_samples
        self._verify = RowCurve(window, min_samples)
        self._catch = RowCurve(window, min_samples)
        self._draft = Window(window)
        self._host = Window(window)
        self._draft0 = 0.1 * t1 if draft_step is None else draft_step
        self._host0 = host
        self.steady_rows = 1.0

    def add_verify(self, rows: int, seconds: float) -> None:
        self._verify.add(rows, seconds)

    def add_draft(self, steps: int, seconds: float) -> None:
        if steps > 0:
            self._draft.add(seconds / steps)

    def add_first(self, seconds: float, rows: int = 1) -> None:
        """A round's first draft step: the drafter's catch-up on ``rows`` rows, its first draft included."""
        self._catch.add(max(1, rows), seconds)

    def add_host(self, seconds: float) -> None:
        self._host.add(max(0.0, seconds))

    @property
    def draft_step(self) -> float:
        return self._draft.median(self._draft0)

    def catch_up(self, rows: float) -> float:
        """A first step that decodes ``rows`` rows (interpolated between whole rows): measured by rows, else a
        later step's cost for one row and, until catch-ups of more were measured, a row more costing what a row
        more costs the target (both are the same device's matrix products)."""
        T2 = self._verify.table(2, self.t1, self.prior_slope * self.t1)
        step = self.draft_step
        return at_rows(self._catch.table(int(max(1.0, rows)) + 1, step, step * max(0.0, T2[2] / T2[1] - 1.0)), rows)

    @property
    def first_step(self) -> float:
        """The first step of a round that follows a drafting round: its catch-up of ``steady_rows`` rows."""
        return self.catch_up(self.steady_rows)

    @property
    def host(self) -> float:
        return self._host.median(self._host0)

    def call(self, rows: int) -> float | None:
        """A drafter call of ``rows`` rows, where known in advance (:class:`FixedCosts`); None: measure it."""
        return None

    def samples(self, rows: int) -> int:
        return self._verify.samples(rows)

    def verify(self, max_rows: int, *, optimism: float = 0.0) -> np.ndarray:
        """T[r] for r = 0..max_rows (T[0] = 0), nondecreasing: measured where known, interpolated between measured
        row counts, extrapolated beyond them (:class:`RowCurve`).

        ``optimism`` discounts the extra cost of row counts with fewer than ``min_samples`` samples, so the policy
        tries them before ruling them out: only the count one past the deepest measured one, so that depths are
        explored one at a time.
        """
        out = self._verify.table(max_rows, self.t1, self.prior_slope * self.t1)
        if optimism > 0.0 and max_rows > 1:
            # one row count past the deepest well-measured one at a time: on a CPU every untried depth
            # would look worth a try at once, and each try of a deep verify costs several decodes
            known = self._verify.deepest()
            n = self.min_samples
            seen = np.array([min(1.0, self.samples(r) / n) if r <= known + 1 else 1.0 for r in range(2, max_rows + 1)])
            out[2:] = out[1] + np.cumsum(np.diff(out[1:]) * (1.0 - optimism * (1.0 - seen)))
        return out


class DeafCosts(CostModel):
    """A cost model that learns nothing from this machine's timings: another machine's costs stay what they are."""

    def add_verify(self, rows: int, seconds: float) -> None:
        pass

    def add_draft(self, steps: int, seconds: float) -> None:
        pass

    def add_first(self, seconds: float, rows: int = 1) -> None:
        pass

    def add_host(self, seconds: float) -> None:
        pass


class FixedCosts(DeafCosts):
    """Another machine's costs, fixed: the policy decides as it would there (``bench --decide-on``), whatever this
    machine's timings say. ``verify[r]``: a target call of r rows (index 0 unused, the last slope beyond the table);
    ``drafter[r]``: a drafter call of r rows (a catch-up of r rows; a later step is its 1-row call)."""

    def __init__(self, verify: list[float], drafter: list[float], host: float = 0.0) -> None:
        super().__init__(verify[1], draft_step=drafter[1], host=host)
        self._verify_table = list(verify)
        self._drafter = list(drafter)

    def samples(self, rows: int) -> int:
        return self.min_samples

    def call(self, rows: int) -> float | None:
        return _extended(self._drafter, rows)

    def catch_up(self, rows: float) -> float:
        lo = int(max(1.0, rows))
        return at_rows([0.0, *(_extended(self._drafter, r) for r in range(1, lo + 2))], rows)

    def verify(self, max_rows: int, *, optimism: float = 0.0) -> np.ndarray:
        out = np.array([0.0] + [_extended(self._verify_table, r) for r in range(1, max_rows + 1)])
        out[1:] = np.maximum.accumulate(out[1:])
        return out


def _extended(table: list[float], r: int) -> float:
    if r < len(table):
        return table[r]
    n = len(table) - 1
    slope = table[n] - table[n - 1] if n > 1 else 0.0
    return table[n] + slope * (r - n)

"""Online estimates of what a speculative round costs, from the timings the engine measures anyway.

The draft-length policy (``runtime.policy.draftlen``) needs the target call's cost for every row count it
may verify, including counts it has not tried yet, one draft step's cost and the host time per
round; on a shared machine single timings are noisy and now and then far off.
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


class CostModel:
    """Online estimates of a round's costs: the target call by rows, one draft step, host time per round.

    Every row count keeps a window of recent timings and uses its median, so a core stolen by another
    process for one call does not move the estimate. Row counts with few samples lean on a line through
    the 1-row time whose slope is the sample-weighted median of the measured rows' slopes. Its prior slope
    is that of a target whose cost is proportional to its rows: a pessimistic start, safe on a CPU, that
    a GPU's first few multi-row calls correct.
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
        self._rows: dict[int, Window] = {}
        self._draft = Window(window)
        self._first = Window(window)
        self._host = Window(window)
        self._draft0 = 0.1 * t1 if draft_step is None else draft_step
        self._host0 = host

    def add_verify(self, rows: int, seconds: float) -> None:
        window = self._rows.get(rows)
        if window is None:  # not setdefault: that would build a Window every round
            window = self._rows[rows] = Window(self.window)
        window.add(seconds)

    def add_draft(self, steps: int, seconds: float) -> None:
        if steps > 0:
            self._draft.add(seconds / steps)

    def add_first(self, seconds: float) -> None:
        """A round's first draft step, catching the drafter up on the rows it skipped included."""
        self._first.add(seconds)

    def add_host(self, seconds: float) -> None:
        self._host.add(max(0.0, seconds))

    @property
    def draft_step(self) -> float:
        return self._draft.median(self._draft0)

    @property
    def first_step(self) -> float:
        """The first step of a round; a later step's cost until one was measured."""
        return self._first.median(self.draft_step)

    @property
    def host(self) -> float:
        return self._host.median(self._host0)

    def call(self, rows: int) -> float | None:
        """A drafter call of ``rows`` rows, where known in advance (:class:`FixedCosts`); None: measure it."""
        return None

    def samples(self, rows: int) -> int:
        return len(self._rows.get(rows, ()))

    def verify(self, max_rows: int, *, optimism: float = 0.0) -> np.ndarray:
        """T[r] for r = 0..max_rows (T[0] = 0), nondecreasing: measured where known, fitted elsewhere.

        A row count's estimate is the median of its samples together with ``min_samples`` copies of the
        line's value, so two or three samples, one of them an outlier, cannot pin it far off (and with
        it, through monotonicity, every larger count). ``optimism`` discounts the extra cost of row counts
        with fewer than ``min_samples`` samples, so the policy tries them before ruling them out: only the
        count one past the deepest measured one, so that depths are explored one at a time.
        """
        ones = self._rows.get(1)
        m1 = ones.median(self.t1, pseudo=self.min_samples) if ones else self.t1
        multi = [(r, xs) for r, xs in self._rows.items() if r > 1 and xs]
        # a 1-row call never costs more than a bigger one: a t1 measured while the machine was busy is
        # corrected by multi-row calls even when the policy runs no 1-row call for a while
        m1 = min([m1] + [xs.median(0.0) for _, xs in multi if len(xs) >= self.min_samples])
        slopes = [self.prior_slope * self.t1] + [(xs.median(0.0) - m1) / (r - 1) for r, xs in multi]
        fade = max(1e-3, 1.0 - sum(len(xs) for _, xs in multi) / self.min_samples)
        weights = [fade] + [len(xs) for _, xs in multi]
        order = np.argsort(slopes)  # a weighted median, so that a row seen once, slowly, is outvoted
        cum = np.cumsum(np.array(weights)[order])
        b = max(0.0, slopes[order[int(np.searchsorted(cum, cum[-1] / 2))]])
        a = m1 - b
        out = np.zeros(max_rows + 1)
        for r in range(1, max_rows + 1):
            fit = a + b * r
            xs = self._rows.get(r)
            if xs:
                fit = xs.median(fit, pseudo=self.min_samples)
            out[r] = max(fit, 1e-9)
        out[1:] = np.maximum.accumulate(out[1:])
        if optimism > 0.0 and max_rows > 1:
            # one row count past the deepest well-measured one at a time: on a CPU every untried depth
            # would look worth a try at once, and each try of a deep verify costs several decodes
            known = max((r for r in self._rows if self.samples(r) >= self.min_samples), default=1)
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

    def add_first(self, seconds: float) -> None:
        pass

    def add_host(self, seconds: float) -> None:
        pass


class FixedCosts(DeafCosts):
    """Another machine's costs, fixed: the policy decides as it would there (``bench --decide-on``), whatever this
    machine's timings say. ``verify[r]``: a target call of r rows (index 0 unused, the last slope beyond the table);
    ``drafter[r]``: a drafter call of r rows."""

    def __init__(self, verify: list[float], drafter: list[float], host: float = 0.0) -> None:
        super().__init__(verify[1], draft_step=drafter[1], host=host)
        self._verify = list(verify)
        self._drafter = list(drafter)

    def samples(self, rows: int) -> int:
        return self.min_samples

    def call(self, rows: int) -> float | None:
        return _extended(self._drafter, rows)

    def verify(self, max_rows: int, *, optimism: float = 0.0) -> np.ndarray:
        out = np.array([0.0] + [_extended(self._verify, r) for r in range(1, max_rows + 1)])
        out[1:] = np.maximum.accumulate(out[1:])
        return out


def _extended(table: list[float], r: int) -> float:
    if r < len(table):
        return table[r]
    n = len(table) - 1
    slope = table[n] - table[n - 1] if n > 1 else 0.0
    return table[n] + slope * (r - n)

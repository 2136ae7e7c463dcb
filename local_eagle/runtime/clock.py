"""The clock the engine times its phases with: ``time.perf_counter`` less the time a bench device paused it for.

A bench that arranges the drafter's rows (``bench.arranged``) rewrites them on the host after every drafter call;
that work is the bench's, not the engine's, yet it falls inside the phases the engine times and learns its costs
from (a drafter step, a round's host time) and inside the speeds a bench reports. Inside :func:`paused` the clock
stands still, so the policy prices and the bench reports the engine's own work. Nothing in the product pauses it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

_perf = time.perf_counter
_paused = 0.0  # seconds the clock stood still so far, in every thread (the engine drives its rounds in one)
_since: float | None = None  # when the pause in progress began


def clock() -> float:
    return (_perf() if _since is None else _since) - _paused


@contextmanager
def paused() -> Iterator[None]:
    """The clock stands still inside (a pause within a pause changes nothing)."""
    global _paused, _since
    if _since is not None:
        yield
        return
    _since = _perf()
    try:
        yield
    finally:
        _paused += _perf() - _since
        _since = None


def paused_seconds() -> float:
    """Seconds the clock has stood still so far (the pause in progress not counted)."""
    return _paused

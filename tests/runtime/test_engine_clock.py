"""The engine's clock (runtime.clock) stands still while paused, and only then."""

from __future__ import annotations

import local_eagle.runtime.clock as engine_clock


def test_the_clock_stands_still_while_paused_and_runs_otherwise(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(engine_clock, "_perf", lambda: now[0])
    monkeypatch.setattr(engine_clock, "_paused", 0.0)
    start = engine_clock.clock()
    now[0] += 1.0
    assert engine_clock.clock() - start == 1.0
    with engine_clock.paused():
        now[0] += 5.0
        assert engine_clock.clock() - start == 1.0
    assert engine_clock.paused_seconds() == 5.0
    now[0] += 2.0
    assert engine_clock.clock() - start == 3.0
    try:
        with engine_clock.paused():
            now[0] += 4.0
            raise ValueError("a rewrite that failed")
    except ValueError:
        pass
    assert engine_clock.paused_seconds() == 9.0 and engine_clock.clock() - start == 3.0


def test_a_pause_within_a_pause_is_counted_once(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(engine_clock, "_perf", lambda: now[0])
    monkeypatch.setattr(engine_clock, "_paused", 0.0)
    with engine_clock.paused():
        now[0] += 1.0
        with engine_clock.paused():
            now[0] += 2.0
        assert engine_clock.clock() == 0.0
    assert engine_clock.paused_seconds() == 3.0 and engine_clock.clock() == 0.0

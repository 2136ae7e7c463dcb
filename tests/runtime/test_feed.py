"""The drafter's lazy input queue, against a recording stand-in for the drafter (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from local_eagle.runtime.feed import DrafterFeed


class _Ctx:
    def __init__(self) -> None:
        self.cleared = 0

    def clear(self) -> None:
        self.cleared += 1


class _Drafter:
    """Records what it is asked to encode and decode; a row's 'logits' are its token, its 'prenorm' its feature."""

    def __init__(self) -> None:
        self.ctx = _Ctx()
        self.rows: list[tuple[int, int, float]] = []  # (position, token, feature[0]) in decode order
        self.calls = 0

    def encode(self, features: np.ndarray) -> np.ndarray:
        return features[:, :2].copy()

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        self.calls += 1
        self.rows += [(int(p), int(t), float(x[0])) for p, t, x in zip(positions, tokens, g, strict=True)]

    def decode_last(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns=None):
        self.decode_kv(tokens, g, positions)
        return np.array([[float(tokens[-1])]]), g[-1:].copy()


def _rows(first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    positions = np.arange(first, first + n)
    return (100 + positions).astype(np.int32), np.repeat(positions[:, None].astype(np.float32), 3, axis=1)


def test_rows_wait_until_a_draft_is_due_then_go_in_one_call():
    d = _Drafter()
    feed = DrafterFeed(d, width=3, window=16)
    feed.reset()
    feed.push(0, *_rows(0, 10))  # a prompt
    feed.flush()  # decoded at prefill: all but the row of the last token
    assert d.calls == 1 and [r[0] for r in d.rows] == list(range(9)) and feed.pending == 1
    for p in range(10, 14):  # four rounds without drafting
        feed.push(p, *_rows(p, 1))
    assert d.calls == 1 and feed.pending == 5
    logits, prenorm, n = feed.catch_up()
    assert n == 5 and d.calls == 2 and [r[0] for r in d.rows] == list(range(14)) and d.ctx.cleared == 1
    assert logits[0, 0] == 113 and prenorm[0, 0] == 13  # the last row's outputs: the round's first step
    assert feed.pending == 0 and feed.first == 14
    with pytest.raises(AssertionError):
        feed.push(15, *_rows(15, 1))  # a gap: rows must follow those queued


def test_a_long_idle_stretch_keeps_only_a_window_and_restarts_the_drafter_cache():
    d = _Drafter()
    feed = DrafterFeed(d, width=3, window=4)
    feed.reset()
    feed.push(0, *_rows(0, 3))
    feed.catch_up()
    for p in range(3, 103):  # 100 idle rounds: the queue never holds more than the window (plus the new row)
        feed.push(p, *_rows(p, 1))
        if feed.pending > feed.window:
            feed.trim()
        assert feed.pending <= feed.window
    _, prenorm, n = feed.catch_up()
    assert n == 4 and d.ctx.cleared == 2  # the older rows are gone, so is the cache they would follow
    assert [r[0] for r in d.rows[-4:]] == [99, 100, 101, 102] and prenorm[0, 0] == 102
    assert len(feed._tokens) <= 4 * feed.window  # the buffer did not grow with the stretch
    feed.push(103, *_rows(103, 2))
    feed.catch_up()
    assert d.ctx.cleared == 2 and [r[0] for r in d.rows[-2:]] == [103, 104]  # contiguous again: no restart


def test_skipped_rows_restart_the_drafter_and_drafting_waits_for_a_full_window():
    """Rounds whose features were not captured (an idle policy paused recording) leave a gap: the queue
    starts again after it, and a draft may start once a whole window of rows has been queued."""
    d = _Drafter()
    feed = DrafterFeed(d, width=3, window=4)
    feed.reset()
    feed.push(0, *_rows(0, 3))
    assert feed.ready(3) and not feed.ready(4)
    feed.skip(3, 5)
    assert feed.pending == 0 and feed.first == 8 and not feed.ready(8)
    for p in range(8, 11):
        feed.push(p, *_rows(p, 1))
        assert not feed.ready(p + 1)
    feed.push(11, *_rows(11, 1))
    assert feed.ready(12)
    _, prenorm, n = feed.catch_up()
    assert n == 4 and d.ctx.cleared == 2 and [r[0] for r in d.rows] == [8, 9, 10, 11] and prenorm[0, 0] == 11
    with pytest.raises(AssertionError):
        feed.skip(13, 1)  # a gap: skipped rows must follow those queued

"""The cost curve the kit measures on the GPU, measured here on the tiny random pair."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from local_eagle.bench import costs
from local_eagle.bench.concurrency import cost_rows
from local_eagle.bench.costs import (
    another_call,
    measure_cost_curve,
    measure_sampled,
    shape_until,
    skipped_note,
    split_rows,
)
from local_eagle.bench.pair import make_pair


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("pair"), tiny=True)


def test_cost_curve_has_every_row_count_for_target_and_drafter(tiny_pair) -> None:
    c = measure_cost_curve(tiny_pair["target"], tiny_pair["drafter"], rows=(1, 3, 8), repeats=2, prefix=16, threads=1,
                           seconds=None)  # fmt: skip
    assert list(c.verify_ms) == [1, 3, 8] and list(c.drafter_ms) == [1, 3, 8]
    assert c.samples == {1: 2, 3: 2, 8: 2} and c.skipped == {}
    assert all(v > 0 for v in (*c.verify_ms.values(), *c.decode_ms.values(), *c.drafter_ms.values()))
    # reading every row's logits comes on top of the call itself
    assert all(c.verify_ms[r] >= c.decode_ms[r] for r in c.verify_ms)
    d = c.to_dict()
    assert d["verify_ratio"][1] == 1.0 and d["decode_1_ms"] == c.verify_ms[1]


def test_cost_curve_times_native_capture_on_and_off_and_its_switches(tiny_pair) -> None:
    """The engine's verify stages the drafter's layers in every call: the curve times a 1-row call with and without,
    and the first call after each switch, and leaves the context's staging off as it found it."""
    c = measure_cost_curve(tiny_pair["target"], tiny_pair["drafter"], rows=(1,), repeats=2, prefix=16, threads=1,
                           seconds=None)  # fmt: skip
    assert set(c.capture_ms) == {"on", "off", "switch_on", "switch_off"} and c.capture_note is None
    assert all(ms > 0 for ms in c.capture_ms.values())
    assert json.loads(json.dumps(c.to_dict()))["capture_ms"] == c.capture_ms
    bare = measure_cost_curve(tiny_pair["target"], rows=(1,), repeats=1, prefix=8, threads=1, seconds=None)
    assert bare.capture_ms == {} and bare.capture_note is None  # no drafter, no layers to stage


def test_the_verify_is_timed_with_a_backend_greedy_sampler_beside_its_logits_read(tiny_pair) -> None:
    got = measure_sampled(tiny_pair["target"], rows=(1, 4, 8), repeats=2, prefix=16, gpu_layers=0, threads=1)
    assert got["sampled_note"] is None, got["sampled_note"]
    assert set(got["sampled_ms"]) == set(got["plain_ms"]) == {1, 4, 8}
    assert all(ms > 0 for ms in [*got["sampled_ms"].values(), *got["plain_ms"].values()])
    assert got["sampled_agree"] is True  # the sampler's tokens are the argmax of the logits a verify reads
    assert measure_cost_curve(tiny_pair["target"], rows=(1,), repeats=1, prefix=8, threads=1).sampled_ms == {}


def test_cost_curve_refuses_rows_below_one(tiny_pair) -> None:
    with pytest.raises(ValueError, match="rows must be positive"):
        measure_cost_curve(tiny_pair["target"], rows=(0, 2))


def test_the_kit_prints_the_curve_as_json(tiny_pair) -> None:
    cmd = [sys.executable, "-m", "local_eagle.kit.measure", "costs", tiny_pair["target"], "--rows", "1,2",
           "--repeats", "1", "--prefix", "8"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(d["verify_ms"]) == {"1", "2"} and d["drafter"] is None and d["drafter_ms"] == {}


def test_rows_above_the_cap_are_named_not_measured() -> None:
    # concurrency 1,4,16 asks for calls of up to 80 rows; 64 and 128 lift the cap, so 80 goes
    kept, skipped = split_rows(cost_rows([1, 4, 16]), max_rows=64)
    assert kept == (1, 2, 3, 4, 5, 8, 12, 16, 20, 32, 48, 64)
    assert skipped == {80: "above the cap of 64 rows"}
    assert split_rows((8, 1, 8, 300))[1] == {300: f"above the cap of {costs.MAX_ROWS} rows"}
    assert max(split_rows(cost_rows([64, 256]))[0]) <= costs.MAX_ROWS
    with pytest.raises(ValueError, match="below the smallest"):
        split_rows((4, 8), max_rows=2)


def test_each_shape_gets_its_share_of_the_time_left() -> None:
    assert shape_until(100.0, None, 5) is None
    assert shape_until(100.0, 110.0, 5) == pytest.approx(102.0)
    assert shape_until(112.0, 110.0, 3) == 112.0  # past the deadline: no share
    # up to the repeats asked for while they fit the share; a shape that started gets one call
    assert not another_call(7, 7, 0.0, 0.001, None)
    assert another_call(6, 7, 0.0, 0.001, None)
    assert another_call(0, 7, 5.0, 1.0, 2.0)
    assert another_call(1, 7, 1.0, 1.0, 2.0) and not another_call(2, 7, 1.5, 1.0, 2.0)


def test_a_deadline_measures_the_one_row_call_and_names_the_rest(tiny_pair) -> None:
    c = measure_cost_curve(tiny_pair["target"], tiny_pair["drafter"], rows=(1, 2, 4, 200), prefix=16, threads=1,
                           seconds=0.0)  # fmt: skip
    assert list(c.verify_ms) == [1] and list(c.drafter_ms) == [1] and c.samples == {1: 1}
    assert c.skipped == {2: "the deadline of 0 s passed", 4: "the deadline of 0 s passed",
                         200: f"above the cap of {costs.MAX_ROWS} rows"}  # fmt: skip
    note = skipped_note(json.loads(json.dumps(c.to_dict()))["skipped"])  # as a results file holds it
    assert note == f"rows not measured: 2, 4 (the deadline of 0 s passed); 200 (above the cap of {costs.MAX_ROWS} rows)"
    assert skipped_note({}) is None


class _Events:
    """A context and a clock in one: each call is logged and advances time by a second."""

    def __init__(self) -> None:
        self.now, self.log = 0.0, []

    def clock(self) -> float:
        self.log.append("clock")
        return self.now

    def _step(self, what: str) -> None:
        self.log.append(what)
        self.now += 1.0

    def decode(self, tokens, positions, outputs) -> None:
        self._step("decode")

    def synchronize(self) -> None:
        self._step("synchronize")

    def logits_view(self, i: int, n_vocab: int) -> np.ndarray:
        self._step(f"read {i}")
        return np.zeros(n_vocab, dtype=np.float32)


def test_a_target_call_is_timed_until_the_device_is_done_and_every_row_read(monkeypatch) -> None:
    ev = _Events()
    monkeypatch.setattr(costs, "clock", ev.clock)
    call, total = costs.target_call(ev, np.arange(3), np.arange(3), 8)
    assert ev.log == ["clock", "decode", "synchronize", "clock", "read 0", "read 1", "read 2", "clock"]
    assert (call, total) == (2.0, 5.0)  # the wait inside the call, the reads inside the total


def test_other_drafters_are_timed_in_the_same_loop_and_keyed_by_file(tiny_pair) -> None:
    c = measure_cost_curve(tiny_pair["target"], tiny_pair["drafter"], rows=(1, 4), repeats=2, prefix=16, threads=1,
                           seconds=None, others=(tiny_pair["drafter_q8_0"],))  # fmt: skip
    assert c.others_ms == {"drafter-q8_0.gguf": {1: c.others_ms["drafter-q8_0.gguf"][1],
                                                 4: c.others_ms["drafter-q8_0.gguf"][4]}}  # fmt: skip
    assert all(v > 0 for v in c.others_ms["drafter-q8_0.gguf"].values()) and list(c.drafter_ms) == [1, 4]
    assert c.drafter_types == {"drafter-f16.gguf": "F16", "drafter-q8_0.gguf": "Q8_0"}
    d = json.loads(json.dumps(c.to_dict()))
    assert set(d["others_ms"]["drafter-q8_0.gguf"]) == {"1", "4"}


def test_other_drafters_need_the_drafter_and_names_of_their_own(tiny_pair) -> None:
    with pytest.raises(ValueError, match="name the drafter first"):
        measure_cost_curve(tiny_pair["target"], others=(tiny_pair["drafter_q8_0"],))
    with pytest.raises(ValueError, match="must differ"):
        measure_cost_curve(tiny_pair["target"], tiny_pair["drafter"], others=(tiny_pair["drafter"],))


def test_the_kit_times_another_drafter_and_refuses_one_without_the_first(tiny_pair) -> None:
    base = [sys.executable, "-m", "local_eagle.kit.measure", "costs", tiny_pair["target"]]
    cmd = [*base, tiny_pair["drafter"], "--other", tiny_pair["drafter_q8_0"], "--rows", "1,2", "--repeats", "1",
           "--prefix", "8"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(d["others_ms"]["drafter-q8_0.gguf"]) == {"1", "2"} and d["drafter_types"]["drafter-q8_0.gguf"] == "Q8_0"
    r = subprocess.run([*base, "--other", tiny_pair["drafter_q8_0"]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--other needs the drafter" in r.stderr and "Traceback" not in r.stderr

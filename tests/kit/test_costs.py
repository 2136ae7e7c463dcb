"""The cost curve the kit measures on the GPU, measured here on the tiny random pair."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from local_eagle.bench.costs import measure_cost_curve
from local_eagle.bench.pair import make_pair


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("pair"), tiny=True)


def test_cost_curve_has_every_row_count_for_target_and_drafter(tiny_pair) -> None:
    c = measure_cost_curve(tiny_pair["target"], tiny_pair["drafter"], rows=(1, 3, 8), repeats=2, prefix=16, threads=1)
    assert list(c.verify_ms) == [1, 3, 8] and list(c.drafter_ms) == [1, 3, 8]
    assert all(v > 0 for v in (*c.verify_ms.values(), *c.decode_ms.values(), *c.drafter_ms.values()))
    # reading every row's logits comes on top of the call itself
    assert all(c.verify_ms[r] >= c.decode_ms[r] for r in c.verify_ms)
    d = c.to_dict()
    assert d["verify_ratio"][1] == 1.0 and d["decode_1_ms"] == c.verify_ms[1]


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

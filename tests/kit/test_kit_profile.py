"""A machine's cost profile from a GPU run's results (``kit profile``): the shipped H100 profile is what the H100
run's results give, and results without a curve are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.kit.__main__ import main
from local_eagle.kit.profile import profile_of

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "docs" / "gpu-runs" / "2026-11-26-h100" / "results.json"


def test_the_h100_runs_results_give_the_shipped_h100_profile(tmp_path) -> None:
    out = tmp_path / "h100.json"
    assert main(["profile", str(H100), "--name", "h100-8b-q4", "--out", str(out), "--source",
                 "docs/gpu-runs/2026-11-26-h100/results.json"]) == 0  # fmt: skip
    made = json.loads(out.read_text())
    shipped = json.loads((REPO / "local_eagle" / "bench" / "profiles" / "h100-8b-q4.json").read_text())
    assert {k: v for k, v in made.items() if k != "device"} == {k: v for k, v in shipped.items() if k != "device"}
    assert made["device"].startswith("NVIDIA H100 80GB HBM3 (driver 580.159.04), CUDA 13.0.88 build")


def test_results_without_a_curve_are_refused_in_one_line(tmp_path, capsys) -> None:
    with pytest.raises(LocalEagleError, match=r"x\.json: no cost curve"):
        profile_of({"results": {"costs8b": {"rc": 1}}}, "h200-8b-q4", "x.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["profile", str(bad), "--name", "h200-8b-q4", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kit profile: ") and "\n" not in err and not (tmp_path / "p.json").exists()

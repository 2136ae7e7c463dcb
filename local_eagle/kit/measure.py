"""Measurements the kit runs on the GPU machine that no ``local-eagle`` command prints as JSON yet.

    python -m local_eagle.kit.measure costs TARGET.gguf [DRAFTER.gguf] [--other DRAFTER2.gguf ...]
        [--rows 1,2,4,...] [--repeats 7] [--seconds 20] [--max-rows 128]
    python -m local_eagle.kit.measure replay TARGET.gguf DRAFTER.gguf ROUNDS.json [--costs COSTS.json]
        [--max-rounds N] [--seconds S]

``replay`` runs a bench's recorded rounds (``bench --json --rounds``) for real on this pair and sets
the speed against the projection on the cost curve of the same run (``bench.replay``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from local_eagle.bench.costs import (
    DEFAULT_ROWS,
    DEFAULT_SECONDS,
    MAX_ROWS,
    SAMPLED_ROWS,
    measure_cost_curve,
    measure_sampled,
)
from local_eagle.errors import LocalEagleError


def _rows(ap: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        ap.error(f"--rows {text!r}: expected numbers separated by commas")


def _read_costs(path: str) -> dict:
    """A cost curve file (``measure costs``'s JSON), checked as the projection will read it."""
    from local_eagle.bench.project import profile_from

    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise LocalEagleError(f"{path}: not a cost curve ({type(e).__name__}: {e})") from None
    profile_from(raw, path)
    return raw


def _replay(a: argparse.Namespace, ap: argparse.ArgumentParser) -> dict:
    from local_eagle.bench.replay import read_settings, replay_rounds

    deadline = None if a.seconds is None else time.monotonic() + a.seconds
    settings = read_settings(a.rounds)
    costs = None if a.costs is None else _read_costs(a.costs)
    measured = costs is None
    if costs is None:
        curve = measure_cost_curve(a.target, a.drafter, _rows(ap, a.rows), a.repeats, a.prefix, a.gpu_layers,
                                   a.threads)  # fmt: skip
        costs = json.loads(json.dumps(curve.to_dict()))  # int keys as a file has them
    out = replay_rounds(a.target, a.drafter, settings, a.prefix, a.gpu_layers, a.threads, max_rounds=a.max_rounds,
                        deadline=deadline, costs=costs)  # fmt: skip
    out["costs"] = costs
    out["costs_measured_here"] = measured
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m local_eagle.kit.measure")
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("costs", help="target call cost by rows, drafter call cost by rows (JSON)")
    c.add_argument("target")
    c.add_argument("drafter", nargs="?")
    c.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="measure within this many seconds")
    c.add_argument("--max-rows", type=int, default=MAX_ROWS, help="row counts above this are not measured")
    c.add_argument("--other", action="append", default=[], help="another drafter (e.g. the same at q8_0), timed "
                   "in the same loop right after the first; repeatable")  # fmt: skip
    r = sub.add_parser("replay", help="recorded bench rounds replayed on this pair, against their projection (JSON)")
    r.add_argument("target")
    r.add_argument("drafter")
    r.add_argument("rounds", help="a bench --json --rounds file: a list of settings with their rounds")
    r.add_argument("--costs", help="the cost curve measured in this run (measure costs); measured first if absent")
    r.add_argument("--max-rounds", type=int, help="replay the first N rounds of each setting")
    r.add_argument("--seconds", type=float, help="stop before this many seconds, marking settings truncated")
    r.add_argument("--threads", type=int, default=0)
    s = sub.add_parser("sampled", help="the verify's call with a backend greedy sampler against its logits read (JSON)")
    s.add_argument("target")
    for p in (c, r, s):
        p.add_argument("--rows", default=",".join(map(str, SAMPLED_ROWS if p is s else DEFAULT_ROWS)))
        p.add_argument("--repeats", type=int, default=5 if p is s else 7)
        p.add_argument("--prefix", type=int, default=256)
        p.add_argument("--gpu-layers", type=int, default=-1)
    a = ap.parse_args(argv)
    try:
        if a.what == "replay":
            out = _replay(a, ap)
        elif a.what == "sampled":
            out = measure_sampled(a.target, _rows(ap, a.rows), a.repeats, a.prefix, a.gpu_layers)
        else:
            if a.other and a.drafter is None:
                ap.error("--other needs the drafter to time it beside")
            curve = measure_cost_curve(a.target, a.drafter, _rows(ap, a.rows), a.repeats, a.prefix, a.gpu_layers,
                                       max_rows=a.max_rows, seconds=a.seconds, others=tuple(a.other))  # fmt: skip
            out = curve.to_dict()
    except (LocalEagleError, ValueError) as e:
        print(f"measure {a.what}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps(out))


if __name__ == "__main__":
    main()

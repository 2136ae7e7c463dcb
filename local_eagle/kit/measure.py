"""Measurements the kit runs on the GPU machine that no ``local-eagle`` command prints as JSON yet.

    python -m local_eagle.kit.measure costs TARGET.gguf [DRAFTER.gguf] [--rows 1,2,4,...] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json

from local_eagle.bench.costs import DEFAULT_ROWS, measure_cost_curve


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m local_eagle.kit.measure")
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("costs", help="target call cost by rows, drafter call cost by rows (JSON)")
    c.add_argument("target")
    c.add_argument("drafter", nargs="?")
    c.add_argument("--rows", default=",".join(map(str, DEFAULT_ROWS)))
    c.add_argument("--repeats", type=int, default=7)
    c.add_argument("--prefix", type=int, default=256)
    c.add_argument("--gpu-layers", type=int, default=-1)
    a = ap.parse_args(argv)
    try:
        rows = tuple(int(x) for x in a.rows.split(","))
    except ValueError:
        ap.error(f"--rows {a.rows!r}: expected numbers separated by commas")
    curve = measure_cost_curve(a.target, a.drafter, rows, a.repeats, a.prefix, a.gpu_layers)
    print(json.dumps(curve.to_dict()))


if __name__ == "__main__":
    main()

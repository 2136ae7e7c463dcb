"""``python -m local_eagle.kit``: make the kit, run a call of the lease plan, write the results page.

Standard library only up to the point where local-eagle is installed (docs/gpu.md has the plan).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _make(a: argparse.Namespace) -> int:
    from local_eagle.errors import LocalEagleError
    from local_eagle.kit.make import MIB, KitError, make_kit
    from local_eagle.kit.parts import PartsError
    from local_eagle.kit.trim import TrimError

    try:
        kit = make_kit(Path(a.root).resolve(), REPO, tuple(p for p in a.pairs.split(",") if p), a.python,
                       int(a.part_mib * MIB), None if a.budget_mib is None else int(a.budget_mib * MIB),
                       a.lean)  # fmt: skip
    except (KitError, TrimError, PartsError, LookupError, LocalEagleError) as e:
        print(f"kit make: {e}", file=sys.stderr)
        return 2
    for i, call in enumerate(kit.calls, 1):
        print(f"call {i:2d}: {sum(kit.size(p) for p in call) / MIB:5.1f} MiB  {', '.join(call)[:110]}")
    return 0


def _gpu(a: argparse.Namespace) -> int:
    from local_eagle.kit.gpu import CALL_SECONDS, Env, run_call

    out = Path(a.out or os.environ.get("OUT") or Path(a.home) / "out")
    env = Env(repo=REPO, home=Path(a.home), out=out, cuda=not a.cpu, python=sys.executable)
    if not a.no_deadline:
        env.deadline = env.started + CALL_SECONDS - a.slack
    bundle = None
    if a.call is not None:
        bundle = REPO / a.root / "calls" / f"call{a.call:02d}"
    elif a.bundle:
        bundle = Path(a.bundle)
    only = [s for s in (a.only or "").split(",") if s]
    run_call(env, bundle, only or None, a.force)
    return 0


def _report(a: argparse.Namespace) -> int:
    from local_eagle.errors import LocalEagleError
    from local_eagle.kit.report import ReportError, write_report

    try:
        path = write_report([Path(p) for p in a.results], Path(a.out), a.title, a.command)
    except (ReportError, LocalEagleError) as e:
        print(f"kit report: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _emulate(a: argparse.Namespace) -> int:
    from local_eagle.kit.deps import GPU_IMAGE_PACKAGES, ROOT_EXTRAS, TEST_TOOLS, closure

    roots = [("local-eagle", ROOT_EXTRAS), ("llama-cpp-python", ()), *((t, ()) for t in TEST_TOOLS)]
    pins = [p for p in closure(roots) if p.name in GPU_IMAGE_PACKAGES and p.name != "torch"]
    import subprocess

    # without their dependencies, so nothing the image lacks slips in and hides a missing wheel of the kit's
    t0 = time.monotonic()
    pip = [a.python, "-m", "pip", "install", "-q"]
    rc = subprocess.run([*pip, "--no-deps", *(p.spec for p in pins)]).returncode
    rc = rc or subprocess.run([*pip, "scikit-build-core", "cmake", "ninja", "torch==2.13.0"]).returncode
    print(f"installed {len(pins) + 4} image packages into {a.python} in {time.monotonic() - t0:.0f} s")
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m local_eagle.kit", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("make", help="download, trim and cut the kit into per-call bundles (connected machine)")
    m.add_argument("--root", default=".gpukit", help="the kit's folder (git-ignored); default .gpukit")
    m.add_argument("--pairs", default="smollm2,gemma3", help="shipped pairs whose targets travel")
    m.add_argument("--python", default="3.12", help="the GPU machine's Python version, for the wheels")
    m.add_argument("--part-mib", type=float, default=15.0, help="size of a model part in MiB")
    m.add_argument("--budget-mib", type=float, help="MiB one call may carry beside the tree (default: measured)")
    m.add_argument("--lean", action="store_true",
                   help="carry the shipped drafters in the first call, for a lease with them moved out of the tree")
    m.set_defaults(fn=_make)

    g = sub.add_parser("gpu", help="on the GPU machine: take in a bundle, build, install, measure what is ready")
    g.add_argument("--call", type=int, help="the lease plan's call number (carries ROOT/calls/callNN)")
    g.add_argument("--bundle", help="a bundle folder to take in instead of --call's")
    g.add_argument("--root", default=".gpukit")
    g.add_argument("--home", default="/tmp/le-kit", help="where builds, models and results stay while warm")
    g.add_argument("--out", help="where the results go (default: $OUT)")
    g.add_argument("--cpu", action="store_true", help="build without CUDA (the dry run on a CPU machine)")
    g.add_argument("--no-deadline", action="store_true", help="run every ready stage, however long it takes")
    g.add_argument("--slack", type=float, default=30.0, help="seconds of the 10-minute call kept for transfers")
    g.add_argument("--only", help="comma-separated stages to run")
    g.add_argument("--force", action="store_true", help="run the stages again even if they have results")
    g.set_defaults(fn=_gpu)

    r = sub.add_parser("report", help="write the results page from the results.json files that came back")
    r.add_argument("results", nargs="+")
    r.add_argument("--out", default="docs/gpu-results.md")
    r.add_argument("--title", default="GPU results")
    r.add_argument("--command", default="python -m local_eagle.kit gpu --call N (docs/gpu.md)")
    r.set_defaults(fn=_report)

    e = sub.add_parser("emulate-image", help="dry run only: give a venv the packages the GPU image has")
    e.add_argument("python", help="the venv's python")
    e.set_defaults(fn=_emulate)

    a = ap.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())

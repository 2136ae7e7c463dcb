"""``python -m local_eagle.kit``: build and pack the kit, print the lend plan, run a call, write the results page.

Standard library only up to the point where local-eagle is installed (docs/gpu.md has the plan).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _make(a: argparse.Namespace) -> int:
    from local_eagle.kit.cuda import parse_archs
    from local_eagle.kit.make import KitError, make_kit
    from local_eagle.kit.plan import plan_from_kit, render

    try:
        kit = make_kit(Path(a.root).resolve(), REPO, a.python, parse_archs(a.arch), not a.cpu, a.jobs, lean=a.lean)
        plan = plan_from_kit(Path(a.root).resolve(), REPO)
    except (KitError, LookupError) as e:  # a failed CUDA build is one too
        print(f"kit make: {e}", file=sys.stderr)
        return 2
    b = kit.build
    if b is not None and b.archs:
        print(f"build {b.key}: {b.object_minutes} object-minutes, packed {b.packed_bytes / 2**20:.1f} MiB, "
              f"sha256 {b.packed_sha256[:16]}")  # fmt: skip
    print(render(plan))
    return 0


def _plan(a: argparse.Namespace) -> int:
    from local_eagle.kit.make import KitError
    from local_eagle.kit.plan import plan_from_kit, render

    try:
        plan = plan_from_kit(Path(a.root).resolve(), REPO)
    except KitError as e:
        print(f"kit plan: {e}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict(), indent=1) if a.json else render(plan))
    return 0 if plan.fits() else 1


def _gpu(a: argparse.Namespace) -> int:
    from local_eagle.kit.gpu import Env, run_call

    out = Path(a.out or os.environ.get("OUT") or Path(a.home) / "out")
    env = Env(repo=REPO, home=Path(a.home), out=out, cuda=not a.cpu, python=sys.executable, workers=a.workers)
    if a.seconds:
        env.deadline = env.started + a.seconds
    bundle = Path(a.bundle) if a.bundle else REPO / a.root / "call"
    only = [s for s in (a.only or "").split(",") if s]
    skip = [s for s in (a.skip or "").split(",") if s]
    run_call(env, bundle, only or None, a.retry, skip)
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


def _profile(a: argparse.Namespace) -> int:
    from local_eagle.errors import LocalEagleError
    from local_eagle.kit.profile import write_profile

    out = a.out or str(REPO / "local_eagle" / "bench" / "profiles" / f"{a.name}.json")
    try:
        path = write_profile(a.results, a.name, out, a.source)
    except LocalEagleError as e:
        print(f"kit profile: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _emulate(a: argparse.Namespace) -> int:
    from local_eagle.kit.deps import GPU_IMAGE_PACKAGES, ROOT_EXTRAS, TEST_TOOLS, closure

    roots = [("local-eagle", ROOT_EXTRAS), ("llama-cpp-python", ()), *((t, ()) for t in TEST_TOOLS)]
    pins = [p for p in closure(roots) if p.name in GPU_IMAGE_PACKAGES and p.name != "torch"]
    import subprocess

    # the image's packages at this machine's versions, then only what those versions need besides (typer 0.29
    # needs pydantic, the image's older typer does not): nothing local-eagle itself needs slips in that way
    t0 = time.monotonic()
    pip = [a.python, "-m", "pip", "install", "-q"]
    rc = subprocess.run([*pip, "--no-deps", *(p.spec for p in pins)]).returncode
    rc = rc or subprocess.run([*pip, *(p.spec for p in pins)]).returncode
    rc = rc or subprocess.run([*pip, "pytest-xdist", "execnet", "torch==2.13.0"]).returncode
    print(f"installed {len(pins) + 3} image packages into {a.python} in {time.monotonic() - t0:.0f} s")
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m local_eagle.kit", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("make", help="build llama.cpp with CUDA here (cached), pack it with the wheels into one bundle")
    m.add_argument("--root", default=".gpukit", help="the kit's folder (git-ignored); default .gpukit")
    m.add_argument("--arch", default="90", help="CUDA architectures: 90 (H100/H200, default), 89 (RTX 4090), 120")
    m.add_argument("--python", default="3.12", help="the GPU machine's Python version, for the wheels")
    m.add_argument("--jobs", type=int, help="parallel compile jobs (default: the cores)")
    m.add_argument("--cpu", action="store_true", help="pack this environment's CPU build instead (the dry run)")
    m.add_argument("--lean", action="store_true",
                   help="leave out the MMQ kernels of i-quants and FP4 types (cuBLAS runs those) when a call's bytes "
                   "run short")
    m.set_defaults(fn=_make)

    p = sub.add_parser("plan", help="the lend's calls: bytes each carries against 64 MiB, minutes against 15")
    p.add_argument("--root", default=".gpukit")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_plan)

    g = sub.add_parser("gpu", help="on the GPU machine: unpack the bundle, measure what fits before the deadline")
    g.add_argument("--bundle", help="the bundle folder (default: ROOT/call in the checkout)")
    g.add_argument("--root", default=".gpukit")
    g.add_argument("--home", default="/tmp/le-kit", help="where results stay while the machine is warm")
    g.add_argument("--out", help="where the results go (default: $OUT)")
    g.add_argument("--cpu", action="store_true", help="the dry run on a CPU machine: the tiny pair, no GPU")
    g.add_argument("--seconds", type=float, help="the call's deadline in seconds (default: none)")
    g.add_argument("--retry", action="store_true", help="run again the stages that failed, besides those not run")
    g.add_argument("--only", help="comma-separated stages to run")
    g.add_argument("--skip", help="comma-separated stages not to run (a fresh machine's call 2: what call 1 brought "
                   "back done)")
    g.add_argument("--workers", type=int, default=0, help="pytest-xdist workers for the lossless tests")
    g.set_defaults(fn=_gpu)

    r = sub.add_parser("report", help="write the results page from the results.json files that came back")
    r.add_argument("results", nargs="+")
    r.add_argument("--out", default="docs/gpu-results.md")
    r.add_argument("--title", default="GPU results")
    r.add_argument("--command", default="python -m local_eagle.kit gpu --seconds 340 (docs/gpu.md)")
    r.set_defaults(fn=_report)

    f = sub.add_parser("profile", help="a machine's cost profile (bench/profiles) from a run's results.json")
    f.add_argument("results")
    f.add_argument("--name", required=True, help="the profile's name, e.g. h200-8b-q4")
    f.add_argument("--out", help="default: local_eagle/bench/profiles/NAME.json")
    f.add_argument("--source", help="where the results are kept, for the record (default: the path given)")
    f.set_defaults(fn=_profile)

    e = sub.add_parser("emulate-image", help="dry run only: give a venv the packages the GPU image has")
    e.add_argument("python", help="the venv's python")
    e.set_defaults(fn=_emulate)

    a = ap.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())

"""On the GPU machine: unpack the prebuilt libraries, then measure in order of value, each stage on a deadline.

A lend is 15 minutes of device time with the machine's start, so the plan (``kit/plan.py``) is one
call that measures everything and a shorter second call as the margin. Each stage has a budget
(its timeout), the call a deadline, and a stage runs only if its budget fits what is left: the
call always returns its results, never a command killed with nothing. Results stay in the kit's
home (``/tmp/le-kit``) while the machine is warm; a second call runs what the first did not finish
(``--retry``: and what failed). Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from local_eagle.kit.cuda import PACKED

HOME = Path("/tmp/le-kit")
RESERVE = 10.0  # seconds kept back to write the results
REPLAY_ROUNDS = "drafters/results/decide-on-rtx4090-8b-q4-gemma3-270m.json"
# the lossless part of the suite: greedy identity of chains, trees and the adaptive policy, sampling distributions,
# the identity check and selfcheck, on tiny pairs the tests generate
LOSSLESS_TESTS = ("tests/runtime", "tests/bench", "tests/testing/test_selfcheck.py")
LOSSLESS_K = "lossless or identical or identity or near_tie or distribution or selfcheck or matches"


@dataclass
class Env:
    repo: Path
    home: Path
    out: Path
    cuda: bool
    python: str = sys.executable
    started: float = field(default_factory=time.monotonic)
    deadline: float = float("inf")
    workers: int = 0  # pytest-xdist workers; 0: the machine's cores

    @property
    def files(self) -> Path:
        return self.home / "files"

    @property
    def results(self) -> Path:
        return self.home / "results"

    @property
    def site(self) -> Path:
        return self.home / "site"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run_env(self) -> dict[str, str]:
        """What every stage's process needs: the unpacked site and the checkout on the path, CUDA's runtime found."""
        path = [str(self.site), str(self.repo)]
        extra = {"PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                 "PYTHONUNBUFFERED": "1"}  # fmt: skip
        libs = cuda_lib_dirs()
        if libs:
            extra["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(":")
        return extra


@dataclass(frozen=True)
class Stage:
    name: str
    budget: float  # seconds: its timeout, and what must be left for it to start
    needs: tuple[str, ...]  # stages that must have succeeded first
    run: Callable[[Env, float], dict]
    extra: bool = False  # outside the plan's budget: runs on what a call has left, or by --only



def log(msg: str) -> None:
    print(f"[kit {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _default_signals() -> None:
    """Stages start with default signal dispositions: a launcher in the background (``nohup``, ``&``) leaves
    SIGHUP and SIGINT ignored, which the children inherit and the suite's signal tests then fail on."""
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    os.setpgrp()  # its own group, so a timeout kills its children (pytest's workers) too


def sh(env: Env, cmd: list[str], timeout: float, cwd: Path | None = None) -> dict:
    """Run a command on a deadline, keep its output in the results, never raise: a failed stage is a result too."""
    t0 = time.monotonic()
    log("$ " + " ".join(cmd))
    e = {**os.environ, **env.run_env()}
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e,
                             preexec_fn=_default_signals, cwd=str(cwd or env.repo))  # fmt: skip
    except OSError as ex:
        return {"command": " ".join(cmd), "rc": 127, "seconds": 0.0, "stdout": "", "stderr": f"[kit] {ex}"}
    try:
        stdout, stderr = p.communicate(timeout=None if timeout == float("inf") else max(1.0, timeout))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            p.kill()
        stdout, stderr = p.communicate()
        rc = 124
        stderr = (stderr or "") + f"\n[kit] stopped at its budget of {timeout:.0f} s"
    seconds = time.monotonic() - t0
    log(f"  exit {rc} in {seconds:.1f} s")
    return {"command": " ".join(cmd), "rc": rc, "seconds": round(seconds, 2), "stdout": stdout or "",
            "stderr": (stderr or "")[-20000:]}  # fmt: skip


def _json_of(r: dict) -> dict:
    """Parse the JSON a command printed (its last line that parses), kept beside the raw output."""
    for line in reversed(r.get("stdout", "").strip().splitlines()):
        try:
            r["json"] = json.loads(line)
            break
        except ValueError:
            continue
    return r


def cuda_lib_dirs() -> list[str]:
    """Folders holding the CUDA 13 runtime the prebuilt libraries link to: the image's PyTorch wheels, a toolkit."""
    roots = [p for p in sys.path if p.endswith("site-packages")]
    roots += glob.glob("/opt/*/.venv/lib/python3*/site-packages") + glob.glob("/usr/local/lib/python3*/dist-packages")
    found: list[str] = []
    for root in roots:
        for hit in glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcudart.so.*")):
            found.append(os.path.dirname(hit))
        for hit in glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcublas.so.*")):
            found.append(os.path.dirname(hit))
    for cuda in sorted(glob.glob("/usr/local/cuda*/lib64")):
        if glob.glob(os.path.join(cuda, "libcublas.so.*")):
            found.append(cuda)
    return list(dict.fromkeys(found))


# --- taking in the bundle and installing -------------------------------------------------------


def stash(env: Env, bundle: Path) -> list[str]:
    """Copy the carried bundle into the kit's home (kept while warm, so a second call need not unpack again)."""
    taken = []
    for src in sorted(bundle.rglob("*")):
        if not src.is_file():
            continue
        dst = env.files / src.relative_to(bundle)
        if dst.is_file() and dst.stat().st_size == src.stat().st_size and src.name != "kit.json":
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        taken.append(src.relative_to(bundle).as_posix())
    return taken


def kit_info(env: Env) -> dict:
    try:
        return json.loads((env.files / "kit.json").read_text())
    except (OSError, ValueError):
        return {}


def machine(env: Env, budget: float) -> dict:
    """GPU, driver, CUDA and host facts, as the tools print them."""
    facts: dict = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "cuda_build": env.cuda}
    q = sh(env, ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm",
                 "--format=csv,noheader"], budget / 2)  # fmt: skip
    facts["gpu"] = q["stdout"].strip() if q["rc"] == 0 else None
    v = sh(env, ["nvidia-smi"], budget / 2)
    head = [ln for ln in v["stdout"].splitlines() if "CUDA Version" in ln]
    facts["driver_line"] = head[0].strip(" |") if head else None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    facts["cuda_libs"] = cuda_lib_dirs()
    return {"rc": 0, "seconds": q["seconds"] + v["seconds"], "facts": facts}


def install(env: Env, budget: float) -> dict:
    """Unpack the prebuilt llama-cpp-python and the carried wheels into the home's site: nothing is built."""
    t0 = time.monotonic()
    packed = env.files / PACKED
    if not packed.is_file():
        return {"rc": 1, "seconds": 0.0, "stderr": f"[kit] {packed}: not carried (make the kit, carry its bundle)"}
    shutil.rmtree(env.site, ignore_errors=True)
    env.site.mkdir(parents=True)
    with tarfile.open(packed, "r:xz") as t:
        t.extractall(env.site, filter="data")
    steps = []
    wheels = sorted((env.files / "wheels").glob("*.whl"))
    # llguidance (structured outputs) is a newer glibc's wheel: an image too old for it still measures the rest
    optional = [w for w in wheels if w.name.lower().startswith("llguidance-")]
    pip = [env.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target"]
    if core := [w for w in wheels if w not in optional]:
        steps.append(sh(env, [*pip, str(env.site), *map(str, core)], budget - (time.monotonic() - t0)))
    for w in optional:
        step = sh(env, [*pip, str(env.site), str(w)], budget - (time.monotonic() - t0))
        steps.append({**step, "rc": 0, "optional_rc": step["rc"]})
    # what the loader will not find, named before the import check fails on it
    steps.append(sh(env, ["bash", "-c", f"ldd {env.site}/llama_cpp/lib/*.so* | grep -B0 'not found' || true"], 20))
    check = ("import llama_cpp, gguf, local_eagle.cli.app as a; from local_eagle.llamacpp import bindings; "
             "print(llama_cpp.__file__, llama_cpp.__version__)")  # fmt: skip
    steps.append(sh(env, [env.python, "-c", check], max(10.0, budget - (time.monotonic() - t0))))
    rc = next((s["rc"] for s in steps if s["rc"]), 0)
    return {"rc": rc, "seconds": round(time.monotonic() - t0, 2), "steps": steps,
            "build": kit_info(env).get("build")}  # fmt: skip


# --- measuring ---------------------------------------------------------------------------------


def _cli(env: Env, *args: str) -> list[str]:
    return [env.python, "-m", "local_eagle", *args]


def doctor(env: Env, budget: float) -> dict:
    return _json_of(sh(env, _cli(env, "doctor", "--json"), budget))


def selfcheck(env: Env, budget: float) -> dict:
    return _json_of(sh(env, _cli(env, "selfcheck", "--json"), budget))


def lossless(env: Env, budget: float) -> dict:
    """The suite's lossless tests on this build, spread over the machine's cores."""
    workers = env.workers or min(16, os.cpu_count() or 2)
    r = sh(env, [env.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow",
                 "-n", str(workers), "-k", LOSSLESS_K, *LOSSLESS_TESTS], budget)  # fmt: skip
    lines = r["stdout"].strip().splitlines()
    r["summary"] = lines[-1] if lines else ""
    r["stdout"] = "\n".join(lines[-120:])
    return r


def _pair(env: Env) -> tuple[str, str, str]:
    d = env.home / "pair8b"
    return str(d / "target-q4_k_m.gguf"), str(d / "drafter-f16.gguf"), str(d / "prompts.jsonl")


def pair8b(env: Env, budget: float) -> dict:
    target, drafter, _ = _pair(env)
    if Path(target).is_file() and Path(drafter).is_file():
        return {"rc": 0, "seconds": 0.0, "cached": True}
    tiny = [] if env.cuda else ["--tiny"]  # written in ~15 s here too, but an 8B bench takes hours on 2 cores
    r = _json_of(sh(env, [env.python, "-m", "local_eagle.bench.pair", str(env.home / "pair8b"), *tiny], budget))
    r["shape"] = "tiny (CPU dry run)" if tiny else "Llama-3.1-8B Q4_K_M + EAGLE3-LLaMA3.1-Instruct-8B f16"
    return r


def costs8b(env: Env, budget: float) -> dict:
    target, drafter, _ = _pair(env)
    r = _json_of(sh(env, [env.python, "-m", "local_eagle.kit.measure", "costs", target, drafter, "--repeats", "5"],
                    budget))  # fmt: skip
    if r.get("json"):
        (env.home / "costs8b.json").write_text(json.dumps(r["json"]))
    return r


def fit8b(env: Env, budget: float) -> dict:
    target, drafter, _ = _pair(env)
    gpu = [] if env.cuda else ["--gpu", "h100"]  # a CPU machine has no GPU memory to read
    return _json_of(sh(env, _cli(env, "fit", "-m", target, "-d", drafter, "--ctx", "8192", *gpu, "--measure",
                                 "--json"), budget))  # fmt: skip


def bench8b(env: Env, budget: float) -> dict:
    """The engine itself on the 8B-shaped pair: greedy identity with the target alone (lossless on CUDA at 8B
    shapes), target-alone speed and host time per round. Random weights accept ~nothing: costs, not speedups."""
    target, drafter, prompts = _pair(env)
    n, limit = ("48", "2") if env.cuda else ("16", "1")
    return _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts", prompts, "-n", n, "--limit",
                                 limit, "--draft-max", "auto", "--draft-max", "3", "--tree", "15", "--tree", "63",
                                 "--fixed", "--json", "--rounds"), budget))  # fmt: skip


def replay8b(env: Env, budget: float) -> dict:
    """Every drafter and target call of the Gemma pair's recorded rounds run for real on the 8B-shaped pair, only
    accept/reject from the record: end-to-end speeds of the default policy, chains and trees, and the projection's
    error against them."""
    target, drafter, _ = _pair(env)
    costs = env.home / "costs8b.json"
    rounds = "60" if env.cuda else "12"
    cmd = [env.python, "-m", "local_eagle.kit.measure", "replay", target, drafter, str(env.repo / REPLAY_ROUNDS),
           "--max-rounds", rounds, "--seconds", str(max(5, int(budget - 10)))]  # fmt: skip
    if costs.is_file():
        cmd += ["--costs", str(costs)]
    return _json_of(sh(env, cmd, budget))


def conc8b(env: Env, budget: float) -> dict:
    """Many requests at once on the 8B-shaped pair: the batching gain of one target call for every sequence (no
    drafting), and the default policy's against it, identity checked per request."""
    target, drafter, _ = _pair(env)
    n, limit, conc = ("32", "16", "1,4,16") if env.cuda else ("8", "4", "1,4")
    return _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts",
                                 str(env.repo / "drafters/prompts/humaneval-heldout.jsonl"), "-n", n, "--limit",
                                 limit, "--concurrency", conc, "--json"), budget))  # fmt: skip


def grammar8b(env: Env, budget: float) -> dict:
    """Structured outputs on the 8B-shaped pair: the target alone under each prompt's JSON schema, grammar-aware
    drafting (forced tokens drafted free) and unconstrained drafting, every output checked against its schema."""
    target, drafter, _ = _pair(env)
    n, limit = ("64", "4") if env.cuda else ("16", "2")
    return _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts",
                                 str(env.repo / "drafters/prompts/json-heldout.jsonl"), "-n", n, "--limit", limit,
                                 "--json"), budget))  # fmt: skip


# in order of value (the issue's): the build works, lossless on CUDA, the cost curve, end to end
STAGES: list[Stage] = [
    Stage("machine", 10, (), machine),
    Stage("install", 30, (), install),
    Stage("doctor", 15, ("install",), doctor),
    Stage("selfcheck", 30, ("install",), selfcheck),
    Stage("lossless", 75, ("install",), lossless),
    Stage("pair8b", 25, ("install",), pair8b),
    Stage("costs8b", 40, ("pair8b",), costs8b),
    Stage("fit8b", 20, ("pair8b",), fit8b),
    Stage("bench8b", 45, ("pair8b",), bench8b),
    Stage("replay8b", 40, ("pair8b",), replay8b),
    Stage("conc8b", 60, ("pair8b",), conc8b, extra=True),
    Stage("grammar8b", 40, ("pair8b",), grammar8b, extra=True),
]
BUDGET = sum(s.budget for s in STAGES if not s.extra)


def _result(env: Env, name: str) -> dict | None:
    try:
        return json.loads((env.results / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def run_call(env: Env, bundle: Path | None, only: list[str] | None = None, retry: bool = False,
             skip: list[str] | None = None) -> list[str]:  # fmt: skip
    """Take in ``bundle``, run every stage not done yet (``retry``: and those that failed) whose budget fits."""
    for d in (env.home, env.files, env.results, env.out):
        d.mkdir(parents=True, exist_ok=True)
    if bundle is not None:
        if not bundle.is_dir():
            raise SystemExit(f"kit: {bundle}: no such bundle (did this call carry it? make the kit first)")
        log(f"took in {len(stash(env, bundle))} files from {bundle}")
    ran = []
    for stage in STAGES:
        if (only and stage.name not in only) or (skip and stage.name in skip):
            continue
        prior = _result(env, stage.name)
        if prior is not None and (prior.get("rc") == 0 or not retry):
            continue
        if any((_result(env, n) or {}).get("rc") != 0 for n in stage.needs):
            continue
        room = env.left() - RESERVE
        if stage.budget > room:
            log(f"{stage.name}: its {stage.budget:.0f} s do not fit the {room:.0f} s left; next call")
            continue
        log(f"stage {stage.name} (budget {stage.budget:.0f} s, {room:.0f} s left)")
        t0 = time.monotonic()
        try:
            result = stage.run(env, stage.budget)
        except Exception as e:  # a stage's own bug must not lose the others' results
            result = {"rc": 1, "stderr": f"[kit] {type(e).__name__}: {e}"}
        result.update(stage=stage.name, budget=stage.budget, wall=round(time.monotonic() - t0, 2),
                      at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # fmt: skip
        (env.results / f"{stage.name}.json").write_text(json.dumps(result, indent=1))
        ran.append(stage.name)
        write_out(env)
    write_out(env)
    return ran


def write_out(env: Env) -> None:
    """Everything measured so far, as one JSON (the docs page is made from it) and a status line per stage."""
    results = {}
    for f in sorted(env.results.glob("*.json")):
        try:
            results[f.stem] = json.loads(f.read_text())
        except ValueError:
            continue
    waiting = [s.name for s in STAGES if s.name not in results]
    info = kit_info(env)
    blob = {"kit": {k: info.get(k) for k in ("made", "python", "build", "bundle_bytes", "tree_bytes")},
            "cuda_build": env.cuda, "results": results, "waiting": waiting,
            "budgets": {s.name: s.budget for s in STAGES}}  # fmt: skip
    tmp = env.out / "results.json.tmp"
    tmp.write_text(json.dumps(blob, indent=1))
    os.replace(tmp, env.out / "results.json")
    lines = [f"{name}: rc {r.get('rc')} in {r.get('wall', r.get('seconds'))} s of {r.get('budget', '-')}"
             for name, r in results.items()]  # fmt: skip
    lines += [f"{name}: not run" for name in waiting]
    (env.out / "status.txt").write_text("\n".join(lines) + "\n")
    try:
        from local_eagle.kit.report import render

        title = "GPU results" if env.cuda else "GPU kit: CPU dry run"
        (env.out / "summary.md").write_text(render(blob, title, "python -m local_eagle.kit gpu (docs/gpu.md)"))
    except Exception as e:  # the page is a convenience; the JSON is the result
        log(f"summary.md not written: {type(e).__name__}: {e}")

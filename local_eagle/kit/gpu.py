"""On the GPU machine: unpack the prebuilt libraries, then measure in order of value, each stage on a deadline.

A lend is 15 minutes of device time with the machine's start, so the plan (``kit/plan.py``) is two
calls: the first measures (every stage of call 1, then the lossless tests if they still fit), the
second (``--retry``) runs the lossless tests, which need a call of their own on the GPU, then what
the first left or lost. Each stage has a budget (its timeout), the call a deadline, and a stage
runs only if its budget fits what is left: the call always returns its results, never a command
killed with nothing. Results stay in the kit's home (``/tmp/le-kit``) while the machine is warm.
Standard library only: it runs before anything is installed.
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
RESERVE = 5.0  # seconds kept back to write the results (under 1 s on the H100 and on the 2-core VM)
REPLAY_ROUNDS = "drafters/results/decide-on-rtx4090-8b-q4-gemma3-270m.json"
# the lossless part of the suite: greedy identity of chains, trees and the adaptive policy, sampling distributions,
# the identity check and selfcheck, on tiny pairs the tests generate. The MTP families' tests (test_mtp*.py, 20 more
# tests of the same kind, sampling ones among them) are left to the CPU suite: on the H100 the EAGLE selection alone
# filled the 210 s it has, and they would push it past (their test files' names carry "mtp", which -k matches)
LOSSLESS_TESTS = ("tests/runtime", "tests/bench", "tests/testing/test_selfcheck.py")
LOSSLESS_K = "(lossless or identical or identity or near_tie or distribution or selfcheck or matches) and not mtp"
# the selection's wall on the H100 (16 workers sharing the GPU, each test thousands of tiny decodes at a CUDA call's
# fixed latency): 201 s, bounded by single tests of 130-150 s (docs/gpu-runs/2026-11-26-h100/call2-lossless-pytest.txt)
LOSSLESS_BUDGET = 210.0
# a fresh machine's call 2 installs first and then lacks those 210 s: the short selection leaves out the tests measured
# over 120 s there (the sampling distributions of chains, the adaptive policy, trees and grammars; the 30-prompt greedy
# run on the 3.1 pair, whose 3-token run stays), ~100 s the longest left
LOSSLESS_SHORT_BUDGET = 180.0
LOSSLESS_SLOW = (
    "tests/runtime/test_grammar_loop.py::test_sampling_under_a_grammar_is_the_constrained_target_distribution",
    "tests/runtime/test_tree_sampling.py::test_tree_sampling_matches_the_target_distribution",
    "tests/runtime/test_sampling.py::test_speculative_sampling_matches_target_distribution",
    "tests/runtime/test_sampling.py::test_adaptive_speculative_sampling_matches_target_distribution",
    "tests/runtime/test_engine.py::test_greedy_is_lossless_30_prompts[noisy-3.1]",
)


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
    call: int = 1  # the plan's call for it: 1 measures; 2 (--retry) runs its stages first, each with what it needs
    short: float = 0.0  # a reduced run's budget, for the last call when the full one does not fit (0: none)


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


def _xdist_steals() -> bool:
    """pytest-xdist 3.2+ lets an idle worker take a busy one's queued tests: the default hands each worker two tests
    up front, so two long ones can share a worker while others idle (the H100's 201 s: 133 s + 40 s on one worker)."""
    from importlib import metadata

    try:
        major, minor = (int(x) for x in metadata.version("pytest-xdist").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (3, 2)


def lossless(env: Env, budget: float) -> dict:
    """The suite's lossless tests on this build, spread over the machine's cores; given less than their full budget
    (a fresh machine's last call), the short selection. Each test's outcome and time is printed, so a run stopped
    at its budget still says what passed."""
    workers = env.workers or min(16, os.cpu_count() or 2)
    short = budget < LOSSLESS_BUDGET
    left_out = [a for t in LOSSLESS_SLOW for a in ("--deselect", t)] if short else []
    dist = ["--dist", "worksteal"] if _xdist_steals() else []
    r = sh(env, [env.python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow",
                 "-n", str(workers), *dist, "--durations", "40", "-k", LOSSLESS_K, *left_out, *LOSSLESS_TESTS],
           budget)  # fmt: skip
    lines = r["stdout"].strip().splitlines()
    r["summary"] = lines[-1].strip("= ") if lines else ""  # -v frames it in '='
    r["stdout"] = "\n".join(lines[-200:])
    r["selection"] = "short" if short else "full"
    r["left_out"] = list(LOSSLESS_SLOW) if short else []
    return r


def _pair(env: Env) -> tuple[str, str, str]:
    d = env.home / "pair8b"
    return str(d / "target-q4_k_m.gguf"), str(d / "drafter-f16.gguf"), str(d / "prompts.jsonl")


def _q8_drafter(env: Env) -> Path:
    return env.home / "pair8b" / "drafter-q8_0.gguf"


def pair8b(env: Env, budget: float) -> dict:
    target, drafter, _ = _pair(env)
    if Path(target).is_file() and Path(drafter).is_file() and _q8_drafter(env).is_file():
        return {"rc": 0, "seconds": 0.0, "cached": True}
    tiny = [] if env.cuda else ["--tiny"]  # written in ~15 s here too, but an 8B bench takes hours on 2 cores
    r = _json_of(sh(env, [env.python, "-m", "local_eagle.bench.pair", str(env.home / "pair8b"), *tiny], budget))
    r["shape"] = "tiny (CPU dry run)" if tiny else "Llama-3.1-8B Q4_K_M + EAGLE3-LLaMA3.1-Instruct-8B f16"
    return r


SAMPLED_MIN_SECONDS = 6  # a process loading the 8B target (~3 s warm on the H100) and timing 5 shapes


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:200] if lines else "no output"


def costs8b(env: Env, budget: float) -> dict:
    """The cost curve by rows, the drafter's at f16 and at q8_0 timed in the same loop (which precision to run);
    then, in a process of its own, the verify with llama.cpp's backend greedy sampler against its logits read."""
    target, drafter, _ = _pair(env)
    r = _json_of(sh(env, [env.python, "-m", "local_eagle.kit.measure", "costs", target, drafter, "--other",
                          str(_q8_drafter(env)), "--repeats", "5", "--seconds", str(max(5, int(budget - 10)))],
                    budget))  # fmt: skip
    if r.get("json"):
        (env.home / "costs8b.json").write_text(json.dumps(r["json"]))
        left = budget - r["seconds"] - 1
        # llama.cpp's backend sampling is experimental: its process may abort, so it runs after the curve is safe
        if left >= SAMPLED_MIN_SECONDS:
            s = _json_of(sh(env, [env.python, "-m", "local_eagle.kit.measure", "sampled", target], left))
            r["sampled"] = {k: s.get(k) for k in ("command", "rc", "seconds")}
            got = s.get("json") if isinstance(s.get("json"), dict) else {
                "sampled_note": f"its process ended with code {s.get('rc')}: {_last_line(s.get('stderr', ''))}"}
        else:
            got = {"sampled_note": f"{left:.0f} s of the stage's budget were left, fewer than {SAMPLED_MIN_SECONDS}"}
        r["json"].update({k: got[k] for k in ("sampled_ms", "plain_ms", "sampled_agree", "sampled_note") if k in got})
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
    # 128 tokens: one-off costs (the first drafter call, a graph re-reserve when native capture switches on between
    # the target alone and a speculative run) would weigh on 48 tokens' per-round figures; 12.3 s at 48 on the H100
    n, limit = ("128", "2") if env.cuda else ("16", "1")
    return _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts", prompts, "-n", n, "--limit",
                                 limit, "--draft-max", "auto", "--draft-max", "3", "--tree", "15", "--fixed", "--json",
                                 "--rounds"), budget))  # fmt: skip


ARRANGED_PROMPTS = "drafters/prompts/humaneval-heldout.jsonl"


def engine8b(env: Env, budget: float) -> dict:
    """The engine itself at realistic acceptance on the 8B-shaped pair (``bench --arranged``): every call real, the
    drafter's rows arranged so the target's token sits at the ranks the demo pair's drafter gave on held-out code.
    The default policy decides on the costs it measures here; the rounds go to the replay."""
    target, drafter, _ = _pair(env)
    n, limit = ("64", "4") if env.cuda else ("16", "2")
    r = _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts", str(env.repo / ARRANGED_PROMPTS),
                              "-n", n, "--limit", limit, "--arranged", "demo", "--draft-max", "auto", "--draft-max",
                              "2", "--draft-max", "3", "--draft-max", "4", "--tree", "15", "--tree", "63", "--fixed",
                              "--json", "--rounds"), budget))  # fmt: skip
    if isinstance(r.get("json"), list) and r["json"]:
        (env.home / "engine8b-rounds.json").write_text(json.dumps(r["json"]))
    return r


def replay8b(env: Env, budget: float) -> dict:
    """Every drafter and target call of the Gemma pair's recorded rounds run for real on the 8B-shaped pair, only
    accept/reject from the record: end-to-end speeds of the default policy, chains and trees, and the projection's
    error against them."""
    target, drafter, _ = _pair(env)
    costs = env.home / "costs8b.json"
    engine = env.home / "engine8b-rounds.json"
    recorded = engine if engine.is_file() else env.repo / REPLAY_ROUNDS
    rounds = "60" if env.cuda else "12"
    cmd = [env.python, "-m", "local_eagle.kit.measure", "replay", target, drafter, str(recorded),
           "--max-rounds", rounds, "--seconds", str(max(5, int(budget - 10)))]  # fmt: skip
    if costs.is_file():
        cmd += ["--costs", str(costs)]
    r = _json_of(sh(env, cmd, budget))
    r["recorded"] = "engine8b" if recorded == engine else REPLAY_ROUNDS
    return r


def conc8b(env: Env, budget: float) -> dict:
    """Many requests at once on the 8B-shaped pair: the batching gain of one target call for every sequence (no
    drafting), and the default policy's against it, identity checked per request."""
    target, drafter, _ = _pair(env)
    n, limit, conc = ("32", "16", "1,4,16") if env.cuda else ("8", "4", "1,4")
    return _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts",
                                 str(env.repo / ARRANGED_PROMPTS), "-n", n, "--limit", limit, "--concurrency", conc,
                                 "--arranged", "demo", "--draft-max", "auto", "--draft-max", "3", "--fixed", "--json"),
                       budget))  # fmt: skip


def grammar8b(env: Env, budget: float) -> dict:
    """Structured outputs on the 8B-shaped pair: the target alone under each prompt's JSON schema, grammar-aware
    drafting (forced tokens drafted free) and unconstrained drafting, every output checked against its schema."""
    target, drafter, _ = _pair(env)
    n, limit = ("64", "4") if env.cuda else ("16", "2")
    return _json_of(sh(env, _cli(env, "bench", "-m", target, "-d", drafter, "--prompts",
                                 str(env.repo / "drafters/prompts/json-heldout.jsonl"), "-n", n, "--limit", limit,
                                 "--json"), budget))  # fmt: skip


# Call 1 measures, in order of value: the build works, the cost curve, end to end, many requests, grammars; then the
# lossless tests if their 210 s still fit, else call 2 runs them. Budgets: about 3-5x each stage's time on the first
# lend's H100 (docs/gpu-runs/2026-11-26-h100; machine's 10 s a floor), measured s in the comments; conc8b and
# grammar8b did not complete there
STAGES: list[Stage] = [
    Stage("machine", 10, (), machine),  # 0.1
    Stage("install", 20, (), install),  # 4.7 (14.9 on the 2-core VM's cold dry run)
    Stage("doctor", 10, ("install",), doctor),  # 2.1
    Stage("selfcheck", 15, ("install",), selfcheck),  # 8.2
    Stage("pair8b", 20, ("install",), pair8b),  # 3.3 tiled; margins drawn whole: 28.5 s vs 34.9 tiled on 2 cores
    Stage("costs8b", 25, ("pair8b",), costs8b),  # 4.6; its own deadline is the budget less 10 s
    Stage("fit8b", 10, ("pair8b",), fit8b),  # 2.4
    Stage("bench8b", 45, ("pair8b",), bench8b),  # 12.3 at 48 tokens with a tree of 63 more; ~20 s expected at 128
    Stage("engine8b", 45, ("pair8b",), engine8b),  # new: 3 engines' loads, 6 settings x 4 prompts x 64 tokens
    Stage("replay8b", 30, ("pair8b",), replay8b),  # 10.2; its own deadline is the budget less 10 s
    Stage("conc8b", 80, ("pair8b",), conc8b),  # 3 8B engines, 16 prompts x 32 tokens at 1, 4, 16, a 20 s curve
    Stage("grammar8b", 25, ("pair8b",), grammar8b),  # failed at 5.6 s (a tokenizer bug, fixed); ~15 s expected
    Stage("lossless", LOSSLESS_BUDGET, ("install",), lossless, call=2, short=LOSSLESS_SHORT_BUDGET),  # 201
]


def _result(env: Env, name: str) -> dict | None:
    try:
        return json.loads((env.results / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def call_order(retry: bool, fresh: bool, only: list[str] | None = None) -> list[Stage]:
    """The stages in the order this call tries them, each after what it needs. Call 1: the plan's order. A retry
    (call 2): the stages the plan gives to call 2 first, then, on a warm machine (whose results say what call 1
    left or lost), the rest; on a fresh one only call 2's, since call 1's results came back with call 1."""
    first = [s for s in STAGES if s.call == 2] if retry else []
    rest = [] if retry and fresh else [s for s in STAGES if s.call != 2 or not retry]
    by_name = {s.name: s for s in STAGES}
    out: dict[str, Stage] = {}

    def add(stage: Stage) -> None:
        for need in stage.needs:
            if need in by_name and need not in out:
                add(by_name[need])
        out.setdefault(stage.name, stage)

    for stage in first + rest:
        if not only or stage.name in only:
            add(stage)
    return list(out.values())


def run_call(env: Env, bundle: Path | None, only: list[str] | None = None, retry: bool = False,
             skip: list[str] | None = None) -> list[str]:  # fmt: skip
    """Take in ``bundle``, run every stage not done yet (``retry``: and those that failed) whose budget fits, in
    ``call_order``; ``only`` pulls in what its stages need and this machine has not done."""
    for d in (env.home, env.files, env.results, env.out):
        d.mkdir(parents=True, exist_ok=True)
    fresh = not any(env.results.glob("*.json"))
    if bundle is not None:
        if not bundle.is_dir():
            raise SystemExit(f"kit: {bundle}: no such bundle (did this call carry it? make the kit first)")
        log(f"took in {len(stash(env, bundle))} files from {bundle}")
    ran = []
    for stage in call_order(retry, fresh, only):
        if skip and stage.name in skip:
            continue
        prior = _result(env, stage.name)
        if prior is not None and (prior.get("rc") == 0 or not retry):
            continue
        if any((_result(env, n) or {}).get("rc") != 0 for n in stage.needs):
            continue
        room = env.left() - RESERVE
        given = stage.budget
        if given > room and retry and 0 < stage.short <= room:
            log(f"{stage.name}: its {given:.0f} s do not fit the {room:.0f} s left; short run: {stage.short:.0f} s")
            given = stage.short
        if given > room:
            log(f"{stage.name}: its {given:.0f} s do not fit the {room:.0f} s left; next call")
            continue
        log(f"stage {stage.name} (budget {given:.0f} s, {room:.0f} s left)")
        t0 = time.monotonic()
        try:
            result = stage.run(env, given)
        except Exception as e:  # a stage's own bug must not lose the others' results
            result = {"rc": 1, "stderr": f"[kit] {type(e).__name__}: {e}"}
        result.update(stage=stage.name, budget=given, wall=round(time.monotonic() - t0, 2),
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
             + (" (short selection)" if r.get("selection") == "short" else "") for name, r in results.items()]
    lines += [f"{name}: not run" for name in waiting]
    (env.out / "status.txt").write_text("\n".join(lines) + "\n")
    try:
        from local_eagle.kit.report import render

        title = "GPU results" if env.cuda else "GPU kit: CPU dry run"
        (env.out / "summary.md").write_text(render(blob, title, "python -m local_eagle.kit gpu (docs/gpu.md)"))
    except Exception as e:  # the page is a convenience; the JSON is the result
        log(f"summary.md not written: {type(e).__name__}: {e}")

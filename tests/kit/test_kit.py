"""The GPU kit's logic on small inputs: the CUDA build's helpers and cache, the bundle, the plan, the call runner,
the page. The CUDA build itself (50 CPU-minutes) is made by ``kit make`` and recorded, not run by the suite."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from local_eagle.kit import cuda, gpu, plan, report
from local_eagle.kit.deps import GPU_IMAGE_PACKAGES, closure, wheels_needed
from local_eagle.kit.make import CALL_LIMIT, KitError, make_kit, pack_installed

MIB = 1 << 20

CUDA_H = """
#define cuMemGetInfo cuMemGetInfo_v2
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total);
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size);
"""


def test_the_driver_stub_defines_every_entry_point_and_the_names_its_macros_map_to() -> None:
    src = cuda.stub_source(CUDA_H)
    for name in ("cuInit", "cuMemGetInfo", "cuMemGetInfo_v2", "cuMemCreate"):
        assert f"int {name}(void)" in src
    with pytest.raises(cuda.CudaBuildError, match="not the CUDA driver API header"):
        cuda.stub_source("int foo(void);")


def test_the_stub_links_as_libcuda_so_1(tmp_path: Path) -> None:
    """What CMake links ggml-cuda against: a shared object with libcuda's soname, so the driver's loads at run time."""
    root = tmp_path / "cu13"
    (root / "include").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "include" / "cuda.h").write_text(CUDA_H)
    (root / "lib" / "libcudart.so.13").write_bytes(b"x")
    cuda._finish_toolkit(root)
    assert (root / "lib64").resolve() == (root / "lib").resolve()
    assert (root / "lib" / "libcudart.so").resolve().name == "libcudart.so.13"
    dyn = subprocess.run(["readelf", "-d", str(root / "lib" / "stubs" / "libcuda.so")], capture_output=True, text=True)
    if dyn.returncode == 0:
        assert "libcuda.so.1" in dyn.stdout


@pytest.mark.parametrize("text,want", [("90", ("90",)), ("sm_89,90", ("89", "90")), ("sm_120a", ("120a",)),
                                       ("90;90", ("90",))])  # fmt: skip
def test_architectures_are_cmake_numbers(text: str, want: tuple[str, ...]) -> None:
    assert cuda.parse_archs(text) == want


def test_a_bad_architecture_is_one_line() -> None:
    with pytest.raises(cuda.CudaBuildError, match="expected CUDA architectures like 90"):
        cuda.parse_archs("hopper")


def test_the_cmake_arguments_build_cuda_for_the_named_gpus_and_a_portable_cpu_part(tmp_path: Path) -> None:
    tk = cuda.Toolkit(tmp_path / "cu13", "13.0.88")
    args = cuda.cmake_args(tk, ("89", "90"))
    assert "-DGGML_CUDA=ON" in args and "-DCMAKE_CUDA_ARCHITECTURES=89-real;90-real" in args
    assert f"-DCMAKE_CUDA_COMPILER={tk.nvcc}" in args and f"-DCUDAToolkit_ROOT={tk.root}" in args
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    assert cuda.build_key("0.3.36", "13.0.88", ("90",)) == "llama-cpp-python-0.3.36-cuda13.0.88-sm_90"


def test_build_minutes_come_from_ninjas_log_with_a_resumed_steps_last_entry(tmp_path: Path) -> None:
    (tmp_path / ".ninja_log").write_text("# ninja log v6\n0\t60000\t0\ta.cu.o\tx\n0\t30000\t0\tb.c.o\ty\n"
                                         "100\t120100\t0\ta.cu.o\tz\n")  # fmt: skip
    assert cuda.ninja_minutes(tmp_path) == (2.5, 2, 1)
    assert cuda.ninja_minutes(tmp_path / "none") == (0.0, 0, 0)


MMQ_CU = """#include "mmq.cuh"

static void ggml_cuda_mul_mat_q_switch_type(ggml_backend_cuda_context & ctx, const mmq_args & args) {
    switch (args.type_x) {
        case GGML_TYPE_Q4_0:
            mul_mat_q_case<GGML_TYPE_Q4_0>(ctx, args, stream);
            break;
// -----------------------------------------------------------------------
        case GGML_TYPE_Q4_K:
            mul_mat_q_case<GGML_TYPE_Q4_K>(ctx, args, stream);
            break;
        case GGML_TYPE_IQ4_NL:
            mul_mat_q_case<GGML_TYPE_IQ4_NL>(ctx, args, stream);
            break;
// -----------------------------------------------------------------------
        case GGML_TYPE_MXFP4:
            if (prec_src1 == GGML_PREC_Q4) {
                mul_mat_q_case<GGML_TYPE_MXFP4, GGML_PREC_Q4>(ctx, args, stream);
                break;
            }
            mul_mat_q_case<GGML_TYPE_MXFP4>(ctx, args, stream);
            break;
        default:
            GGML_ABORT("fatal error");
            break;
    }
}

bool ggml_cuda_should_use_mmq(enum ggml_type type, int cc, int64_t ne11, int64_t n_experts) {
    switch (type) {
        case GGML_TYPE_Q4_0:
// -------------------------------------------------
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_IQ4_NL:
// -------------------------------------------------
        case GGML_TYPE_MXFP4:
            mmq_supported = true;
            break;
        default:
            mmq_supported = false;
            break;
    }
}
"""


def test_the_mmq_trim_leaves_out_dropped_types_kernels_and_keeps_the_k_quants(tmp_path: Path) -> None:
    d = tmp_path / "vendor" / "llama.cpp" / "ggml" / "src" / "ggml-cuda"
    (d / "template-instances").mkdir(parents=True)
    (d / "mmq.cu").write_text(MMQ_CU)
    for t in ("q4_0", "q4_k", "iq4_nl", "mxfp4"):
        (d / "template-instances" / f"mmq-instance-{t}.cu").write_text("//")
    assert cuda.trim_mmq(tmp_path, ("IQ4_NL", "MXFP4")) == ["mmq-instance-iq4_nl.cu", "mmq-instance-mxfp4.cu"]
    text = (d / "mmq.cu").read_text()
    assert "IQ4_NL" not in text and "MXFP4" not in text
    assert "mul_mat_q_case<GGML_TYPE_Q4_K>" in text and text.count("mmq_supported = true;") == 1
    assert text.split("bool ggml_cuda_should_use_mmq")[1].count("case GGML_TYPE_") == 2
    assert sorted(p.name for p in (d / "template-instances").iterdir()) == [
        "mmq-instance-q4_0.cu",
        "mmq-instance-q4_k.cu",
    ]
    assert cuda.trim_mmq(tmp_path, ("IQ4_NL", "MXFP4")) == [] and (d / "mmq.cu").read_text() == text  # idempotent
    (d / "mmq.cu").write_text("int main() {}")
    with pytest.raises(cuda.CudaBuildError, match="not the expected layout"):
        cuda.trim_mmq(tmp_path, ("IQ4_NL",))


def test_a_trimmed_source_is_restored_from_its_sdist_and_an_untouched_one_is_left_alone(tmp_path: Path) -> None:
    cuda_dir = "vendor/llama.cpp/ggml/src/ggml-cuda"
    files = {
        f"{cuda_dir}/mmq.cu": MMQ_CU,
        f"{cuda_dir}/template-instances/mmq-instance-iq4_nl.cu": "//",
        f"{cuda_dir}/template-instances/mmq-instance-q4_k.cu": "//",
        f"{cuda_dir}/other.cu": "// o",
    }
    sdist = tmp_path / "pkg-1.tar.gz"
    with tarfile.open(sdist, "w:gz") as t:
        for rel, text in files.items():
            data = text.encode()
            ti = tarfile.TarInfo(f"pkg-1/{rel}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    src = tmp_path / "src"
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    assert cuda.restore_mmq(src, sdist) == []  # nothing differs: nothing rewritten, nothing rebuilds
    cuda.trim_mmq(src, ("IQ4_NL",))
    assert sorted(cuda.restore_mmq(src, sdist)) == ["mmq.cu", "template-instances/mmq-instance-iq4_nl.cu"]
    assert all((src / rel).read_text() == text for rel, text in files.items())


def _wheel(tmp_path: Path) -> Path:
    w = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("llama_cpp/__init__.py", "__version__ = '0.3.36'\n")
        for name in ("llama_cpp/lib/libggml-cuda.so", "llama_cpp/lib/libggml-cuda.so.0", "lib/libggml-cuda.so"):
            z.writestr(name, b"\x7fELF not really" * 100)  # zip has no links: one library, three names
        z.writestr("include/ggml.h", "//")
        z.writestr("llama_cpp_python-0.3.36.dist-info/METADATA", "Name: llama_cpp_python\nVersion: 0.3.36\n")
    return w


def test_a_packed_wheel_unpacks_to_the_same_files_with_its_libraries_recorded(tmp_path: Path) -> None:
    out = tmp_path / cuda.PACKED
    libs = cuda.pack_wheel(_wheel(tmp_path), out, strip=False, extras={"llama_cpp/lib/libgomp.so.1": b"gomp"})
    data = b"\x7fELF not really" * 100
    assert libs[0].bytes == len(data) and libs[0].sha256 == hashlib.sha256(data).hexdigest()
    assert [lib.name for lib in libs] == ["llama_cpp/lib/libggml-cuda.so.0", "llama_cpp/lib/libgomp.so.1"]
    with tarfile.open(out, "r:xz") as t:  # neither the headers nor the top-level lib/ copy travel
        assert sorted(t.getnames()) == ["llama_cpp/__init__.py", "llama_cpp/lib/libggml-cuda.so",
                                        "llama_cpp/lib/libggml-cuda.so.0", "llama_cpp/lib/libgomp.so.1",
                                        "llama_cpp_python-0.3.36.dist-info/METADATA"]  # fmt: skip
        assert t.getmember("llama_cpp/lib/libggml-cuda.so").linkname == "libggml-cuda.so.0"
        t.extractall(tmp_path / "site", filter="data")
    assert (tmp_path / "site" / "llama_cpp" / "lib" / "libggml-cuda.so").read_bytes() == data


def _fake_toolkit(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cuda, "fetch_toolkit", lambda cache, log=print: cuda.Toolkit(tmp_path / "tk", "13.0.88"))


def test_a_finished_build_is_found_in_the_cache_and_not_built_again(tmp_path: Path, monkeypatch) -> None:
    _fake_toolkit(monkeypatch, tmp_path)
    folder = tmp_path / "cache" / "builds" / "llama-cpp-python-0.3.36-cuda13.0.88-sm_90"
    folder.mkdir(parents=True)
    wheel = _wheel(folder)
    (folder / "build").mkdir()
    (folder / "build" / ".ninja_log").write_text("# ninja log v6\n0\t6000\t0\tx.cu.o\th\n")
    tk = cuda.Toolkit(tmp_path / "tk", "13.0.88")
    rec = cuda.finish(folder, wheel, "0.3.36", tk, ("90",), cuda.cmake_args(tk, ("90",)), 1.5, log=lambda *_: None)
    assert rec.object_minutes == 0.1 and rec.cuda_objects == 1 and rec.wall_minutes == 1.5
    assert rec.packed_sha256 == cuda.sha256_file(folder / cuda.PACKED)
    monkeypatch.setattr(cuda, "_run", lambda *a, **k: pytest.fail("a cached build must not run pip"))
    again, where = cuda.build("0.3.36", ("90",), cache=tmp_path / "cache", log=lambda *_: None)
    assert where == folder and again.to_dict() == json.loads((folder / "record.json").read_text())


def test_a_wheel_without_the_cuda_backend_is_refused(tmp_path: Path) -> None:
    w = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("llama_cpp/lib/libllama.so", b"x")
    with pytest.raises(cuda.CudaBuildError, match="holds no libggml-cuda"):
        cuda.finish(tmp_path, w, "0.3.36", cuda.Toolkit(tmp_path, "13.0.88"), ("90",), [], 1.0, log=lambda *_: None)


def _repo(tmp_path: Path, size: int) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "big.bin").write_bytes(b"d" * size)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def _fake_build(monkeypatch, tmp_path: Path, packed_size: int) -> None:
    from local_eagle.kit import make

    folder = tmp_path / "build"
    folder.mkdir()
    (folder / cuda.PACKED).write_bytes(b"p" * packed_size)
    rec = cuda.BuildRecord(key="k", llama_cpp_python="0.3.36", toolkit="13.0.88", archs=["90"], cmake_args=[],
                           wheel="w.whl", wheel_sha256="", packed=cuda.PACKED, packed_bytes=packed_size,
                           packed_sha256="", object_minutes=49.0)  # fmt: skip
    monkeypatch.setattr(make, "build", lambda *a, **k: (rec, folder))
    monkeypatch.setattr(make, "installed_version", lambda name: "0.3.36")

    def wheel(pin, dest, python):
        p = dest / f"{pin.name.replace('-', '_')}-{pin.version}-py3-none-any.whl"
        p.write_bytes(b"w" * 100)
        return p

    monkeypatch.setattr(make, "fetch_wheel", wheel)


def test_make_writes_one_bundle_that_fits_a_call_with_the_tree(tmp_path: Path, monkeypatch) -> None:
    _needed_or_skip()
    _fake_build(monkeypatch, tmp_path, 3_000)
    repo = _repo(tmp_path, 4_000)
    kit = make_kit(tmp_path / ".gpukit", repo, log=lambda *_: None)
    bundle = tmp_path / ".gpukit" / "call"
    assert (bundle / cuda.PACKED).stat().st_size == 3_000 and (bundle / "kit.json").is_file()
    assert sorted(p.name for p in (bundle / "wheels").iterdir()) == sorted(kit.wheels)
    info = json.loads((bundle / "kit.json").read_text())
    assert info["build"]["object_minutes"] == 49.0 and info["tree_bytes"] == 4_000
    p = plan.plan_from_kit(tmp_path / ".gpukit", repo)
    assert p.bundle_bytes == sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    assert p.calls[0].bytes == 4_000 + p.bundle_bytes and p.fits()


def test_a_bundle_over_one_calls_bytes_is_refused(tmp_path: Path, monkeypatch) -> None:
    _needed_or_skip()
    _fake_build(monkeypatch, tmp_path, 10)
    repo = _repo(tmp_path, CALL_LIMIT)
    with pytest.raises(KitError, match="over one call's 64 MiB"):
        make_kit(tmp_path / ".gpukit", repo, log=lambda *_: None)


def test_the_plan_meets_the_bar() -> None:
    p = plan.make_plan(32 * MIB, 30 * MIB)
    d = p.to_dict()
    assert len(d["calls"]) == 2 and all(c["bytes"] <= 64 * MIB for c in d["calls"])
    assert d["calls"][0]["timeout_s"] <= 360 and d["minutes"] <= 12 and d["fits"]
    assert "--retry" in d["calls"][1]["command"] and "--retry" not in d["calls"][0]["command"]
    for i, call in enumerate(d["calls"]):
        assert f"--seconds {plan.CALL_SECONDS[i] - plan.SLACK}" in call["command"]
    assert not plan.make_plan(40 * MIB, 30 * MIB).fits()


def test_each_calls_stages_fit_its_deadline_and_the_lossless_tests_have_call_2() -> None:
    """Call 1's measuring stages with the results' reserve fit its --seconds, so a call that runs them all still
    returns; call 2 holds the lossless tests' own 210 s on a warm machine, and on a fresh one the install and the
    short selection: no case of the plan leaves a stage it lists without room."""
    one, warm, fresh = plan.call_budgets()
    measuring = ["machine", "install", "doctor", "selfcheck", "pair8b", "costs8b", "fit8b", "bench8b", "engine8b",
                 "replay8b", "conc8b", "grammar8b"]  # fmt: skip
    assert [n for n, _ in one.stages] == measuring and one.seconds == plan.CALL_SECONDS[0] - plan.SLACK
    assert sum(s.budget for s in gpu.STAGES if s.call == 1) + gpu.RESERVE <= plan.CALL_SECONDS[0] - plan.SLACK
    assert warm.stages == (("lossless", gpu.LOSSLESS_BUDGET),) and warm.seconds == plan.CALL_SECONDS[1] - plan.SLACK
    assert gpu.LOSSLESS_BUDGET >= 210  # the H100's 201 s wall, its slowest tests 130-150 s
    assert fresh.stages == (("install", 20), ("lossless short", gpu.LOSSLESS_SHORT_BUDGET))
    assert all(b.fits() for b in (one, warm, fresh))
    lines = plan.render(plan.make_plan(32 * MIB, 20 * MIB)).splitlines()
    assert any(line.strip().startswith("call 2, fresh machine: install 20, lossless short 180") for line in lines)


def test_the_short_selection_names_tests_of_the_suite() -> None:
    """The tests it leaves out exist under their names: a renamed one would silently stay in."""
    repo = Path(__file__).resolve().parents[2]
    for node in gpu.LOSSLESS_SLOW:
        path, name = node.split("::")
        assert f"def {name.split('[')[0]}(" in (repo / path).read_text(), node


def test_the_backend_sampler_runs_after_the_curve_is_safe_and_its_crash_is_a_note(tmp_path: Path,
                                                                                    monkeypatch) -> None:  # fmt: skip
    curve = {"target": "/x/t.gguf", "verify_ms": {"1": 4.0}}
    answers: list[dict] = []

    def fake_sh(env, cmd, timeout, cwd=None):
        if "sampled" not in cmd:
            return {"rc": 0, "seconds": 5.0, "stdout": json.dumps(curve), "stderr": "", "command": "costs"}
        return answers.pop(0)

    monkeypatch.setattr(gpu, "sh", fake_sh)
    env = gpu.Env(repo=tmp_path, home=tmp_path, out=tmp_path, cuda=True, workers=4)
    got = {"sampled_ms": {"1": 3.0}, "plain_ms": {"1": 4.1}, "sampled_agree": True, "sampled_note": None}
    answers.append({"rc": 0, "seconds": 4.0, "stdout": json.dumps(got), "stderr": "", "command": "sampled"})
    r = gpu.costs8b(env, 25)
    assert r["json"]["sampled_ms"] == {"1": 3.0} and r["json"]["sampled_agree"] is True
    assert json.loads((tmp_path / "costs8b.json").read_text()) == curve  # the curve was kept before the sampler ran
    answers.append({"rc": -6, "seconds": 2.0, "stdout": "", "stderr": "GGML_ASSERT(x) failed\n", "command": "s"})
    r = gpu.costs8b(env, 25)
    assert r["rc"] == 0 and r["json"]["verify_ms"] == {"1": 4.0}
    assert r["json"]["sampled_note"] == "its process ended with code -6: GGML_ASSERT(x) failed"
    r = gpu.costs8b(env, 5.0 + 1 + gpu.SAMPLED_MIN_SECONDS - 1)  # too little left: not started
    assert "fewer than" in r["json"]["sampled_note"] and not answers


def test_the_lossless_stage_runs_the_short_selection_when_given_less_than_its_budget(tmp_path: Path,
                                                                                     monkeypatch) -> None:  # fmt: skip
    calls: list[list[str]] = []

    def fake_sh(env, cmd, timeout, cwd=None):
        calls.append(cmd)
        return {"rc": 0, "seconds": 1.0, "stdout": "3 passed in 1.00s", "stderr": "", "command": " ".join(cmd)}

    monkeypatch.setattr(gpu, "sh", fake_sh)
    env = gpu.Env(repo=tmp_path, home=tmp_path, out=tmp_path, cuda=True, workers=4)
    full = gpu.lossless(env, gpu.LOSSLESS_BUDGET)
    short = gpu.lossless(env, gpu.LOSSLESS_SHORT_BUDGET)
    assert full["selection"] == "full" and "--deselect" not in calls[0] and full["summary"] == "3 passed in 1.00s"
    assert short["selection"] == "short" and short["left_out"] == list(gpu.LOSSLESS_SLOW)
    assert [calls[1][i + 1] for i, a in enumerate(calls[1]) if a == "--deselect"] == list(gpu.LOSSLESS_SLOW)
    assert "--durations" in calls[0] and "-v" in calls[0]


def test_call_1_measures_first_and_a_retry_runs_the_lossless_tests_first() -> None:
    names = [s.name for s in gpu.call_order(retry=False, fresh=True)]
    assert names == [s.name for s in gpu.STAGES] and names[-1] == "lossless"
    warm = [s.name for s in gpu.call_order(retry=True, fresh=False)]
    assert warm[:2] == ["install", "lossless"] and sorted(warm) == sorted(names)  # install: done on a warm machine
    assert [s.name for s in gpu.call_order(retry=True, fresh=True)] == ["install", "lossless"]
    assert [s.name for s in gpu.call_order(retry=False, fresh=True, only=["conc8b"])] == ["install", "pair8b",
                                                                                        "conc8b"]  # fmt: skip


def test_plan_without_a_kit_is_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "local_eagle.kit", "plan", "--root", str(tmp_path / "none"), "--json"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no kit made yet" in r.stderr


def _stages(monkeypatch, ran: list[str], fail: set[str] = frozenset()) -> None:
    def stage(name: str):
        def run(env, budget):
            ran.append(name)
            return {"rc": 1 if name in fail else 0, "seconds": 0.0}

        return run

    monkeypatch.setattr(gpu, "STAGES", [
        gpu.Stage("first", 1, (), stage("first")),
        gpu.Stage("slow", 10_000, ("first",), stage("slow")),
        gpu.Stage("flaky", 1, ("first",), stage("flaky")),
        gpu.Stage("after-flaky", 1, ("flaky",), stage("after-flaky")),
    ])  # fmt: skip


def test_a_call_runs_what_fits_its_deadline_and_a_retry_runs_what_failed(tmp_path: Path, monkeypatch) -> None:
    ran: list[str] = []
    _stages(monkeypatch, ran, fail={"flaky"})
    bundle = tmp_path / "call"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"w")
    (bundle / "kit.json").write_text(json.dumps({"made": "today"}))
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    env.deadline = env.started + 600
    assert gpu.run_call(env, bundle) == ["first", "flaky"]  # "slow" does not fit; "after-flaky" needs "flaky"
    assert (env.files / "wheels" / "a-1-py3-none-any.whl").is_file()
    blob = json.loads((env.out / "results.json").read_text())
    assert blob["waiting"] == ["slow", "after-flaky"] and blob["kit"]["made"] == "today"
    assert "flaky: rc 1" in (env.out / "status.txt").read_text()
    assert "CPU DRY RUN" in (env.out / "summary.md").read_text()
    assert gpu.run_call(env, None) == []  # done, failed included, without --retry
    _stages(monkeypatch, ran)
    assert gpu.run_call(env, None, retry=True, skip=["after-flaky"]) == ["flaky"]
    assert gpu.run_call(env, None, retry=True) == ["after-flaky"]


def test_a_retry_runs_a_stages_short_run_when_only_that_fits(tmp_path: Path, monkeypatch) -> None:
    """A fresh machine's call 2: the install first, then the lossless stage's short run in what is left; call 1
    (no --retry) leaves a stage that does not fit whole for the next call."""
    given: dict[str, float] = {}

    def run(name: str):
        def f(env, budget):
            given[name] = budget
            return {"rc": 0}

        return f

    monkeypatch.setattr(
        gpu,
        "STAGES",
        [
            gpu.Stage("install", 1, (), run("install")),
            gpu.Stage("measure", 1, ("install",), run("measure")),
            gpu.Stage("tests", 500, ("install",), run("tests"), call=2, short=50),
        ],
    )
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    env.deadline = env.started + 100
    assert gpu.run_call(env, None, retry=True) == ["install", "tests"] and given["tests"] == 50
    res = json.loads((env.out / "results.json").read_text())["results"]
    assert res["tests"]["budget"] == 50
    other = gpu.Env(repo=tmp_path, home=tmp_path / "other", out=tmp_path / "out2", cuda=False)
    other.deadline = other.started + 100
    assert gpu.run_call(other, None) == ["install", "measure"]


def test_a_stage_that_raises_is_a_failed_result_not_a_lost_call(tmp_path: Path, monkeypatch) -> None:
    def boom(env, budget):
        raise RuntimeError("no GPU")

    monkeypatch.setattr(gpu, "STAGES", [gpu.Stage("boom", 1, (), boom),
                                        gpu.Stage("after", 1, (), lambda e, b: {"rc": 0})])  # fmt: skip
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    assert gpu.run_call(env, None) == ["boom", "after"]
    res = json.loads((env.out / "results.json").read_text())["results"]
    assert res["boom"]["rc"] == 1 and "RuntimeError: no GPU" in res["boom"]["stderr"] and res["after"]["rc"] == 0


def test_a_missing_bundle_is_one_line(tmp_path: Path) -> None:
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    with pytest.raises(SystemExit, match="no such bundle"):
        gpu.run_call(env, tmp_path / "nowhere")


def test_sh_keeps_output_and_exit_status_and_stops_a_stage_with_its_children(tmp_path: Path) -> None:
    env = gpu.Env(repo=tmp_path, home=tmp_path, out=tmp_path, cuda=False)
    r = gpu.sh(env, ["bash", "-c", "echo out; echo err >&2; exit 3"], 30)
    assert (r["rc"], r["stdout"].strip(), r["stderr"].strip()) == (3, "out", "err")
    assert gpu.sh(env, ["no-such-command-here"], 30)["rc"] == 127
    t0 = time.monotonic()
    r = gpu.sh(env, ["bash", "-c", "sleep 30 & sleep 30; wait"], 0.5)
    assert r["rc"] == 124 and "stopped at its budget" in r["stderr"] and time.monotonic() - t0 < 10


def test_stages_start_with_default_signals_even_from_a_background_launcher(tmp_path: Path) -> None:
    import signal

    env = gpu.Env(repo=tmp_path, home=tmp_path, out=tmp_path, cuda=False)
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup leaves
    try:
        r = gpu.sh(env, [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGHUP) == 0)"], 60)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert r["stdout"].strip() == "True"


def test_the_cuda_runtime_is_found_beside_the_images_pytorch(tmp_path: Path, monkeypatch) -> None:
    lib = tmp_path / "site-packages" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"x")
    (lib / "libcublas.so.13").write_bytes(b"x")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site-packages")])
    assert str(lib) in gpu.cuda_lib_dirs()
    env = gpu.Env(repo=tmp_path / "repo", home=tmp_path / "home", out=tmp_path, cuda=True)
    extra = env.run_env()
    assert extra["LD_LIBRARY_PATH"].split(":")[0] == str(lib)
    assert extra["PYTHONPATH"].split(":")[:2] == [str(env.site), str(env.repo)]


def test_an_installed_distribution_packs_as_a_build_does(tmp_path: Path) -> None:
    out = tmp_path / "p.tar.xz"
    libs = pack_installed("iniconfig", out)  # small, pure Python, a pytest dependency
    assert libs == []
    with tarfile.open(out, "r:xz") as t:
        names = t.getnames()
    assert any(n.startswith("iniconfig/") and n.endswith(".py") for n in names)
    assert any(".dist-info/METADATA" in n for n in names)


def test_the_wheels_leave_out_what_the_gpu_image_has() -> None:
    need = {p.name for p in _needed_or_skip()}
    assert {"gguf", "diskcache"} <= need
    assert need & GPU_IMAGE_PACKAGES == {"typer"} and "fastapi" not in need  # the call runs no server; typer: ALWAYS
    assert "torch" not in need and "llama-cpp-python" not in need
    with pytest.raises(LookupError, match="not installed here"):
        closure([("no-such-package-anywhere", ())])


def _needed_or_skip() -> list:
    """The kit is made from a full development install; elsewhere (the GPU machine's image) say so and skip."""
    try:
        return wheels_needed()
    except LookupError as e:
        pytest.skip(f"not a full local-eagle[dev] environment: {e}")


BENCH_ROW = {"draft_max": 4, "adaptive": False, "prompts": 2, "baseline_tps": 100.0, "speculative_tps": 180.0,
             "speedup": 1.8, "acceptance_length": 2.5, "acceptance_per_position": [0.7, 0.5, 0.4, 0.3],
             "identical": True, "mismatches": 0, "near_ties": 0, "target_call_ms": 10.0, "verify_call_ms": 11.0,
             "draft_ms_per_round": 2.0, "host_ms_per_round": 0.25}  # fmt: skip


ARRANGED = {
    "label": "arranged acceptance",
    "note": "arranged acceptance: rows rewritten",
    "rows": 900,
    "placed": 400,
    "unknown": 12,
    "recorded_acceptance": [0.8, 0.7],
}


def _results(tmp_path: Path, cuda_build: bool) -> Path:
    build = {
        "key": "k",
        "llama_cpp_python": "0.3.36",
        "toolkit": "13.0.88",
        "archs": ["90"],
        "objects": 286,
        "cuda_objects": 157,
        "object_minutes": 49.2,
        "packed_bytes": 30 * MIB,
        "packed_sha256": "ab" * 32,
        "cmake_args": ["-DGGML_CUDA=ON"],
        "cpus": 2,
        "host": "AMD EPYC",
        "libraries": [{"name": "llama_cpp/lib/libggml-cuda.so", "bytes": 58 * MIB, "sha256": "cd" * 32}],
    }
    blob = {"kit": {"made": "2026-11-26T00:00:00Z", "build": build}, "cuda_build": cuda_build,
            "waiting": ["pair8b"], "budgets": {"machine": 10, "lossless": 75, "pair8b": 30}, "results": {
                "machine": {"rc": 0, "wall": 1.5, "facts": {"gpu": "NVIDIA H100 80GB HBM3, 580.1, 81559 MiB, 9.0",
                                                            "cpus": 16, "cuda_build": cuda_build, "python": "3.12.3"}},
                "lossless": {"rc": 0, "wall": 61.0, "summary": "420 passed in 58.0s", "command": "python -m pytest",
                             "seconds": 61},
                "costs8b": {"json": {"target": "/x/t.gguf", "drafter": "/x/d.gguf", "prefix": 256, "repeats": 5,
                                     "verify_ms": {"1": 7.5, "16": 9.0}, "verify_ratio": {"1": 1.0, "16": 1.2},
                                     "drafter_ms": {"1": 0.9, "16": 1.1}}},
                "bench8b": {"rc": 0, "command": "python -m local_eagle bench ...", "seconds": 30,
                            "json": [BENCH_ROW, {**BENCH_ROW, "draft_max": 15, "tree_nodes": 15,
                                                 "mean_verify_rows": 16.0, "speedup": 2.0}]},
                "replay8b": {"rc": 0, "json": {"note": "tree verifies run as one sequence.",
                                               "baseline": {"tokens_per_second": 130.0, "tokens": 400},
                                               "settings": [{"label": "auto", "rounds": 60, "rounds_recorded": 292,
                                                             "tokens_per_second": 290.0, "speedup": 2.23,
                                                             "acceptance_length": 4.1,
                                                             "acceptance_per_position": [0.9, 0.8],
                                                             "host_ms_per_round": 0.12,
                                                             "projected": {"host_record": {"tokens_per_second": 299.0}},
                                                             "projection_error": {"tokens_per_second": 0.031}}]}},
                "engine8b": {"rc": 0, "command": "python -m local_eagle bench --arranged demo", "json": [
                    {**BENCH_ROW, "draft_max": 8, "adaptive": True, "speedup": 1.62, "acceptance_length": 2.9,
                     "baseline_tps": 300.0, "arranged": ARRANGED},
                    {**BENCH_ROW, "draft_max": 3, "speedup": 1.7, "acceptance_length": 3.1},
                    {**BENCH_ROW, "draft_max": 15, "tree_nodes": 15, "speedup": 1.9, "acceptance_length": 3.6}]},
                "conc8b": {"rc": 0, "json": {"arranged": ARRANGED, "rows": [
                    {"concurrency": 1, "setting": "none", "draft_max": 0, "adaptive": False, "aggregate_tps": 300.0,
                     "speedup": 1.0, "batching_gain": 1.0, "acceptance_length": 1.0},
                    {"concurrency": 4, "setting": "none", "draft_max": 0, "adaptive": False, "aggregate_tps": 900.0,
                     "speedup": 1.0, "batching_gain": 3.0, "acceptance_length": 1.0},
                    {"concurrency": 4, "setting": "auto<=8", "draft_max": 8, "adaptive": True, "aggregate_tps": 990.0,
                     "speedup": 1.1, "batching_gain": 3.3, "acceptance_length": 2.2},
                    {"concurrency": 4, "setting": "3", "draft_max": 3, "adaptive": False, "aggregate_tps": 1080.0,
                     "speedup": 1.2, "batching_gain": 3.6, "acceptance_length": 2.8}]}},
                "fit8b": {"json": {"measure": {"backend": "CUDA0", "rows": [
                    {"component": "target weights", "predicted": 110 * 2**20, "measured": 100 * 2**20}]}}},
            }}  # fmt: skip
    p = tmp_path / "results.json"
    p.write_text(json.dumps(blob))
    return p


def test_the_page_holds_every_figure_and_its_command(tmp_path: Path) -> None:
    out = report.write_report([_results(tmp_path, True)], tmp_path / "docs" / "gpu-results.md", command="kit gpu")
    text = out.read_text()
    assert "CPU DRY RUN" not in text
    for figure in ("NVIDIA H100 80GB HBM3", "420 passed in 58.0s", "| 16 | 9.00 | 1.20 | 1.10 |", "1.80x",
                   "0.70 0.50 0.40 0.30", "python -m local_eagle bench ...", "+10.0%", "CUDA0", "pair8b",
                   "CUDA 13.0.88 for sm_90", "49.2 object-minutes", "libggml-cuda.so", "| lossless | 75 | 61.0 | 0 |",
                   "| pair8b | 30 | not run | - |", "k=4 0.250 ms",
                   "| auto | 60/292 | 290.0 | 2.23x | 4.10 | 0.90 0.80 | 0.120 | 299.0 | +3.1% |",
                   "Target alone: 130.0 tok/s"):  # fmt: skip
        assert figure in text, figure
    # the engine at arranged acceptance: one row per number of requests, the replay beside the default's
    for figure in ("ARRANGED acceptance", "| 1 | 300.0 | 1.62x (2.90) | k=3: 1.70x (3.10) | tree 15: 1.90x (3.60) | "
                   "2.23x / 2.30x |", "| 4 | 900.0, 3.00x one request | 1.10x (2.20) | 3: 1.20x (2.80) | - (batches",
                   "Recorded acceptance by depth 0.80 0.70", "rows of a text not known (a near-tie parted it from "
                   "the target alone's) 12"):  # fmt: skip
        assert figure in text, figure


def test_the_page_names_a_short_selection_and_each_failed_test() -> None:
    lossless = {
        "summary": "1 failed, 30 passed in 120.00s",
        "selection": "short",
        "left_out": list(gpu.LOSSLESS_SLOW),
        "stdout": "[gw1] PASSED tests/a.py::t\nFAILED tests/runtime/test_x.py::test_y - AssertionError\n",
    }
    text = "\n".join(report._tests({"lossless": lossless}))
    assert f"The short selection: {len(gpu.LOSSLESS_SLOW)} tests left out" in text
    assert "- `FAILED tests/runtime/test_x.py::test_y - AssertionError`" in text and "PASSED" not in text


def test_a_cpu_run_is_labelled_as_such(tmp_path: Path) -> None:
    text = report.render(report.load([_results(tmp_path, False)]), "GPU results", "kit gpu --cpu")
    assert "**CPU DRY RUN: no GPU was used.**" in text.splitlines()[2]


def test_a_results_file_that_is_not_one_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("[1, 2]")
    with pytest.raises(report.ReportError, match="r.json: not a kit results file"):
        report.load([bad])


def test_the_command_line_gives_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{")
    r = subprocess.run([sys.executable, "-m", "local_eagle.kit", "report", str(bad), "--out", str(tmp_path / "p.md")],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "not a kit results file" in r.stderr
    assert not (tmp_path / "p.md").exists()


def test_the_replay_rounds_travel_with_the_tree() -> None:
    """The replay stage reads the Gemma pair's recorded rounds from the checkout: they must be tracked files."""
    repo = Path(__file__).resolve().parents[2]
    rows = json.loads((repo / gpu.REPLAY_ROUNDS).read_text())
    assert any(r.get("adaptive") for r in rows) and all(r.get("rounds") for r in rows)
    tracked = subprocess.run(["git", "-C", str(repo), "ls-files", gpu.REPLAY_ROUNDS], capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout.strip():
        assert tracked.stdout.strip() == gpu.REPLAY_ROUNDS


def test_report_quotes_python_time_and_graph_reuse_per_round() -> None:
    rows = [{"draft_max": 8, "adaptive": True, "host_ms_per_round": 0.8, "python_ms_per_round": 0.31,
             "baseline_python_ms": 0.12, "graph_reuse": 0.95, "baseline_graph_reuse": 0.99},
            {"draft_max": 3, "adaptive": False, "host_ms_per_round": 0.15, "python_ms_per_round": 0.9,
             "baseline_python_ms": 0.14, "graph_reuse": 0.5, "baseline_graph_reuse": 0.98},
            {"draft_max": 15, "tree_nodes": 15, "host_ms_per_round": 0.5}]  # fmt: skip
    text = "\n".join(report._host({"json": rows}))
    assert "auto<=8 0.310 ms, k=3 0.900 ms; the target alone 0.120-0.140 ms." in text
    assert "auto<=8 95%, k=3 50%; the target alone 98-99%." in text
    assert "tree 15 0.500 ms" in text  # host time for every row, the older field


def test_the_cost_table_sets_the_q8_0_drafter_beside_the_f16_one_and_says_which_to_run() -> None:
    from local_eagle.bench.precision import measured_acceptance

    curve = {"target": "/x/t.gguf", "drafter": "/x/drafter-f16.gguf", "prefix": 256, "repeats": 5,
             "verify_ms": {"1": 3.0, "4": 3.3}, "verify_ratio": {"1": 1.0, "4": 1.1},
             "drafter_ms": {"1": 0.5, "4": 0.6}, "others_ms": {"drafter-q8_0.gguf": {"1": 0.3, "4": 0.4}},
             "drafter_types": {"drafter-f16.gguf": "F16", "drafter-q8_0.gguf": "Q8_0"}}  # fmt: skip
    text = "\n".join(report._curve(curve, "Cost by rows"))
    kept = measured_acceptance()
    speed = (kept["Q8_0"].acceptance_length / kept["F16"].acceptance_length) / ((3.3 + 0.9) / (3.3 + 1.5))
    for part in ("`drafter-q8_0.gguf` call ms (x the drafter's)", "| 1 | 3.00 | 1.00 | 0.50 | 0.30 (0.60x) |",
                 "Drafter precision:", f"Q8_0 runs at {speed:.2f}x F16's speed"):  # fmt: skip
        assert part in text, part
    # a curve of one drafter keeps its table as it was
    plain = "\n".join(report._curve({**curve, "others_ms": {}}, "Cost by rows"))
    assert "Drafter precision" not in plain and "| 1 | 3.00 | 1.00 | 0.50 | - |" in plain


def test_the_cost_table_says_what_native_capture_costs_a_call_and_a_switch() -> None:
    curve = {
        "target": "/x/t.gguf",
        "drafter": "/x/d.gguf",
        "verify_ms": {"1": 3.0},
        "verify_ratio": {"1": 1.0},
        "drafter_ms": {"1": 0.5},
        "capture_ms": {"on": 3.1, "off": 3.0, "switch_on": 12.0, "switch_off": 10.0},
    }
    text = "\n".join(report._curve(curve, "Cost by rows"))
    assert "a 1-row call 3.100 ms with it, 3.000 ms without (1.03x)" in text
    assert "pays for its two switches after 159 rounds" in text  # (12 + 10 - 3.1 - 3) / 0.1
    free = {**curve, "capture_ms": {"on": 3.0, "off": 3.0, "switch_on": 9.0, "switch_off": 9.0}}
    assert "switching it off while idle never pays" in "\n".join(report._curve(free, "Cost by rows"))
    callback = {**curve, "capture_ms": {}, "capture_note": "gemma3 is captured through the eval callback"}
    assert "Native capture not measured: gemma3 is captured" in "\n".join(report._curve(callback, "Cost by rows"))


def test_the_cost_table_sets_backend_sampling_beside_the_logits_read() -> None:
    curve = {
        "target": "/x/t.gguf",
        "verify_ms": {"1": 4.0, "64": 20.0},
        "verify_ratio": {"1": 1.0, "64": 5.0},
        "sampled_ms": {"1": 3.6, "64": 8.0},
        "sampled_agree": True,
    }
    text = "\n".join(report._curve(curve, "Cost by rows"))
    assert "1 rows 3.600 ms against 4.000 (0.90x), 64 rows 8.000 ms against 20.000 (0.40x)" in text
    assert "the same tokens as the logits' argmax" in text
    other = "\n".join(report._curve({**curve, "sampled_agree": False}, "Cost by rows"))
    assert "tokens OTHER than the logits' argmax" in other
    refused = {**curve, "sampled_ms": {}, "sampled_note": "llama.cpp could not offload a greedy sampler here"}
    assert "Backend sampling not measured: llama.cpp could not" in "\n".join(report._curve(refused, "Cost by rows"))

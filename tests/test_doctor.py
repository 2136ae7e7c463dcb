"""`local-eagle doctor`: the real facts of this machine, and verdicts on simulated setups."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from local_eagle import doctor
from local_eagle.cli.app import app
from local_eagle.llamacpp import bindings
from local_eagle.vram.gpus import DetectedGPU

runner = CliRunner()
GiB = 2**30

cpu_build_only = pytest.mark.skipif(
    bindings.gpu_offload_supported(), reason="asserts what a CPU build of llama.cpp reports"
)


@pytest.fixture(scope="module")
def report() -> doctor.Report:
    return doctor.run()


def check(rep: doctor.Report | list[doctor.Check], name: str) -> doctor.Check:
    checks = rep.checks if isinstance(rep, doctor.Report) else rep
    (c,) = [c for c in checks if c.name == name]
    return c


def test_real_facts(report: doctor.Report) -> None:
    f = report.facts
    assert "CPU" in f.backends
    assert any(d.kind == "cpu" and d.total > 0 for d in f.devices)
    assert f.staging and all(f.staging.values())
    assert check(report, "staging symbols").status == doctor.OK
    assert f.llama_cpp_version == bindings.PINNED_VERSION
    assert f.versions["llama-cpp-python"] == bindings.PINNED_VERSION
    assert f.offload is not None and f.offload.loaded and f.offload.buffers


@cpu_build_only
def test_cpu_build_verdicts(report: doctor.Report) -> None:
    f = report.facts
    assert "CUDA" not in f.backends and not [d for d in f.devices if d.kind == "gpu"]
    off = check(report, "GPU offload")
    assert off.status == doctor.OK and "no GPU offload (CPU build)" in off.detail
    assert f.offload is not None and f.offload.layers_offloaded is None
    amx = check(report, "AMX repack workaround")
    assert "in effect" in amx.detail and "use_extra_bufts off" in amx.detail
    if f.detected_gpu is None:
        assert report.ok


@cpu_build_only
def test_cli_table_and_exit_zero() -> None:
    r = runner.invoke(app, ["doctor"])
    if doctor.detect() is None:
        assert r.exit_code == 0, r.output
        assert "nothing to fix" in r.output
    assert "staging symbols" in r.output and "CPU build" in r.output


def test_cli_json_shape() -> None:
    r = runner.invoke(app, ["doctor", "--json"])
    d = json.loads(r.output)
    assert set(d) == {"ok", "checks", "facts"}
    assert r.exit_code == (0 if d["ok"] else 1)
    names = [c["name"] for c in d["checks"]]
    assert names == [
        "llama-cpp-python",
        "backends",
        "GPU",
        "GPU offload",
        "staging symbols",
        "CPU features",
        "AMX repack workaround",
        "packages",
    ]
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in d["checks"])
    assert all(c["status"] in ("ok", "info", "warn", "fail") for c in d["checks"])
    assert d["facts"]["staging"]["get_embeddings_nextn_ith"] is True
    assert {"backend", "name", "kind", "free", "total"} <= set(d["facts"]["devices"][0])


def test_missing_staging_symbol_fails_with_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    real = bindings.staging.available()
    monkeypatch.setattr(bindings.staging, "available", lambda: {**real, "get_embeddings_nextn_ith": False})
    r = runner.invoke(app, ["doctor", "--json"])
    assert r.exit_code == 1
    c = check([doctor.Check(**x) for x in json.loads(r.output)["checks"]], "staging symbols")
    assert c.status == doctor.FAIL
    assert "llama_get_embeddings_nextn_ith" in c.detail
    assert "pip install" in c.fix and "--force-reinstall --no-cache-dir" in c.fix
    assert f"llama-cpp-python=={bindings.PINNED_VERSION}" in c.fix
    r = runner.invoke(app, ["doctor"])
    assert r.exit_code == 1 and "FAIL" in r.output and "Traceback" not in r.output


# --- simulated setups -----------------------------------------------------------------------------


def cpu_facts() -> doctor.Facts:
    return doctor.Facts(
        python="3.11.7",
        llama_cpp_version=bindings.PINNED_VERSION,
        llama_importable=True,
        gpu_offload_supported=False,
        backends=["CPU"],
        devices=[bindings.BackendDevice("CPU", "CPU", "Xeon", "cpu", 8 * GiB, 16 * GiB)],
        staging=dict.fromkeys(bindings.STAGING, True),
        cpu_features={"AVX": True, "AVX2": True, "AMX_INT8": False},
        offload=doctor.OffloadProbe(gpu_build=False, loaded=True, buffers={"CPU_Mapped": 0.98}),
        versions=dict.fromkeys(doctor.PACKAGES, "1.0"),
    )


CUDA_LOG = [
    "load_tensors: offloading output layer to GPU",
    "load_tensors: offloading 6 repeating layers to GPU",
    "load_tensors: offloaded 7/7 layers to GPU",
    "load_tensors:        CUDA0 model buffer size =     0.92 MiB",
    "load_tensors:   CPU_Mapped model buffer size =     0.07 MiB",
]
RTX4090 = DetectedGPU("NVIDIA GeForce RTX 4090", 24564 * 2**20, 23000 * 2**20)


def cuda_facts(log: list[str]) -> doctor.Facts:
    return replace(
        cpu_facts(),
        gpu_offload_supported=True,
        backends=["CUDA", "CPU"],
        devices=[
            bindings.BackendDevice("CUDA", "CUDA0", "NVIDIA GeForce RTX 4090", "gpu", 22 * GiB, 24 * GiB),
            *cpu_facts().devices,
        ],
        detected_gpu=RTX4090,
        offload=doctor.parse_load_log(log, gpu_build=True),
    )


def test_gpu_present_but_cpu_build_fails_with_cuda_install() -> None:
    checks = doctor.evaluate(replace(cpu_facts(), detected_gpu=RTX4090))
    c = check(checks, "GPU")
    assert c.status == doctor.FAIL and "built without CUDA" in c.detail
    assert c.fix.startswith('CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=89" pip install')
    assert "--no-cache-dir" in c.fix and f"llama-cpp-python=={bindings.PINNED_VERSION}" in c.fix
    assert not doctor.Report(cpu_facts(), checks).ok


def test_cuda_build_with_layers_on_gpu_is_ok() -> None:
    facts = cuda_facts(CUDA_LOG)
    assert facts.offload is not None
    assert (facts.offload.layers_offloaded, facts.offload.layers_total) == (7, 7)
    assert facts.offload.buffers == {"CUDA0": 0.92, "CPU_Mapped": 0.07}
    checks = doctor.evaluate(facts)
    assert all(c.status != doctor.FAIL for c in checks), checks
    assert "offloaded 7/7" in check(checks, "GPU offload").detail
    assert "CUDA0" in check(checks, "GPU").detail
    assert "not applied" in check(checks, "AMX repack workaround").detail


def test_cuda_build_that_kept_weights_on_cpu_fails() -> None:
    log = [CUDA_LOG[2], "load_tensors:   CPU_Mapped model buffer size =     0.98 MiB", "load_tensors: CUDA_Host x"]
    c = check(doctor.evaluate(cuda_facts(log)), "GPU offload")
    assert c.status == doctor.FAIL and c.fix


def test_cuda_build_without_device() -> None:
    facts = replace(cpu_facts(), backends=["CUDA", "CPU"])
    checks = doctor.evaluate(facts)
    assert "GPU build" in check(checks, "backends").detail
    assert "no device found" in check(checks, "GPU offload").detail
    assert doctor.Report(facts, checks).ok
    c = check(doctor.evaluate(replace(facts, detected_gpu=RTX4090)), "GPU")
    assert c.status == doctor.FAIL and "found no device" in c.detail and "driver" in c.fix


def test_old_llama_cpp_and_import_failure() -> None:
    c = check(doctor.evaluate(replace(cpu_facts(), llama_cpp_version="0.3.16")), "llama-cpp-python")
    assert c.status == doctor.FAIL and bindings.PINNED_VERSION in c.fix and "GGML_CUDA" not in c.fix
    c = check(doctor.evaluate(replace(cuda_facts(CUDA_LOG), llama_cpp_version="0.3.16")), "llama-cpp-python")
    assert c.fix.startswith('CMAKE_ARGS="-DGGML_CUDA=on')
    checks = doctor.evaluate(replace(cpu_facts(), llama_importable=False, import_error="libllama.so: not found"))
    assert checks[0].status == doctor.FAIL and "libllama.so" in checks[0].detail


def test_no_avx2_is_a_warning_not_a_failure() -> None:
    facts = replace(cpu_facts(), cpu_features={"AVX": True, "AVX2": False})
    checks = doctor.evaluate(facts)
    assert check(checks, "CPU features").status == doctor.WARN
    assert doctor.Report(facts, checks).ok


def test_parsers() -> None:
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
    assert doctor.parse_cpu_features(info) == {"AVX": True, "AVX2": True, "AVX512": False, "AMX_INT8": True}
    assert doctor.cuda_arch("NVIDIA GeForce RTX 3090") == "86"
    assert doctor.cuda_arch("Some Future GPU") is None
    assert "CMAKE_CUDA_ARCHITECTURES" not in doctor.cuda_install_command(None)

"""``local-eagle doctor``: is this machine's llama.cpp the one local-eagle needs, and does it use the GPU?

A CUDA build that quietly came out CPU-only is the most common way to lose a GPU's speed-up, and
nothing else says so: generation just runs 10x slower. The doctor gathers plain facts first
(``gather``: backend registry, GPU detection, a tiny load test, staging symbols, CPU features,
package versions) and judges them second (``evaluate``, a pure function), so every verdict can be
tested with simulated facts. Each problem carries the command or step that fixes it.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from local_eagle.llamacpp import bindings
from local_eagle.vram.gpus import DetectedGPU, detect

OK = "ok"
INFO = "info"
WARN = "warn"
FAIL = "fail"

PACKAGES = ("local-eagle", "llama-cpp-python", "gguf", "numpy", "torch")

# compute capability by card family, for CMAKE_CUDA_ARCHITECTURES in the fix
_CUDA_ARCH = (
    ("RTX 50", "120"),
    ("RTX 40", "89"),
    ("RTX 30", "86"),
    ("RTX 20", "75"),
    ("L40", "89"),
    ("L4", "89"),
    ("H100", "90"),
    ("H200", "90"),
    ("A100", "80"),
    ("A6000", "86"),
)

CPU_FEATURES = ("AVX", "AVX2", "F16C", "FMA", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "NEON", "SVE")

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"^\s*(\S+) model buffer size =\s*([\d.]+) MiB")


def cuda_arch(gpu_name: str | None) -> str | None:
    """The CUDA architecture to build for, from the card's name; None when unknown (llama.cpp picks)."""
    if not gpu_name:
        return None
    for key, arch in _CUDA_ARCH:
        if key in gpu_name:
            return arch
    return None


def cuda_install_command(arch: str | None = "89") -> str:
    """The pip command that rebuilds the pinned llama-cpp-python with CUDA (docs/cuda.md)."""
    args = "-DGGML_CUDA=on" + (f" -DCMAKE_CUDA_ARCHITECTURES={arch}" if arch else "")
    return (
        f'CMAKE_ARGS="{args}" pip install --upgrade --force-reinstall --no-cache-dir '
        f"--no-binary llama-cpp-python llama-cpp-python=={bindings.PINNED_VERSION}"
    )


@dataclass
class OffloadProbe:
    """Where llama.cpp put a tiny model loaded with every layer asked on the GPU."""

    gpu_build: bool
    loaded: bool
    layers_offloaded: int | None = None
    layers_total: int | None = None
    buffers: dict[str, float] = field(default_factory=dict)  # buffer name -> MiB
    error: str = ""


@dataclass
class Facts:
    """Everything the doctor looks at, as plain data."""

    python: str
    llama_cpp_version: str | None
    llama_importable: bool
    import_error: str = ""
    registry_error: str = ""
    gpu_offload_supported: bool = False
    backends: list[str] = field(default_factory=list)
    devices: list[bindings.BackendDevice] = field(default_factory=list)
    detected_gpu: DetectedGPU | None = None
    staging: dict[str, bool] = field(default_factory=dict)
    system_info: str = ""
    cpu_features: dict[str, bool] = field(default_factory=dict)
    offload: OffloadProbe | None = None
    versions: dict[str, str | None] = field(default_factory=dict)


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class Report:
    facts: Facts
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """Nothing needs fixing for the detected setup (warnings and notes do not count)."""
        return all(c.status != FAIL for c in self.checks)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks], "facts": asdict(self.facts)}


# --- gathering ------------------------------------------------------------------------------------


def parse_cpu_features(info: str) -> dict[str, bool]:
    """The features llama.cpp's CPU backend was built to use (``llama_print_system_info``: ``AVX2 = 1 | ...``)."""
    flags = {k.strip(): v.strip() == "1" for k, v in re.findall(r"([A-Z0-9_]+)\s*=\s*(\d)", info)}
    return {k: flags[k] for k in CPU_FEATURES if k in flags}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def parse_load_log(lines: list[str], gpu_build: bool) -> OffloadProbe:
    """Read llama.cpp's ``load_tensors`` lines: the offload count and each weight buffer's size."""
    probe = OffloadProbe(gpu_build=gpu_build, loaded=True)
    for ln in lines:
        m = _OFFLOADED.search(ln)
        if m:
            probe.layers_offloaded, probe.layers_total = int(m.group(1)), int(m.group(2))
        b = _BUFFER.search(ln.split(":", 1)[-1])
        if b:
            probe.buffers[b.group(1)] = probe.buffers.get(b.group(1), 0.0) + float(b.group(2))
    return probe


def probe_offload(gpu_build: bool) -> OffloadProbe:
    """Load a tiny generated model with n_gpu_layers=-1 and read where llama.cpp put its weights."""
    from local_eagle.errors import LocalEagleError
    from local_eagle.testing.tiny import write_tiny_target

    try:
        with tempfile.TemporaryDirectory(prefix="local-eagle-doctor-") as d:
            path = write_tiny_target(Path(d) / "tiny.gguf")
            with bindings.LogCapture() as log:
                model = bindings.Model(path, n_gpu_layers=-1, what="doctor's tiny model")
            model.close()
    except (LocalEagleError, OSError) as e:
        return OffloadProbe(gpu_build=gpu_build, loaded=False, error=str(e))
    return parse_load_log(log.lines, gpu_build)


def gather(load_test: bool = True) -> Facts:
    facts = Facts(
        python=platform.python_version(),
        llama_cpp_version=bindings.llama_cpp_version(),
        llama_importable=bindings.C is not None,
        import_error=str(bindings._IMPORT_ERROR or ""),
        versions=package_versions(),
        detected_gpu=detect(),
    )
    if not facts.llama_importable:
        return facts
    facts.gpu_offload_supported = bindings.gpu_offload_supported()
    facts.staging = bindings.staging.available()
    facts.system_info = bindings.system_info()
    facts.cpu_features = parse_cpu_features(facts.system_info)
    try:
        facts.backends = bindings.backend_names()
        facts.devices = bindings.backend_devices()
    except bindings.LlamaError as e:
        facts.registry_error = str(e)
    if load_test:
        facts.offload = probe_offload(facts.gpu_offload_supported)
    return facts


# --- judging --------------------------------------------------------------------------------------


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


_NOT_GPU_BACKENDS = ("CPU", "BLAS", "RPC")


def gpu_backends(facts: Facts) -> list[str]:
    """Backends compiled in that drive a GPU (CUDA, Metal, Vulkan, ...), whether or not they found one."""
    return [b for b in facts.backends if b not in _NOT_GPU_BACKENDS]


_DRIVER_FIX = (
    "check that the driver supports the CUDA version llama-cpp-python was built with (nvidia-smi shows it), "
    "that CUDA_VISIBLE_DEVICES does not hide the GPU, then run: local-eagle doctor"
)


def _gpu_devices(facts: Facts) -> list[bindings.BackendDevice]:
    return [d for d in facts.devices if d.kind in ("gpu", "igpu")]


def _fix_for_gpu(facts: Facts) -> str:
    return cuda_install_command(cuda_arch(facts.detected_gpu.name) if facts.detected_gpu else "89")


def evaluate(facts: Facts) -> list[Check]:
    """Verdicts for the facts: a FAIL is something to fix on this setup, with the fix that does it."""
    pinned = bindings.PINNED_VERSION
    reinstall = f"pip install --force-reinstall --no-cache-dir llama-cpp-python=={pinned}"
    if facts.detected_gpu is not None or "CUDA" in facts.backends:
        reinstall = _fix_for_gpu(facts)  # a plain reinstall would leave a CPU-only build
    if not facts.llama_importable:
        return [
            Check("llama-cpp-python", FAIL, f"not importable: {facts.import_error}", reinstall),
            _versions_check(facts),
        ]
    checks: list[Check] = []
    if facts.llama_cpp_version == pinned:
        checks.append(Check("llama-cpp-python", OK, f"{pinned} (pinned)"))
    else:
        checks.append(
            Check("llama-cpp-python", FAIL, f"{facts.llama_cpp_version}, local-eagle needs {pinned}", reinstall)
        )

    gpu_devs = _gpu_devices(facts)
    backends = ", ".join(facts.backends) or "none found"
    build = "GPU build" if gpu_backends(facts) else "CPU build"
    if facts.registry_error:
        checks.append(Check("backends", WARN, f"could not read ggml's backend registry: {facts.registry_error}"))
    else:
        checks.append(Check("backends", OK, f"{backends} ({build})"))

    gpu = facts.detected_gpu
    if gpu_devs:
        desc = "; ".join(f"{d.name} {d.description}: {_gib(d.free)} free of {_gib(d.total)}" for d in gpu_devs)
        checks.append(Check("GPU", OK, desc))
    elif gpu is not None and gpu_backends(facts):
        checks.append(
            Check(
                "GPU",
                FAIL,
                f"{gpu.name} is present and llama.cpp has {', '.join(gpu_backends(facts))}, but the backend found "
                "no device: everything runs on the CPU",
                _DRIVER_FIX,
            )
        )
    elif gpu is not None:
        n = f"{gpu.count} x " if gpu.count > 1 else ""
        checks.append(
            Check(
                "GPU",
                FAIL,
                f"{n}{gpu.name} ({_gib(gpu.free)} free of {_gib(gpu.total)}), but llama.cpp was built without "
                "CUDA: everything runs on the CPU",
                _fix_for_gpu(facts),
            )
        )
    else:
        checks.append(Check("GPU", INFO, "no NVIDIA GPU found (nvidia-smi / NVML) and no GPU backend device"))

    checks.append(_offload_check(facts, gpu_devs))
    checks.append(_staging_check(facts, reinstall))
    checks.append(_cpu_check(facts))
    checks.append(_amx_check(facts))
    checks.append(_versions_check(facts))
    return checks


def _offload_check(facts: Facts, gpu_devs: list[bindings.BackendDevice]) -> Check:
    probe = facts.offload
    if probe is None:
        return Check("GPU offload", INFO, "load test skipped")
    if not probe.loaded:
        return Check(
            "GPU offload",
            FAIL,
            f"a tiny generated model failed to load: {probe.error}",
            f"reinstall llama-cpp-python=={bindings.PINNED_VERSION}; "
            "run with LOCAL_EAGLE_LLAMA_LOG=1 to see llama.cpp's log",
        )
    where = ", ".join(f"{k} {v:.2f} MiB" for k, v in probe.buffers.items())
    if not probe.gpu_build and gpu_backends(facts):
        return Check(
            "GPU offload",
            INFO,
            f"no GPU offload: {', '.join(gpu_backends(facts))} built in but no device found; the tiny model "
            f"loads on the CPU ({where})",
        )
    if not probe.gpu_build:
        return Check("GPU offload", OK, f"no GPU offload (CPU build); the tiny model loads on the CPU ({where})")
    names = [d.name for d in gpu_devs]
    on_gpu = {k: v for k, v in probe.buffers.items() if any(k.startswith(n) for n in names) and "Host" not in k}
    counted = probe.layers_offloaded is not None and probe.layers_offloaded == probe.layers_total
    if on_gpu and counted:
        return Check(
            "GPU offload",
            OK,
            f"offloaded {probe.layers_offloaded}/{probe.layers_total} layers of a tiny model to GPU ({where})",
        )
    return Check(
        "GPU offload",
        FAIL,
        f"a GPU build, but llama.cpp kept the weights off the GPU "
        f"(offloaded {probe.layers_offloaded}/{probe.layers_total}; buffers: {where or 'none reported'})",
        "check that the GPU is visible to this process (CUDA_VISIBLE_DEVICES, driver: nvidia-smi) and has free "
        "memory; run with LOCAL_EAGLE_LLAMA_LOG=1 to see llama.cpp's device log",
    )


def _staging_check(facts: Facts, reinstall: str) -> Check:
    missing = [name for name, present in facts.staging.items() if not present]
    n = len(facts.staging)
    if not missing:
        return Check("staging symbols", OK, f"all {n} present (llama-ext.h, bound by mangled name)")
    return Check(
        "staging symbols",
        FAIL,
        f"{len(missing)} of {n} missing: " + ", ".join(f"llama_{m}" for m in missing) + "; EAGLE drafting cannot run",
        reinstall
        + f" (these symbols exist only in the llama.cpp that llama-cpp-python {bindings.PINNED_VERSION} vendors)",
    )


def _cpu_check(facts: Facts) -> Check:
    on = [k for k, v in facts.cpu_features.items() if v]
    detail = " ".join(on) if on else "none of " + ", ".join(CPU_FEATURES)
    x86 = any(k.startswith("AVX") or k == "F16C" for k in facts.cpu_features)
    if x86 and not facts.cpu_features.get("AVX2"):
        return Check(
            "CPU features",
            WARN,
            detail + "; no AVX2: layers left on the CPU decode slowly",
            "offload every layer to the GPU, or rebuild llama-cpp-python on this machine (CMAKE_ARGS=-DGGML_NATIVE=on)",
        )
    return Check("CPU features", OK, detail)


def _amx_check(facts: Facts) -> Check:
    amx = facts.cpu_features.get("AMX_INT8", False)
    if not facts.gpu_offload_supported:
        why = "AMX present" if amx else "no AMX here"
        return Check(
            "AMX repack workaround",
            INFO,
            f"in effect: CPU builds load models with use_extra_bufts off ({why}; the AMX/repack buffers "
            "segfaulted on Q4_K_M decode)",
        )
    return Check(
        "AMX repack workaround",
        INFO,
        "not applied on a GPU build; layers kept on the CPU use llama.cpp's repack buffers"
        + (" (this CPU has AMX)" if amx else ""),
    )


def _versions_check(facts: Facts) -> Check:
    parts = [f"{k} {v or 'not installed'}" for k, v in facts.versions.items()]
    detail = f"python {facts.python}; " + ", ".join(parts)
    if facts.versions.get("torch") is None:
        return Check("packages", INFO, detail + " (torch is needed for .bin checkpoints, training and the tests)")
    return Check("packages", OK, detail)


def drafter_check(path: Path) -> Check:
    """What drafts from ``path`` (``doctor --draft``), read from its GGUF header alone: a drafter's family (EAGLE 3,
    EAGLE 3.1, DFlash, ...) from its architecture and keys, or a target's own MTP (NextN) head, and whether
    local-eagle drafts with it."""
    from local_eagle.errors import LocalEagleError
    from local_eagle.gguf import model_info, read_header
    from local_eagle.gguf.info import drafts_with, family_name
    from local_eagle.gguf.keys import KEY_NEXTN_PREDICT_LAYERS

    name = f"drafter {path.name}"
    try:
        header = read_header(path, "drafter GGUF")
        info = model_info(header, path, "drafter GGUF")
    except (LocalEagleError, OSError) as e:
        return Check(name, FAIL, str(e), "point --draft at a drafter GGUF (local-eagle convert makes one)")
    layers = f"target layers {info.target_layers}"
    if info.is_drafter:
        return Check(name, OK, f"{info.family_name} drafter ({info.arch}), {layers}: local-eagle drafts with it")
    if info.is_block_drafter and drafts_with(info.family):
        return Check(name, OK, f"{info.family_name} block drafter ({info.arch}), block of {info.block_size}, {layers}: "
                     "local-eagle drafts with it, one block a round")  # fmt: skip
    if info.is_block_drafter:
        return Check(
            name,
            INFO,
            f"{info.family_name} block drafter ({info.arch}), block of {info.block_size}, {layers}: convert, show "
            "and fit take it; local-eagle does not draft with this family yet",
            "run with an EAGLE 3 / 3.1, a DFlash or a DSpark drafter meanwhile",
        )
    heads = header.kv.get(KEY_NEXTN_PREDICT_LAYERS.format(arch=info.arch), 0)
    if isinstance(heads, int) and heads > 0:
        return Check(name, OK, f"a target ({info.arch}) with its own {family_name('mtp')} head ({heads} NextN "
                     "block): it drafts with it when no drafter is named")  # fmt: skip
    return Check(name, WARN, f"a target model ({info.arch}), not a drafter, and without an MTP head",
                 "give --draft a drafter GGUF; the target goes to --model")  # fmt: skip


def run(load_test: bool = True, draft: Path | None = None) -> Report:
    facts = gather(load_test=load_test)
    checks = evaluate(facts)
    if draft is not None:
        checks.append(drafter_check(draft))
    return Report(facts, checks)

"""Which GPU a plan is for: a preset, a size given by hand, or the card in this machine.

Presets carry the total memory ``nvidia-smi`` reports for each card. Detection asks
``nvidia-smi`` first and NVML (``libnvidia-ml``, through ctypes) second; on a machine without
an NVIDIA GPU both are simply absent and detection returns None, so planning on a laptop works.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from local_eagle.errors import LocalEagleError
from local_eagle.units import GiB, MiB
from local_eagle.vram.plan import DEFAULT_OVERHEAD, GPUBudget


@dataclass(frozen=True)
class Preset:
    key: str
    name: str
    total_mib: int


PRESETS: dict[str, Preset] = {
    p.key: p
    for p in (
        Preset("rtx4090", "NVIDIA GeForce RTX 4090", 24564),
        Preset("rtx3090", "NVIDIA GeForce RTX 3090", 24576),
        Preset("rtx5090", "NVIDIA GeForce RTX 5090", 32607),
        Preset("rtx4080", "NVIDIA GeForce RTX 4080", 16376),
        Preset("rtx4070ti", "NVIDIA GeForce RTX 4070 Ti", 12282),
        Preset("rtx4060ti-16", "NVIDIA GeForce RTX 4060 Ti 16GB", 16380),
        Preset("rtx3060", "NVIDIA GeForce RTX 3060 12GB", 12288),
        Preset("a6000", "NVIDIA RTX A6000", 49140),
        Preset("l4", "NVIDIA L4", 23034),
        Preset("a100-80", "NVIDIA A100 80GB", 81920),
        Preset("h100", "NVIDIA H100 80GB", 81559),
    )
}


@dataclass(frozen=True)
class DetectedGPU:
    name: str
    total: int
    free: int
    count: int = 1


def _parse_smi(text: str) -> DetectedGPU | None:
    """``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits`` output."""
    rows = [r for r in text.strip().splitlines() if r.strip()]
    if not rows:
        return None
    parts = [p.strip() for p in rows[0].split(",")]
    if len(parts) < 3:
        return None
    try:
        total, free = int(float(parts[-2])), int(float(parts[-1]))
    except ValueError:
        return None
    name = ",".join(parts[:-2]).strip() or "NVIDIA GPU"
    return DetectedGPU(name, total * MiB, free * MiB, len(rows))


def _from_smi(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> DetectedGPU | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        res = run(
            [exe, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return _parse_smi(res.stdout)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _from_nvml() -> DetectedGPU | None:
    path = ctypes.util.find_library("nvidia-ml")
    candidates = [p for p in (path, "libnvidia-ml.so.1", "nvml.dll") if p]
    lib = None
    for c in candidates:
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError:
            continue
    if lib is None:
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            return None
        try:
            count = ctypes.c_uint(0)
            if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
                return None
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
                return None
            mem = _NvmlMemory()
            if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) != 0:
                return None
            buf = ctypes.create_string_buffer(96)
            name = "NVIDIA GPU"
            if lib.nvmlDeviceGetName(handle, buf, ctypes.c_uint(len(buf))) == 0:
                name = buf.value.decode("utf-8", "replace") or name
            return DetectedGPU(name, int(mem.total), int(mem.free), int(count.value))
        finally:
            lib.nvmlShutdown()
    except (AttributeError, OSError):
        return None


def detect() -> DetectedGPU | None:
    """The first NVIDIA GPU of this machine, or None when there is none (or no driver)."""
    return _from_smi() or _from_nvml()


def budget(
    gpu: str | None = None,
    vram_gb: float | None = None,
    overhead_mib: int | None = None,
    detector: Callable[[], DetectedGPU | None] = detect,
) -> GPUBudget:
    """The VRAM budget from ``--gpu``, ``--vram-gb`` or detection, in that order."""
    overhead = DEFAULT_OVERHEAD if overhead_mib is None else overhead_mib * MiB
    if overhead < 0:
        raise LocalEagleError(f"--overhead-mib must be >= 0, got {overhead_mib}")
    if gpu is not None and vram_gb is not None:
        raise LocalEagleError("give either --gpu or --vram-gb, not both")
    if vram_gb is not None:
        if not vram_gb > 0:
            raise LocalEagleError(f"--vram-gb must be positive, got {vram_gb}")
        total = int(vram_gb * GiB)
        return GPUBudget(f"{vram_gb:g} GiB GPU", total, total, "manual", overhead)
    if gpu is not None:
        p = PRESETS.get(gpu.lower().replace("_", "-"))
        if p is None:
            raise LocalEagleError(f"--gpu {gpu!r}: unknown GPU preset; expected one of {', '.join(PRESETS)}")
        return GPUBudget(p.name, p.total_mib * MiB, p.total_mib * MiB, "preset", overhead)
    found = detector()
    if found is None:
        raise LocalEagleError(
            "no NVIDIA GPU found on this machine; say which one you plan for with --gpu "
            f"({', '.join(PRESETS)}) or --vram-gb"
        )
    return GPUBudget(found.name, found.total, found.free, "detected", overhead)

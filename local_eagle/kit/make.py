"""Make the kit on a connected machine: the prebuilt CUDA libraries and the wheels the GPU image lacks, one bundle.

A lend is 15 minutes of device time; a command carries at most 64 MiB, the checkout included
(~32 MiB, mostly the two shipped drafters). So nothing is built there: ``make`` builds llama.cpp
with CUDA here (``kit/cuda.py``, cached), packs it as tar.xz, adds the few wheels the image
lacks, and writes ``ROOT/call/`` for the device tool to carry. Every call of the plan carries
that same bundle (``kit/plan.py``). A ``--cpu`` kit packs this environment's CPU build instead,
for the dry run that rehearses the plan here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from local_eagle.kit.cuda import (
    DEFAULT_ARCHS,
    MIB,
    PACKED,
    BuildRecord,
    KitError,
    Library,
    _run,
    build,
    sha256_file,
    travels,
    write_pack,
)
from local_eagle.kit.deps import Pin, wheels_needed

CALL_LIMIT = 64 * MIB
MARGIN = 1 * MIB  # room for the tree to grow a little after the kit was made
PLATFORMS = ("manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "any")  # fmt: skip
LLAMA_CPP_PYTHON = "llama-cpp-python"
BUNDLE = "call"

Log = Callable[[str], None]


@dataclass
class Kit:
    root: Path
    python: str
    cuda: bool
    build: BuildRecord | None = None
    wheels: list[str] = field(default_factory=list)
    bundle_bytes: int = 0
    tree_bytes: int = 0

    def to_dict(self) -> dict:
        return {"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": self.python, "cuda": self.cuda,
                "build": self.build.to_dict() if self.build else None, "wheels": self.wheels,
                "bundle": f"{self.root.name}/{BUNDLE}", "bundle_bytes": self.bundle_bytes,
                "tree_bytes": self.tree_bytes}  # fmt: skip


def installed_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise KitError(f"{name} is not installed here: make the kit from local-eagle's own environment") from None


def tree_bytes(repo: Path) -> int:
    """Bytes the device tool sends every call: tracked files and untracked ones git does not ignore."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as e:
        raise KitError(f"{repo}: cannot list the working tree with git ({e})") from None
    total = 0
    for name in out.decode().split("\0"):
        p = repo / name
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def fetch_wheel(pin: Pin, dest: Path, python: str) -> Path:
    stem = pin.name.replace("-", "_").lower()

    def have() -> list[Path]:
        return [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{stem}-{pin.version}-".lower())]

    if have():
        return have()[0]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           python, "--implementation", "cp", "-d", str(dest), pin.spec]  # fmt: skip
    for plat in PLATFORMS:
        cmd[-1:-1] = ["--platform", plat]
    _run(cmd, f"downloading the wheel of {pin.spec} for Python {python}")
    if not have():
        raise KitError(f"pip downloaded no wheel for {pin.spec}")
    return have()[0]


def pack_installed(dist_name: str, out: Path) -> list[Library]:
    """An installed distribution's package (its RECORD) as the same tar.xz a CUDA build is packed into: the CPU
    dry run then installs exactly as the GPU machine does."""
    dist = metadata.distribution(dist_name)
    files = [f for f in (dist.files or []) if not str(f).startswith("..") and "__pycache__" not in str(f)]
    if not files:
        raise KitError(f"{dist_name}: its install lists no files (an editable install cannot be packed)")
    packages = tuple({str(f).split("/", 1)[0] for f in files if str(f).endswith(".py") and "/" in str(f)})
    members = []
    for f in files:
        p = Path(str(f.locate()))
        if p.is_file() and travels(str(f), packages):
            members.append((str(f), p.read_bytes()))
    return write_pack(members, out, strip=False, preset=6)


def cpu_record(out: Path) -> BuildRecord:
    version = installed_version(LLAMA_CPP_PYTHON)
    libs = pack_installed(LLAMA_CPP_PYTHON, out)
    return BuildRecord(key=f"llama-cpp-python-{version}-cpu-installed", llama_cpp_python=version, toolkit="none",
                       archs=[], cmake_args=[], wheel="(this environment's install)", wheel_sha256="",
                       packed=out.name, packed_bytes=out.stat().st_size, packed_sha256=sha256_file(out),
                       libraries=libs, made=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # fmt: skip


def make_kit(root: Path, repo: Path, python: str = "3.12", archs: tuple[str, ...] = DEFAULT_ARCHS, cuda: bool = True,
             jobs: int | None = None, log: Log = print, lean: bool = False) -> Kit:  # fmt: skip
    """Make (or refresh) the kit under ``root``: ``root/call/`` is what every call of the plan carries."""
    bundle = root / BUNDLE
    shutil.rmtree(bundle, ignore_errors=True)
    (bundle / "wheels").mkdir(parents=True)
    (root / "wheels").mkdir(parents=True, exist_ok=True)
    kit = Kit(root, python, cuda)
    kit.tree_bytes = tree_bytes(repo)
    version = installed_version(LLAMA_CPP_PYTHON)
    if cuda:
        kit.build, folder = build(version, archs, jobs=jobs, log=log, lean=lean)
        os.link(folder / kit.build.packed, bundle / PACKED)
    else:
        kit.build = cpu_record(bundle / PACKED)
        log(f"cpu: packed this environment's llama-cpp-python {version} ({kit.build.packed_bytes / MIB:.1f} MiB)")
    pins = wheels_needed(python)
    log(f"wheels: {len(pins)} for Python {python} ({', '.join(p.spec for p in pins)})")
    for pin in pins:
        w = fetch_wheel(pin, root / "wheels", python)
        os.link(w, bundle / "wheels" / w.name)
        kit.wheels.append(w.name)
    kit.bundle_bytes = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    (bundle / "kit.json").write_text(json.dumps(kit.to_dict(), indent=1) + "\n")
    kit.bundle_bytes += (bundle / "kit.json").stat().st_size
    (root / "kit.json").write_text(json.dumps(kit.to_dict(), indent=1) + "\n")
    total = kit.tree_bytes + kit.bundle_bytes
    log(f"bundle {bundle}: {kit.bundle_bytes / MIB:.1f} MiB beside a {kit.tree_bytes / MIB:.1f} MiB tree = "
        f"{total / MIB:.1f} of {CALL_LIMIT / MIB:.0f} MiB a call")
    if total > CALL_LIMIT - MARGIN:
        raise KitError(f"{bundle}: {total / MIB:.1f} MiB with the tree is over one call's {CALL_LIMIT / MIB:.0f} MiB "
                       f"(less {MARGIN / MIB:.0f} MiB of room): trim the build or the wheels")  # fmt: skip
    return kit

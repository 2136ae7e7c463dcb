"""CUDA builds of the pinned llama.cpp, made ahead on a CPU machine, so a lent GPU spends no minute compiling.

A lend of the GPU machine is 15 minutes in all, and compiling ggml's CUDA kernels for one
architecture takes about 50 CPU-minutes. So the kit builds llama-cpp-python with ``GGML_CUDA=ON``
here, with the CUDA toolkit from the package index (``nvidia-cuda-nvcc`` and friends unpack into
a toolkit under ``nvidia/cu13``), and the GPU machine only unpacks the libraries. They link
against the CUDA runtime's sonames (``libcudart.so.13``, ``libcublas.so.13``), which the GPU
image has beside its PyTorch and a user's CUDA install has too: none of the toolkit travels.

The toolkit lacks the driver's link stub (``libcuda.so``, which ggml links for its virtual memory
pool). A stub with every ``cu*`` name in the toolkit's ``cuda.h`` stands in at link time only; at
run time the driver's own ``libcuda.so.1`` is loaded, so the build is the stock one (VMM on).

Builds are cached under ``$LOCAL_EAGLE_KIT_CACHE`` (default ``~/.cache/local-eagle/kit``), one
folder per llama-cpp-python version, toolkit version and architectures; each holds its
``record.json`` (build minutes, sizes, SHA-256). The standard library only (and ``local_eagle.files``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from local_eagle.files import sha256_file

MIB = 1 << 20
TOOLKIT_SERIES = "13.0"
TOOLKIT_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cublas",
                    "nvidia-cuda-cccl")  # fmt: skip
DEFAULT_ARCHS = ("90",)  # H100 / H200; 89 for an RTX 4090, 120 for an RTX 50x0
PLATFORMS = ("manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64",
             "manylinux_2_12_x86_64")  # fmt: skip
PACKED = "llama-cpp-python-cuda.tar.xz"
# quantised matmul (MMQ) kernels left out of the build, so the libraries travel beside the checkout in one call:
# i-quants and FP4/ternary types no local-eagle benchmark, test or shipped pair uses. Their matmuls still run,
# through cuBLAS on dequantised weights (ggml's own path for types without MMQ); the K-quants and legacy quants
# (Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q4_0...) keep their kernels.
MMQ_DROPPED = ("IQ1_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "MXFP4", "NVFP4",
               "Q1_0", "Q2_0")  # fmt: skip
# the CPU part runs on whatever host the GPU sits in: AVX2-era x86-64, not this machine's own features
CPU_ARGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_BMI2=ON")  # fmt: skip

Log = Callable[[str], None]


class KitError(Exception):
    """A step of making the kit failed; one line saying which and why."""


class CudaBuildError(KitError):
    """A step of the CUDA build failed; one line saying which and why."""


def cache_root() -> Path:
    return Path(os.environ.get("LOCAL_EAGLE_KIT_CACHE") or Path.home() / ".cache" / "local-eagle" / "kit")


def parse_archs(text: str) -> tuple[str, ...]:
    """``90``, ``sm_90``, ``89,90`` -> ('90',) ...: CMake's numbers, one build per set."""
    out = []
    for part in text.replace(";", ",").split(","):
        p = part.strip().lower().removeprefix("sm_").removeprefix("sm")
        if not re.fullmatch(r"\d{2,3}[af]?", p):
            raise CudaBuildError(f"--arch {text!r}: expected CUDA architectures like 90, sm_89 or 89,90")
        out.append(p)
    return tuple(dict.fromkeys(out))


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None, log_file: Path | None = None) -> None:
    if log_file is not None:
        with log_file.open("ab") as f:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        if r.returncode != 0:
            tail = log_file.read_bytes()[-2000:].decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise CudaBuildError(f"{what} failed (exit {r.returncode}; log {log_file}): {tail[0][:300]}")
        return
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CudaBuildError(f"{what} failed: {tail[0][:300]}")


# --- the toolkit -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolkit:
    root: Path  # the folder holding bin/nvcc, include/, lib/ (nvidia/cu13)
    version: str  # nvcc's release, e.g. 13.0.88

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"


def nvcc_version(nvcc: Path) -> str:
    r = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
    m = re.search(r"V(\d+\.\d+\.\d+)", r.stdout)
    if r.returncode != 0 or not m:
        raise CudaBuildError(f"{nvcc}: does not run or print its version ({(r.stderr or r.stdout).strip()[:200]})")
    return m.group(1)


def stub_source(cuda_h: str) -> str:
    """C source defining every driver entry point ``cuda.h`` names (and the ``_v2`` names its macros map to)."""
    names = set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", cuda_h))
    for alias, target in re.findall(r"#define\s+(cu[A-Z]\w*)\s+(cu[A-Z]\w*)\b", cuda_h):
        names.update((alias, target))
    if "cuInit" not in names:
        raise CudaBuildError("cuda.h names no cuInit: not the CUDA driver API header")
    return "".join(f"int {n}(void) {{ return 999; }}\n" for n in sorted(names))


def _finish_toolkit(root: Path) -> None:
    """What CMake's FindCUDAToolkit expects of a toolkit that the wheels leave out: lib64, unversioned .so, stub."""
    lib = root / "lib"
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for so in sorted(lib.glob("lib*.so.*")):
        plain = lib / (so.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(so.name)
    stubs = lib / "stubs"
    stubs.mkdir(exist_ok=True)
    src = stubs / "cuda_stub.c"
    src.write_text(stub_source((root / "include" / "cuda.h").read_text()))
    _run(["cc", "-shared", "-fPIC", "-o", str(stubs / "libcuda.so"), "-Wl,-soname,libcuda.so.1", str(src)],
         "compiling the libcuda link stub")  # fmt: skip


def fetch_toolkit(cache: Path, series: str = TOOLKIT_SERIES, log: Log = print) -> Toolkit:
    """The CUDA toolkit of ``series`` from the package index, unpacked once into ``cache/toolkits``."""
    for done in sorted((cache / "toolkits").glob(f"cuda-{series}.*/nvidia/cu*/bin/nvcc")):
        root = done.parent.parent
        if (root / "lib" / "stubs" / "libcuda.so").is_file():
            return Toolkit(root, nvcc_version(done))
    dl = cache / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dl),
           "--python-version", "3.12", "--implementation", "cp"]  # fmt: skip
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    log(f"toolkit: downloading {', '.join(TOOLKIT_PACKAGES)} {series}.x")
    _run([*cmd, *(f"{p}=={series}.*" for p in TOOLKIT_PACKAGES)], "downloading the CUDA toolkit wheels")
    staging = cache / "toolkits" / f".unpacking-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for pkg in TOOLKIT_PACKAGES:
        stem = pkg.replace("-", "_")
        wheels = sorted(dl.glob(f"{stem}-{series}.*.whl"))
        if not wheels:
            raise CudaBuildError(f"pip downloaded no wheel of {pkg} {series}.x into {dl}")
        with zipfile.ZipFile(wheels[-1]) as z:
            z.extractall(staging)
    roots = sorted(staging.glob("nvidia/cu*/bin/nvcc"))
    if not roots:
        raise CudaBuildError(f"the toolkit wheels hold no nvidia/cu*/bin/nvcc (looked in {staging})")
    root = roots[0].parent.parent
    for exe in [*(root / "bin").rglob("*"), *(root / "nvvm" / "bin").glob("*")]:
        if exe.is_file():
            exe.chmod(exe.stat().st_mode | 0o111)
    version = nvcc_version(root / "bin" / "nvcc")
    _finish_toolkit(root)
    final = cache / "toolkits" / f"cuda-{version}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    log(f"toolkit: CUDA {version} in {final}")
    return Toolkit(final / root.relative_to(staging), version)


# --- the build ---------------------------------------------------------------------------------


def build_key(version: str, toolkit_version: str, archs: tuple[str, ...]) -> str:
    return f"llama-cpp-python-{version}-cuda{toolkit_version}-" + "-".join(f"sm_{a}" for a in archs)


def cmake_args(toolkit: Toolkit, archs: tuple[str, ...]) -> list[str]:
    # -real: machine code only, no PTX for later GPUs (a third of the size; a new GPU gets its own build)
    return ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=" + ";".join(f"{a}-real" for a in archs),
            f"-DCMAKE_CUDA_COMPILER={toolkit.nvcc}", f"-DCUDAToolkit_ROOT={toolkit.root}", *CPU_ARGS,
            "-DLLAVA_BUILD=OFF"]  # fmt: skip


@dataclass
class Library:
    name: str
    bytes: int
    sha256: str


@dataclass
class BuildRecord:
    key: str
    llama_cpp_python: str
    toolkit: str
    archs: list[str]
    cmake_args: list[str]
    wheel: str
    wheel_sha256: str
    packed: str
    packed_bytes: int
    packed_sha256: str
    libraries: list[Library] = field(default_factory=list)
    mmq_dropped: list[str] = field(default_factory=list)
    wall_minutes: float = 0.0  # the make that finished the build (a resumed build counts only its part)
    object_minutes: float = 0.0  # every compile and link step's own minutes, from ninja's log (all resumes)
    objects: int = 0
    cuda_objects: int = 0
    cpus: int = 0
    made: str = ""
    host: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BuildRecord:
        libs = [Library(**x) for x in d.get("libraries", [])]
        return cls(**{**d, "libraries": libs})


def ninja_minutes(build_dir: Path) -> tuple[float, int, int]:
    """(minutes of all steps, steps, CUDA object steps) from ``.ninja_log``: the build's own cost, resumes too."""
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return 0.0, 0, 0
    last: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 4 and cols[0].isdigit() and cols[1].isdigit():
            last[cols[3]] = int(cols[1]) - int(cols[0])
    cuda = sum(1 for k in last if k.endswith(".cu.o"))
    return sum(last.values()) / 60000, len(last), cuda


def fetch_sdist(cache: Path, version: str) -> Path:
    dl = cache / "downloads"
    dest = dl / f"llama_cpp_python-{version}.tar.gz"
    if not dest.is_file():
        dl.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={version}", "-d", str(dl)], "downloading the llama-cpp-python sdist")  # fmt: skip
    if not dest.is_file():
        raise CudaBuildError(f"{dest}: pip downloaded no sdist of that name")
    return dest


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    if (dest / "pyproject.toml").is_file():
        return dest
    tmp = dest.with_name(dest.name + f".unpacking-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(sdist, "r:gz") as t:
        t.extractall(tmp, filter="data")
    tops = [p for p in tmp.iterdir() if p.is_dir()]
    if len(tops) != 1 or not (tops[0] / "pyproject.toml").is_file():
        raise CudaBuildError(f"{sdist}: not a llama-cpp-python sdist (one top folder with pyproject.toml)")
    os.replace(tops[0], dest)
    shutil.rmtree(tmp, ignore_errors=True)
    return dest


def runtime_extras() -> dict[str, bytes]:
    """Shared libraries the build needs that a bare image may lack, put beside ggml's (its ``$ORIGIN`` rpath finds
    them there): GCC's OpenMP runtime, which ggml's CPU backend links and PyTorch ships only under a hashed name."""
    out = {}
    try:
        r = subprocess.run(["cc", "-print-file-name=libgomp.so.1"], capture_output=True, text=True)
        p = Path(r.stdout.strip())
        if r.returncode == 0 and p.is_absolute() and p.is_file():
            out["llama_cpp/lib/libgomp.so.1"] = p.resolve().read_bytes()
    except OSError:
        pass
    return out


def pack_wheel(wheel: Path, out: Path, strip: bool = True, extras: dict[str, bytes] | None = None) -> list[Library]:
    """The wheel's package (and ``extras``) as a tar.xz to unpack onto ``sys.path``.

    Only ``llama_cpp/`` and the dist-info travel: the wheel also installs the headers and a second copy of
    every library under a top-level ``lib/``, none of which the package loads. Zip has no links, so each
    library is in the wheel three times (``.so``, ``.so.0``, ``.so.0.25.3``): here once, the other names
    links to it. With xz that is ~40% of the wheel, which is what lets it travel beside the checkout."""
    with zipfile.ZipFile(wheel) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist() if not i.is_dir() and travels(i.filename)]
    names = {n for n, _ in members}
    members += [(n, data) for n, data in (extras or {}).items() if n not in names]
    return write_pack(members, out, strip)


def travels(name: str, packages: tuple[str, ...] = ("llama_cpp",)) -> bool:
    top = name.split("/", 1)[0]
    return top in packages or top.endswith(".dist-info")


def write_pack(members: list[tuple[str, bytes]], out: Path, strip: bool = True, preset: int = 9) -> list[Library]:
    """Files as a tar.xz, libraries stripped and stored once per folder (other names as links); returns the
    libraries stored."""
    libs: list[Library] = []
    is_lib = re.compile(r"\.so(\.\d+)*$")
    data_of = {n: (_strip(d) if strip and is_lib.search(n) else d) for n, d in members}
    first: dict[tuple[str, str], str] = {}  # (folder, sha256) -> the name stored
    digests = {n: hashlib.sha256(d).hexdigest() for n, d in data_of.items()}
    for name in sorted(data_of, key=lambda n: (-len(n), n)):  # the longest name (the full version) is the file
        first.setdefault((os.path.dirname(name), digests[name]), name)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with tarfile.open(tmp, "w:xz", preset=preset) as t:
        for name in sorted(data_of):
            data = data_of[name]
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            keep = first[(os.path.dirname(name), digests[name])]
            if is_lib.search(name) and keep != name:
                ti.type, ti.linkname = tarfile.SYMTYPE, os.path.basename(keep)
                t.addfile(ti)
                continue
            if is_lib.search(name):
                libs.append(Library(name, len(data), digests[name]))
            ti.size, ti.mode = len(data), 0o755 if is_lib.search(name) else 0o644
            t.addfile(ti, io.BytesIO(data))
    os.replace(tmp, out)
    return libs


def _strip(data: bytes) -> bytes:
    """``strip --strip-unneeded``: symbols and the like nothing loads (10% of the CUDA library)."""
    if not shutil.which("strip"):
        return data
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(data)
        f.flush()
        if subprocess.run(["strip", "--strip-unneeded", f.name], capture_output=True).returncode != 0:
            return data
        return Path(f.name).read_bytes()


def trim_mmq(src: Path, dropped: tuple[str, ...] = MMQ_DROPPED) -> list[str]:
    """Leave ``dropped`` types' MMQ kernels out of the vendored ggml: their template instances go, and ``mmq.cu``
    neither dispatches to them nor says MMQ supports them (so ggml takes its cuBLAS path). Idempotent; a source
    that does not look as expected is refused, so a new llama.cpp layout shows at once."""
    cuda_dir = src / "vendor" / "llama.cpp" / "ggml" / "src" / "ggml-cuda"
    mmq = cuda_dir / "mmq.cu"
    try:
        text = mmq.read_text()
    except OSError as e:
        raise CudaBuildError(f"{mmq}: cannot read ({e.strerror})") from None
    head, sep, tail = text.partition("bool ggml_cuda_should_use_mmq(")
    if not sep or "static void ggml_cuda_mul_mat_q_switch_type(" not in head:
        raise CudaBuildError(f"{mmq}: no MMQ dispatch and support switch where expected: not the expected layout")
    lines, rest = head.split("\n"), tail.split("\n")
    removed = []
    for t in dropped:
        case = f"        case GGML_TYPE_{t}:"
        if case in lines:  # the dispatch: the case down to its own ``break;`` (12 spaces; inner ones are deeper)
            i = lines.index(case)
            j = next((k for k in range(i + 1, len(lines)) if lines[k] == "            break;"), None)
            if j is None or any(ln.startswith("        case ") for ln in lines[i + 1 : j]):
                raise CudaBuildError(f"{mmq}: the MMQ dispatch of {t} does not end where expected")
            del lines[i : j + 1]
        if case in rest:  # the support switch: the case label only
            rest.remove(case)
        if f"GGML_TYPE_{t}>" in "\n".join(lines) or case in rest:
            raise CudaBuildError(f"{mmq}: could not take {t} out of the MMQ dispatch: not the expected layout")
        inst = cuda_dir / "template-instances" / f"mmq-instance-{t.lower()}.cu"
        if inst.is_file():
            inst.unlink()
            removed.append(inst.name)
    text = "\n".join(lines) + sep + "\n".join(rest)
    if "mul_mat_q_case<GGML_TYPE_Q4_K>" not in text:
        raise CudaBuildError(f"{mmq}: lost the Q4_K kernel while trimming: refusing")
    tmp = mmq.with_suffix(".cu.tmp")
    tmp.write_text(text)
    if tmp.read_text() != mmq.read_text():
        os.replace(tmp, mmq)
    else:
        tmp.unlink()
    return removed


def restore_mmq(src: Path, sdist: Path) -> list[str]:
    """Undo :func:`trim_mmq`: ``mmq.cu`` and the MMQ template instances as the sdist has them (only what differs is
    written, so an untouched source keeps its times and nothing rebuilds)."""
    cuda_dir = "vendor/llama.cpp/ggml/src/ggml-cuda/"
    written = []
    with tarfile.open(sdist, "r:gz") as t:
        for m in t.getmembers():
            rel = m.name.split("/", 1)[-1]
            if not m.isfile() or not rel.startswith(cuda_dir):
                continue
            tail = rel[len(cuda_dir):]
            if tail != "mmq.cu" and not (tail.startswith("template-instances/mmq-instance-") and tail.endswith(".cu")):
                continue
            f = t.extractfile(m)
            data = f.read() if f else b""
            dst = src / rel
            if dst.is_file() and dst.read_bytes() == data:
                continue
            dst.write_bytes(data)
            written.append(tail)
    return written


def read_record(folder: Path) -> BuildRecord | None:
    try:
        return BuildRecord.from_dict(json.loads((folder / "record.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def build(version: str, archs: tuple[str, ...] = DEFAULT_ARCHS, cache: Path | None = None, jobs: int | None = None,
          log: Log = print, force: bool = False, lean: bool = False) -> tuple[BuildRecord, Path]:  # fmt: skip
    """Build (or find) llama-cpp-python ``version`` with CUDA for ``archs``; returns its record and folder.

    The CMake build folder is kept: a build stopped half way resumes where it was, and a second
    ``make`` with the same key only packs. ``lean`` leaves out :data:`MMQ_DROPPED`'s kernels (for
    when the bytes of a call run short); switching it rebuilds only the MMQ objects.
    """
    cache = cache or cache_root()
    toolkit = fetch_toolkit(cache, log=log)
    key = build_key(version, toolkit.version, archs)
    folder = cache / "builds" / key
    rec = read_record(folder)
    if rec and not force and (folder / rec.packed).is_file() and bool(rec.mmq_dropped) == lean:
        log(f"build: cached, {folder}")
        return rec, folder
    folder.mkdir(parents=True, exist_ok=True)
    sdist = fetch_sdist(cache, version)
    src = unpack_sdist(sdist, folder / "src")
    if lean:
        trim_mmq(src)
    else:
        restore_mmq(src, sdist)
    args = cmake_args(toolkit, archs)
    wheels = folder / "wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    env = {**os.environ, "CMAKE_ARGS": " ".join(args), "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs or os.cpu_count() or 2),
           "PATH": f"{toolkit.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    log(f"build: llama-cpp-python {version} for sm_{', sm_'.join(archs)} with CUDA {toolkit.version} "
        f"({env['CMAKE_BUILD_PARALLEL_LEVEL']} jobs; about 50 CPU-minutes on a 2-core VM), log {folder / 'build.log'}")
    t0 = time.monotonic()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), "--config-settings",
          f"build-dir={folder / 'build'}", "-v", str(src)], "building llama-cpp-python with CUDA", env,
         folder / "build.log")  # fmt: skip
    wall = (time.monotonic() - t0) / 60
    built = sorted(wheels.glob("llama_cpp_python-*.whl"))
    if not built:
        raise CudaBuildError(f"{wheels}: the build made no wheel")
    return finish(folder, built[-1], version, toolkit, archs, args, wall, log, MMQ_DROPPED if lean else ()), folder


def finish(folder: Path, wheel: Path, version: str, toolkit: Toolkit, archs: tuple[str, ...], args: list[str],
           wall_minutes: float, log: Log = print, dropped: tuple[str, ...] = ()) -> BuildRecord:  # fmt: skip
    """Pack the built wheel for travel and write the build's record."""
    packed = folder / PACKED
    libs = pack_wheel(wheel, packed, extras=runtime_extras())
    if not any("ggml-cuda" in lib.name for lib in libs):
        raise CudaBuildError(f"{wheel}: holds no libggml-cuda: CMake did not build the CUDA backend")
    minutes, objects, cuda_objects = ninja_minutes(folder / "build")
    rec = BuildRecord(
        key=folder.name, llama_cpp_python=version, toolkit=toolkit.version, archs=list(archs), cmake_args=args,
        wheel=wheel.name, wheel_sha256=sha256_file(wheel), packed=PACKED, packed_bytes=packed.stat().st_size,
        packed_sha256=sha256_file(packed), libraries=libs, mmq_dropped=list(dropped),
        wall_minutes=round(wall_minutes, 1), object_minutes=round(minutes, 1), objects=objects,
        cuda_objects=cuda_objects, cpus=os.cpu_count() or 0, made=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        host=_cpu_name())  # fmt: skip
    tmp = folder / "record.json.tmp"
    tmp.write_text(json.dumps(rec.to_dict(), indent=1) + "\n")
    os.replace(tmp, folder / "record.json")
    big = ", ".join(f"{Path(lib.name).name} {lib.bytes / MIB:.1f} MiB" for lib in libs if lib.bytes > MIB)
    log(f"build: packed {packed.stat().st_size / MIB:.1f} MiB ({big} unpacked)")
    return rec


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""

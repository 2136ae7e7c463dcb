"""The llama-cpp-python sdist without what its build never reads, so it fits one transfer.

The 0.3.36 sdist is 76.6 MB, over the 64 MiB one command may carry: a git pack of llama.cpp
(39 MB), the tokenizer-test vocabularies under ``models/`` (75 MB unpacked), llama.cpp's docs,
benches, web UI, tests and examples. None is built by llama-cpp-python's CMake (it builds
libllama, ggml and mtmd, with llama.cpp's tests and examples off), so the trimmed sdist
(about 8.5 MB) builds the same libraries, CPU or CUDA.
"""

from __future__ import annotations

import fnmatch
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from local_eagle.files import atomic_output

# relative to the sdist's top folder; a pattern ending in "/" drops the folder and everything under it
DROP: tuple[str, ...] = (
    ".git/",
    "docs/",
    "tests/",
    "examples/",
    "docker/",
    "vendor/llama.cpp/models/*.gguf",
    "vendor/llama.cpp/models/*.gguf.inp",
    "vendor/llama.cpp/models/*.gguf.out",
    "vendor/llama.cpp/docs/",
    "vendor/llama.cpp/benches/",
    "vendor/llama.cpp/media/",
    "vendor/llama.cpp/tests/",
    "vendor/llama.cpp/examples/",
    "vendor/llama.cpp/tools/ui/",
    "vendor/llama.cpp/.github/",
)

# what the build reads; a trimmed sdist without any of these is refused, so a new upstream layout shows at once
REQUIRED: tuple[str, ...] = (
    "pyproject.toml",
    "CMakeLists.txt",
    "llama_cpp/__init__.py",
    "llama_cpp/llama_cpp.py",
    "vendor/llama.cpp/CMakeLists.txt",
    "vendor/llama.cpp/src/llama.cpp",
    "vendor/llama.cpp/ggml/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cpu/CMakeLists.txt",
    "vendor/llama.cpp/common/CMakeLists.txt",
    "vendor/llama.cpp/tools/mtmd/CMakeLists.txt",
)


class TrimError(Exception):
    """An sdist that cannot be trimmed safely; one line naming the file."""


@dataclass(frozen=True)
class TrimResult:
    path: Path
    kept: int
    dropped: int
    bytes_in: int
    bytes_out: int


def dropped(relpath: str) -> bool:
    """Whether a path inside the sdist (without its top folder) is one the build never reads."""
    for pattern in DROP:
        if pattern.endswith("/"):
            if relpath == pattern[:-1] or relpath.startswith(pattern):
                return True
        elif fnmatch.fnmatchcase(relpath, pattern):
            return True
    return False


def trim_sdist(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> TrimResult:
    """Write ``dest`` (a .tar.gz) holding ``src`` without the paths in :data:`DROP`; atomic."""
    src_p, dest_p = Path(src), Path(dest)
    kept = dropped_n = 0
    seen: set[str] = set()
    with atomic_output(dest_p) as tmp:
        try:
            with tarfile.open(src_p, "r:gz") as tin, tarfile.open(tmp, "w:gz", compresslevel=9) as tout:
                top = None
                for member in tin:
                    name = member.name.lstrip("./")
                    head, _, rel = name.partition("/")
                    top = top or head
                    if head != top or ".." in Path(name).parts:
                        raise TrimError(f"{src_p}: member {member.name!r} lies outside the sdist's folder {top!r}")
                    if rel and dropped(rel):
                        dropped_n += 1
                        continue
                    if member.isfile():
                        tout.addfile(member, tin.extractfile(member))
                    elif member.isdir() or member.issym():
                        tout.addfile(member)
                    else:
                        dropped_n += 1
                        continue
                    seen.add(rel)
                    kept += 1
        except (tarfile.TarError, OSError, EOFError) as e:
            raise TrimError(f"{src_p}: not a readable sdist ({type(e).__name__}: {e})") from None
        lacking = [r for r in REQUIRED if r not in seen]
        if lacking:
            raise TrimError(f"{src_p}: the trimmed sdist would lack {', '.join(lacking)}: not llama-cpp-python's?")
    return TrimResult(dest_p, kept, dropped_n, src_p.stat().st_size, dest_p.stat().st_size)

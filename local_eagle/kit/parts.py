"""Files cut into checksummed parts, and put back together only when every byte checks out.

A part travels in one command's transfer; the manifest beside the parts says the whole file's
size and SHA-256 and each part's, so a part lost, cut short or swapped is named before anything
trusts the reassembled file.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from local_eagle.files import atomic_output, sha256_file

CHUNK = 1 << 20
MANIFEST_SUFFIX = ".parts.json"


class PartsError(Exception):
    """A part or a manifest that does not check out; the message is one line naming the file."""


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    name: str
    size: int
    sha256: str
    parts: list[Part] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"


def split_file(path: str | os.PathLike[str], outdir: str | os.PathLike[str], part_size: int) -> Path:
    """Cut ``path`` into ``<name>.partNNN`` files of at most ``part_size`` bytes; returns the manifest's path."""
    src, out = Path(path), Path(outdir)
    if part_size < 1:
        raise PartsError(f"part size must be at least 1 byte, got {part_size}")
    out.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    parts: list[Part] = []
    with src.open("rb") as f:
        while True:
            name = f"{src.name}.part{len(parts):03d}"
            h, size = hashlib.sha256(), 0
            tmp = out / (name + ".tmp")
            with tmp.open("wb") as o:
                while size < part_size and (block := f.read(min(CHUNK, part_size - size))):
                    o.write(block)
                    h.update(block)
                    whole.update(block)
                    size += len(block)
            if size == 0 and parts:
                tmp.unlink()
                break
            os.replace(tmp, out / name)
            parts.append(Part(name, size, h.hexdigest()))
            if size < part_size:
                break
    manifest = Manifest(src.name, sum(p.size for p in parts), whole.hexdigest(), parts)
    mpath = out / (src.name + MANIFEST_SUFFIX)
    with atomic_output(mpath) as tmp:
        tmp.write_text(manifest.to_json())
    return mpath


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
        parts = [Part(str(x["name"]), int(x["size"]), str(x["sha256"])) for x in raw["parts"]]
        m = Manifest(str(raw["name"]), int(raw["size"]), str(raw["sha256"]), parts)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PartsError(f"{p}: not a parts manifest ({type(e).__name__}: {e})") from None
    for part in m.parts:
        if Path(part.name).name != part.name or not part.name.startswith(m.name + ".part"):
            raise PartsError(f"{p}: part name {part.name!r} is not a part of {m.name!r}")
    if Path(m.name).name != m.name:
        raise PartsError(f"{p}: file name {m.name!r} must not contain a directory")
    return m


def missing_parts(manifest_path: str | os.PathLike[str], dirs: list[Path] | None = None) -> list[str]:
    """Names of the parts not yet present (by name and size) in the manifest's folder or ``dirs``."""
    mpath = Path(manifest_path)
    m = read_manifest(mpath)
    where = [mpath.parent, *(dirs or [])]
    return [p.name for p in m.parts if _find(p, where) is None]


def _find(part: Part, where: list[Path]) -> Path | None:
    for d in where:
        f = d / part.name
        if f.is_file() and f.stat().st_size == part.size:
            return f
    return None


def join_parts(
    manifest_path: str | os.PathLike[str], dest: str | os.PathLike[str], dirs: list[Path] | None = None
) -> Path:
    """Reassemble the file a manifest describes into ``dest`` (a file path), checking every part and the whole.

    The parts may lie in the manifest's folder or any of ``dirs``. The output is written to a
    temporary file and renamed only once the whole file's checksum matches, so ``dest`` is
    either the right file or absent.
    """
    mpath = Path(manifest_path)
    m = read_manifest(mpath)
    where = [mpath.parent, *(dirs or [])]
    out = Path(dest)
    if out.is_file() and out.stat().st_size == m.size and sha256_file(out) == m.sha256:
        return out
    whole = hashlib.sha256()
    with atomic_output(out) as tmp:
        with tmp.open("wb") as o:
            for part in m.parts:
                f = _find(part, where)
                if f is None:
                    raise PartsError(f"{mpath}: part {part.name} ({part.size} bytes) is missing")
                h = hashlib.sha256()
                with f.open("rb") as i:
                    while block := i.read(CHUNK):
                        h.update(block)
                        whole.update(block)
                        o.write(block)
                if h.hexdigest() != part.sha256:
                    raise PartsError(f"{f}: SHA-256 {h.hexdigest()[:12]}... does not match the manifest's "
                                     f"{part.sha256[:12]}...")
        if whole.hexdigest() != m.sha256:
            raise PartsError(f"{mpath}: the reassembled {m.name} does not match its SHA-256")
    return out

"""Reading GGUF headers and tensors without loading a model.

Kept plain in the manner of gguf-py: small dataclasses and functions over ``GGUFReader``.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, Keys

from local_eagle.errors import GGUFError
from local_eagle.gguf.check import MAX_DIMS, check_alignment, check_keys, check_tensor_info


@dataclass(frozen=True)
class Tensor:
    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the row length
    type: int
    nbytes: int
    offset: int = 0  # from the start of the data section

    @property
    def layer(self) -> int | None:
        if self.name.startswith("blk."):
            try:
                return int(self.name.split(".")[1])
            except ValueError:
                return None
        return None


@dataclass
class ArrayInfo:
    """A long array that was skipped rather than decoded (token lists, scores, merges): its length."""

    count: int

    def __len__(self) -> int:
        return self.count


@dataclass
class GGUFHeader:
    """The key/values and tensor table of a GGUF file, read without touching the tensor data."""

    path: Path
    version: int
    kv: dict[str, Any]
    tensors: list[Tensor]
    data_offset: int
    file_size: int
    types: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # key -> (type, array item type)
    splits_read: bool = False  # ``tensors`` holds every split's (``check_model`` may count the layers)

    def tensor(self, name: str) -> Tensor | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_KEPT_ARRAY = 1 << 16


def pad(n: int, a: int) -> int:
    """``n`` rounded up to a multiple of ``a``: GGUF's data alignment, and ggml's buffer alignment alike."""
    return (n + a - 1) // a * a


def read_header(
    path: str | os.PathLike[str], what: str = "GGUF", keep: Callable[[str], bool] | None = None
) -> GGUFHeader:
    """Parse a GGUF header (v2/v3) directly: fast even with a 256K-token vocabulary, and every
    failure (missing file, wrong magic, truncation, unknown tensor type) is one clear line. Its keys
    and tensor table are checked on the way (``local_eagle.gguf.check``), so no caller meets a
    ``block_count`` of 10^6 or a NaN epsilon.

    Arrays longer than 65536 items are skipped (``ArrayInfo``) unless ``keep(key)`` says
    otherwise; string items of kept long arrays stay ``bytes`` so a copy is lossless.
    """
    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"{p}: {what} file not found")
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except (OSError, ValueError) as e:
        raise GGUFError(f"{p}: cannot read {what} file ({e})") from None
    try:
        return _parse_header(p, buf, size, what, keep or (lambda k: False))
    except (struct.error, IndexError, UnicodeDecodeError, OverflowError, MemoryError):
        raise GGUFError(f"{p}: {what} header is truncated or damaged (ends at byte {size})") from None
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def split_tensors(header: GGUFHeader, what: str = "GGUF") -> list[Tensor]:
    """The tensors of the remaining files of a split GGUF (``name-00001-of-0000N.gguf``).

    llama.cpp loads every split when given the first, so whatever judges a model by its tensors
    (the planner, the pair check) must see them all; none for a file that is not split.
    """
    count = int(header.kv.get(Keys.Split.LLM_KV_SPLIT_COUNT, 0) or 0)
    if count <= 1:
        return []
    p = header.path
    no = int(header.kv.get(Keys.Split.LLM_KV_SPLIT_NO, 0) or 0)
    m = re.match(r"(.*)-(\d{5})-of-(\d{5})\.gguf$", p.name)
    if no != 0:
        first = f"{m.group(1)}-00001-of-{m.group(3)}.gguf" if m else "the first split"
        raise GGUFError(f"{p}: this is split {no + 1} of {count}; pass the first file ({first})")
    if m is None:
        raise GGUFError(f"{p}: split GGUF of {count} files not named <name>-00001-of-{count:05d}.gguf")
    out: list[Tensor] = []
    for i in range(2, count + 1):
        q = p.with_name(f"{m.group(1)}-{i:05d}-of-{m.group(3)}.gguf")
        out += read_header(q, f"{what} (split {i} of {count})").tensors
    return out


def _parse_header(p: Path, b: Any, size: int, what: str, keep: Callable[[str], bool]) -> GGUFHeader:
    if size < 4 or b[:4] != b"GGUF":
        magic = bytes(b[:4]) if size else b""
        raise GGUFError(f"{p}: not a GGUF file (bad magic {magic!r}, expected b'GGUF')")
    (version,) = struct.unpack_from("<I", b, 4)
    if version not in (2, 3):
        raise GGUFError(f"{p}: GGUF version {version} is not supported (expected 2 or 3)")
    n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
    if n_tensors > size or n_kv > size:
        raise GGUFError(f"{p}: {what} header is damaged ({n_tensors} tensors, {n_kv} keys in {size} bytes)")
    pos = 24

    def raw_string(pos: int) -> tuple[bytes, int]:
        (n,) = struct.unpack_from("<Q", b, pos)
        if pos + 8 + n > size:
            raise IndexError
        return bytes(b[pos + 8 : pos + 8 + n]), pos + 8 + n

    def string(pos: int) -> tuple[str, int]:
        s, pos = raw_string(pos)
        return s.decode("utf-8", "replace"), pos

    def value(t: int, pos: int, key: str) -> tuple[Any, int, int | None]:
        if t in _SCALAR:
            fmt = _SCALAR[t]
            return struct.unpack_from(fmt, b, pos)[0], pos + struct.calcsize(fmt), None
        if t == 8:
            s, pos = string(pos)
            return s, pos, None
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            wanted = keep(key)
            if et in _SCALAR:
                w = struct.calcsize(_SCALAR[et])
                if pos + n * w > size:
                    raise IndexError
                if n > _MAX_KEPT_ARRAY and not wanted:
                    return ArrayInfo(n), pos + n * w, et
                return list(struct.unpack_from("<" + _SCALAR[et][1] * n, b, pos)), pos + n * w, et
            if et == 8:
                if pos + 8 * n > size:
                    raise IndexError
                raw = wanted and n > _MAX_KEPT_ARRAY
                short = n <= _MAX_KEPT_ARRAY
                out: list[Any] = []
                for _ in range(n):
                    (ln,) = struct.unpack_from("<Q", b, pos)
                    if raw:
                        out.append(bytes(b[pos + 8 : pos + 8 + ln]))
                    elif short:
                        out.append(bytes(b[pos + 8 : pos + 8 + ln]).decode("utf-8", "replace"))
                    pos += 8 + ln
                if pos > size:
                    raise IndexError
                return (out if (raw or short) else ArrayInfo(n)), pos, et
            raise GGUFError(f"{p}: {what} has an array of unsupported type {et}")
        raise GGUFError(f"{p}: {what} has a value of unknown type {t}")

    kv: dict[str, Any] = {}
    types: dict[str, tuple[int, int | None]] = {}
    for _ in range(n_kv):
        k, pos = string(pos)
        (t,) = struct.unpack_from("<I", b, pos)
        v, pos, sub = value(t, pos + 4, k)
        kv[k] = v
        types[k] = (t, sub)
    check_keys(p, what, kv, types)
    infos = []
    seen: set[str] = set()
    for _ in range(n_tensors):
        name, pos = string(pos)
        (nd,) = struct.unpack_from("<I", b, pos)
        if nd > MAX_DIMS:
            raise GGUFError(f"{p}: tensor {name!r} has {nd} dimensions, expected at most {MAX_DIMS} (damaged header)")
        ne = struct.unpack_from(f"<{nd}q", b, pos + 4)
        check_tensor_info(p, what, name, ne, seen)
        ttype, off = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, tuple(int(x) for x in ne), ttype, off))
    align = check_alignment(p, what, kv, types)
    data = pad(pos, align)
    tensors = []
    end = data if infos else pos  # a header-only file need not carry the alignment padding
    for name, ne, ttype, off in infos:
        try:
            block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise GGUFError(f"{p}: tensor {name!r} has ggml type {ttype}, unknown to this gguf library") from None
        n = math.prod(ne)
        if ne and ne[0] % block:
            raise GGUFError(f"{p}: tensor {name!r} has rows of {ne[0]} values, not whole {block}-blocks")
        nbytes = n // block * tsize
        tensors.append(Tensor(name, ne, ttype, nbytes, off))
        end = max(end, data + off + nbytes)
    if end > size:
        raise GGUFError(
            f"{p}: {what} is truncated: its tensor data ends at byte {end:,} but the file has {size:,} bytes"
        )
    return GGUFHeader(p, version, kv, tensors, data, size, types)


def open_gguf(
    path: str | os.PathLike[str], what: str = "GGUF", keep: Callable[[str], bool] | None = None
) -> GGUFHeader:
    """The header of a GGUF file, with one clear line for every kind of failure."""
    return read_header(path, what, keep)


def field_value(header: GGUFHeader, key: str, default: Any = None) -> Any:
    return header.kv.get(key, default)


def copy_fields(header: GGUFHeader, prefix: str) -> list[tuple[str, Any, GGUFValueType, GGUFValueType | None]]:
    """Every key/value under ``prefix`` as (key, value, type, sub_type) for ``GGUFWriter.add_key_value``.

    The header must have been read keeping those keys' arrays (``keep``).
    """
    out = []
    for name, val in header.kv.items():
        if not name.startswith(prefix):
            continue
        t, sub = header.types[name]
        if isinstance(val, ArrayInfo):
            raise GGUFError(f"{header.path}: '{name}' was not read in full")
        if t == GGUFValueType.ARRAY and not val:
            continue
        out.append((name, val, GGUFValueType(t), GGUFValueType(sub) if sub is not None else None))
    return out


def tensor_f32(header: GGUFHeader, name: str) -> np.ndarray:
    """One tensor as float32 in numpy order ([rows, cols]), dequantised if needed, read from disk."""
    from gguf.quants import dequantize

    t = header.tensor(name)
    if t is None:
        raise GGUFError(f"{header.path}: GGUF has no tensor {name!r}")
    qtype = GGMLQuantizationType(t.type)
    shape = tuple(reversed(t.ne))
    n_rows = math.prod(t.ne[1:]) if len(t.ne) > 1 else 1
    raw = np.memmap(header.path, dtype=np.uint8, mode="r", offset=header.data_offset + t.offset, shape=(t.nbytes,))
    if qtype == GGMLQuantizationType.F32:
        return np.array(raw.view(np.float32).reshape(shape))
    if qtype == GGMLQuantizationType.F16:
        return raw.view(np.float16).reshape(shape).astype(np.float32)
    out = dequantize(np.asarray(raw).reshape(n_rows, t.nbytes // n_rows), qtype)
    return np.asarray(out, dtype=np.float32).reshape(shape)

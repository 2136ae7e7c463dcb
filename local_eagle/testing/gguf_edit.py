"""A copy of a GGUF with some keys set or dropped, written with gguf-py's own writer (tests: a file type, a
pooling type, a malformed vocabulary, on a tiny generated model)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys


def with_keys(
    src: Path,
    dst: Path,
    uint32: dict[str, int] | None = None,
    drop: Iterable[str] = (),
    typed: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]] | None = None,
) -> Path:
    """``src`` as ``dst``, its ``uint32`` keys set (replacing any of the same name) and ``drop`` left out.

    ``typed`` replaces keys in their place with ``(value, type, array item type or None)``: any type, a wrong one
    too."""
    uint32, typed = uint32 or {}, typed or {}
    skip = {Keys.General.ARCHITECTURE, *uint32, *drop}
    r = GGUFReader(src)
    w = GGUFWriter(dst, arch=r.fields[Keys.General.ARCHITECTURE].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in skip:
            continue
        if name in typed:
            value, vtype, sub = typed[name]
            w.add_key_value(name, value, vtype, sub_type=sub)
            continue
        sub_type = f.types[1] if f.types[0] == GGUFValueType.ARRAY else None
        value: Any = f.contents()
        w.add_key_value(name, value, f.types[0], sub_type=sub_type)
    for name, v in uint32.items():
        w.add_uint32(name, v)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst

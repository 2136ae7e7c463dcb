"""Reading GGUF headers: what a target or a drafter file holds, without loading weights.

Kept plain in the manner of gguf-py: small dataclasses and functions over ``GGUFReader``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from local_eagle.errors import GGUFError

DRAFTER_ARCH = "eagle3"


def open_gguf(path: str | os.PathLike[str], what: str = "GGUF") -> GGUFReader:
    """Open a GGUF file for reading, turning every failure into one clear line."""
    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"{p}: {what} file not found")
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise GGUFError(f"{p}: cannot read {what} file ({e.strerror})") from None
    if magic != b"GGUF":
        raise GGUFError(f"{p}: not a GGUF file (bad magic {magic!r}, expected b'GGUF')")
    try:
        return GGUFReader(p)
    except Exception as e:  # gguf-py raises ValueError, IndexError, struct.error ... on damage
        raise GGUFError(f"{p}: unreadable {what} file, truncated or damaged ({type(e).__name__}: {e})") from None


def field_value(reader: GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.get_field(key)
    if f is None:
        return default
    return f.contents()


def _raw_array(f: Any) -> list[Any]:
    """Array contents, with strings as raw bytes so that invalid UTF-8 survives a copy."""
    sub = f.types[-1]
    if sub == GGUFValueType.STRING:
        return [bytes(f.parts[i]) for i in f.data]
    return f.contents()


def copy_fields(reader: GGUFReader, prefix: str) -> list[tuple[str, Any, GGUFValueType, GGUFValueType | None]]:
    """Every key/value under ``prefix`` as (key, value, type, sub_type) for ``GGUFWriter.add_key_value``."""
    out = []
    for name, f in reader.fields.items():
        if not name.startswith(prefix) or not f.types:
            continue
        main = f.types[0]
        if main == GGUFValueType.ARRAY:
            val = _raw_array(f)
            if not val:
                continue
            out.append((name, val, main, f.types[-1]))
        elif main == GGUFValueType.STRING:
            out.append((name, bytes(f.parts[-1]), main, None))
        else:
            out.append((name, f.contents(), main, None))
    return out


@dataclass
class ModelInfo:
    """What local-eagle needs to know about a GGUF model, target or drafter."""

    path: Path
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    name: str | None = None
    tensor_count: int = 0
    tensor_bytes: dict[str, int] = field(default_factory=dict)
    tensor_counts: dict[str, int] = field(default_factory=dict)
    tensor_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # drafter only
    target_layers: list[int] | None = None
    target_hidden_size: int | None = None
    draft_vocab_size: int | None = None
    fc_norm: bool = False
    norm_output: bool = False
    norm_before_fc: bool = False
    norm_before_residual: bool = False
    has_own_embeddings: bool = False
    has_own_lm_head: bool = False

    @property
    def is_drafter(self) -> bool:
        return self.arch == DRAFTER_ARCH

    @property
    def eagle_version(self) -> str | None:
        if not self.is_drafter:
            return None
        return "3.1" if (self.fc_norm and self.norm_output) else "3"

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "tensor_shapes"}
        d["path"] = str(self.path)
        d["is_drafter"] = self.is_drafter
        d["eagle_version"] = self.eagle_version
        return d


def read_model_info(path: str | os.PathLike[str], what: str = "GGUF") -> ModelInfo:
    reader = open_gguf(path, what)
    return model_info(reader, Path(path), what)


def model_info(reader: GGUFReader, path: Path, what: str = "GGUF") -> ModelInfo:
    arch = field_value(reader, "general.architecture")
    if not isinstance(arch, str):
        raise GGUFError(f"{path}: {what} has no general.architecture")

    def need_int(key: str) -> int:
        v = field_value(reader, key)
        if v is None:
            raise GGUFError(f"{path}: {what} lacks the key '{key}'")
        return int(v)

    tokens = reader.get_field("tokenizer.ggml.tokens")
    if tokens is not None:
        n_vocab = len(tokens.data)
    elif field_value(reader, f"{arch}.vocab_size") is not None:
        n_vocab = int(field_value(reader, f"{arch}.vocab_size"))
    else:
        raise GGUFError(f"{path}: {what} has no tokenizer.ggml.tokens (a GGUF without its vocabulary)")

    by_type: Counter[str] = Counter()
    count_by_type: Counter[str] = Counter()
    shapes: dict[str, tuple[int, ...]] = {}
    for t in reader.tensors:
        tname = GGMLQuantizationType(t.tensor_type).name
        by_type[tname] += int(t.n_bytes)
        count_by_type[tname] += 1
        shapes[t.name] = tuple(int(x) for x in t.shape)
    info = ModelInfo(
        path=path,
        arch=arch,
        n_layer=need_int(f"{arch}.block_count"),
        n_embd=need_int(f"{arch}.embedding_length"),
        n_vocab=n_vocab,
        name=field_value(reader, "general.name"),
        tensor_count=len(reader.tensors),
        tensor_bytes=dict(by_type),
        tensor_counts=dict(count_by_type),
        tensor_shapes=shapes,
    )
    if arch == DRAFTER_ARCH:
        layers = field_value(reader, f"{arch}.target_layers")
        info.target_layers = [int(x) for x in layers] if layers is not None else None
        ths = field_value(reader, f"{arch}.target_hidden_size")
        info.target_hidden_size = int(ths) if ths is not None else None
        d2t = shapes.get("d2t")
        info.draft_vocab_size = d2t[0] if d2t else n_vocab
        info.fc_norm = bool(field_value(reader, f"{arch}.fc_norm", False))
        info.norm_output = bool(field_value(reader, f"{arch}.norm_output", False))
        info.norm_before_fc = bool(field_value(reader, f"{arch}.norm_before_fc", False))
        info.norm_before_residual = bool(field_value(reader, f"{arch}.norm_before_residual", False))
        info.has_own_embeddings = "token_embd.weight" in shapes
        info.has_own_lm_head = "output.weight" in shapes
    return info


def tensor_f32(reader: GGUFReader, name: str) -> np.ndarray:
    """One tensor as float32 in numpy order ([rows, cols]), dequantised if needed."""
    from gguf.quants import dequantize

    for t in reader.tensors:
        if t.name == name:
            arr = dequantize(t.data, GGMLQuantizationType(t.tensor_type))
            return np.asarray(arr, dtype=np.float32).reshape(tuple(int(x) for x in reversed(t.shape)))
    raise GGUFError(f"GGUF has no tensor {name!r}")

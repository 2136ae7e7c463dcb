"""Crafted GGUFs: a valid file copied with one key or one tensor changed, as a red team would hand it over.

The checks in ``local_eagle.gguf.check`` are tested on these: a tiny valid model with ``block_count`` 513, a NaN
epsilon, a ``d2t`` past the vocabulary... Written with gguf-py's own writer, so each file is well-formed GGUF
except for the one thing the test means.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys, TokenType

KeyEdit = tuple[Any, GGUFValueType, GGUFValueType | None] | None
"""A key's new (value, type, array item type), or None to drop the key."""


def rewrite_gguf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    keys: Mapping[str, KeyEdit] | None = None,
    tensors: Mapping[str, np.ndarray | None] | None = None,
) -> Path:
    """A copy of ``src`` with ``keys`` set (None: dropped) and ``tensors`` replaced (None: dropped).

    A replacement tensor keeps the original's ggml type when its bytes fit it, so ``d2t`` can be given
    other values; a new dtype writes another type (an I32 ``d2t``).
    """
    keys = dict(keys or {})
    tensors = dict(tensors or {})
    r = GGUFReader(src)
    arch = r.fields[Keys.General.ARCHITECTURE].contents()
    w = GGUFWriter(dst, arch=arch)  # the writer adds general.architecture itself
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == Keys.General.ARCHITECTURE or name in keys:
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    for name, edit in keys.items():
        if edit is not None:
            w.add_key_value(name, edit[0], edit[1], sub_type=edit[2])
    for t in r.tensors:
        if t.name in tensors:
            data = tensors[t.name]
            if data is None:
                continue
            same = data.dtype == t.data.dtype
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type if same else None)
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(dst)


def write_many_layers_gguf(path: str | os.PathLike[str], n_layer: int, data_bytes: int = 1 << 20) -> Path:
    """A small llama GGUF (``data_bytes`` of weights, a byte vocabulary) whose header claims ``n_layer`` layers:
    what a planner that allocates per layer must refuse before it starts."""
    w = GGUFWriter(path, "llama")
    w.add_block_count(n_layer)
    w.add_embedding_length(64)
    w.add_context_length(1024)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([int(TokenType.UNKNOWN)] + [int(TokenType.CONTROL)] * 2 + [int(TokenType.BYTE)] * 256)
    w.add_tensor("token_embd.weight", np.zeros((data_bytes // 4 // 64, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)

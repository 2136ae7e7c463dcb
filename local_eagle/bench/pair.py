"""Random-weight model pairs of published shapes, for timing local-eagle on a GPU without downloads.

Speed depends on shapes and quantisation types, not on what the weights say, so an 8B-shaped
target with random weights, quantised to Q4_K_M by llama.cpp's own recipe, costs on a GPU what
the real Llama-3.1-8B Q4_K_M does. Acceptance, on the other hand, is meaningless with a random
drafter (about one token per round): a bench of such a pair measures the costs of target decode,
verify and drafting, not the speed-up a trained drafter gets.

    python -m local_eagle.bench.pair OUTDIR [--tiny]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

from local_eagle.llamacpp import bindings
from local_eagle.testing.vram_fixtures import (
    LLAMA31_8B,
    LLAMA31_8B_EAGLE3,
    DrafterShape,
    ShapeSpec,
    write_drafter_gguf,
    write_shape_gguf,
)

Q = GGMLQuantizationType
TINY_TARGET = ShapeSpec(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024, name="tiny")
TINY_DRAFTER = DrafterShape(target_hidden=256, n_vocab=1024, n_embd=256, n_ff=512, draft_vocab=512, name="tiny")
_ROWS = 4096


def fill_random(path: str | Path, seed: int = 0) -> Path:
    """Replace a shape GGUF's zero data in place: matrices N(0, 1/cols), norms 1, ``d2t`` the first ids.

    Works on F32/F16 files from ``vram_fixtures`` (quantise afterwards); rows are filled in chunks
    so an 8B file needs no more than a few hundred MiB of memory.
    """
    rng = np.random.default_rng(seed)
    r = GGUFReader(path, "r+")
    for t in r.tensors:
        data = t.data
        if t.tensor_type == Q.I64:
            data[:] = np.arange(data.size, dtype=np.int64).reshape(data.shape)
        elif t.tensor_type not in (Q.F32, Q.F16):
            raise ValueError(f"{path}: {t.name} is {t.tensor_type.name}; fill an F16 file, then quantise")
        elif data.ndim == 1:
            data[:] = 1.0
        else:
            std = 1.0 / np.sqrt(data.shape[-1])
            for i in range(0, data.shape[0], _ROWS):
                chunk = data[i : i + _ROWS]
                chunk[:] = (rng.standard_normal(chunk.shape, dtype=np.float32) * std).astype(data.dtype)
    r.data.flush()
    del r
    return Path(path)


def make_pair(outdir: str | Path, tiny: bool = False, seed: int = 0, threads: int = 0) -> dict[str, str]:
    """Write ``target-f16.gguf`` -> ``target-q4_k_m.gguf`` and ``drafter-f16.gguf`` (published EAGLE-3 shape)."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    target, drafter = (TINY_TARGET, TINY_DRAFTER) if tiny else (LLAMA31_8B, LLAMA31_8B_EAGLE3)
    f16 = write_shape_gguf(out / "target-f16.gguf", replace(target, mix=None, wtype=Q.F16))
    fill_random(f16, seed)
    q4 = bindings.quantize(f16, out / "target-q4_k_m.gguf", "q4_k_m", threads)
    f16.unlink()
    d = write_drafter_gguf(out / "drafter-f16.gguf", drafter)
    fill_random(d, seed + 1)
    prompts = out / "prompts.jsonl"
    words = "the quick brown fox jumps over the lazy dog while a model drafts tokens for the target to check"
    with prompts.open("w") as f:
        for i in range(8):
            f.write(json.dumps({"prompt": f"{i}: {words}"}) + "\n")
    return {"target": str(q4), "drafter": str(d), "prompts": str(prompts)}


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a thin wrapper
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--tiny", action="store_true", help="a tiny pair, to check the recipe on a CPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    print(json.dumps(make_pair(a.outdir, a.tiny, a.seed, a.threads)))


if __name__ == "__main__":  # pragma: no cover
    main()

"""Random-weight model pairs of published shapes, for timing local-eagle on a GPU without downloads.

Speed depends on shapes and quantisation types, not on what the weights say, so an 8B-shaped
target with random weights in Llama-3.1-8B Q4_K_M's tensor types costs on a GPU what the real
model does. Acceptance, on the other hand, is meaningless with a random drafter (about one token
per round): a bench of such a pair measures the costs of target decode, verify and drafting, not
the speed-up a trained drafter gets.

The target is written straight in its quantised layout: llama.cpp's own recipe (an f16 file of
16 GB filled with normals, then llama-quantize) takes minutes of a GPU machine's rented time for
weights nobody reads, whereas tiling a few MiB of random blocks over the tensor table takes
seconds. The blocks only have to be valid: their fp16 scales finite, positive and sized so that
the dequantised weights are centred with a std of 1/sqrt(cols), as the normals would be, so
activations stay finite through every layer. ``--via-f16`` keeps llama.cpp's recipe, the
reference for what a quantised random model is. The drafter is f16, as EAGLE drafters ship, and
quantised by llama.cpp to q8_0 beside it (``local-eagle convert --outtype q8_0`` quantises the same
tensors), so a run prices both precisions.

    python -m local_eagle.bench.pair OUTDIR [--tiny] [--via-f16]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from local_eagle.gguf.reader import GGUFHeader, Tensor, field_value, read_header
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
_JOB_ELEMENTS = 1 << 22  # normals per job: 16 MiB of float32 per thread at a time
_CHUNK_BYTES = 8 << 20  # random blocks made once per (type, cols) and tiled: generating 5 GB would cost more
_FLOATS = (Q.F32, Q.F16, Q.I64)
_Job = Callable[[int], None]  # given the file descriptor, writes one piece of the data section


def _float_jobs(t: Tensor, data: int, seeds: np.random.SeedSequence) -> list[_Job]:
    """Matrices N(0, 1/cols), vectors (norms) 1, ``d2t`` the first ids, in pieces of ``_JOB_ELEMENTS``.

    Each piece draws from its own child of ``seeds``, so the data depends on the seed, not on the threads.
    """
    qt = Q(t.type)
    dtype = np.dtype(np.int64 if qt == Q.I64 else np.float16 if qt == Q.F16 else np.float32)
    off = data + t.offset
    n_elements = math.prod(t.ne)
    if qt == Q.I64:
        return [partial(_put, off, np.arange(n_elements, dtype=np.int64))]
    if len(t.ne) == 1:
        return [partial(_put, off, np.ones(n_elements, dtype=dtype))]
    cols = t.ne[0]
    rows = n_elements // cols
    step = max(1, _JOB_ELEMENTS // cols)
    jobs: list[_Job] = []
    for i in range(0, rows, step):
        n = min(step, rows - i)
        jobs.append(partial(_normals, off + i * cols * dtype.itemsize, (n, cols), dtype, seeds.spawn(1)[0]))
    return jobs


def _put(offset: int, a: np.ndarray, fd: int) -> None:
    os.pwrite(fd, np.ascontiguousarray(a), offset)


def _normals(offset: int, shape: tuple[int, int], dtype: np.dtype, ss: np.random.SeedSequence, fd: int) -> None:
    """N(0, 1/cols) values, picked by random 16-bit indices from 65536 normals drawn for this piece:
    the same distribution to within the table's sampling noise at a quarter of the cost of a draw each."""
    rng = np.random.default_rng(ss)
    table = (rng.standard_normal(1 << 16, dtype=np.float32) / np.float32(np.sqrt(shape[1]))).astype(dtype)
    n = shape[0] * shape[1]
    idx = rng.bit_generator.random_raw(-(-n // 4)).view(np.uint16)[:n]  # raw 64-bit words: 4 indices each
    _put(offset, table[idx], fd)


def _run(path: str | Path, jobs: list[_Job], threads: int) -> None:
    """Run the writes on ``threads`` threads (0: every core); numpy and ``pwrite`` release the GIL.

    ``pwrite`` at the reader's offsets fills the file in place like a memory map would, at a few
    times the speed (no page faults on the sparse holes); the pages reach the disk by the kernel's
    own writeback and llama.cpp reads them through the same page cache.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        with ThreadPoolExecutor(max(1, threads or os.cpu_count() or 1)) as pool:
            for f in [pool.submit(job, fd) for job in jobs]:
                f.result()
    finally:
        os.close(fd)


def fill_random(path: str | Path, seed: int = 0, threads: int = 0) -> Path:
    """Replace a shape GGUF's zero data in place: matrices N(0, 1/cols), norms 1, ``d2t`` the first ids.

    Works on F32/F16 files from ``vram_fixtures`` (quantise afterwards, or use ``fill_quantised``);
    pieces of a few MiB on every core, so an 8B drafter takes seconds and little memory.
    """
    h = read_header(path)
    seeds = np.random.SeedSequence(seed)
    jobs: list[_Job] = []
    for t in h.tensors:
        if t.type not in _FLOATS:
            raise ValueError(f"{path}: {t.name} is {Q(t.type).name}; fill an F16 file, then quantise")
        jobs += _float_jobs(t, h.data_offset, seeds)
    _run(path, jobs, threads)
    return Path(path)


# --- quantised blocks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockLayout:
    """One ggml block type as ggml-common.h lays it out, and how ``fill_quantised`` fills it.

    Quant fields are random codes: ``any`` random bytes, where a min field centres the weights;
    ``nib`` nibbles in 1..15, ``crumb`` 2-bit fields in 1..3 and ``i8`` int8 in -127..127, codes
    whose dequantised values are symmetric about 0 where the type has no min (ggml's own zero
    code 8, 4 or 0 would leave every weight offset by half a step, and a shared offset in every
    row grows into one direction through 32 layers). Sub-block scales are ``fixed`` small
    integers; ``halves`` are the fp16 fields in units of ``d``, which sets the std.
    """

    size: int  # bytes per block
    quants: tuple[tuple[int, int, str], ...]  # (offset, bytes, code)
    fixed: tuple[tuple[int, bytes], ...]  # (offset, packed sub-block scales and mins)
    halves: tuple[tuple[int, float], ...]  # (offset, value / d): d, dmin (> 0) and Q4_1/Q5_1's additive min m
    unit_std: float  # std of a dequantised weight at d = 1


def _k_scales(sc: int, m: int) -> bytes:
    """Eight 6-bit (scale, min) pairs, all equal, packed as Q4_K/Q5_K's ``get_scale_min_k4`` reads them."""
    lo = [sc & 63 | (sc >> 4) << 6] * 4
    mid = [m & 63 | (m >> 4) << 6] * 4
    hi = [(sc & 15) | (m & 15) << 4] * 4
    return bytes(lo + mid + hi)


def _q3_k_scales(s: int) -> bytes:
    """Sixteen 6-bit scales (stored +32), all equal, packed as Q3_K's 12 bytes: low nibbles, then 2-bit highs."""
    low = (s & 15) | (s & 15) << 4
    high = sum((s >> 4) << shift for shift in (0, 2, 4, 6))
    return bytes([low] * 8 + [high] * 4)


def _sq(values: range, drop: tuple[int, ...] = ()) -> float:
    """The std about 0 of codes uniform over ``values`` but ``drop``."""
    v = [x for x in values if x not in drop]
    return math.sqrt(sum(x * x for x in v) / len(v))


_UNIFORM4 = math.sqrt((16**2 - 1) / 12)  # 0..15 about its mean 7.5
_UNIFORM5 = math.sqrt((32**2 - 1) / 12)  # 0..31 about 15.5

LAYOUTS: dict[Q, BlockLayout] = {
    # {d, qs[16]}: x = d (q - 8), q in 1..15
    Q.Q4_0: BlockLayout(18, ((2, 16, "nib"),), (), ((0, 1.0),), _sq(range(-7, 8))),
    # {d, m, qs[16]}: x = d q + m, m = -7.5 d
    Q.Q4_1: BlockLayout(20, ((4, 16, "any"),), (), ((0, 1.0), (2, -7.5)), _UNIFORM4),
    # {d, qh[4], qs[16]}: x = d (q | h << 4) - 16 d, q in 1..15: +-1..15
    Q.Q5_0: BlockLayout(22, ((2, 4, "any"), (6, 16, "nib")), (), ((0, 1.0),), _sq(range(-15, 16), (0,))),
    # {d, m, qh[4], qs[16]}: x = d q5 + m, m = -15.5 d
    Q.Q5_1: BlockLayout(24, ((4, 4, "any"), (8, 16, "any")), (), ((0, 1.0), (2, -15.5)), _UNIFORM5),
    # {d, qs[32] int8}: x = d q
    Q.Q8_0: BlockLayout(34, ((2, 32, "i8"),), (), ((0, 1.0),), _sq(range(-127, 128))),
    # {scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin}: x = 2 d q - 3 dmin = 2 d (q - 1.5)
    Q.Q2_K: BlockLayout(
        84, ((16, 64, "any"),), ((0, bytes([0x32] * 16)),), ((80, 1.0), (82, 1.0)), 2 * math.sqrt((4**2 - 1) / 12)
    ),
    # {hmask[32], qs[64], scales[12], d}: x = d (s - 32) (q - 4 (1 - h)), s = 33, q in 1..3: +-1..3
    Q.Q3_K: BlockLayout(
        110, ((0, 32, "any"), (32, 64, "crumb")), ((96, _q3_k_scales(33)),), ((108, 1.0),), _sq(range(-3, 4), (0,))
    ),
    # {d, dmin, scales[12], qs[128]}: x = 2 d q - 15 dmin = 2 d (q - 7.5)
    Q.Q4_K: BlockLayout(144, ((16, 128, "any"),), ((4, _k_scales(2, 15)),), ((0, 1.0), (2, 1.0)), 2 * _UNIFORM4),
    # {d, dmin, scales[12], qh[32], qs[128]}: x = 2 d q5 - 31 dmin = 2 d (q5 - 15.5)
    Q.Q5_K: BlockLayout(
        176, ((16, 32, "any"), (48, 128, "any")), ((4, _k_scales(2, 31)),), ((0, 1.0), (2, 1.0)), 2 * _UNIFORM5
    ),
    # {ql[128], qh[64], scales[16] int8, d}: x = d s ((ql | qh << 4) - 32), s = 1, ql in 1..15: +-1..31 but 16
    Q.Q6_K: BlockLayout(
        210,
        ((0, 128, "nib"), (128, 64, "any")),
        ((192, bytes([1] * 16)),),
        ((208, 1.0),),
        _sq(range(-31, 32), (0, 16, -16)),
    ),
}


def _codes(rng: np.random.Generator, shape: tuple[int, int], code: str) -> np.ndarray:
    if code == "any":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    if code == "nib":
        return rng.integers(1, 16, shape, dtype=np.uint8) | rng.integers(1, 16, shape, dtype=np.uint8) << 4
    if code == "crumb":
        out = np.zeros(shape, dtype=np.uint8)
        for shift in (0, 2, 4, 6):
            out |= rng.integers(1, 4, shape, dtype=np.uint8) << shift
        return out
    if code == "i8":
        return rng.integers(-127, 128, shape, dtype=np.int8).view(np.uint8)
    raise AssertionError(code)


def random_blocks(t: Q, n_blocks: int, cols: int, rng: np.random.Generator, std: float | None = None) -> np.ndarray:
    """``n_blocks`` valid random blocks of type ``t`` (uint8, one row each) for a matrix of ``cols`` columns, its
    weights' std ``1/sqrt(cols)`` unless ``std`` says otherwise."""
    lay = LAYOUTS[t]
    if GGML_QUANT_SIZES[t] != (32 if lay.size < 64 else 256, lay.size):  # ggml-common.h's layouts, read by hand
        raise AssertionError(f"{t.name}: gguf says {GGML_QUANT_SIZES[t]}, the layout here {lay.size} bytes")
    b = np.empty((n_blocks, lay.size), dtype=np.uint8)
    for off, n, code in lay.quants:
        b[:, off : off + n] = _codes(rng, (n_blocks, n), code)
    for off, raw in lay.fixed:
        b[:, off : off + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    d = (std if std is not None else 1.0 / math.sqrt(cols)) / lay.unit_std
    for off, k in lay.halves:
        h = np.float16(k * d)
        if not np.isfinite(h) or abs(float(h)) < np.finfo(np.float16).tiny:
            want = f"{std:g}" if std is not None else f"1/sqrt({cols})"
            raise ValueError(f"{t.name}: no normal fp16 scale gives std {want} (got {float(h)})")
        b[:, off : off + 2] = np.frombuffer(h.tobytes(), dtype=np.uint8)
    return b


def _tile(offset: int, nbytes: int, chunk: np.ndarray, fd: int) -> None:
    """Write ``chunk`` over ``nbytes`` from ``offset`` again and again (the last copy cut short)."""
    raw = memoryview(chunk).cast("B")
    for at in range(0, nbytes, len(raw)):
        os.pwrite(fd, raw[: min(len(raw), nbytes - at)], offset + at)


def _blocks(offset: int, qt: Q, n_blocks: int, cols: int, ss: np.random.SeedSequence, fd: int) -> None:
    os.pwrite(fd, random_blocks(qt, n_blocks, cols, np.random.default_rng(ss)), offset)


def _unique_jobs(t: Tensor, qt: Q, data: int, seeds: np.random.SeedSequence) -> list[_Job]:
    """Blocks drawn for the whole tensor, in pieces of ``_CHUNK_BYTES``, each from its own child of ``seeds``."""
    size = LAYOUTS[qt].size
    n_blocks, step = t.nbytes // size, max(1, _CHUNK_BYTES // size)
    return [partial(_blocks, data + t.offset + i * size, qt, min(step, n_blocks - i), t.ne[0], seeds.spawn(1)[0])
            for i in range(0, n_blocks, step)]  # fmt: skip


# --- a text with wide margins -------------------------------------------------------------------------

EMBED_STD = 64.0  # the token embedding's weights: the residual stays its token's whatever 32 random layers add
_NORMAL = 1  # llama.cpp's LLAMA_TOKEN_TYPE_NORMAL
_Q4_K_LEVEL_STD = 2 * _UNIFORM4  # of 2q - 15, q uniform in 0..15


def q4_k_levels(blocks: np.ndarray) -> np.ndarray:
    """The integer levels ``2q - 15`` of Q4_K blocks as ``random_blocks`` writes them (every sub-block's scale 2
    and min 15, d = dmin: a weight is d times its level), in ggml's dequantised order (dequantize_row_q4_K)."""
    qs = blocks[:, 16:144].reshape(-1, 4, 1, 32)
    out = np.empty((len(blocks), 4, 2, 32), dtype=np.uint8)
    np.bitwise_and(qs, 15, out=out[:, :, :1])
    np.right_shift(qs, 4, out=out[:, :, 1:])
    out <<= 1
    out -= 15  # modulo 256: the int8 view reads -15..15
    return out.reshape(-1, 256).view(np.int8)


def q6_k_blocks(levels: np.ndarray, d: float) -> np.ndarray:
    """Q6_K blocks whose weights are ``d`` times ``levels`` (-32..31, ggml's dequantised order, 256 a block): every
    sub-block scale 1, the 6-bit codes ``level + 32`` packed as dequantize_row_q6_K reads them."""
    q = (levels.view(np.uint8) + np.uint8(32)).reshape(-1, 2, 4, 32)  # modulo 256: 0..63; halves, runs of 32
    b = np.empty((len(q), 210), dtype=np.uint8)
    ql = b[:, :128].reshape(-1, 2, 2, 32)
    np.bitwise_or(q[:, :, :2] & 15, (q[:, :, 2:] & 15) << 4, out=ql)
    hi = q >> 4
    qh = b[:, 128:192].reshape(-1, 2, 32)
    np.bitwise_or(hi[:, :, 0] | hi[:, :, 1] << 2, hi[:, :, 2] << 4 | hi[:, :, 3] << 6, out=qh)
    b[:, 192:208] = 1
    b[:, 208:210] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    return b


def next_tokens(types: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """Each id's successor in the text: one cycle through every normal id, and each other id (controls, bytes) to
    a normal id of its own, so no text meets an end-of-generation id; None where normal ids are too few."""
    normal, others = np.flatnonzero(types == _NORMAL), np.flatnonzero(types != _NORMAL)
    if len(normal) < max(2, len(others)):
        return None
    order = rng.permutation(normal)
    nxt = np.empty(len(types), dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    nxt[others] = rng.choice(normal, len(others), replace=False)
    return nxt


def _margin_jobs(h: GGUFHeader, embd: Tensor, out: Tensor, seeds: np.random.SeedSequence,
                 threads: int) -> list[_Job] | None:  # fmt: skip
    """The token embedding and the logits' matrix of a target that writes one long cycle through its vocabulary.

    Random weights give a random model's logits: a 128K-way argmax whose top two lie closer than a verify of
    several rows and a decode of one differ (about 1% of the logits' range on a CPU), so the greedy text parts
    from the target alone's within a few dozen tokens, and a bench that arranges drafts on that text
    (``arranged``) would lose it. Here each token's embedding is large (``EMBED_STD``) so the last hidden state
    stays mostly its own, and the logits' row of its successor holds the same levels, so that row's logit
    stands tens of units above a 128K-way maximum of about 5: no two computations part. Costs do not change: the
    same shapes and types, every weight still random. The text means nothing and runs as long as asked.
    """
    types = field_value(read_header(h.path, keep=lambda k: k == "tokenizer.ggml.token_type"),
                        "tokenizer.ggml.token_type")  # fmt: skip
    cols, n_vocab = embd.ne[0], embd.ne[1]
    if (Q(embd.type), Q(out.type)) != (Q.Q4_K, Q.Q6_K) or out.ne != embd.ne or not isinstance(types, list) \
            or len(types) != n_vocab:  # fmt: skip
        return None
    kinds = np.asarray(types)
    nxt = next_tokens(kinds, np.random.default_rng(seeds.spawn(1)[0]))
    if nxt is None:
        return None
    # each output row's sources: the normal id leading to it, the other id leading to it too (-1: none)
    first, second = np.full(n_vocab, -1), np.full(n_vocab, -1)
    normal = kinds == _NORMAL
    first[nxt[normal]] = np.flatnonzero(normal)
    second[nxt[~normal]] = np.flatnonzero(~normal)
    per_row = cols // 256
    rows = max(1, _CHUNK_BYTES // (LAYOUTS[Q.Q4_K].size * per_row))
    starts = range(0, n_vocab, rows)
    pieces = [(a, min(a + rows, n_vocab), ss) for a, ss in zip(starts, seeds.spawn(len(starts)), strict=True)]
    e = np.empty((n_vocab * per_row, LAYOUTS[Q.Q4_K].size), dtype=np.uint8)
    levels = np.empty((n_vocab, cols), dtype=np.int8)

    def embed(a: int, b: int, ss: np.random.SeedSequence) -> None:
        e[a * per_row : b * per_row] = random_blocks(Q.Q4_K, (b - a) * per_row, cols, np.random.default_rng(ss),
                                                     std=EMBED_STD)  # fmt: skip
        levels[a:b] = q4_k_levels(e[a * per_row : b * per_row]).reshape(b - a, cols)

    with ThreadPoolExecutor(max(1, threads or os.cpu_count() or 1)) as pool:
        for f in [pool.submit(embed, *p) for p in pieces]:
            f.result()
    d = 1.0 / (math.sqrt(cols) * _Q4_K_LEVEL_STD)
    at = h.data_offset + out.offset

    def logits_rows(a: int, b: int, ss: np.random.SeedSequence, fd: int) -> None:
        src, two = first[a:b], second[a:b]
        o = levels[np.maximum(src, 0)]
        o[two >= 0] += levels[two[two >= 0]]  # a second id's levels: -30..30 still fits Q6_K's -32..31
        free = src < 0  # rows no normal id leads to: random levels, as any other row's
        o[free] = np.random.default_rng(ss).integers(0, 16, (int(free.sum()), cols), dtype=np.int8) * 2 - 15
        os.pwrite(fd, q6_k_blocks(o.reshape(-1, 256), d), at + a * per_row * LAYOUTS[Q.Q6_K].size)

    return [partial(_put, h.data_offset + embd.offset, e), *(partial(logits_rows, *p) for p in pieces)]


def fill_quantised(path: str | Path, seed: int = 0, threads: int = 0) -> Path:
    """Fill a shape GGUF of any ``LAYOUTS`` types (and F32/F16/I64) in place with valid random blocks.

    Each (type, cols) gets one chunk of random blocks, tiled over every tensor that needs it, so
    identical patterns repeat across layers: the pair times kernels, it reads no meaning. F32/F16
    tensors get what ``fill_random`` gives them. The token embedding and the logits' matrix are drawn
    whole so that the target writes a text with wide margins (``_margin_jobs``; where their types
    or vocabulary do not allow it, the logits' matrix is at least drawn whole: tiled, every token's
    row would have twins and every argmax would be an exact tie).
    """
    h = read_header(path)  # gguf-py's GGUFReader spends seconds decoding a 128K-token vocabulary
    seeds = np.random.SeedSequence(seed)
    rng = np.random.default_rng(seeds.spawn(1)[0])
    embd, out = h.tensor("token_embd.weight"), h.tensor("output.weight")
    margins = _margin_jobs(h, embd, out, seeds.spawn(1)[0], threads) if embd and out else None
    drawn = {"token_embd.weight", "output.weight"} if margins else {out.name if out else "token_embd.weight"}
    jobs: list[_Job] = list(margins or [])
    chunks: dict[tuple[Q, int], np.ndarray] = {}
    for t in h.tensors:
        qt = Q(t.type)
        if qt in _FLOATS:
            jobs += _float_jobs(t, h.data_offset, seeds)
            continue
        if qt not in LAYOUTS:
            raise ValueError(
                f"{path}: {t.name} is {qt.name}, a type the fast writer has no block layout for "
                f"(it fills {', '.join(q.name for q in LAYOUTS)}); write F16 and quantise (--via-f16)"
            )
        key = (qt, t.ne[0])  # ggml order: ne[0] is the row length
        if key not in chunks:
            try:
                chunks[key] = random_blocks(qt, max(1, _CHUNK_BYTES // LAYOUTS[qt].size), t.ne[0], rng)
            except ValueError as e:
                raise ValueError(f"{path}: {t.name}: {e}") from None
        if t.name in drawn:
            if not margins:
                jobs += _unique_jobs(t, qt, h.data_offset, seeds)
            continue
        jobs.append(partial(_tile, h.data_offset + t.offset, t.nbytes, chunks[key]))
    _run(path, jobs, threads)
    return Path(path)


def make_pair(
    outdir: str | Path, tiny: bool = False, seed: int = 0, threads: int = 0, via_f16: bool = False
) -> dict[str, str]:
    """Write ``target-q4_k_m.gguf``, ``drafter-f16.gguf`` (published EAGLE-3 shape), the same drafter quantised by
    llama.cpp to ``drafter-q8_0.gguf``, and ``prompts.jsonl``.

    ``via_f16`` writes ``target-f16.gguf`` and quantises it with llama.cpp instead of writing the
    Q4_K_M blocks directly (minutes for 8B instead of seconds).
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    from local_eagle.llamacpp import bindings

    target, drafter = (TINY_TARGET, TINY_DRAFTER) if tiny else (LLAMA31_8B, LLAMA31_8B_EAGLE3)
    if via_f16:
        f16 = write_shape_gguf(out / "target-f16.gguf", replace(target, mix=None, wtype=Q.F16))
        fill_random(f16, seed, threads)
        q4 = bindings.quantize(f16, out / "target-q4_k_m.gguf", "q4_k_m", threads)
        f16.unlink()
    else:
        q4 = fill_quantised(write_shape_gguf(out / "target-q4_k_m.gguf", replace(target, mix="q4_k_m")), seed, threads)
    d = write_drafter_gguf(out / "drafter-f16.gguf", drafter)
    fill_random(d, seed + 1, threads)
    # the same drafter at q8_0, so one run times both precisions (issue 45: which should a user run)
    q8 = bindings.quantize(d, out / "drafter-q8_0.gguf", "q8_0", threads)
    prompts = out / "prompts.jsonl"
    words = "the quick brown fox jumps over the lazy dog while a model drafts tokens for the target to check"
    with prompts.open("w") as f:
        for i in range(8):
            f.write(json.dumps({"prompt": f"{i}: {words}"}) + "\n")
    return {"target": str(q4), "drafter": str(d), "drafter_q8_0": str(q8), "prompts": str(prompts)}


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a thin wrapper
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--tiny", action="store_true", help="a tiny pair, to check the recipe on a CPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    ap.add_argument("--via-f16", action="store_true", help="llama.cpp's recipe: f16 normals, then llama-quantize")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    paths = make_pair(a.outdir, a.tiny, a.seed, a.threads, a.via_f16)
    print(json.dumps({**paths, "seconds": round(time.perf_counter() - t0, 2)}))


if __name__ == "__main__":  # pragma: no cover
    main()

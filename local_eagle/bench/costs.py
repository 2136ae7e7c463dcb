"""The cost curve of a pair on this machine: what one target call costs by rows, and one drafter call by rows.

Speculative decoding pays where a call of many rows costs little more than one row: on a GPU a
16-64-row verify of an 8B model costs ~1.1-1.5x one row, on a 2-core CPU about 16-64x. This
measures the curve the draft-shape policy and the projections need: the target's 1-row decode,
its verify of R rows with logits read back for every row (what a verify needs; on a GPU the read
includes the wait for the device), and the drafter's decode of R rows (a chain step or a tree's
frontier). Medians of several repeats after a warm-up, from a cache that already holds a prefix.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

DEFAULT_ROWS = (1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 48, 64)


@dataclass
class CostCurve:
    target: str
    drafter: str | None
    prefix: int
    repeats: int
    gpu_layers: int
    verify_ms: dict[int, float] = field(default_factory=dict)  # one call of R rows, logits of every row read
    decode_ms: dict[int, float] = field(default_factory=dict)  # the same call up to llama_process's return
    drafter_ms: dict[int, float] = field(default_factory=dict)  # drafter decode of R rows, logits and states read

    @property
    def decode_1_ms(self) -> float:
        return self.verify_ms.get(1, 0.0)

    def ratios(self) -> dict[int, float]:
        """Verify cost by rows against one row: what the policy weighs drafts against."""
        one = self.decode_1_ms
        return {r: ms / one for r, ms in self.verify_ms.items()} if one else {}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["decode_1_ms"] = self.decode_1_ms
        d["verify_ratio"] = self.ratios()
        return d


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def measure_cost_curve(
    target: str | os.PathLike[str],
    drafter: str | os.PathLike[str] | None = None,
    rows: tuple[int, ...] = DEFAULT_ROWS,
    repeats: int = 7,
    prefix: int = 256,
    gpu_layers: int = -1,
    threads: int = 0,
    seed: int = 0,
) -> CostCurve:
    """Time target calls of each number of ``rows`` (and drafter calls, with ``drafter``) after a ``prefix``."""
    from local_eagle.llamacpp.model import Context, ContextOptions, Model
    from local_eagle.runtime.drafter import Drafter

    rows = tuple(sorted(set(rows)))
    if not rows or rows[0] < 1:
        raise ValueError(f"rows must be positive numbers, got {rows}")
    n_batch = max(512, rows[-1])
    n_ctx = prefix + rows[-1] + 64
    rng = np.random.default_rng(seed)
    curve = CostCurve(str(target), None if drafter is None else str(drafter), prefix, repeats, gpu_layers)
    model = Model(Path(target), n_gpu_layers=gpu_layers)
    try:
        ctx = Context(model, ContextOptions(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads))
        try:
            n_vocab = model.n_vocab
            tokens = rng.integers(100, min(n_vocab, 30000), size=prefix + rows[-1]).astype(np.int32)
            ctx.decode(tokens[:prefix], np.arange(prefix), np.arange(prefix) == prefix - 1)
            for r in rows:
                pos = np.arange(prefix, prefix + r)
                calls, totals = [], []
                for i in range(repeats + 1):
                    t0 = time.perf_counter()
                    ctx.decode(tokens[prefix : prefix + r], pos, True)
                    t1 = time.perf_counter()
                    np.stack([ctx.logits_view(j, n_vocab) for j in range(r)])  # what a verify reads
                    t2 = time.perf_counter()
                    ctx.remove_from(prefix)
                    if i:  # the first call of a shape warms it up
                        calls.append(t1 - t0)
                        totals.append(t2 - t0)
                curve.decode_ms[r] = _median_ms(calls)
                curve.verify_ms[r] = _median_ms(totals)
            if drafter is not None:
                _drafter_curve(curve, Drafter(drafter, ctx, n_gpu_layers=gpu_layers), rows, repeats, prefix, rng)
        finally:
            ctx.close()
    finally:
        model.close()
    return curve


def _drafter_curve(curve: CostCurve, d, rows: tuple[int, ...], repeats: int, prefix: int,
                   rng: np.random.Generator) -> None:  # fmt: skip
    try:
        h = d.n_embd
        tokens = rng.integers(100, 30000, size=prefix + rows[-1]).astype(np.int32) % max(d.n_vocab, 1)
        g = (rng.standard_normal((prefix + rows[-1], h)) / np.sqrt(h)).astype(np.float32)
        d.decode_kv(tokens[:prefix], g[:prefix], np.arange(prefix))
        for r in rows:
            pos = np.arange(prefix, prefix + r)
            samples = []
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                d.decode(tokens[prefix : prefix + r], g[prefix : prefix + r], pos)
                t1 = time.perf_counter()
                d.remove_from(prefix)
                if i:
                    samples.append(t1 - t0)
            curve.drafter_ms[r] = _median_ms(samples)
    finally:
        d.close()

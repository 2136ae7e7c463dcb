"""The cost curve of a pair on this machine: what one target call costs by rows, and one drafter call by rows.

Speculative decoding pays where a call of many rows costs little more than one row: on a GPU a
16-64-row verify of an 8B model costs ~1.1-1.5x one row, on a 2-core CPU about 16-64x. This
measures the curve the draft-shape policy and the projections need, each call timed the way the
engine makes it (:func:`target_call`, :func:`drafter_call`): the target's call of R rows until its
outputs are on the host (``llama_synchronize``: on a GPU ``llama_decode`` returns before the device
is done) with every row's logits read in place, as a verify reads the rows it reaches; and the
drafter's call of R rows on one sequence with its last row's logits and state read, as a catch-up
reads them (a chain step is its 1-row case). Medians after a warm-up, from a cache that already
holds a prefix. Other drafters (``others``: the same drafter at another precision) are timed in the
same loop, in turn after each target call, so a noisy machine weighs on all alike.

The measurement is bounded: row counts above ``max_rows`` are not measured, and a deadline
(``seconds``) shares the time left evenly among the shapes still to measure (:func:`shape_until`,
:func:`another_call`), so a slow shape gets fewer timed calls (``samples``) and the shapes left when
the deadline passes are skipped, each named with its reason in the curve (``skipped``). The deadline
can be overrun by one shape's warm-up and one timed call at most.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from local_eagle.llamacpp.model import Context
    from local_eagle.runtime.drafter import Drafter

DEFAULT_ROWS = (1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 48, 64)
MAX_ROWS = 128  # a verify of 16 sequences with 7 drafts each; larger calls are not what drafting makes
DEFAULT_SECONDS = 20.0  # the whole curve, both models' calls; an 8B pair on an H100 needs ~2 s of it

clock = time.perf_counter


@dataclass
class CostCurve:
    target: str
    drafter: str | None
    prefix: int
    repeats: int  # timed calls per shape asked for; ``samples`` says how many each shape got
    gpu_layers: int
    verify_ms: dict[int, float] = field(default_factory=dict)  # one call of R rows, complete, every row's logits read
    decode_ms: dict[int, float] = field(default_factory=dict)  # the same call up to llama_synchronize, nothing read
    drafter_ms: dict[int, float] = field(default_factory=dict)  # drafter call of R rows, its last row read (a catch-up)
    others_ms: dict[str, dict[int, float]] = field(default_factory=dict)  # other drafters' calls by file, timed alike
    drafter_types: dict[str, str] = field(default_factory=dict)  # each drafter file's quantization (F16, Q8_0)
    samples: dict[int, int] = field(default_factory=dict)  # timed calls behind each shape's medians
    # native capture (the drafter's layers staged by llama.cpp, the engine's verify): a 1-row target call with it
    # ("on") and without ("off"), and the first call after switching it on or off (a graph reserve), ms
    capture_ms: dict[str, float] = field(default_factory=dict)
    capture_note: str | None = None  # why capture_ms is empty (a target captured through the eval callback)
    # the same target call with llama.cpp's backend greedy sampler (the argmax inside the call, on the device where
    # it can be; only each row's token comes back, not its logits): whether the verify should read tokens, not rows
    # (:func:`measure_sampled`, in a process of its own: the kit merges it in)
    sampled_ms: dict[int, float] = field(default_factory=dict)
    sampled_agree: bool | None = None  # its tokens were every row's argmax of the logits read the usual way
    sampled_note: str | None = None  # why sampled_ms is empty
    plain_ms: dict[int, float] = field(default_factory=dict)  # the target call with logits read, in that process
    skipped: dict[int, str] = field(default_factory=dict)  # row counts not measured, and why
    seconds: float | None = None  # the deadline the curve was measured under (None: none)
    took_seconds: float = 0.0  # measuring, after loading both models

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


def split_rows(rows: tuple[int, ...], max_rows: int = MAX_ROWS) -> tuple[tuple[int, ...], dict[int, str]]:
    """The row counts to measure (sorted, each once) and those left out with the reason: above ``max_rows``."""
    wanted = tuple(sorted(set(rows)))
    if not wanted or wanted[0] < 1:
        raise ValueError(f"rows must be positive numbers, got {rows}")
    if max_rows < wanted[0]:
        raise ValueError(f"max_rows {max_rows} is below the smallest row count {wanted[0]}")
    kept = tuple(r for r in wanted if r <= max_rows)
    return kept, {r: f"above the cap of {max_rows} rows" for r in wanted if r > max_rows}


def shape_until(now: float, deadline: float | None, shapes_left: int) -> float | None:
    """When the next shape's calls should end: its even share of the time left (``shapes_left`` counts it), so a
    slow shape cannot take the time of the shapes after it (None: no deadline)."""
    if deadline is None:
        return None
    return now + max(0.0, deadline - now) / max(1, shapes_left)


def another_call(done: int, repeats: int, now: float, call_s: float, until: float | None) -> bool:
    """Whether a shape times one more call: up to ``repeats``, while one more of ``call_s`` ends by ``until``; a shape
    that started always gets one, so no row count is left with a warm-up and no figure."""
    if done >= repeats:
        return False
    return done == 0 or until is None or now + call_s <= until


def skipped_note(skipped: dict) -> str | None:
    """The row counts a curve did not measure, grouped by reason (a curve's ``skipped``, keys ints or a file's
    strings), for the line under its table; None when every row count was measured."""
    by_reason: dict[str, list[int]] = {}
    for rows, reason in sorted((int(k), v) for k, v in (skipped or {}).items()):
        by_reason.setdefault(str(reason), []).append(rows)
    if not by_reason:
        return None
    return "rows not measured: " + "; ".join(f"{', '.join(map(str, r))} ({why})" for why, r in by_reason.items())


def target_call(ctx: Context, tokens: np.ndarray, positions: np.ndarray, n_vocab: int) -> tuple[float, float]:
    """A verify's target call: the rows decoded, the device waited for, every row's logits read in place (a greedy
    verify's argmax). Its seconds up to the wait's end (the call alone) and with the reads (the call as used)."""
    t0 = clock()
    ctx.decode(tokens, positions, True)
    ctx.synchronize()
    t1 = clock()
    for j in range(len(tokens)):
        int(np.argmax(ctx.logits_view(j, n_vocab)))
    return t1 - t0, clock() - t0


def drafter_call(d: Drafter, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray) -> None:
    """A drafter call of these rows on one sequence as a catch-up makes it: its last row's logits and state read
    (a chain step is the 1-row case; a tree frontier also reads its other rows' draft vocabulary)."""
    d.decode_last(tokens, g, positions)


def measure_cost_curve(
    target: str | os.PathLike[str],
    drafter: str | os.PathLike[str] | None = None,
    rows: tuple[int, ...] = DEFAULT_ROWS,
    repeats: int = 7,
    prefix: int = 256,
    gpu_layers: int = -1,
    threads: int = 0,
    seed: int = 0,
    max_rows: int = MAX_ROWS,
    seconds: float | None = DEFAULT_SECONDS,
    others: tuple[str | os.PathLike[str], ...] = (),
) -> CostCurve:
    """Time target calls of each number of ``rows`` (and drafter calls, with ``drafter``; and each of ``others``'s,
    keyed by file) after a ``prefix``, row counts up to ``max_rows``, within ``seconds`` of measuring (None: no
    deadline)."""
    from local_eagle.llamacpp.model import Context, ContextOptions, Model
    from local_eagle.runtime.drafter import Drafter

    rows, skipped = split_rows(rows, max_rows)
    if others and drafter is None:
        raise ValueError("other drafters are timed beside a drafter: name the drafter first")
    names = [Path(x).name for x in others]
    if len(set(names)) < len(names) or (drafter is not None and Path(drafter).name in names):
        raise ValueError(f"the drafters' file names must differ (their curves are keyed by them): {names}")
    n_batch = max(512, rows[-1])
    n_ctx = prefix + rows[-1] + 64
    rng = np.random.default_rng(seed)
    curve = CostCurve(str(target), None if drafter is None else str(drafter), prefix, repeats, gpu_layers,
                      others_ms={n: {} for n in names}, skipped=skipped, seconds=seconds)  # fmt: skip
    if drafter is not None:
        from local_eagle.gguf.info import read_model_info

        curve.drafter_types = {Path(x).name: read_model_info(x, "drafter").quantization for x in (drafter, *others)}
    model = Model(Path(target), n_gpu_layers=gpu_layers)
    try:
        ctx = Context(model, ContextOptions(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads))
        try:
            ds: list[Drafter] = []
            try:
                for path in () if drafter is None else (drafter, *others):
                    ds.append(Drafter(path, ctx, n_gpu_layers=gpu_layers))
                _measure(curve, ctx, ds, rows, max(1, repeats), prefix, rng, seconds)
                if ds:
                    _measure_capture(curve, ctx, ds[0].spec.target_layers, max(1, repeats), prefix, rng)
            finally:
                for d in ds:
                    d.close()
        finally:
            ctx.close()
    finally:
        model.close()
    curve.skipped = dict(sorted(curve.skipped.items()))
    return curve


def _measure(curve: CostCurve, ctx: Context, ds: list[Drafter], rows: tuple[int, ...], repeats: int, prefix: int,
             rng: np.random.Generator, seconds: float | None) -> None:  # fmt: skip
    """Shape by shape, smallest first, target and drafter calls in turn, within the deadline."""
    n_vocab = ctx.model.n_vocab
    tokens = rng.integers(100, min(n_vocab, 30000), size=prefix + rows[-1]).astype(np.int32)
    ctx.decode(tokens[:prefix], np.arange(prefix), np.arange(prefix) == prefix - 1)
    if ds:
        h = ds[0].n_embd
        d_tokens = tokens % max(ds[0].n_vocab, 1)
        g = (rng.standard_normal((prefix + rows[-1], h)) / np.sqrt(h)).astype(np.float32)
        for d in ds:
            d.decode_kv(d_tokens[:prefix], g[:prefix], np.arange(prefix))
    started = clock()
    deadline = None if seconds is None else started + seconds

    def target_once(r: int) -> tuple[float, float]:
        spent = target_call(ctx, tokens[prefix : prefix + r], np.arange(prefix, prefix + r), n_vocab)
        ctx.remove_from(prefix)
        return spent

    def drafter_once(d: Drafter, r: int) -> float:
        t0 = clock()
        drafter_call(d, d_tokens[prefix : prefix + r], g[prefix : prefix + r], np.arange(prefix, prefix + r))
        t1 = clock()
        d.remove_from(prefix)
        return t1 - t0

    for i, r in enumerate(rows):
        if i and deadline is not None and clock() >= deadline:
            curve.skipped.update({x: f"the deadline of {seconds:g} s passed" for x in rows[i:]})
            break
        until = shape_until(clock(), deadline, len(rows) - i)
        t = clock()  # the first call of a shape warms it up (graphs, kernels) and prices the timed ones
        target_once(r)
        for d in ds:
            drafter_once(d, r)
        per = clock() - t
        calls: list[float] = []
        totals: list[float] = []
        drafts: list[list[float]] = [[] for _ in ds]
        while another_call(len(calls), repeats, clock(), per, until):
            t = clock()
            call, total = target_once(r)
            calls.append(call)
            totals.append(total)
            # the drafters in turn, each first every len(ds)-th call: the one right after the target call may pay
            # for the caches the target emptied
            for j in np.roll(np.arange(len(ds)), -len(calls)):
                drafts[j].append(drafter_once(ds[j], r))
            per = clock() - t
        curve.decode_ms[r] = _median_ms(calls)
        curve.verify_ms[r] = _median_ms(totals)
        if ds:
            curve.drafter_ms[r] = _median_ms(drafts[0])
        for name, times in zip(curve.others_ms, drafts[1:], strict=True):
            curve.others_ms[name][r] = _median_ms(times)
        curve.samples[r] = len(calls)
    curve.took_seconds = clock() - started


def _measure_capture(curve: CostCurve, ctx: Context, layers: list[int], repeats: int, prefix: int,
                     rng: np.random.Generator, block: int = 5) -> None:  # fmt: skip
    """What native capture costs a 1-row target call (the engine's verify stages the drafter's layers in every call, an
    idle round's too) and what switching it costs (one graph reserve): ``repeats`` blocks of ``block`` calls each way,
    alternating, the first call after each switch timed apart. A target captured through the eval callback
    (``runtime.capture``) gets a note instead: its capture is paused without a switch."""
    from local_eagle.runtime.capture import NATIVE_CAPTURE_ARCHS

    arch = ctx.model.arch()
    if arch not in NATIVE_CAPTURE_ARCHS:
        curve.capture_note = f"{arch} is captured through the eval callback (paused while idle), not staged natively"
        return
    n_vocab = ctx.model.n_vocab
    token = rng.integers(100, min(n_vocab, 30000), size=1).astype(np.int32)
    position = np.array([prefix])
    calls: dict[str, list[float]] = {"on": [], "off": [], "switch_on": [], "switch_off": []}
    try:
        for i in range(2 * repeats):
            on = i % 2 == 0
            for layer in sorted(set(layers)):
                ctx.set_layer_capture(layer, on)
            for j in range(block):
                calls[("switch_" if j == 0 else "") + ("on" if on else "off")].append(
                    target_call(ctx, token, position, n_vocab)[1]
                )
                ctx.remove_from(prefix)
    finally:
        for layer in sorted(set(layers)):
            ctx.set_layer_capture(layer, False)
    curve.capture_ms = {name: _median_ms(times) for name, times in calls.items()}


SAMPLED_ROWS = (1, 4, 8, 16, 64)


def measure_sampled(target: str | os.PathLike[str], rows: tuple[int, ...] = SAMPLED_ROWS, repeats: int = 5,
                    prefix: int = 256, gpu_layers: int = -1, threads: int = 0) -> dict:  # fmt: skip
    """A verify's target call with llama.cpp's backend greedy sampler against the same call with every row's logits
    read and scanned (:func:`target_call`), in two contexts of one model on the same tokens: ``sampled_ms`` and
    ``plain_ms`` by rows, ``sampled_agree`` (the sampler's tokens were the logits' argmax) and ``sampled_note``
    (what failed). On a GPU every row's logits (512 KB at a 128K vocabulary) cross to the host and are scanned
    there; with the sampler only its token does. The API is experimental, so the kit runs this in a process of its
    own, after the curve is safe (``kit.gpu.costs8b``)."""
    from local_eagle.errors import LlamaError
    from local_eagle.llamacpp.model import Context, ContextOptions, Model

    rows = tuple(sorted(set(rows)))
    out: dict = {"sampled_ms": {}, "plain_ms": {}, "sampled_agree": None, "sampled_note": None}
    model = Model(Path(target), n_gpu_layers=gpu_layers)
    n_vocab = model.n_vocab
    tokens = np.random.default_rng(1).integers(100, min(n_vocab, 30000), size=prefix + rows[-1]).astype(np.int32)
    positions = np.arange(prefix + rows[-1])
    opts = ContextOptions(n_ctx=prefix + rows[-1] + 64, n_batch=max(512, rows[-1]), n_ubatch=max(512, rows[-1]),
                          n_threads=threads, outputs_per_seq=rows[-1])  # fmt: skip
    contexts: list[Context] = []
    try:
        plain = Context(model, opts)
        contexts.append(plain)
        sampled = Context(model, opts)
        contexts.append(sampled)
        if not sampled.set_greedy_sampler(0):
            out["sampled_note"] = "llama.cpp could not offload a greedy sampler here"
            return out
        for c in contexts:
            c.decode(tokens[:prefix], positions[:prefix], positions[:prefix] == prefix - 1)
        agree = True
        for r in rows:
            got, at = tokens[prefix : prefix + r], positions[prefix : prefix + r]
            times: dict[str, list[float]] = {"plain": [], "sampled": []}
            for i in range(repeats + 1):  # each shape's first call warms it up
                t0 = clock()
                sampled.decode(got, at, True)
                picked = [sampled.sampled_token(j) for j in range(r)]
                t1 = clock()
                read = target_call(plain, got, at, n_vocab)[1]
                if i:
                    times["sampled"].append(t1 - t0)
                    times["plain"].append(read)
                else:
                    agree = agree and picked == [int(np.argmax(plain.logits_view(j, n_vocab))) for j in range(r)]
                sampled.remove_from(prefix)
                plain.remove_from(prefix)
            out["sampled_ms"][r] = _median_ms(times["sampled"])
            out["plain_ms"][r] = _median_ms(times["plain"])
        out["sampled_agree"] = agree
    except LlamaError as e:  # an experimental API: what it did not do is a finding
        out["sampled_note"] = f"backend sampling failed: {str(e).splitlines()[0]}"
        out["sampled_ms"], out["plain_ms"] = {}, {}
    finally:
        for c in contexts:
            c.close()
        model.close()
    return out

"""Greedy identity, told honestly: an exact match, a divergence at a near-tie, or a real divergence.

Greedy speculative decoding emits the target's argmax at every position, but the verify batch computes a
row with other float rounding than the 1-row decode of the target alone (llama.cpp picks kernels by batch
shape), so where the target's top two logits are almost equal the two can pick different tokens, and the
texts part there. That is a near-tie, not a bug. Anything else (a token the target would not pick in
either computation, or logits that differ by more than float noise) is a real divergence: a bug.

:func:`check_identity` finds the first differing token and computes the target's logits at that position
both ways, by replaying on the engine's target: the plain decode token by token, and the speculative run's
verify batches in their recorded shapes (``SpecStats.trace_*``). A row of a batch does not depend on the
rows after it (causal attention, row-wise matmuls), so drafts the target rejected need not be known.
The replays run with the engine's thread count and capture settings, as the runs did: with two threads
the logits of a 1-row decode are not those of a batch (``KERNEL_NOISE``), so near-ties are real there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.runtime.rounds import GenerationResult, decode_prompt, prompt_logits
from local_eagle.runtime.sampling import GREEDY, SamplingParams, apply_repeat_penalty

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine

IDENTICAL = "identical"
NEAR_TIE = "near-tie"
DIVERGENT = "divergent"

KERNEL_NOISE = 0.1
"""The most two computations of the same logits may differ, as a fraction of their range, and still count as float
noise rather than a bug.

Measured on the 2-core development CPU (llama.cpp 0.3.36, Gemma 3 270M Q4_K_M, flash attention on): with one
thread, verify batches of up to 7 rows give bit-identical logits to 1-row decodes; with two threads, once the
cache holds 256 rows, a 1-row decode splits attention over the cache between the threads and sums in another
order than a batch does, and Gemma 3's logits then differ by 0.5-1.8 (up to 4% of their range), before and after;
batches of 8 or more rows use another kernel that differs by as much. A wrong cache row moves them by more, and
above all a replay on a correct cache does not pick the token the faulty run picked."""


@dataclass(frozen=True)
class Divergence:
    """The first position where the speculative output differs from the target alone's."""

    index: int  # in the generated tokens
    position: int  # in the sequence (prompt included)
    target_token: int  # what the target alone chose
    speculative_token: int
    gap_single: float  # the target's top-2 logit gap there, 1-row computation (as decoding alone)
    gap_batched: float  # the same, in the verify batch that chose the speculative token (replayed)
    noise: float  # the largest difference between the two computations' logits there (float noise)
    scale: float  # the range of the logits there (noise / scale: how large that noise is)
    reproduced: bool  # the replays pick the two tokens the runs picked
    near_tie: bool


@dataclass(frozen=True)
class IdentityCheck:
    verdict: str  # IDENTICAL, NEAR_TIE or DIVERGENT
    divergence: Divergence | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def top2_gap(logits: np.ndarray) -> float:
    """The largest logit minus the second largest."""
    top = np.partition(logits, -2)[-2:]
    return float(top[1] - top[0])


def classify(single: np.ndarray, batched: np.ndarray, target_token: int, speculative_token: int,
             index: int = 0, position: int = 0) -> Divergence:  # fmt: skip
    """Near-tie or not, from the target's logits at the divergent position computed both ways.

    A near-tie needs all of: each computation picks the token its run emitted (replayed on a correct cache,
    so a faulty run is not reproduced); the top-2 gap is within float noise in both, the noise being how far
    the two computations' logits differ there; and that noise is within ``KERNEL_NOISE`` of their range.
    """
    finite = np.isfinite(single) & np.isfinite(batched)
    s, b = single[finite], batched[finite]
    scale = float(s.max() - s.min())
    noise = float(np.abs(s - b).max())
    gap_single, gap_batched = top2_gap(single), top2_gap(batched)
    reproduced = int(np.argmax(single)) == target_token and int(np.argmax(batched)) == speculative_token
    near_tie = reproduced and max(gap_single, gap_batched) <= noise <= KERNEL_NOISE * scale
    return Divergence(index, position, target_token, speculative_token, gap_single, gap_batched, noise, scale,
                      reproduced, near_tie)  # fmt: skip


def check_identity(
    engine: Engine,
    prompt: str | np.ndarray,
    baseline: GenerationResult,
    speculative: GenerationResult,
    sampling: SamplingParams = GREEDY,
) -> IdentityCheck:
    """Compare two greedy runs of ``prompt`` on ``engine``: the target alone's and a speculative one.

    Where they differ, the target's logits at the first differing token are recomputed both ways on the
    engine's target context (which the next generation resets): this costs one decode per token before it.
    """
    a, b = baseline.tokens, speculative.tokens
    if a == b:
        return IdentityCheck(IDENTICAL)
    j, tokens, single = _first_difference(engine, prompt, a, b)
    batched = _replay_batched(engine, tokens, b, j, speculative.spec_stats)
    if sampling.repeat_penalty != 1.0:
        history = np.concatenate([tokens, np.asarray(a[:j], dtype=np.int32)])
        single = apply_repeat_penalty(single, history, sampling.repeat_penalty, sampling.repeat_last_n)
        batched = apply_repeat_penalty(batched, history, sampling.repeat_penalty, sampling.repeat_last_n)
    # a run that ended first chose an end-of-generation token there, which its tokens leave out
    ta = a[j] if j < len(a) else _stop_choice(engine, single)
    tb = b[j] if j < len(b) else _stop_choice(engine, batched)
    if ta is None or tb is None:  # ended without choosing an end token (a length cap): not a token choice
        return IdentityCheck(DIVERGENT)
    d = classify(single, batched, ta, tb, j, len(tokens) + j)
    return IdentityCheck(NEAR_TIE if d.near_tie else DIVERGENT, d)


def check_identity_batched(
    engine: Engine, prompt: str | np.ndarray, baseline: GenerationResult, speculative: GenerationResult
) -> IdentityCheck:
    """:func:`check_identity` for a run that shared its verify calls with other sequences (``runtime.batch``).

    Those calls' shapes depend on what else was in the batch, so they cannot be replayed: a divergence is a
    near-tie when the target alone's choice is its top there and the batch's choice is within ``KERNEL_NOISE`` of
    the logits' range below it (on the demo pair at 4 sequences, with or without drafts, the batch's choices were
    the target alone's 2nd to 7th, 0.2-1.2 logits below the top of a range of 35-50: the kernels' rounding by
    batch shape, which the one-sequence replay measures at 0.5-1.8). ``engine`` must be a one-sequence engine of
    the same target (the replay clears it).
    """
    a, b = baseline.tokens, speculative.tokens
    if a == b:
        return IdentityCheck(IDENTICAL)
    j, tokens, single = _first_difference(engine, prompt, a, b)
    ta = a[j] if j < len(a) else _stop_choice(engine, single)
    tb = b[j] if j < len(b) else None
    if ta is None or tb is None:
        return IdentityCheck(DIVERGENT)
    finite = single[np.isfinite(single)]
    scale = float(finite.max() - finite.min())
    # several tokens may tie within the kernels' noise: the emitted one need only be within it of the top
    gap = float(single[ta] - single[tb])
    near_tie = int(np.argmax(single)) == ta and 0.0 <= gap <= KERNEL_NOISE * scale
    d = Divergence(j, len(tokens) + j, ta, tb, gap, float("nan"), float("nan"), scale, False, near_tie)
    return IdentityCheck(NEAR_TIE if near_tie else DIVERGENT, d)


def _first_difference(
    engine: Engine, prompt: str | np.ndarray, a: list[int], b: list[int]
) -> tuple[int, np.ndarray, np.ndarray]:
    """Where two outputs first differ, the prompt's tokens, and the target alone's logits there (replayed)."""
    j = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    tokens = engine.tokenize(prompt) if isinstance(prompt, str) else np.asarray(prompt, dtype=np.int32)
    return j, tokens, _replay_single(engine, tokens, a[:j])


def _stop_choice(engine: Engine, logits: np.ndarray) -> int | None:
    """The end-of-generation token a greedy run that stopped here picked, if its argmax is one."""
    top = int(np.argmax(logits))
    return top if engine.model.is_eog(top) else None


def _start(engine: Engine, tokens: np.ndarray, capture: bool) -> np.ndarray:
    """Clear the target, set capturing as the run had it, decode the prompt; the first token's logits."""
    ctx = engine.ctx
    ctx.clear()
    if engine.capture is not None:
        engine.capture.set_enabled(capture)
    for _ in decode_prompt(ctx, tokens):
        pass
    return prompt_logits(ctx, len(tokens), engine.n_vocab)


def _replay_single(engine: Engine, tokens: np.ndarray, before: list[int]) -> np.ndarray:
    """The target alone's logits for the token after ``before``: one 1-row decode per token, as it ran."""
    logits = _start(engine, tokens, capture=False)
    ctx, n = engine.ctx, len(tokens)
    for i, token in enumerate(before):
        ctx.decode(np.array([token], dtype=np.int32), np.array([n + i]), True)
        logits = ctx.logits(0, engine.n_vocab)
    return logits


def _replay_batched(engine: Engine, tokens: np.ndarray, out: list[int], j: int, trace) -> np.ndarray:
    """The logits the speculative run chose ``out[j]`` from: its verify batches again, in the same shapes."""
    logits = _start(engine, tokens, capture=True)
    if j == 0 or trace is None:
        return logits
    from local_eagle.runtime.treeverify import PrefixTags, TreeBatch

    ctx, n_prompt, tags = engine.ctx, len(tokens), PrefixTags()  # the context was cleared by _start
    trees = dict(zip(trace.trace_tree_rounds, trace.trace_trees, strict=True))  # an adaptive run mixes chains in
    n_past = n_prompt
    for r, (drafted, accepted) in enumerate(zip(trace.trace_drafted, trace.trace_accepted, strict=True)):
        first = n_past - n_prompt  # index in ``out`` of the round's last token
        if r in trees:
            tree, path = trees[r]
            batch = TreeBatch(tree, n_past, tags=tags)
            batch.decode(ctx)
            if first + 1 + len(path) >= j:
                return ctx.logits([0, *path][j - first - 1], engine.n_vocab)
            batch.keep(ctx, path[-1] if path else 0)
            n_past += 1 + len(path)
            continue
        rows = [out[min(first + i, len(out) - 1)] for i in range(1 + drafted)]  # rejected drafts: any token
        ctx.decode(np.array(rows, dtype=np.int32), np.arange(n_past, n_past + len(rows)), True)
        if first + 1 + accepted >= j:
            return ctx.logits(j - first - 1, engine.n_vocab)
        ctx.remove_from(n_past + 1 + accepted)
        n_past += 1 + accepted
    raise AssertionError("the speculative trace does not reach the divergent token")

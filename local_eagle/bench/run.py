"""``local-eagle bench``: speculative decoding against the plain target, in one process.

Each prompt runs the baseline (k = 0, same loop) and speculative decoding back to back, the
order alternating between prompts so slow drift on a noisy machine hits both sides alike.
Speed is reported as a ratio within the run, next to the acceptance figures that explain it
and the ideal speedup the measured costs allow, so the loop's own overhead shows.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine
from local_eagle.runtime.sampling import GREEDY
from local_eagle.runtime.stats import GenerationTotals


def read_prompts(path: str | os.PathLike[str]) -> list[str]:
    """Prompts from JSONL (``prompt``/``text`` field, or a bare string per line) or plain-text paragraphs."""
    from local_eagle.train.data import read_samples

    return [s.text for s in read_samples(path)]


@dataclass
class BenchRow:
    draft_max: int
    prompts: int
    baseline_tps: float
    speculative_tps: float
    speedup: float
    acceptance_length: float
    acceptance_per_position: list[float]
    identical: bool
    mismatches: int
    target_call_ms: float
    verify_call_ms: float
    draft_ms_per_round: float
    draft_step_ms: float
    ideal_speedup: float
    host_ms_per_round: float

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(k: int, base: GenerationTotals, spec: GenerationTotals, n_prompts: int, mismatches: int) -> BenchRow:
    baseline, speculative = base.total, spec.total
    calls = speculative.target_calls
    t1 = baseline.target_seconds / baseline.target_calls if baseline.target_calls else 0.0
    tv = speculative.target_seconds / calls if calls else 0.0
    draft_round = speculative.drafter_seconds / calls if calls else 0.0
    tau = spec.acceptance_length
    base_round = baseline.decode_seconds / baseline.target_calls if baseline.target_calls else 0.0
    base_tps, spec_tps = baseline.tokens_per_second, speculative.tokens_per_second
    return BenchRow(
        draft_max=k,
        prompts=n_prompts,
        baseline_tps=base_tps,
        speculative_tps=spec_tps,
        speedup=spec_tps / base_tps if base_tps else 0.0,
        acceptance_length=tau,
        acceptance_per_position=spec.acceptance_per_position,
        identical=mismatches == 0,
        mismatches=mismatches,
        target_call_ms=1000 * t1,
        verify_call_ms=1000 * tv,
        draft_ms_per_round=1000 * draft_round,
        draft_step_ms=1000 * speculative.drafter_seconds / speculative.draft_steps if speculative.draft_steps else 0.0,
        # what the loop would reach with no host overhead: tau tokens per (verify + drafting) against t1 per token
        ideal_speedup=tau * base_round / (tv + draft_round) if (tv + draft_round) else 0.0,
        host_ms_per_round=1000 * speculative.host_seconds / calls if calls else 0.0,
    )


def run_bench(
    engine: Engine,
    prompts: list[str],
    draft_values: list[int],
    max_tokens: int = 128,
    draft_p_min: float = 0.0,
    progress: bool = True,
) -> list[BenchRow]:
    """Greedy baseline vs speculative for every prompt and every k; outputs must match token for token."""
    from rich.progress import Progress

    if engine.drafter is None:
        raise LocalEagleError("bench needs a drafter (--draft)")
    if not prompts:
        raise LocalEagleError("bench needs at least one prompt")
    rows = []
    with Progress(transient=True, disable=not progress) as bar:
        task = bar.add_task("benchmarking", total=len(prompts) * len(draft_values))
        engine.generate(prompts[0], max_tokens=8, sampling=GREEDY, draft_max=max(draft_values))  # warm-up
        for k in draft_values:
            base, spec, mismatches = GenerationTotals(), GenerationTotals(), 0
            for i, prompt in enumerate(prompts):
                order = (0, k) if i % 2 == 0 else (k, 0)
                results = {}
                for kk in order:
                    results[kk] = engine.generate(
                        prompt, max_tokens=max_tokens, sampling=GREEDY, draft_max=kk, draft_p_min=draft_p_min
                    )
                base.add(results[0].stats)
                spec.add(results[k].stats)
                if results[0].tokens != results[k].tokens:
                    mismatches += 1
                bar.advance(task)
            rows.append(summarize(k, base, spec, len(prompts), mismatches))
    return rows

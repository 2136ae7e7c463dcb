"""``local-eagle bench``: speculative decoding against the plain target, in one process.

Each prompt runs the baseline (k = 0, same loop) and speculative decoding back to back, the
order alternating between prompts so slow drift on a noisy machine hits both sides alike.
Speed is reported as a ratio within the run, next to the acceptance figures that explain it
and the ideal speedup the measured costs allow, so the loop's own overhead shows. A run with
the adaptive policy also reports the draft lengths it chose, the costs it estimated and what
catching the drafter up after idle rounds cost. Greedy outputs are compared token for token:
an exact match, a divergence at a near-tie (float rounding), or a real divergence (a bug).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine
from local_eagle.runtime.identity import DIVERGENT, IDENTICAL, NEAR_TIE, check_identity
from local_eagle.runtime.policy.draftcost import CostModel
from local_eagle.runtime.sampling import GREEDY
from local_eagle.runtime.stats import GenerationTotals
from local_eagle.runtime.tree import TreeShape


def read_prompts(path: str | os.PathLike[str]) -> list[str]:
    """Prompts from JSONL (``prompt``/``text`` field, or a bare string per line) or plain-text paragraphs."""
    from local_eagle.train.data import read_samples

    return [s.text for s in read_samples(path)]


@dataclass(frozen=True)
class DraftSetting:
    """One configuration to benchmark: up to ``draft_max`` drafts, chosen by the policy or always all of them;
    or a draft tree of a fixed shape (``draft_max`` its nodes)."""

    draft_max: int
    adaptive: bool
    tree: TreeShape | None = None

    @property
    def label(self) -> str:
        if self.tree is not None:
            tree = f"tree {self.tree.nodes} (d{self.tree.depth} w{self.tree.width})"
            return f"auto<={self.draft_max} or {tree}" if self.adaptive else tree
        return f"auto<={self.draft_max}" if self.adaptive else str(self.draft_max)


@dataclass
class BenchRow:
    draft_max: int
    prompts: int
    baseline_tps: float
    speculative_tps: float
    speedup: float
    acceptance_length: float
    acceptance_per_position: list[float]
    identical: bool  # every output matched the target's exactly
    mismatches: int  # prompts whose output differed (near-ties and divergences)
    target_call_ms: float
    verify_call_ms: float
    draft_ms_per_round: float
    draft_step_ms: float
    ideal_speedup: float
    host_ms_per_round: float
    adaptive: bool = False
    # decoding's wall time outside llama.cpp's calls, drafting's Python included (host_ms_per_round leaves that in the
    # draft phase): per speculative round, and per target-alone call in the same run; None where not measured
    python_ms_per_round: float | None = None
    baseline_python_ms: float | None = None
    # share of target calls that reused llama.cpp's previous graph (speculative, and the target alone)
    graph_reuse: float | None = None
    baseline_graph_reuse: float | None = None
    near_ties: int = 0  # outputs that differed at a near-tie (float rounding)
    divergent: int = 0  # outputs that differed otherwise: a bug
    divergences: list[dict] = field(default_factory=list)  # runtime.identity's finding for each mismatch
    draft_lengths: list[float] = field(default_factory=list)  # share of rounds by number of tokens drafted
    probes: int = 0
    captured: float = 0.0  # share of rounds whose target call recorded features for the drafter
    catch_ups: int = 0
    catch_up_rows: float = 0.0  # per catch-up
    catch_up_ms: float = 0.0  # per catch-up
    policy: dict | None = None  # the adaptive policy's cost estimates at the end of the run (ms)
    tree_nodes: int | None = None  # drafted nodes per tree verify (None: chains)
    tree_depth: int | None = None
    tree_width: int | None = None
    mean_verify_rows: float = 0.0  # rows per target call: the last token and what was drafted
    # every round (verify rows, accepted, drafter calls, catch-up rows, later drafter rows); kept with --rounds
    rounds: list[tuple[int, int, int, int, int]] | None = None
    projected: dict[str, float] = field(default_factory=dict)  # cost profile -> projected speedup (a projection)
    arranged: dict | None = None  # bench.arranged's summary where the drafts were arranged (--arranged)

    @property
    def label(self) -> str:
        tree = None
        if self.tree_nodes is not None:
            tree = TreeShape(self.tree_nodes, self.tree_depth or 1, self.tree_width or 1)
        return DraftSetting(self.draft_max, self.adaptive, tree).label

    def to_dict(self) -> dict:
        return asdict(self)


def _share(n: int, calls: int) -> float | None:
    return n / calls if calls else None


def _per_call(seconds: float | None, calls: int) -> float | None:
    return None if seconds is None or not calls else 1000 * seconds / calls


def summarize(k: int, base: GenerationTotals, spec: GenerationTotals, n_prompts: int, mismatches: int,
              adaptive: bool = False, checks: list | None = None,
              tree: TreeShape | None = None) -> BenchRow:  # fmt: skip
    baseline, speculative = base.total, spec.total
    calls = speculative.target_calls
    t1 = baseline.target_seconds / baseline.target_calls if baseline.target_calls else 0.0
    tv = speculative.target_seconds / calls if calls else 0.0
    draft_round = speculative.drafter_seconds / calls if calls else 0.0
    tau = spec.acceptance_length
    base_round = baseline.decode_seconds / baseline.target_calls if baseline.target_calls else 0.0
    base_tps, spec_tps = baseline.tokens_per_second, speculative.tokens_per_second
    checks = checks or []
    rounds = sum(speculative.draft_lengths)
    n_catch = speculative.catch_ups
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
        python_ms_per_round=_per_call(speculative.python_seconds, calls),
        baseline_python_ms=_per_call(baseline.python_seconds, baseline.target_calls),
        adaptive=adaptive,
        near_ties=sum(c.verdict == NEAR_TIE for c in checks),
        divergent=sum(c.verdict == DIVERGENT for c in checks),
        divergences=[c.to_dict() for c in checks if c.verdict != IDENTICAL],
        draft_lengths=[n / rounds for n in speculative.draft_lengths] if rounds else [],
        probes=speculative.probes,
        captured=speculative.captured_rounds / calls if calls else 0.0,
        catch_ups=n_catch,
        catch_up_rows=speculative.catch_up_rows / n_catch if n_catch else 0.0,
        catch_up_ms=1000 * speculative.catch_up_seconds / n_catch if n_catch else 0.0,
        policy=speculative.policy,
        tree_nodes=None if tree is None else tree.nodes,
        tree_depth=None if tree is None else tree.depth,
        tree_width=None if tree is None else tree.width,
        mean_verify_rows=1.0 + speculative.drafted_tokens / calls if calls else 0.0,
    )


def run_bench(
    engine: Engine,
    prompts: list[str],
    draft_values: list[int | DraftSetting],
    max_tokens: int = 128,
    draft_p_min: float = 0.0,
    progress: bool = True,
    decide_on: CostModel | None = None,
) -> list[BenchRow]:
    """Greedy baseline vs speculative for every prompt and every setting; outputs are checked token for token.

    A plain number in ``draft_values`` is a fixed draft length. A setting runs on the same engine as the
    others, so the adaptive policy keeps what it learnt from one prompt to the next (as a server's does).
    With ``decide_on`` (another machine's costs) the adaptive policy decides on those instead of this machine's.
    """
    from rich.progress import Progress

    if engine.drafter is None:
        raise LocalEagleError("bench needs a drafter (--draft)")
    if not prompts:
        raise LocalEagleError("bench needs at least one prompt")
    settings = [v if isinstance(v, DraftSetting) else DraftSetting(v, False) for v in draft_values]
    rows = []
    with Progress(transient=True, disable=not progress) as bar:
        task = bar.add_task("benchmarking", total=len(prompts) * len(settings))
        # every setting once before any is timed: a setting's first run would otherwise pay its one-offs (the policy
        # built, the first call of each shape: on a GPU its kernels and graph captured) inside measured rounds
        for warm in settings:
            engine.generate(prompts[0], max_tokens=8, sampling=GREEDY, draft_max=warm.draft_max,
                            adaptive=warm.adaptive, tree=warm.tree)  # fmt: skip
        if decide_on is not None:
            engine.lengths.decide_on(decide_on, max(s.draft_max for s in settings))
            engine.tree_choices.clear()
        for setting in settings:
            k = setting.draft_max
            base, spec, checks, rounds = GenerationTotals(), GenerationTotals(), [], []
            reused = {0: 0, k: 0}
            for i, prompt in enumerate(prompts):
                order = (0, k) if i % 2 == 0 else (k, 0)
                results = {}
                for kk in order:
                    before = engine.ctx.graphs_reused()
                    results[kk] = engine.generate(
                        prompt, max_tokens=max_tokens, sampling=GREEDY, draft_max=kk, draft_p_min=draft_p_min,
                        adaptive=setting.adaptive and kk > 0, tree=setting.tree if kk > 0 else None,
                    )  # fmt: skip
                    reused[kk] += engine.ctx.graphs_reused() - before
                base.add(results[0].stats)
                spec.add(results[k].stats)
                if results[k].spec_stats is not None:
                    rounds += results[k].spec_stats.trace_rounds
                if results[0].tokens != results[k].tokens:
                    checks.append(check_identity(engine, prompt, results[0], results[k]))
                bar.advance(task)
            row = summarize(k, base, spec, len(prompts), len(checks), setting.adaptive, checks, setting.tree)
            row.rounds = rounds
            row.graph_reuse = _share(reused[k], spec.total.target_calls)
            row.baseline_graph_reuse = _share(reused[0], base.total.target_calls)
            rows.append(row)
    return rows

"""``local-eagle bench``: a greedy baseline against speculative decoding, in one process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from local_eagle.cli.console import err, friendly, out
from local_eagle.cli.loading import BeyondTrainingOpt, LoadOptions, open_engine
from local_eagle.cli.options import (
    GpuOpt,
    ModelOpt,
    OptionalCtxOpt,
    RequiredDraftOpt,
    ThreadsOpt,
    checked_options,
)
from local_eagle.errors import LocalEagleError
from local_eagle.ollama.parameters import PARAMETERS


@friendly
@checked_options
def bench(
    model: ModelOpt,
    draft: RequiredDraftOpt,
    prompts: Annotated[Path, typer.Option("--prompts", help="JSONL file of prompts ({'prompt': ...} per line).")],
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help=PARAMETERS["num_predict"].help)] = 128,
    draft_max: Annotated[
        list[int] | None, typer.Option("--draft-max", help="Tokens drafted per step to test (repeatable). Default 4.")
    ] = None,
    draft_p_min: Annotated[float, typer.Option("--draft-p-min")] = 0.0,
    limit: Annotated[int | None, typer.Option(help="Use only the first N prompts.")] = None,
    ctx: OptionalCtxOpt = None,
    ctx_beyond_training: BeyondTrainingOpt = False,
    gpu_layers: GpuOpt = -1,
    threads: ThreadsOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Greedy baseline vs speculative decoding in one process: speedup, acceptance, ideal speedup."""
    from local_eagle.bench.run import read_prompts, run_bench

    if limit is not None and limit < 1:
        raise LocalEagleError(f"--limit must be at least 1 (prompts to use), got {limit}")
    texts = read_prompts(prompts)[:limit]
    ks = draft_max or [4]
    load = LoadOptions(ctx, gpu_layers, threads, max(ks), ctx_beyond_training)
    with open_engine(model, draft, load) as engine:
        n = max_tokens if max_tokens > 0 else engine.n_ctx  # Ollama's -1: until the context is full
        rows = run_bench(engine, texts, ks, max_tokens=n, draft_p_min=draft_p_min, progress=not as_json)
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
    else:
        t = Table(title=f"{model.name} + {draft.name}: greedy, {len(texts)} prompts x {max_tokens} tokens")
        for c in ("k", "baseline tok/s", "spec tok/s", "speedup", "ideal", "accept len", "identical"):
            t.add_column(c)
        for r in rows:
            t.add_row(
                str(r.draft_max), f"{r.baseline_tps:.1f}", f"{r.speculative_tps:.1f}", f"{r.speedup:.2f}x",
                f"{r.ideal_speedup:.2f}x", f"{r.acceptance_length:.2f}",
                "yes" if r.identical else f"NO ({r.mismatches})",
            )  # fmt: skip
        out.print(t)
        c = Table(title="acceptance per draft position and costs (ms)")
        for col in ("k", "per-position acceptance", "target 1-tok", "verify", "draft/round", "host/round"):
            c.add_column(col)
        for r in rows:
            c.add_row(
                str(r.draft_max), " ".join(f"{a:.2f}" for a in r.acceptance_per_position), f"{r.target_call_ms:.2f}",
                f"{r.verify_call_ms:.2f}", f"{r.draft_ms_per_round:.2f}", f"{r.host_ms_per_round:.2f}",
            )  # fmt: skip
        out.print(c)
    if not all(r.identical for r in rows):  # a correctness bug, not a slow pair: exit status 1
        err.print("[red]speculative output differed from the target's[/]")
        raise typer.Exit(1)

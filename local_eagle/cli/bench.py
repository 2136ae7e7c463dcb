"""``local-eagle bench``: a greedy baseline against speculative decoding, in one process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from local_eagle.cli.console import err, friendly, out
from local_eagle.cli.loading import BeyondTrainingOpt, LoadOptions, open_engine
from local_eagle.cli.options import (
    AUTO,
    FixedOpt,
    FormatOpt,
    GpuOpt,
    GrammarOpt,
    JsonSchemaOpt,
    ModelOpt,
    OptionalCtxOpt,
    RequiredDraftOpt,
    ThreadsOpt,
    checked_options,
    parse_draft_max,
)
from local_eagle.errors import LocalEagleError
from local_eagle.ollama.parameters import PARAMETERS
from local_eagle.runtime.policy.lengths import AUTO_TREE_NODES, AUTO_TREE_WIDTH


@friendly
@checked_options
def bench(
    model: ModelOpt,
    draft: RequiredDraftOpt,
    prompts: Annotated[Path, typer.Option("--prompts", help="JSONL file of prompts ({'prompt': ...} per line).")],
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help=PARAMETERS["num_predict"].help)] = 128,
    draft_max: Annotated[
        list[str] | None,
        typer.Option(
            "--draft-max",
            help="Settings to test (repeatable): 'auto' (adaptive, up to 8) or N (adaptive up to N; fixed with "
            "--fixed). Default: auto.",
        ),
    ] = None,
    fixed: FixedOpt = False,
    tree: Annotated[
        list[int] | None,
        typer.Option(
            "--tree",
            help="Draft trees of N nodes per target call (repeatable): EAGLE-2's dynamic tree, the N best of the "
            "drafter's expansions verified in one call; every round with --fixed, else when the measured costs "
            "favour it over the adaptive policy's chains (up to 8 drafts).",
        ),
    ] = None,
    no_tree: Annotated[
        bool,
        typer.Option(
            "--no-tree",
            help="Open the engine for chains only (as --tree off elsewhere): the adaptive rows draft no trees. "
            f"By default they may, up to {AUTO_TREE_NODES} nodes, as generate, chat and serve do.",
        ),
    ] = False,
    tree_depth: Annotated[
        int | None, typer.Option("--tree-depth", help="Drafter calls per tree (default: N, at most 32).")
    ] = None,
    tree_width: Annotated[
        int | None, typer.Option("--tree-width", help="Frontier nodes expanded per call (default: N, at most 8).")
    ] = None,
    draft_p_min: Annotated[float, typer.Option("--draft-p-min")] = 0.0,
    limit: Annotated[int | None, typer.Option(help="Use only the first N prompts.")] = None,
    ctx: OptionalCtxOpt = None,
    ctx_beyond_training: BeyondTrainingOpt = False,
    gpu_layers: GpuOpt = -1,
    threads: ThreadsOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Also draw tokens per target call against rows per call (PNG).")
    ] = None,
    cost_profile: Annotated[
        list[str] | None,
        typer.Option(
            "--cost-profile",
            help="Also project each row's speedup on another machine's costs (repeatable): a built-in profile "
            "(rtx4090-8b-q4, rtx4090-1b-f32) or a profile file from --measure-costs. A projection, printed beside "
            "the measured speedup.",
        ),
    ] = None,
    decide_on: Annotated[
        str | None,
        typer.Option(
            "--decide-on",
            help="The adaptive rows' policy decides on this profile's costs (built-in or file, as --cost-profile) "
            "instead of this machine's: it drafts what it would there, and the rows are projected on it. The "
            "measured speed of those rows is this machine's, not the profile's.",
        ),
    ] = None,
    measure_costs: Annotated[
        Path | None,
        typer.Option(
            "--measure-costs",
            help="Also measure this machine's cost curve (target call by rows 1-64, drafter call by rows) and write "
            "it as a cost profile (JSON) others can project on.",
        ),
    ] = None,
    keep_rounds: Annotated[
        bool, typer.Option("--rounds", help="With --json: one record per round (rows verified, tokens accepted, "
                           "drafter calls, catch-up rows, later drafter rows).")  # fmt: skip
    ] = False,
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            help="Many requests at once, e.g. 1,4,16: one engine of that many sequences runs each --draft-max "
            "setting and no drafting with C requests in flight, and reports aggregate and per-request tok/s, the "
            "speedup over no drafting at the same concurrency, acceptance, the batching gain over one at a time, "
            "the cost of a target call by rows and each output's identity with the target alone's.",
        ),
    ] = None,
    repeat: Annotated[
        int,
        typer.Option(
            "--repeat", min=1,
            help="With --concurrency: run every setting this many times at each concurrency, in alternating order, "
            "and report all the passes together (a noisy machine's drift falls on both sides).",
        ),
    ] = 1,
    json_schema: JsonSchemaOpt = None,
    grammar: GrammarOpt = None,
    output_format: FormatOpt = None,
    arranged: Annotated[
        str | None,
        typer.Option(
            "--arranged",
            help="Arranged acceptance, for a random-weight pair (python -m local_eagle.bench.pair): the real engine, "
            "each drafter row rewritten so the target's next token sits at a rank recorded from a real pair: 'demo' "
            "(the demo pair on held-out code) or a rank table (python -m local_eagle.bench.arranged record). The "
            "verify is real; every output says 'arranged acceptance'.",
        ),
    ] = None,
) -> None:
    """Greedy baseline vs speculative decoding in one process: speedup, acceptance, chosen draft lengths, costs.

    ``--draft-max auto --draft-max 1 --draft-max 4 --fixed`` compares the adaptive policy with fixed k = 1 and 4.

    Under a constraint (``--json-schema FILE``, ``--grammar FILE``, ``--format json``, or prompts whose lines carry
    their own ``schema``) it runs the target alone under it, grammar-aware drafting and unconstrained drafting
    (llama-server's way) at each setting, and checks every output against its schema (docs/structured.md).
    """
    from local_eagle.bench.run import DraftSetting, read_prompts
    from local_eagle.runtime.policy.lengths import AUTO_DRAFT_MAX

    if no_tree and tree:
        raise LocalEagleError("give --tree N or --no-tree, not both")
    if limit is not None and limit < 1:
        raise LocalEagleError(f"--limit must be at least 1 (prompts to use), got {limit}")
    if plot is not None:
        from local_eagle.files import check_output_file

        inputs = [("target GGUF", model), ("drafter GGUF", draft), ("prompts file", prompts)]
        check_output_file(plot, "--plot", inputs)
    from local_eagle.bench.project import load_profile

    profiles = [load_profile(p) for p in cost_profile or []]
    decided = None
    if decide_on is not None:
        decided = load_profile(decide_on)
        if decided.name not in [p.name for p in profiles]:
            profiles.append(decided)
    if measure_costs is not None:
        from local_eagle.files import check_output_file

        check_output_file(measure_costs, "--measure-costs", [("target GGUF", model), ("drafter GGUF", draft)])
    from local_eagle.cli.options import resolve_models

    pair = resolve_models(model, draft, None)  # a model name, hf.co/USER/REPO or a shipped name, as generate takes
    model, draft = pair.model, pair.draft or draft
    from local_eagle.bench.structured import has_schemas
    from local_eagle.cli.options import grammar_option

    constraint = grammar_option(output_format, json_schema, grammar)
    if constraint is not None or has_schemas(prompts):
        others = [("--tree", tree), ("--plot", plot), ("--cost-profile", cost_profile), ("--decide-on", decide_on),
                  ("--rounds", keep_rounds), ("--concurrency", concurrency), ("--measure-costs", measure_costs)]
        refused = [f for f, given in [*others, ("--arranged", arranged)] if given]
        if refused:
            raise LocalEagleError(f"{', '.join(refused)}: not under a constraint (--json-schema, --grammar, --format "
                                  "or prompts with a schema: a constrained generation drafts chains)")  # fmt: skip
        values = [parse_draft_max(v) for v in draft_max or [AUTO]]
        chains = [DraftSetting(AUTO_DRAFT_MAX, True) if n is None else DraftSetting(n, not fixed) for n in values]
        _bench_structured(model, draft, prompts, constraint, limit, chains, max_tokens, draft_p_min, as_json,
                          LoadOptions(ctx, gpu_layers, threads, max(s.draft_max for s in chains),
                                      ctx_beyond_training, tree_nodes=0))  # fmt: skip
        return
    texts = read_prompts(prompts)[:limit]
    if concurrency is not None:
        refused = [f for f, given in [("--tree", tree), ("--plot", plot), ("--cost-profile", cost_profile),
                                      ("--decide-on", decide_on), ("--rounds", keep_rounds)] if given]  # fmt: skip
        if refused:
            raise LocalEagleError(f"{', '.join(refused)}: not with --concurrency (parallel sequences draft chains)")
    if arranged is not None:
        from local_eagle.bench.concurrency import on_own_thread  # the main thread keeps no OpenMP team for it

        load = LoadOptions(ctx, gpu_layers, threads)
        arrangement = on_own_thread(lambda: _arrange(model, draft, texts, max_tokens, arranged, load))
        draft = arrangement.drafter
    else:
        arrangement = None
    try:
        _bench_texts(model, draft, texts, max_tokens, draft_max, fixed, tree, no_tree, tree_depth, tree_width,
                     draft_p_min, as_json, plot, profiles, decided, measure_costs, keep_rounds, concurrency, repeat,
                     ctx, gpu_layers, threads, ctx_beyond_training, arrangement)  # fmt: skip
    finally:
        if arrangement is not None:
            arrangement.close()


def _arrange(model: Path, draft: Path, texts: list[str], max_tokens: int, table: str, load: LoadOptions):
    """``--arranged``: the target alone's texts, and the drafter copied with them in its draft vocabulary."""
    from local_eagle.bench.arranged import arrange, load_table

    rank_table = load_table(table)
    with open_engine(model, None, replace(load, mtp=False, tree_nodes=0)) as alone:
        return arrange(alone, draft, texts, max_tokens if max_tokens > 0 else 512, rank_table)


def _bench_texts(model: Path, draft: Path, texts: list[str], max_tokens: int, draft_max, fixed: bool, tree, no_tree,
                 tree_depth, tree_width, draft_p_min: float, as_json: bool, plot, profiles, decided, measure_costs,
                 keep_rounds: bool, concurrency, repeat: int, ctx, gpu_layers: int, threads: int,
                 ctx_beyond_training: bool, arrangement) -> None:  # fmt: skip
    """The unconstrained benches: one request at a time, or ``--concurrency``; ``arrangement`` wraps the engine's
    drafter (``--arranged``)."""
    from local_eagle.bench.run import DraftSetting, run_bench
    from local_eagle.cli.run import draft_lengths_text
    from local_eagle.runtime.policy.lengths import AUTO_DRAFT_MAX
    from local_eagle.runtime.tree import TreeShape

    if concurrency is not None:
        values = [parse_draft_max(v) for v in draft_max or [AUTO]]
        chains = [DraftSetting(AUTO_DRAFT_MAX, True) if n is None else DraftSetting(n, not fixed) for n in values]
        _bench_concurrency(model, draft, texts, concurrency, chains, max_tokens, measure_costs, as_json,
                           LoadOptions(ctx, gpu_layers, threads, max(s.draft_max for s in chains),
                                       ctx_beyond_training, tree_nodes=0), repeat, arrangement)  # fmt: skip
        return
    if repeat != 1:
        raise LocalEagleError("--repeat: only with --concurrency (the other rows alternate the target alone and "
                              "each setting prompt by prompt already)")  # fmt: skip
    settings = []
    for value in draft_max or ([] if tree else [AUTO]):
        n = parse_draft_max(value)
        settings.append(DraftSetting(AUTO_DRAFT_MAX, True) if n is None else DraftSetting(n, not fixed))
    for nodes in tree or []:
        shape = TreeShape.for_nodes(nodes, tree_depth, tree_width)
        settings.append(DraftSetting(nodes, False, shape) if fixed else DraftSetting(AUTO_DRAFT_MAX, True, shape))
    shapes = [s.tree for s in settings if s.tree is not None]
    # the product's default: adaptive rows on an engine opened for trees, which the policy drafts where they pay
    auto = [] if no_tree or not any(s.adaptive and s.tree is None for s in settings) else [AUTO_TREE_NODES]
    load = LoadOptions(
        ctx, gpu_layers, threads, max(s.draft_max for s in settings), ctx_beyond_training,
        tree_nodes=max([t.nodes for t in shapes] + auto, default=0),
        tree_width=max([t.width for t in shapes] + [AUTO_TREE_WIDTH] * len(auto), default=AUTO_TREE_WIDTH),
    )  # fmt: skip
    with open_engine(model, draft, load) as engine:
        if arrangement is not None:
            arrangement.wrap(engine)
        n_tokens = max_tokens if max_tokens > 0 else engine.n_ctx  # Ollama's -1: until the context is full
        if shapes and engine.tree_refusal is not None:
            err.print(f"no draft trees for this target ({engine.tree_refusal}): its tree rows draft chains instead")
        fitted = [replace(s, tree=engine.fit_tree(s.tree)) if s.tree is not None else s for s in settings]
        if fitted != settings:
            n = engine.max_tree_nodes
            err.print(f"trees of more than {n} nodes verify {n} where attention runs on the CPU (llama.cpp's "
                      "64-row flash attention rounds apart from a plain decode)", markup=False)  # fmt: skip
            settings = fitted
        rows = run_bench(engine, texts, settings, max_tokens=n_tokens, draft_p_min=draft_p_min, progress=not as_json,
                         decide_on=None if decided is None else decided.fixed_costs())  # fmt: skip
    if measure_costs is not None:
        from local_eagle.bench.costs import measure_cost_curve
        from local_eagle.bench.project import write_profile

        curve = measure_cost_curve(model, draft, gpu_layers=gpu_layers, threads=threads)
        host = min((r.host_ms_per_round for r in rows if not r.adaptive and r.host_ms_per_round), default=None)
        write_profile(measure_costs, curve.to_dict(), host, f"{model.stem} + {draft.stem}")
        err.print(f"cost profile written to {measure_costs}", markup=False)
    _project(rows, profiles)
    for r in rows:
        if not keep_rounds:
            r.rounds = None
        if arrangement is not None:
            r.arranged = arrangement.summary()
    if plot is not None:
        from local_eagle.bench.plot import plot_rows

        plot_rows(rows, plot, f"{model.name} + {draft.name}: greedy, {len(texts)} prompts x {max_tokens} tokens")
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
    else:
        label = "" if arrangement is None else ", ARRANGED ACCEPTANCE"
        t = Table(title=f"{model.name} + {draft.name}: greedy, {len(texts)} prompts x {max_tokens} tokens{label}")
        for c in ("k", "baseline tok/s", "spec tok/s", "speedup", "ideal", "accept len", "identical"):
            t.add_column(c)
        for p in profiles:
            t.add_column(f"projected on {p.name}")
        for r in rows:
            same = "yes" if r.identical else f"{r.prompts - r.mismatches} + {r.near_ties} near-tie"
            if r.divergent:
                same += f", {r.divergent} DIVERGENT"
            t.add_row(
                r.label, f"{r.baseline_tps:.1f}", f"{r.speculative_tps:.1f}", f"{r.speedup:.2f}x",
                f"{r.ideal_speedup:.2f}x", f"{r.acceptance_length:.2f}", same,
                *(f"{r.projected[p.name]:.2f}x" for p in profiles),
            )  # fmt: skip
        out.print(t)
        if profiles:
            out.print("projected: this run's rounds priced on the profile's costs (a projection, not a measurement)",
                      highlight=False)  # fmt: skip
        if decided is not None:
            note = f"the adaptive rows drafted as the policy would on {decided.name} (--decide-on): their measured "
            out.print(note + "speedup is this machine's running those drafts", highlight=False)
        c = Table(title="acceptance per draft position and costs (ms)")
        for col in ("k", "per-position acceptance", "rows/call", "target 1-tok", "verify", "draft/round", "host/round",
                    "python/round (alone)"):  # fmt: skip
            c.add_column(col)
        for r in rows:
            python = "-" if r.python_ms_per_round is None else f"{r.python_ms_per_round:.2f}"
            if r.baseline_python_ms is not None:
                python += f" ({r.baseline_python_ms:.2f})"
            c.add_row(
                r.label, " ".join(f"{a:.2f}" for a in r.acceptance_per_position), f"{r.mean_verify_rows:.1f}",
                f"{r.target_call_ms:.2f}",
                f"{r.verify_call_ms:.2f}", f"{r.draft_ms_per_round:.2f}", f"{r.host_ms_per_round:.2f}", python,
            )  # fmt: skip
        out.print(c)
        if arrangement is not None:
            _print_arranged(arrangement.summary())
        _print_adaptive(rows, draft_lengths_text)
        for r in rows:
            for d in r.divergences:
                x = d["divergence"]
                if x is not None:
                    out.print(
                        f"k={r.label}: {d['verdict']} at token {x['index']}: top-2 gap {x['gap_single']:.3f} "
                        f"(1-row) / {x['gap_batched']:.3f} (batched), the two computations differ by "
                        f"{x['noise']:.3f} (logit range {x['scale']:.1f})",
                        highlight=False,
                    )
    if any(r.divergent for r in rows):  # a correctness bug, not a slow pair or a near-tie: exit status 1
        err.print("[red]speculative output diverged from the target's (not at a near-tie)[/]")
        raise typer.Exit(1)


def _bench_structured(model: Path, draft: Path, prompts: Path, constraint, limit: int | None, settings: list,
                      max_tokens: int, draft_p_min: float, as_json: bool, load: LoadOptions) -> None:  # fmt: skip
    """Under a constraint: the target alone, grammar-aware and unconstrained drafting on the same prompts, every
    output checked against its schema and against the target alone's (bench.structured)."""
    from local_eagle.bench.structured import read_structured_tasks, run_structured, schema_validation

    tasks = read_structured_tasks(prompts, constraint)[:limit]
    with open_engine(model, draft, load) as engine:
        n_tokens = max_tokens if max_tokens > 0 else engine.n_ctx
        rows = run_structured(engine, tasks, settings, max_tokens=n_tokens, draft_p_min=draft_p_min,
                              progress=not as_json)  # fmt: skip
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
    else:
        _print_structured(rows, f"{model.name} + {draft.name}: greedy under constraints, {len(tasks)} prompts x "
                                f"{max_tokens} tokens")  # fmt: skip
        if not schema_validation() and any(t.spec.kind == "json_schema" for t in tasks):
            out.print("valid: JSON outputs were parsed, not validated against their schemas (pip install "
                      "jsonschema)", highlight=False)  # fmt: skip
    if any(r.divergent for r in rows):
        err.print("[red]an output diverged from the target alone's under the same constraint (not at a near-tie)[/]")
        raise typer.Exit(1)


def _print_structured(rows: list, title: str) -> None:
    t = Table(title=title)
    for c in ("drafting", "k", "tok/s", "speedup", "accept len", "drafter calls/call", "valid", "identical"):
        t.add_column(c)
    for r in rows:
        same = f"{r.identical}/{r.prompts}"
        if r.near_ties:
            same += f" + {r.near_ties} near-tie"
        if r.divergent:
            same += f", {r.divergent} DIVERGENT"
        valid = f"{r.valid}/{r.prompts}" + (f" ({r.cut} cut)" if r.cut else "")
        alone = r.drafting == "target alone"
        t.add_row(
            r.drafting, r.setting, f"{r.tokens_per_second:.1f}", "1.00x" if alone else f"{r.speedup:.2f}x",
            "-" if alone else f"{r.acceptance_length:.2f}", "-" if alone else f"{r.drafter_calls_per_call:.2f}",
            valid, same,
        )  # fmt: skip
    out.print(t)
    c = Table(title="acceptance per draft position")
    for col in ("drafting", "k", "per-position acceptance", "rows/call"):
        c.add_column(col)
    for r in rows:
        if r.drafting != "target alone":
            c.add_row(r.drafting, r.setting, " ".join(f"{a:.2f}" for a in r.acceptance_per_position) or "-",
                      f"{r.mean_verify_rows:.1f}")  # fmt: skip
    out.print(c)
    out.print("speedup: over the target alone under the same constraints; accept len: tokens per target call; "
              "grammar-aware: drafts masked by the grammar, forced tokens drafted without a drafter call; "
              "unconstrained: the drafter drafts as if there were no constraint (llama-server's way); identical: "
              "outputs token for token the target alone's; cut: stopped by the token limit",
              highlight=False)  # fmt: skip
    for r in rows:
        for bad in r.invalid:
            out.print(f"{r.label}: task {bad['task']}: {bad['reason']} (stop: {bad['stop_reason']})", highlight=False)
        for d in r.divergences:
            x = d["divergence"]
            if x is not None:
                out.print(f"{r.label}: {d['verdict']} at token {x['index']}: top-2 gap among allowed tokens "
                          f"{x['gap_single']:.3f} (1-row) / {x['gap_batched']:.3f} (batched), the two computations "
                          f"differ by {x['noise']:.3f} (logit range {x['scale']:.1f})", highlight=False)  # fmt: skip


def _print_arranged(summary: dict) -> None:
    s = summary
    out.print(f"{s['note']}. Recorded acceptance by depth {s['recorded_acceptance']}; rows read {s['rows']}, on the "
              f"text {s['on_path']}, its token placed {s['placed']}, of texts not known (left as computed) "
              f"{s['unknown']}; {s['seconds']:.3f} s spent rewriting rows, left out of every time (the engine's "
              "clock stood still).",
              highlight=False)  # fmt: skip


def _bench_concurrency(model: Path, draft: Path, texts: list[str], concurrency: str, settings: list, max_tokens: int,
                       measure_costs: Path | None, as_json: bool, load: LoadOptions,
                       repeat: int = 1, arrangement=None) -> None:  # fmt: skip
    """``--concurrency``: every setting and no drafting at each concurrency on one parallel engine, the outputs
    checked against a one-sequence engine's, then the cost of a target call by rows (bench.concurrency)."""
    from local_eagle.bench.concurrency import cost_rows, parse_concurrency, run_concurrency
    from local_eagle.bench.costs import DEFAULT_ROWS, measure_cost_curve

    values = parse_concurrency(concurrency)
    if max(values) > len(texts):
        raise LocalEagleError(f"--concurrency {max(values)} needs at least {max(values)} prompts to keep that many "
                              f"requests in flight; the prompts file has {len(texts)}")  # fmt: skip
    with open_engine(model, draft, replace(load, parallel=max(values))) as engine:
        with open_engine(model, draft, load) as single:
            if arrangement is not None:  # the identity reference (single) runs the target alone: not wrapped
                arrangement.wrap(engine)
            n_tokens = max_tokens if max_tokens > 0 else engine.n_ctx
            report = run_concurrency(engine, single, texts, values, settings, n_tokens, progress=not as_json,
                                     repeat=repeat)  # fmt: skip
    rows = cost_rows(values)
    if measure_costs is not None:
        rows = tuple(sorted(set(rows) | set(DEFAULT_ROWS)))
    curve = measure_cost_curve(model, draft, rows=rows, gpu_layers=load.gpu_layers, threads=load.threads)
    report.costs = curve.to_dict()
    if arrangement is not None:
        report.arranged = arrangement.summary()
    if measure_costs is not None:
        from local_eagle.bench.project import write_profile

        write_profile(measure_costs, curve.to_dict(), None, f"{model.stem} + {draft.stem}")
        err.print(f"cost profile written to {measure_costs}", markup=False)
    if as_json:
        print(json.dumps(report.to_dict()))
    else:
        _print_concurrency(report, f"{model.name} + {draft.name}")
        if report.arranged is not None:
            _print_arranged(report.arranged)
    if report.divergent:
        err.print("[red]an output diverged from the target alone's (not at a near-tie)[/]")
        raise typer.Exit(1)


def _print_concurrency(report, pair: str) -> None:
    passes = f", {report.repeat} passes each" if report.repeat > 1 else ""
    t = Table(title=f"{pair}: greedy, {report.prompts} prompts x {report.max_tokens} tokens at each concurrency"
              f"{passes}")  # fmt: skip
    for c in ("concurrency", "drafting", "aggregate tok/s", "per-request tok/s", "speedup", "accept len",
              "batching gain", "identical"):  # fmt: skip
        t.add_column(c)
    for r in report.rows:
        same = f"{r.identical}/{r.requests}"
        if r.near_ties:
            same += f" + {r.near_ties} near-tie"
        if r.divergent:
            same += f", {r.divergent} DIVERGENT"
        gain = "-" if r.batching_gain is None else f"{r.batching_gain:.2f}x"
        t.add_row(str(r.concurrency), r.setting, f"{r.aggregate_tps:.1f}", f"{r.per_request_tps:.1f}",
                  f"{r.speedup:.2f}x", f"{r.acceptance_length:.2f}", gain, same)  # fmt: skip
    out.print(t)
    note = "speedup: over no drafting at the same concurrency; batching gain: over no drafting one request at a time"
    out.print(note + "; per-request: each request's tokens over its own time, prompt included", highlight=False)
    adaptive = [r for r in report.rows if r.adaptive and r.policy]
    if adaptive:
        a = Table(title="adaptive rows: the policy that decided last, drafts per round (share of rounds)")
        for col in ("concurrency", "drafting", "policy", "draft lengths"):
            a.add_column(col)
        for r in adaptive:
            shares = " ".join(f"{k}:{x:.0%}" for k, x in enumerate(r.draft_lengths) if x >= 0.005)
            kind = r.policy.get("kind")
            kind = f"batch, last k={r.policy.get('draft_length')}" if kind == "batch" else kind or "one sequence"
            a.add_row(str(r.concurrency), r.setting, kind, shares)
        out.print(a)
    costs = report.costs or {}
    verify = {int(k): v for k, v in (costs.get("verify_ms") or {}).items()}
    drafter = {int(k): v for k, v in (costs.get("drafter_ms") or {}).items()}
    if verify:
        from local_eagle.bench.costs import skipped_note

        one = verify.get(1, 0.0)
        samples = {int(k): v for k, v in (costs.get("samples") or {}).items()}
        c = Table(title="cost of a call by rows, measured in this run (ms, medians)")
        for col in ("rows", "target call", "x 1 row", "batching allows", "drafter call", "calls timed"):
            c.add_column(col)
        for n, ms in sorted(verify.items()):
            ratio = ms / one if one else 0.0
            c.add_row(str(n), f"{ms:.2f}", f"{ratio:.2f}x", f"{n / ratio:.2f}x" if ratio else "-",
                      f"{drafter[n]:.2f}" if n in drafter else "-", str(samples.get(n, "-")))  # fmt: skip
        out.print(c)
        out.print("target call: its rows decoded, the device waited for, every row's logits read; drafter call: its "
                  "rows decoded on one sequence, the last row's logits and state read (a catch-up; a step of c "
                  "sequences reads c rows); batching allows: rows x cost(1 row) / cost(rows), the most that many "
                  "one-row sequences gain from sharing one call", highlight=False)  # fmt: skip
        note = skipped_note(costs.get("skipped") or {})
        if note:
            out.print(note, highlight=False)
    for r in report.rows:
        for d in r.divergences:
            x = d["divergence"]
            if x is not None:
                out.print(f"concurrency {r.concurrency}, {r.setting}: {d['verdict']} at token {x['index']}: top-2 gap "
                          f"{x['gap_single']:.3f} (logit range {x['scale']:.1f})", highlight=False)  # fmt: skip


def _project(rows: list, profiles: list) -> None:
    """Each row's rounds priced on each profile; host time per round is the profile's, else the row's own."""
    from local_eagle.bench.project import projected_speedup

    for r in rows:
        for p in profiles:
            host = p.host_ms if p.host_ms is not None else r.host_ms_per_round
            r.projected[p.name] = projected_speedup(r.rounds or [], p, host)


def _print_adaptive(rows: list, lengths_text) -> None:
    """The adaptive runs: the draft lengths chosen, what the policy estimated, what catching up cost."""
    adaptive = [r for r in rows if r.adaptive]
    if not adaptive:
        return
    a = Table(title="adaptive runs: draft lengths chosen (share of rounds), estimated costs (ms), drafter catch-up")
    for col in ("k", "draft lengths", "est. verify by rows", "est. step / first", "probes", "captured", "catch-up"):
        a.add_column(col)
    for r in adaptive:
        p = r.policy or {}
        verify = " ".join(f"{t:.1f}" for t in p.get("verify_ms", []))
        steps = f"{p.get('draft_step_ms', 0.0):.2f} / {p.get('first_step_ms', 0.0):.2f}"
        catch = f"{r.catch_ups} x {r.catch_up_rows:.1f} rows, {r.catch_up_ms:.2f} ms" if r.catch_ups else "none"
        shares = lengths_text([round(1000 * x) for x in r.draft_lengths])
        a.add_row(r.label, shares, verify, steps, str(r.probes), f"{r.captured:.0%}", catch)
    out.print(a)

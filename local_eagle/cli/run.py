"""Commands that run a model pair: ``generate``, ``chat``, ``demo`` and ``selfcheck``.

The chat REPL itself is :mod:`local_eagle.cli.chat`; ``chat`` here only turns its flags into a
:class:`~local_eagle.cli.chat.ChatSession`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from local_eagle.cli.console import err, friendly, out, warn_if_cpu_only
from local_eagle.cli.loading import (
    BeyondTrainingOpt,
    note_mtp,
    note_tree_refusal,
    open_engine,
    own_head,
)
from local_eagle.cli.options import (
    AUTO,
    NO_SAMPLING_FLAGS,
    DraftLengthOpt,
    DraftOpt,
    DraftPMinOpt,
    FixedOpt,
    FormatOpt,
    GrammarOpt,
    JsonOpt,
    JsonSchemaOpt,
    ModelfileOpt,
    MtpOpt,
    OptionalCtxOpt,
    OptionalGpuOpt,
    OptionalModelOpt,
    OptionalThreadsOpt,
    SamplingFlags,
    ThreadsOpt,
    TreeOpt,
    checked_options,
    draft_mode,
    given,
    grammar_option,
    parse_draft_max,
    resolve,
    resolve_models,
    sampling_options,
    table_help,
)
from local_eagle.errors import LocalEagleError
from local_eagle.files import read_text_input
from local_eagle.ollama.parameters import PARAMETERS

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine

DEFAULT_MAX_TOKENS = 128
"""generate's answer length when neither --max-tokens nor the Modelfile's num_predict gives one."""


def _echo(pieces: Iterable[str], quiet: bool) -> None:
    """Print an answer as it streams (unless the command prints JSON at the end instead)."""
    for piece in pieces:
        if not quiet:
            out.file.write(piece)
            out.file.flush()


def _read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    """The prompt from exactly one of --prompt and --prompt-file."""
    if (prompt is None) == (prompt_file is None):
        raise LocalEagleError("give exactly one of --prompt or --prompt-file")
    if prompt_file is not None:
        return read_text_input(prompt_file, "prompt file")
    assert prompt is not None
    return prompt


def _stats_line(st: Any) -> str:
    """One dim line of speed and acceptance after a generation, for stderr."""
    per_pos = ", ".join(f"{a:.2f}" for a in st.acceptance_drafted)
    line = (
        f"{st.generated_tokens} tokens in {st.decode_seconds:.2f}s ({st.tokens_per_second:.1f} tok/s), "
        f"prompt {st.prompt_tokens} tokens in {st.prefill_seconds:.2f}s; "
        f"{st.target_calls} target calls, acceptance length {st.acceptance_length:.2f}"
    )
    if st.replay_calls:
        line += f" (and {st.replay_calls} calls re-decoding rows a checkpoint rollback dropped)"
    if st.drafted_tokens:
        line += f", drafted {st.drafted_tokens}, accepted {st.accepted_tokens}, per position [{per_pos}]"
    if st.adaptive:
        line += f"; draft lengths chosen {draft_lengths_text(st.draft_lengths)}"
    return line + f"; stop: {st.stop_reason}"


@friendly
@checked_options
@sampling_options
def generate(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    mtp: MtpOpt = True,
    modelfile: ModelfileOpt = None,
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="Prompt text.")] = None,
    prompt_file: Annotated[Path | None, typer.Option("--prompt-file", help="Read the prompt from a file.")] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", "-n", help=table_help("num_predict", DEFAULT_MAX_TOKENS))
    ] = None,
    sampling: SamplingFlags = NO_SAMPLING_FLAGS,
    draft_max: DraftLengthOpt = AUTO,
    fixed: FixedOpt = False,
    tree: TreeOpt = AUTO,
    draft_p_min: DraftPMinOpt = 0.0,
    ctx: OptionalCtxOpt = None,
    ctx_beyond_training: BeyondTrainingOpt = False,
    gpu_layers: OptionalGpuOpt = None,
    threads: OptionalThreadsOpt = None,
    raw: Annotated[bool, typer.Option("--raw", help="With -f: send the prompt without the template.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with text, tokens, stats.")] = False,
    output_format: FormatOpt = None,
    json_schema: JsonSchemaOpt = None,
    grammar: GrammarOpt = None,
) -> None:
    """Generate text with the target, speculatively when a drafter is given; output equals the target's.

    With -f, the Modelfile gives the model, drafter, parameters, system prompt and template;
    flags given on the command line override it.
    """
    text = _read_prompt(prompt, prompt_file)
    constraint = grammar_option(output_format, json_schema, grammar)
    mode = draft_mode(fixed, tree, draft_p_min)
    pair = resolve_models(model, draft, modelfile, mtp)
    if pair.modelfile is not None and not raw:
        from local_eagle.ollama.prompt import modelfile_prompt

        text = modelfile_prompt(pair.modelfile, [{"role": "user", "content": text}])
    flags = given(sampling, max_tokens=max_tokens, draft_max=parse_draft_max(draft_max), ctx=ctx,
                  gpu_layers=gpu_layers, threads=threads)  # fmt: skip
    settings = pair.settings(flags, mode, defaults={"num_predict": DEFAULT_MAX_TOKENS},
                             beyond_training=ctx_beyond_training)  # fmt: skip
    with open_engine(pair.model, pair.draft, settings.load()) as engine:
        note_tree_refusal(engine, mode.tree.explicit and mode.tree.nodes > 1)
        more = {"grammar": constraint} if constraint is not None else {}
        s = engine.stream(text, **settings.stream_options(engine.n_ctx), **more)
        _echo(s, as_json)
        res = s.result
    if as_json:
        rounds = res.spec_stats.trace_drafted if res.spec_stats is not None else []
        print(json.dumps({"text": res.text, "tokens": res.tokens, "stats": res.stats.to_dict(),
                          "draft_lengths_by_round": rounds}))  # fmt: skip
        return
    out.file.write("\n")
    err.print(_stats_line(res.stats), highlight=False, style="dim", soft_wrap=True)


@friendly
@checked_options
@sampling_options
def chat(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    mtp: MtpOpt = True,
    modelfile: Annotated[
        Path | None, typer.Option("--file", "-f", help="Ollama Modelfile: model, DRAFT, parameters, system, template.")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", "-n", help=table_help("num_predict"))] = None,
    sampling: SamplingFlags = NO_SAMPLING_FLAGS,
    system: Annotated[str | None, typer.Option("--system", help="System message.")] = None,
    draft_max: DraftLengthOpt = AUTO,
    fixed: FixedOpt = False,
    tree: TreeOpt = AUTO,
    draft_p_min: DraftPMinOpt = 0.0,
    ctx: OptionalCtxOpt = None,
    ctx_beyond_training: BeyondTrainingOpt = False,
    gpu_layers: OptionalGpuOpt = None,
    threads: OptionalThreadsOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Print timings and acceptance after each answer.")] = False,
) -> None:
    """Chat with the model as `ollama run` does: streamed answers, history, /commands (/? for help).

    With -f, the Modelfile gives the model, drafter, parameters, system prompt, template and
    MESSAGE history; flags given on the command line override it. With neither -m nor -f, the
    built-in instruct pair (SmolLM2-135M-Instruct + its EAGLE 3.1 drafter; the chat extra, which
    dev includes). Ctrl+C stops an answer, Ctrl+D or /bye exits.
    """
    from local_eagle.cli.chat import ChatSession, run_repl

    mode = draft_mode(fixed, tree, draft_p_min)
    if model is None and modelfile is None:  # the built-in instruct pair, as demo's is for code
        from local_eagle.assets import CHAT_MODELFILE

        modelfile = CHAT_MODELFILE
        err.print("chatting with the built-in pair: SmolLM2-135M-Instruct + its EAGLE 3.1 drafter "
                  "(-m NAME or -f Modelfile for another model)", highlight=False, markup=False,
                  soft_wrap=True)  # fmt: skip
    pair = resolve_models(model, draft, modelfile, mtp)
    if pair.modelfile is not None:
        session = ChatSession.from_modelfile(pair.modelfile, pair.model, pair.draft, mode=mode)
    else:
        session = ChatSession(pair.model, pair.draft, mode=mode)
    session.mtp = own_head(pair.model, pair.draft, pair.mtp)
    # flags (checked by checked_options) override the Modelfile under their Ollama names, so
    # /show parameters prints what is in force
    flags = given(sampling, max_tokens=max_tokens, draft_max=parse_draft_max(draft_max), ctx=ctx,
                  gpu_layers=gpu_layers, threads=threads)  # fmt: skip
    session.parameters = dict(pair.settings(flags, mode).parameters)
    if system is not None:
        session.system = system
    session.verbose = verbose
    session.beyond_training = ctx_beyond_training
    warn_if_cpu_only()

    def load(s: ChatSession) -> Engine:
        engine = open_engine(s.model, s.draft, s.settings().load())
        note_tree_refusal(engine, mode.tree.nodes > 1 and (mode.tree.explicit or s.verbose))
        note_mtp(engine, s.verbose)
        return engine

    run_repl(session, load)


DEMO_CTX = 2048
"""demo's context: its prompt and answer are short."""

_WARMUP = (
    'def fibonacci(n: int) -> int:\n    """ Return the n-th Fibonacci number.\n    >>> fibonacci(10)\n    55\n    """\n'
)
"""demo's warm-up (not the demo prompt): llama.cpp's first calls, and the adaptive policy measuring this machine."""


def draft_lengths_text(counts: list[int]) -> str:
    """Rounds by draft length, as shares: ``0: 91%, 1: 8%, 2: 1%`` (lengths never chosen left out)."""
    total = sum(counts)
    return ", ".join(f"{k}: {n / total:.0%}" for k, n in enumerate(counts) if n) if total else "none"


def acceptance_text(st: Any) -> str:
    """Acceptance per draft position, for the positions that were drafted at all."""
    pairs = zip(st.acceptance_per_position, st.drafted_per_position, strict=True)
    return " ".join(f"{a:.2f}" for a, n in pairs if n) or "-"


def identity_text(check: Any) -> str:
    """How the speculative output compares with the target's own, in the three cases runtime.identity tells apart."""
    from local_eagle.runtime.identity import IDENTICAL, NEAR_TIE

    if check.verdict == IDENTICAL:
        return "output identical to the target's own"
    d = check.divergence
    if d is None:
        return "output DIFFERENT from the target's own (a bug)"
    where = (
        f"at token {d.index}: the target's top-2 logit gap is {d.gap_single:.3f} decoding alone and "
        f"{d.gap_batched:.3f} in the verify batch, the two computations differing by {d.noise:.3f}"
    )
    if check.verdict == NEAR_TIE:
        return f"output differs from the target's own at a near-tie, {where} (float rounding, not a bug)"
    return f"output DIFFERENT from the target's own {where} (a bug)"


@friendly
@checked_options
def demo(
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="Prompt (default: a short coding task).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help=PARAMETERS["num_predict"].help)] = 128,
    draft_max: DraftLengthOpt = AUTO,
    fixed: FixedOpt = False,
    tree: TreeOpt = AUTO,
    threads: ThreadsOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """The built-in default: Gemma 3 270M with our EAGLE 3.1 drafter, speculative vs plain, on this machine."""
    from local_eagle.assets import DEMO_PROMPT, demo_drafter, demo_target
    from local_eagle.runtime.engine import Engine
    from local_eagle.runtime.identity import DIVERGENT, check_identity
    from local_eagle.runtime.policy.lengths import explain

    warn_if_cpu_only()
    target, draft = demo_target(), demo_drafter()
    text = prompt if prompt is not None else DEMO_PROMPT
    mode = draft_mode(fixed, tree)
    settings = resolve(flags=given(draft_max=parse_draft_max(draft_max), threads=threads), mode=mode)
    k, adaptive, shape = settings.draft_max, mode.adaptive, mode.shape
    with Engine(target, draft, settings.load().engine_options(DEMO_CTX)) as engine:
        note_tree_refusal(engine, mode.tree.explicit and mode.tree.nodes > 1)
        engine.generate(_WARMUP, max_tokens=64 if adaptive else 8, draft_max=k, tree=shape)  # warm-up
        fixed_how = f"a tree of {shape.nodes} nodes" if shape is not None else f"k={k}"
        if not as_json:
            how = "draft lengths chosen per round (after 64 tokens of another prompt)" if adaptive else fixed_how
            head = f"{target.name} + {draft.name}, greedy, up to {max_tokens} tokens, {how}"
            out.print(head, highlight=False, markup=False, style="dim")
            out.file.write(text)
        s = engine.stream(text, max_tokens=max_tokens, draft_max=k, tree=shape)
        _echo(s, as_json)
        spec = s.result
        # timed in the order S T T S S T (S speculative, T the target alone): a trend in this machine's
        # speed (another job, the clock) weighs on both sides alike
        base = engine.generate(text, max_tokens=max_tokens, draft_max=0)
        spec_runs, base_runs = [_rate(spec)], [_rate(base)]
        for draft in (0, k, k, 0):
            run = _rate(engine.generate(text, max_tokens=max_tokens, draft_max=draft, tree=shape if draft else None))
            (spec_runs if draft else base_runs).append(run)
        check = check_identity(engine, text, base, spec)
    st = spec.stats
    spec_tps, base_tps = _mean_rate(*spec_runs), _mean_rate(*base_runs)
    ratio = spec_tps / base_tps if base_tps else 0.0
    why = explain(st.policy, st.draft_lengths, st.to_dict()) if adaptive and st.policy else ""
    if as_json:
        print(json.dumps({"text": spec.text, "identical": spec.tokens == base.tokens, "identity": check.to_dict(),
                          "speedup": ratio, "speculative_tokens_per_second": spec_tps,
                          "baseline_tokens_per_second": base_tps, "why": why, "speculative": st.to_dict(),
                          "baseline": base.stats.to_dict()}))  # fmt: skip
        if check.verdict == DIVERGENT:
            raise typer.Exit(1)
        return
    out.file.write("\n")
    t = Table(title="speculative vs the target alone (three runs each, alternating)")
    for c in ("", "tok/s", "target calls", "accept len", "per-position acceptance", "draft lengths chosen"):
        t.add_column(c)
    t.add_row("target alone", f"{base_tps:.1f}", str(base.stats.target_calls), "1.00", "", "")
    t.add_row(
        f"EAGLE 3.1, auto, up to k={k}" if adaptive else f"EAGLE 3.1, fixed {fixed_how}", f"{spec_tps:.1f}",
        str(st.target_calls), f"{st.acceptance_length:.2f}", acceptance_text(st), draft_lengths_text(st.draft_lengths),
    )  # fmt: skip
    out.print(t)
    out.print(f"speedup {ratio:.2f}x; {identity_text(check)}", highlight=False)
    if why:
        out.print(f"why: {why}", highlight=False, soft_wrap=True)
    if check.verdict == DIVERGENT:
        raise typer.Exit(1)


def _rate(result: Any) -> tuple[int, float]:
    return result.stats.generated_tokens, result.stats.decode_seconds


def _mean_rate(*runs: tuple[int, float]) -> float:
    """Tokens per second over several runs: all their tokens over all their time."""
    seconds = sum(s for _, s in runs)
    return sum(n for n, _ in runs) / seconds if seconds else 0.0


@friendly
def selfcheck(
    workdir: Annotated[
        Path | None, typer.Option(help="Keep the generated files here (default: a temporary directory).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Build a tiny target and EAGLE 3.1 drafter, convert it, and check llama.cpp against the torch reference."""
    from local_eagle.testing.selfcheck import run_demo

    rows = run_demo(workdir, progress=not as_json)
    if as_json:
        print(json.dumps(rows))
        return
    t = Table(title="llama.cpp drafter vs torch reference (tiny EAGLE 3.1 pair)")
    for col in ("weights", "step", "max |diff|", "logit scale", "argmax equal"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["outtype"], str(r["step"]), f"{r['max_abs_diff']:.2e}", f"{r['logit_scale']:.2f}", str(r["argmax_equal"])
        )
    out.print(t)
    ok = all(r["ok"] for r in rows)
    out.print("[green]all steps agree[/]" if ok else "[red]mismatch against the reference[/]")
    if not ok:
        raise typer.Exit(1)

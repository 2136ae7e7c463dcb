"""The ``local-eagle`` command: parses arguments, calls the library, prints."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from local_eagle.errors import LocalEagleError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="EAGLE 3.1 speculative decoding for llama.cpp / GGUF models.",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Turn user-facing failures into one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LocalEagleError as e:
            err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("interrupted", highlight=False)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


@app.command()
@friendly
def convert(
    draft_dir: Annotated[Path, typer.Argument(help="Drafter checkpoint directory (config.json + weights).")],
    target: Annotated[Path, typer.Option("--target", help="The target model's GGUF.")],
    outfile: Annotated[Path, typer.Option("--outfile", "-o", help="Where to write the drafter GGUF.")],
    outtype: Annotated[str, typer.Option(help="f32, f16, bf16 or q8_0.")] = "f16",
    target_layers: Annotated[
        str | None, typer.Option(help="Override the captured target layers, e.g. 2,16,29.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Convert an EAGLE 3 / 3.1 drafter checkpoint into a GGUF for llama.cpp."""
    from converters.eagle3_gguf import convert as do_convert
    from converters.eagle3_gguf import parse_target_layers

    layers = parse_target_layers(target_layers) if target_layers else None
    res = do_convert(draft_dir, target, outfile, outtype=outtype, target_layers=layers, progress=not as_json)
    if as_json:
        d = dict(res.__dict__)
        d["outfile"] = str(res.outfile)
        print(json.dumps(d))
        return
    out.print(
        f"wrote [bold]{res.outfile}[/] ({_human(res.nbytes)}): EAGLE {res.eagle_version} drafter from a "
        f"{res.format} checkpoint, target layers {res.target_layers}, draft vocab {res.draft_vocab_size}",
        highlight=False,
    )


@app.command()
@friendly
def inspect(
    file: Annotated[Path, typer.Argument(help="A GGUF file (drafter or target).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show what a GGUF holds: architecture, drafter flags, target layers, vocab, tensors by type."""
    from local_eagle.gguf import read_model_info

    info = read_model_info(file)
    if as_json:
        print(json.dumps(info.to_dict()))
        return
    t = Table(title=str(file), show_header=False)
    t.add_row("architecture", info.arch)
    t.add_row("kind", f"EAGLE {info.eagle_version} drafter" if info.is_drafter else "target model")
    t.add_row("layers", str(info.n_layer))
    t.add_row("hidden size", str(info.n_embd))
    t.add_row("vocabulary", str(info.n_vocab))
    if info.is_drafter:
        t.add_row("draft vocabulary", str(info.draft_vocab_size))
        t.add_row("target layers", str(info.target_layers))
        t.add_row("target hidden size", str(info.target_hidden_size))
        t.add_row("fc_norm (3.1)", str(info.fc_norm))
        t.add_row("norm_output (3.1)", str(info.norm_output))
        t.add_row("norm_before_fc", str(info.norm_before_fc))
        t.add_row("norm_before_residual", str(info.norm_before_residual))
        t.add_row("own embeddings / lm_head", f"{info.has_own_embeddings} / {info.has_own_lm_head}")
    t.add_row("tensors", str(info.tensor_count))
    for ty in sorted(info.tensor_bytes):
        t.add_row(f"  {ty}", f"{info.tensor_counts[ty]} tensors, {_human(info.tensor_bytes[ty])}")
    out.print(t)


@app.command()
@friendly
def demo(
    prompt: Annotated[
        str | None, typer.Option("--prompt", "-p", help="Prompt (default: a held-out coding task).")
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n")] = 128,
    draft_max: Annotated[int, typer.Option("--draft-max")] = 4,
    threads: ThreadsOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The built-in default: Gemma 3 270M with our EAGLE 3.1 drafter, speculative vs plain, on this machine."""
    from local_eagle.assets import DEMO_PROMPT, demo_drafter, demo_target
    from local_eagle.llamacpp.bindings import gpu_offload_supported
    from local_eagle.runtime.engine import Engine, EngineOptions

    if not gpu_offload_supported():
        err.print("[dim]no GPU build of llama.cpp found: running on the CPU[/]")
    target, draft = demo_target(), demo_drafter()
    text = prompt if prompt is not None else DEMO_PROMPT
    with Engine(target, draft, EngineOptions(n_ctx=2048, n_threads=threads)) as engine:
        engine.generate(text, max_tokens=8, draft_max=draft_max)  # warm-up
        if not as_json:
            out.print(f"[dim]{target.name} + {draft.name}, greedy, up to {max_tokens} tokens[/]", highlight=False)
            out.file.write(text)
        s = engine.stream(text, max_tokens=max_tokens, draft_max=draft_max)
        for piece in s:
            if not as_json:
                out.file.write(piece)
                out.file.flush()
        spec = s.result
        base = engine.generate(text, max_tokens=max_tokens, draft_max=0)
    ratio = spec.stats.tokens_per_second / base.stats.tokens_per_second if base.stats.tokens_per_second else 0.0
    if as_json:
        print(json.dumps({"text": spec.text, "identical": spec.tokens == base.tokens, "speedup": ratio,
                          "speculative": spec.stats.to_dict(), "baseline": base.stats.to_dict()}))  # fmt: skip
        return
    out.file.write("\n")
    t = Table(title="speculative vs the target alone (same run)")
    for c in ("", "tok/s", "target calls", "accept len", "per-position acceptance"):
        t.add_column(c)
    st = spec.stats
    t.add_row("target alone", f"{base.stats.tokens_per_second:.1f}", str(base.stats.target_calls), "1.00", "")
    t.add_row(
        f"EAGLE 3.1, k={draft_max}", f"{st.tokens_per_second:.1f}", str(st.target_calls),
        f"{st.acceptance_length:.2f}", " ".join(f"{a:.2f}" for a in st.acceptance_per_position),
    )  # fmt: skip
    out.print(t)
    same = "identical to" if spec.tokens == base.tokens else "DIFFERENT from"
    out.print(f"speedup {ratio:.2f}x; output {same} the target's own", highlight=False)


@app.command()
@friendly
def selfcheck(
    workdir: Annotated[
        Path | None, typer.Option(help="Keep the generated files here (default: a temporary directory).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
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


@dataclass
class _ModelfileSettings:
    model: Path
    draft: Path | None
    parameters: dict[str, Any]
    modelfile: Any


def _from_modelfile(path: Path) -> _ModelfileSettings:
    """Model, drafter (a checkpoint directory is converted once, cached) and parameters of a Modelfile."""
    from local_eagle.ollama.modelfile import parse_file, resolve_draft, resolve_model

    m = parse_file(path)
    for w in m.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)
    draft = resolve_draft(m) if m.draft is not None else None
    return _ModelfileSettings(resolve_model(m), draft, dict(m.parameters), m)


def _engine(model: Path, draft: Path | None, ctx: int, gpu_layers: int, threads: int):
    from local_eagle.runtime.engine import Engine, EngineOptions

    return Engine(model, draft, EngineOptions(n_ctx=ctx, n_gpu_layers=gpu_layers, n_threads=threads))


def _stats_line(st) -> str:
    per_pos = ", ".join(f"{a:.2f}" for a in st.acceptance_per_position)
    line = (
        f"{st.generated_tokens} tokens in {st.decode_seconds:.2f}s ({st.tokens_per_second:.1f} tok/s), "
        f"prompt {st.prompt_tokens} tokens in {st.prefill_seconds:.2f}s; "
        f"{st.target_calls} target calls, acceptance length {st.acceptance_length:.2f}"
    )
    if st.drafted_tokens:
        line += f", drafted {st.drafted_tokens}, accepted {st.accepted_tokens}, per position [{per_pos}]"
    return line + f"; stop: {st.stop_reason}"


ModelOpt = Annotated[Path, typer.Option("--model", "-m", help="Target model GGUF.")]
DraftOpt = Annotated[Path | None, typer.Option("--draft", "-d", help="EAGLE 3 / 3.1 drafter GGUF.")]
CtxOpt = Annotated[int, typer.Option("--ctx", help="Context length (tokens).")]
GpuOpt = Annotated[int, typer.Option("--gpu-layers", help="Layers to offload to the GPU (-1: all).")]
ThreadsOpt = Annotated[int, typer.Option("--threads", help="CPU threads (0: all cores).")]
OptionalModelOpt = Annotated[Path | None, typer.Option("--model", "-m", help="Target model GGUF.")]
ModelfileOpt = Annotated[
    Path | None, typer.Option("--file", "-f", help="Ollama Modelfile: model, DRAFT, parameters, template.")
]
TemperatureOpt = Annotated[float | None, typer.Option(help="0 = greedy. Default 0.8.")]
TopKOpt = Annotated[int | None, typer.Option("--top-k", help="Default 40.")]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help="Default 0.95.")]
MinPOpt = Annotated[float | None, typer.Option("--min-p", help="Default 0.05.")]
RepeatPenaltyOpt = Annotated[float | None, typer.Option("--repeat-penalty", help="Default 1.0 (off).")]
RepeatLastNOpt = Annotated[int | None, typer.Option("--repeat-last-n", help="Default 64.")]
SeedOpt = Annotated[int | None, typer.Option(help="Sampling seed.")]
StopOpt = Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")]
DraftMaxOpt = Annotated[int | None, typer.Option("--draft-max", help="Most tokens drafted per step (k).")]


@app.command()
@friendly
def generate(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    modelfile: ModelfileOpt = None,
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="Prompt text.")] = None,
    prompt_file: Annotated[Path | None, typer.Option("--prompt-file", help="Read the prompt from a file.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", "-n", help="Default 128.")] = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    min_p: MinPOpt = None,
    repeat_penalty: RepeatPenaltyOpt = None,
    repeat_last_n: RepeatLastNOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    draft_max: DraftMaxOpt = None,
    draft_p_min: Annotated[float, typer.Option("--draft-p-min", help="Stop drafting below this probability.")] = 0.0,
    ctx: Annotated[int | None, typer.Option("--ctx", help="Context length (default 4096).")] = None,
    gpu_layers: GpuOpt = -1,
    threads: ThreadsOpt = 0,
    raw: Annotated[bool, typer.Option("--raw", help="With -f: send the prompt without the template.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with text, tokens, stats.")] = False,
) -> None:
    """Generate text with the target, speculatively when a drafter is given; output equals the target's.

    With -f, the Modelfile gives the model, drafter, parameters, system prompt and template;
    flags given on the command line override it.
    """
    from local_eagle.runtime.sampling import SamplingParams

    if (prompt is None) == (prompt_file is None):
        raise LocalEagleError("give exactly one of --prompt or --prompt-file")
    if prompt_file is not None:
        if not prompt_file.is_file():
            raise LocalEagleError(f"{prompt_file}: prompt file not found")
        prompt = prompt_file.read_text(encoding="utf-8")
    params: dict[str, Any] = {}
    if modelfile is not None:
        mf = _from_modelfile(modelfile)
        model = model or mf.model
        draft = draft or mf.draft
        params = mf.parameters
        if draft_max is None and mf.draft is not None:
            draft_max = mf.modelfile.draft_num_predict
        if not raw:
            from local_eagle.ollama.prompt import modelfile_prompt

            prompt = modelfile_prompt(mf.modelfile, [{"role": "user", "content": prompt}])
    if model is None:
        raise LocalEagleError("give --model (or -f Modelfile)")

    def pick(flag: Any, name: str, default: Any) -> Any:
        return flag if flag is not None else params.get(name, default)

    n_predict = pick(max_tokens, "num_predict", 128)
    n_ctx = pick(ctx, "num_ctx", 4096)
    if n_predict is not None and n_predict < 0:  # Ollama: -1 = until the context is full
        n_predict = n_ctx
    sp = SamplingParams(
        temperature=pick(temperature, "temperature", 0.8),
        top_k=pick(top_k, "top_k", 40),
        top_p=pick(top_p, "top_p", 0.95),
        min_p=pick(min_p, "min_p", 0.05),
        repeat_penalty=pick(repeat_penalty, "repeat_penalty", 1.0),
        repeat_last_n=pick(repeat_last_n, "repeat_last_n", 64),
        seed=pick(seed, "seed", None),
    )
    stops = stop if stop else list(params.get("stop", []))
    with _engine(model, draft, n_ctx, gpu_layers, threads) as engine:
        s = engine.stream(prompt, max_tokens=n_predict, sampling=sp, draft_max=4 if draft_max is None else draft_max,
                          draft_p_min=draft_p_min, stop=stops)  # fmt: skip
        for piece in s:
            if not as_json:
                out.file.write(piece)
                out.file.flush()
        res = s.result
    if as_json:
        print(json.dumps({"text": res.text, "tokens": res.tokens, "stats": res.stats.to_dict()}))
        return
    out.file.write("\n")
    err.print(_stats_line(res.stats), highlight=False, style="dim", soft_wrap=True)


@app.command()
@friendly
def chat(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    modelfile: Annotated[
        Path | None, typer.Option("--file", "-f", help="Ollama Modelfile: model, DRAFT, parameters, system, template.")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", "-n", help="Most tokens per answer (default: no limit).")
    ] = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    min_p: MinPOpt = None,
    repeat_penalty: RepeatPenaltyOpt = None,
    repeat_last_n: RepeatLastNOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    system: Annotated[str | None, typer.Option("--system", help="System message.")] = None,
    draft_max: DraftMaxOpt = None,
    draft_p_min: Annotated[float, typer.Option("--draft-p-min", help="Stop drafting below this probability.")] = 0.0,
    ctx: Annotated[int | None, typer.Option("--ctx", help="Context length (default 4096).")] = None,
    gpu_layers: Annotated[int | None, typer.Option("--gpu-layers", help="Layers on the GPU (-1: all).")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="CPU threads (0: all cores).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Print timings and acceptance after each answer.")] = False,
) -> None:
    """Chat with the model as `ollama run` does: streamed answers, history, /commands (/? for help).

    With -f, the Modelfile gives the model, drafter, parameters, system prompt, template and
    MESSAGE history; flags given on the command line override it. Ctrl+C stops an answer,
    Ctrl+D or /bye exits.
    """
    from local_eagle.cli.chat import ChatSession, check_parameter, run_repl
    from local_eagle.llamacpp.bindings import gpu_offload_supported

    if modelfile is not None:
        mf = _from_modelfile(modelfile)
        session = ChatSession.from_modelfile(mf.modelfile, model or mf.model, draft or mf.draft)
    elif model is None:
        raise LocalEagleError("give --model (or -f Modelfile)")
    else:
        session = ChatSession(model, draft)
    flags = [
        ("num_predict", "--max-tokens", max_tokens), ("temperature", "--temperature", temperature),
        ("top_k", "--top-k", top_k), ("top_p", "--top-p", top_p), ("min_p", "--min-p", min_p),
        ("repeat_penalty", "--repeat-penalty", repeat_penalty), ("repeat_last_n", "--repeat-last-n", repeat_last_n),
        ("seed", "--seed", seed), ("draft_num_predict", "--draft-max", draft_max), ("num_ctx", "--ctx", ctx),
        ("num_gpu", "--gpu-layers", gpu_layers), ("num_thread", "--threads", threads),
    ]  # fmt: skip
    for name, flag, value in flags:
        if value is not None:
            problem = check_parameter(name, value)
            if problem:
                raise LocalEagleError(f"{flag}: {problem}")
            session.parameters[name] = value
    if stop:
        session.parameters["stop"] = list(stop)
    if system is not None:
        session.system = system
    session.verbose = verbose
    session.draft_p_min = draft_p_min
    if not gpu_offload_supported():
        err.print("[dim]no GPU build of llama.cpp found: running on the CPU[/]")

    def open_engine(s: ChatSession):
        return _engine(s.model, s.draft, s.n_ctx, s.n_gpu_layers, s.n_threads)

    run_repl(session, open_engine)


@app.command()
@friendly
def bench(
    model: ModelOpt,
    draft: Annotated[Path, typer.Option("--draft", "-d", help="EAGLE 3 / 3.1 drafter GGUF.")],
    prompts: Annotated[Path, typer.Option("--prompts", help="JSONL file of prompts ({'prompt': ...} per line).")],
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n")] = 128,
    draft_max: Annotated[list[int] | None, typer.Option("--draft-max", help="k values to test (repeatable).")] = None,
    draft_p_min: Annotated[float, typer.Option("--draft-p-min")] = 0.0,
    limit: Annotated[int | None, typer.Option(help="Use only the first N prompts.")] = None,
    ctx: CtxOpt = 4096,
    gpu_layers: GpuOpt = -1,
    threads: ThreadsOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Greedy baseline vs speculative decoding in one process: speedup, acceptance, ideal speedup."""
    from local_eagle.bench.run import read_prompts, run_bench

    texts = read_prompts(prompts)[:limit]
    ks = draft_max or [4]
    with _engine(model, draft, ctx, gpu_layers, threads) as engine:
        rows = run_bench(engine, texts, ks, max_tokens=max_tokens, draft_p_min=draft_p_min, progress=not as_json)
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
    if not all(r.identical for r in rows):
        err.print("[red]speculative output differed from the target's[/]")
        raise typer.Exit(1)


@app.command()
@friendly
def train(
    target: Annotated[Path, typer.Option("--target", help="The target model's GGUF.")],
    prompts: Annotated[Path, typer.Option("--prompts", help=".jsonl prompts the target answers, or .txt text.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for data, checkpoints and the drafter.")],
    arch: Annotated[str, typer.Option(help="eagle3.1 (FC norm + post-norm feedback) or eagle3.")] = "eagle3.1",
    draft_vocab: Annotated[int, typer.Option("--draft-vocab", help="Draft vocabulary size.")] = 8192,
    target_layers: Annotated[str | None, typer.Option(help="Captured target layers, e.g. 2,9,15.")] = None,
    ttt_steps: Annotated[int, typer.Option("--ttt-steps", help="Unrolled draft steps in training.")] = 3,
    epochs: Annotated[int, typer.Option()] = 3,
    lr: Annotated[float, typer.Option()] = 3e-4,
    max_tokens_per_sample: Annotated[int, typer.Option("--max-tokens-per-sample")] = 256,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in --out.")] = False,
    gguf: Annotated[Path | None, typer.Option("--gguf", help="Also convert the drafter to this GGUF.")] = None,
    gguf_type: Annotated[str, typer.Option("--gguf-type", help="f16 or q8_0.")] = "q8_0",
    threads: ThreadsOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-epoch report as JSON.")] = False,
) -> None:
    """Train an EAGLE 3.1 (or 3) drafter for a GGUF target from its own answers to your prompts."""
    from converters.eagle3_gguf import parse_target_layers
    from local_eagle.train.trainer import TrainConfig
    from local_eagle.train.trainer import train as do_train

    cfg = TrainConfig(
        arch=arch, draft_vocab=draft_vocab, target_layers=parse_target_layers(target_layers) if target_layers else None,
        ttt_steps=ttt_steps, epochs=epochs, lr=lr, max_tokens_per_sample=max_tokens_per_sample, device=device,
        n_threads=threads,
    )  # fmt: skip
    reports = do_train(target, prompts, out_dir, cfg, resume=resume, gguf_out=gguf, gguf_type=gguf_type,
                       progress=not as_json)  # fmt: skip
    if as_json:
        print(json.dumps([r.__dict__ for r in reports]))
        return
    t = Table(title=f"{arch} drafter for {target.name}")
    for c in ("epoch", "train loss", "held-out top-1 by depth"):
        t.add_column(c)
    for r in reports:
        t.add_row(str(r.epoch), f"{r.train_loss:.3f}", " ".join(f"{a:.2f}" for a in r.heldout_accuracy))
    out.print(t)
    out.print(f"checkpoint: {out_dir / 'drafter'}" + (f", GGUF: {gguf}" if gguf else ""), highlight=False)


modelfile_app = typer.Typer(
    no_args_is_help=True, help="Ollama Modelfiles: read them as Ollama does, with DRAFT for the drafter."
)
app.add_typer(modelfile_app, name="modelfile")


@modelfile_app.command("show")
@friendly
def modelfile_show(
    file: Annotated[Path, typer.Option("--file", "-f", help="The Modelfile to read.")] = Path("Modelfile"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the parsed values as JSON.")] = False,
) -> None:
    """Print the Modelfile normalised, the way `ollama show --modelfile` prints one."""
    from local_eagle.ollama.modelfile import parse_file, show

    m = parse_file(file)
    for w in m.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
    if as_json:
        print(
            json.dumps(
                {
                    "model": str(m.model),
                    "draft": str(m.draft) if m.draft else None,
                    "draft_num_predict": m.draft_num_predict,
                    "parameters": m.parameters,
                    "template": m.template,
                    "system": m.system,
                    "messages": [x.to_dict() for x in m.messages],
                    "license": m.license,
                    "requires": m.requires,
                    "renderer": m.renderer,
                    "parser": m.parser,
                    "extra_models": [str(p) for p in m.extra_models],
                }
            )
        )
        return
    sys.stdout.write(show(m))


@app.command()
@friendly
def fit(
    model: Annotated[
        Path | None, typer.Option("--model", "-m", help="The target model's GGUF (headers only are read).")
    ] = None,
    draft: Annotated[Path | None, typer.Option("--draft", "-d", help="An EAGLE 3 / 3.1 drafter GGUF.")] = None,
    modelfile: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take model, drafter, num_ctx from a Modelfile.")
    ] = None,
    ctx: Annotated[int | None, typer.Option(help="Context length (default 8192; --suggest: the model's).")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU preset: rtx4090, rtx3090, rtx4080, rtx4070ti, ...")] = None,
    vram_gb: Annotated[float | None, typer.Option(help="GPU memory in GiB instead of a preset.")] = None,
    kv_type: Annotated[str | None, typer.Option(help="KV cache type for K and V: f16, q8_0, q4_0, ...")] = None,
    kv_type_k: Annotated[str | None, typer.Option(help="KV cache type for K only.")] = None,
    kv_type_v: Annotated[str | None, typer.Option(help="KV cache type for V only.")] = None,
    draft_kv_type: Annotated[str, typer.Option(help="The drafter's KV cache type.")] = "f16",
    flash_attn: Annotated[bool, typer.Option("--flash-attn/--no-flash-attn", help="Flash attention.")] = True,
    gpu_layers: Annotated[str, typer.Option(help="Target layers on the GPU (output layer counts), or auto.")] = "auto",
    parallel: Annotated[int, typer.Option(help="Parallel sequences (n_seq_max).")] = 1,
    batch: Annotated[int, typer.Option(help="n_batch of the target context.")] = 2048,
    ubatch: Annotated[int, typer.Option(help="n_ubatch of the target context.")] = 512,
    draft_ubatch: Annotated[int, typer.Option(help="n_ubatch (and at most n_batch) of the drafter.")] = 512,
    draft_max: Annotated[int, typer.Option(help="Most tokens drafted per step.")] = 8,
    swa_full: Annotated[
        bool, typer.Option("--swa-full/--no-swa-full", help="Full-size cache for sliding-window layers.")
    ] = True,
    overhead_mib: Annotated[
        int | None, typer.Option(help="CUDA context + pool allowance in MiB (default 768).")
    ] = None,
    suggest: Annotated[bool, typer.Option("--suggest", help="Search for the best configuration that fits.")] = False,
    measure: Annotated[
        bool, typer.Option("--measure", help="Also ask llama.cpp (dry-run load) and compare with the prediction.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Will this target (+ drafter) fit in VRAM? Breakdown, verdict, and with --suggest the best fit.

    Exit status 0 when it fits, 1 when it does not, 2 on bad input.
    """
    from dataclasses import replace

    from local_eagle.vram import gpus
    from local_eagle.vram import plan as vram
    from local_eagle.vram import report as vram_report

    if modelfile is not None:
        mf = _from_modelfile(modelfile)
        model = model or mf.model
        draft = draft or mf.draft
        ctx = ctx or mf.parameters.get("num_ctx")
    if model is None:
        raise LocalEagleError("give --model (or -f Modelfile)")
    target = vram.read_shape(model, "target GGUF")
    drafter = vram.read_shape(draft, "drafter GGUF") if draft is not None else None
    if target.is_drafter:
        raise LocalEagleError(
            f"{model}: --model is an eagle3 drafter; pass it with --draft and the target with --model"
        )
    if drafter is not None:
        vram.check_pair(target, drafter)
    if gpu_layers == "auto":
        ngl: int | None = None
    else:
        try:
            ngl = int(gpu_layers)
        except ValueError:
            raise LocalEagleError(f"--gpu-layers {gpu_layers!r}: expected a number or auto") from None
    if ctx is not None and ctx < 1:
        raise LocalEagleError(f"--ctx must be positive, got {ctx}")
    tk = kv_type_k or kv_type or "f16"
    tv = kv_type_v or kv_type or "f16"
    s = vram.Settings(
        n_ctx=ctx or 8192,
        n_seq=parallel,
        n_batch=batch,
        n_ubatch=ubatch,
        type_k=tk,
        type_v=tv,
        flash_attn=flash_attn,
        n_gpu_layers=ngl,
        draft_type_k=draft_kv_type,
        draft_type_v=draft_kv_type if flash_attn else "f16",
        draft_batch=max(draft_ubatch, 512),
        draft_ubatch=draft_ubatch,
        draft_max=draft_max,
        swa_full=swa_full,
    )
    s.validate()
    budget = gpus.budget(gpu, vram_gb, overhead_mib)
    plan = vram.make_plan(target, drafter, s, budget)
    result: dict[str, Any] = {"plan": plan.to_dict()}
    ok = plan.fits
    sg = None
    if suggest:
        top = ctx or target.n_ctx_train or s.n_ctx
        sg = vram.suggest(target, drafter, replace(s, n_ctx=top), budget, max_ctx=top)
        result["suggestion"] = sg.to_dict()
        ok = sg.plan is not None
    rows = None
    if measure:
        from local_eagle.llamacpp import bindings
        from local_eagle.vram.measure import measure as do_measure

        gpu_build = bindings.gpu_offload_supported()
        ms = replace(s, n_gpu_layers=plan.n_gpu_layers)
        m = do_measure(model, ms, draft)
        pred = vram_report.predict_for_backend(target, drafter, ms, gpu_build)
        rows = vram_report.measure_rows(pred, m)
        result["measure"] = {
            "backend": m.backend,
            "rows": [{"component": r.label, "predicted": r.predicted, "measured": r.measured} for r in rows],
        }
    if as_json:
        print(json.dumps(result))
    else:
        vram_report.print_plan(out, plan)
        if sg is not None:
            out.print()
            vram_report.print_suggestion(out, sg)
        if rows is not None:
            out.print()
            out.print(vram_report.measure_table(rows, result["measure"]["backend"]))
    if not ok:
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover
    sys.exit(app())


_STATUS_STYLE = {"ok": "[green]ok[/]", "info": "[cyan]info[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]"}


@app.command()
@friendly
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks and the facts as JSON.")] = False,
) -> None:
    """Check llama.cpp's build, backends, GPU offload, staging symbols, CPU features and package versions.

    Exit status 0 when nothing needs fixing for this setup, 1 when something does (each problem has a fix).
    """
    from local_eagle import doctor as doc

    report = doc.run()
    if as_json:
        print(json.dumps(report.to_dict()))
    else:
        t = Table(title="local-eagle doctor")
        t.add_column("check", style="bold", no_wrap=True)
        t.add_column("status", no_wrap=True)
        t.add_column("detail")
        t.add_column("fix")
        for c in report.checks:
            t.add_row(c.name, _STATUS_STYLE.get(c.status, c.status), c.detail, c.fix)
        out.print(t)
        out.print("[green]nothing to fix[/]" if report.ok else "[red]fix the FAIL rows above[/]")
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@friendly
def serve(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    modelfile: ModelfileOpt = None,
    name: Annotated[
        str | None, typer.Option(help="The model name clients ask for (default: the Modelfile's or GGUF's name).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind; keep 127.0.0.1 unless others must connect.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port (Ollama's is 11434).")] = 11434,
    draft_max: Annotated[int | None, typer.Option("--draft-max", help="Default tokens drafted per step.")] = None,
    ctx: Annotated[int | None, typer.Option("--ctx", help="Context length, fixed for the server (default 4096).")] = (
        None
    ),
    timeout: Annotated[float, typer.Option(help="Stop any generation after this many seconds (0: never).")] = 0.0,
    queue_timeout: Annotated[
        float, typer.Option("--queue-timeout", help="Answer 503 after waiting this long for the model (0: never).")
    ] = 300.0,
    gpu_layers: GpuOpt = -1,
    threads: ThreadsOpt = 0,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's: warning, info, debug.")] = "info",
) -> None:
    """Serve one model pair over Ollama's (/api) and OpenAI's (/v1) HTTP APIs; requests queue for it."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn")):
        raise LocalEagleError("serve needs FastAPI and uvicorn: pip install 'local-eagle[serve]'")
    from local_eagle.runtime.engine import EngineOptions
    from local_eagle.serve.app import ServeConfig, load, model_name
    from local_eagle.serve.app import serve as run_server

    params: dict[str, Any] = {}
    mf = None
    if modelfile is not None:
        s = _from_modelfile(modelfile)
        model, draft, params, mf = model or s.model, draft or s.draft, s.parameters, s.modelfile
        if draft_max is None and s.draft is not None:
            draft_max = mf.draft_num_predict
    if model is None:
        raise LocalEagleError("give --model (or -f Modelfile)")
    if timeout < 0 or queue_timeout < 0:
        raise LocalEagleError("--timeout and --queue-timeout must be 0 (never) or positive")
    n_ctx = ctx or params.get("num_ctx", 4096)
    config = ServeConfig(
        name=name or model_name(model, modelfile), model=model, draft=draft, modelfile=mf, parameters=params,
        draft_max=4 if draft_max is None else draft_max, queue_timeout=queue_timeout or None,
        generation_timeout=timeout or None,
    )  # fmt: skip
    server = load(config, EngineOptions(n_ctx=n_ctx, n_gpu_layers=gpu_layers, n_threads=threads), host, port, log_level)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err.print(f"[yellow]warning:[/] listening on {host}: whoever reaches it can use the model", soft_wrap=True)
    pair = model.name + (f" + {draft.name}" if draft else "")
    err.print(
        f"serving [bold]{config.name}[/] ({pair}, ctx {server.engine.n_ctx}) "
        f"on http://{host}:{port}: Ollama API at /api, OpenAI API at /v1",
        highlight=False,
        soft_wrap=True,
    )
    run_server(server, host, port, log_level)

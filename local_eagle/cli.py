"""The ``local-eagle`` command: parses arguments, calls the library, prints."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
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
    from local_eagle.ggufinfo import read_model_info

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
    workdir: Annotated[
        Path | None, typer.Option(help="Keep the generated files here (default: a temporary directory).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Build a tiny target and EAGLE 3.1 drafter, convert it, and check llama.cpp against the torch reference."""
    from local_eagle.demo import run_demo

    rows = run_demo(workdir, progress=not as_json)
    if as_json:
        print(json.dumps(rows))
        return
    t = Table(title="llama.cpp drafter vs torch reference (tiny EAGLE 3.1 pair)")
    for col in ("weights", "step", "max |diff|", "logit scale", "argmax equal"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["outtype"],
            str(r["step"]),
            f"{r['max_abs_diff']:.2e}",
            f"{r['logit_scale']:.2f}",
            str(r["argmax_equal"]),
        )
    out.print(t)
    ok = all(r["ok"] for r in rows)
    out.print("[green]all steps agree[/]" if ok else "[red]mismatch against the reference[/]")
    if not ok:
        raise typer.Exit(1)


@app.command()
@friendly
def fit(
    model: Annotated[Path, typer.Option("--model", "-m", help="The target model's GGUF (headers only are read).")],
    draft: Annotated[Path | None, typer.Option("--draft", "-d", help="An EAGLE 3 / 3.1 drafter GGUF.")] = None,
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

    from local_eagle import gpus, vram, vram_report

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
        from local_eagle import bindings
        from local_eagle.vram_measure import measure as do_measure

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

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
    from local_eagle.modelfile import parse_file, show

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


def main() -> None:  # pragma: no cover
    sys.exit(app())

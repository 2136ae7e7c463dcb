"""``local-eagle export``: a drafter GGUF as the checkpoint vLLM and SGLang load, for when one GPU is not enough."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from local_eagle.cli.console import escape, friendly, out, print_json_result
from local_eagle.units import human_bytes


@friendly
def export(
    drafter: Annotated[Path, typer.Argument(help="The drafter GGUF (converted or trained here).")],
    outdir: Annotated[Path, typer.Option("--outdir", "-o", help="New checkpoint directory to write.")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="speculators (vLLM's own format, fc_norm / norm_output in config.json) or eagle3 "
            "(LlamaForCausalLMEagle3, the EAGLE / SpecForge layout SGLang and vLLM load).",
        ),
    ] = "speculators",
    target: Annotated[
        Path | None,
        typer.Option(
            "--target", help="The target's GGUF: lends its embeddings and head to a drafter that shares them."
        ),
    ] = None,
    dtype: Annotated[
        str,
        typer.Option(help="auto (the GGUF's own float type; float32 for a quantised one), float32, float16, bfloat16."),
    ] = "auto",
    vocab_size: Annotated[
        int | None,
        typer.Option(help="The Hugging Face target's vocabulary size when its embedding matrix is padded."),
    ] = None,
    verifier: Annotated[
        str | None,
        typer.Option(help="The target's Hugging Face name or path, written into speculators_config.verifier."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Write a drafter GGUF as a Hugging Face EAGLE 3 / 3.1 checkpoint for vLLM or SGLang."""
    from converters.export import export as do_export

    res = do_export(drafter, outdir, fmt=fmt, target_gguf=target, dtype=dtype, vocab_size=vocab_size, verifier=verifier)
    if as_json:
        print_json_result(res)
        return
    out.print(
        f"wrote [bold]{escape(str(res.outdir))}[/] ({human_bytes(res.nbytes)}): EAGLE {res.eagle_version} drafter "
        f"as a checkpoint in the {res.format} format, target layers {res.target_layers}, "
        f"draft vocab {res.draft_vocab_size}",
        highlight=False,
    )

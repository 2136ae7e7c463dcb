"""Commands for drafter files: ``convert`` a checkpoint to GGUF, ``inspect`` what a GGUF holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from local_eagle.cli.console import escape, friendly, out, print_json_result
from local_eagle.cli.options import JsonOpt
from local_eagle.units import human_bytes


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
    """Convert an EAGLE 3 / 3.1 or DFlash drafter checkpoint into a GGUF for llama.cpp."""
    from converters.dflash_gguf import is_block_drafter
    from converters.eagle3_gguf import convert as do_convert
    from converters.eagle3_gguf import parse_target_layers

    if is_block_drafter(draft_dir):
        _convert_block_drafter(draft_dir, target, outfile, outtype, target_layers, as_json)
        return
    layers = parse_target_layers(target_layers) if target_layers else None
    res = do_convert(draft_dir, target, outfile, outtype=outtype, target_layers=layers, progress=not as_json)
    if as_json:
        print_json_result(res)
        return
    out.print(
        f"wrote [bold]{escape(str(res.outfile))}[/] ({human_bytes(res.nbytes)}): EAGLE {res.eagle_version} drafter "
        f"from a {res.format} checkpoint, target layers {res.target_layers}, draft vocab {res.draft_vocab_size}",
        highlight=False,
    )


def _convert_block_drafter(
    draft_dir: Path, target: Path, outfile: Path, outtype: str, target_layers: str | None, as_json: bool
) -> None:
    """``convert`` for a DFlash checkpoint: any number of target layers, the block size and mask token reported."""
    from converters.dflash_gguf import convert_dflash, parse_layer_list

    layers = parse_layer_list(target_layers) if target_layers else None
    res = convert_dflash(draft_dir, target, outfile, outtype=outtype, target_layers=layers, progress=not as_json)
    if as_json:
        print_json_result(res)
        return
    out.print(
        f"wrote [bold]{escape(str(res.outfile))}[/] ({human_bytes(res.nbytes)}): DFlash drafter of "
        f"{res.block_count} layers, block size {res.block_size}, target layers {res.checkpoint_layers} (their "
        f"outputs: llama.cpp layer inputs {res.target_layers}), "
        f"mask token {res.mask_token_id}",
        highlight=False,
    )


@friendly
def inspect(
    file: Annotated[Path, typer.Argument(help="A GGUF file (drafter or target).")],
    as_json: JsonOpt = False,
) -> None:
    """Show what a GGUF holds: architecture, drafter flags, target layers, vocab, tensors by type."""
    from local_eagle.gguf import read_model_info

    info = read_model_info(file)
    if as_json:
        print(json.dumps(info.to_dict()))
        return
    t = Table(title=escape(str(file)), show_header=False)
    t.add_row("architecture", escape(info.arch))
    t.add_row("kind", f"{info.family_name} drafter" if info.family else "target model")
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
    elif info.is_block_drafter:
        t.add_row("block size", str(info.block_size))
        t.add_row("mask token", str(info.mask_token_id))
        t.add_row("target layers", f"{info.target_layers} (llama.cpp layer inputs)")
        t.add_row("target hidden size", str(info.target_hidden_size))
        t.add_row("drafts", "not yet: local-eagle does not draft with block drafters yet")
    t.add_row("tensors", str(info.tensor_count))
    for ty in sorted(info.tensor_bytes):
        t.add_row(f"  {ty}", f"{info.tensor_counts[ty]} tensors, {human_bytes(info.tensor_bytes[ty])}")
    out.print(t)

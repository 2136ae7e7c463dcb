"""``local-eagle drafters [MODEL]``: the public drafters of the catalog, or those that fit one model's GGUF."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from local_eagle.cli.console import escape, friendly, out
from local_eagle.cli.options import JsonOpt

if TYPE_CHECKING:
    from local_eagle.ollama.modelfile import Modelfile


def _target_gguf(model: str) -> tuple[Path, Modelfile | None]:
    """A GGUF file as given, else the target of a model name (local-eagle's store, then Ollama's) with the
    Modelfile it stands for, whose DRAFT decides whether the built-in head drafts."""
    from local_eagle.ollama.modelfile import resolve_model
    from local_eagle.store import is_model_name, resolve_name

    if Path(model).exists() or not is_model_name(model):
        return Path(model), None
    m = resolve_name(model)
    return resolve_model(m), m


def _builtin_text(heads: int, target: Path, model: str, m: Modelfile | None) -> str:
    """Whether the built-in head drafts for ``model``: by default, not under ``DRAFT none``, not beside a DRAFT."""
    what = f"built-in: {heads} MTP (NextN) head{'s' if heads > 1 else ''} in {escape(target.name)}; "
    if m is not None and m.draft_off:
        return what + f"off for {escape(model)}, whose Modelfile says DRAFT none"
    if m is not None and m.draft is not None:
        return what + f"{escape(model)} drafts with its DRAFT {escape(m.draft.name)} instead"
    return what + "it drafts when no drafter is named (DRAFT in a Modelfile, or --draft, names one instead; " \
        "DRAFT none or --no-mtp turns it off)"


def _listed_under(model: str) -> list[Any]:
    """The catalog's drafters whose target Ollama knows as ``model`` (``llama3.1:8b``), best first; matched as
    Ollama matches names (case, ``:latest``, ``registry.ollama.ai/library/``), so that a model not pulled here
    still finds the drafters listed for it."""
    from local_eagle.catalog import catalog
    from local_eagle.ollama.store import StoreError, check_name

    try:
        want = check_name(model)
    except StoreError:
        return []
    return [d for d in catalog() if any(check_name(name).same(want) for name in d.target.ollama)]


def builtin_heads(target: Path, arch: str) -> int:
    """The MTP (NextN) heads a target GGUF carries (``<arch>.nextn_predict_layers``), 0 for none."""
    from local_eagle.errors import GGUFError
    from local_eagle.gguf import read_header
    from local_eagle.gguf.keys import KEY_NEXTN_PREDICT_LAYERS

    try:
        n = read_header(target, "target GGUF").kv.get(KEY_NEXTN_PREDICT_LAYERS.format(arch=arch), 0)
    except GGUFError:
        return 0
    return int(n) if isinstance(n, int) and n > 0 else 0


def _row(d: Any, best: bool = False) -> dict[str, Any]:
    return {
        "drafter": d.hub_name,
        "family": d.family,
        "eagle_version": d.eagle_version,
        "format": d.format,
        "target": d.target.repo,
        "ollama": list(d.target.ollama),
        "gguf": list(d.target.gguf),
        "best": best,
        "unsupported": d.why_not,
        "source": d.source,
    }


def _table(rows: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=escape(title))
    from local_eagle.gguf.info import family_name

    for col in ("drafter", "family", "format", "target", "Ollama", "GGUF"):
        t.add_column(col, overflow="fold")
    for r in rows:
        family = family_name(r["family"])
        family = f"[bold green]{family}[/]" if r["family"] == "eagle3.1" else family
        name = escape(r["drafter"]) + (" [bold](best)[/]" if r["best"] else "")
        if r["unsupported"]:
            name += f"\n[red]not runnable here ({escape(r['unsupported'].split(':')[0])})[/]"
        t.add_row(name, family, r["format"], escape(r["target"]), escape(", ".join(r["ollama"])),
                  escape(", ".join(r["gguf"])))  # fmt: skip
    return t


@friendly
def drafters(
    model: Annotated[
        str | None,
        typer.Argument(help="A target GGUF or a model name; without it, the whole catalog.", show_default=False),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List public drafters (EAGLE 3 / 3.1, DFlash), or those that fit MODEL (by its GGUF's shape, not its name).

    `DRAFT auto` in a Modelfile (or `--draft auto`) takes the one marked best.
    """
    from local_eagle.catalog import catalog, fitting, near_misses
    from local_eagle.gguf import read_model_info

    if model is None:
        rows = [_row(d) for d in catalog()]
        if as_json:
            print(json.dumps(rows))
            return
        title = "public drafters (EAGLE 3.1 in green; DRAFT auto picks EAGLE, a DFlash one drafts when named)"
        out.print(_table(rows, title))
        return
    from local_eagle.store.models import StoreEntryError

    try:
        target, m = _target_gguf(model)
    except StoreEntryError as e:  # no store has it: the drafters the catalog lists under that name, if any
        listed = _listed_under(model) if "not found" in str(e) else []
        if not listed:
            raise
        _print_listed(model, listed, as_json)
        return
    info = read_model_info(target, "target GGUF")
    fits = fitting(info)
    first = next((d for d in fits if d.supported), None)
    rows = [_row(d, d is first) for d in fits]
    misses = near_misses(info)
    heads = builtin_heads(target, info.arch)
    if as_json:
        drafts = m is None or not (m.draft_off or m.draft)  # a name's DRAFT none, or its own drafter, overrules it
        builtin = {"kind": "mtp", "heads": heads, "drafts": drafts} if heads else None
        print(json.dumps({"model": model, "fits": rows, "near_misses": [{**_row(d), "why": w} for d, w in misses],
                          "builtin": builtin}))  # fmt: skip
        return
    shape = f"{info.arch}, hidden size {info.n_embd}, {info.n_layer} layers, {info.n_vocab} tokens"
    if heads:
        out.print(_builtin_text(heads, target, model, m), highlight=False)
    if rows:
        out.print(_table(rows, f"drafters for {model} ({shape})"))
        return
    if heads:
        return
    out.print(f"no drafter in the catalog fits {escape(model)} ({shape})", highlight=False)
    for d, why in misses:
        out.print(f"  {escape(d.hub_name)}: {escape(why)}", highlight=False)


def _print_listed(model: str, listed: list[Any], as_json: bool) -> None:
    """The catalog's rows for a model name no store has here: by the name, since there is no GGUF to read."""
    first = next((d for d in listed if d.supported), None)
    rows = [_row(d, d is first) for d in listed]
    note = f"{model} is not pulled here: these drafters are listed for it by name (`ollama pull {model}` to use one)"
    if as_json:
        print(json.dumps({"model": model, "fits": rows, "near_misses": [], "by_name": True, "note": note}))
        return
    out.print(_table(rows, f"drafters listed for {model}"))
    out.print(escape(note), highlight=False)

"""``local-eagle doctor``: prints :mod:`local_eagle.doctor`'s checks; the checks live there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from local_eagle.cli.console import escape, friendly, out

_STATUS_STYLE = {"ok": "[green]ok[/]", "info": "[cyan]info[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]"}


@friendly
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks and the facts as JSON.")] = False,
    draft: Annotated[
        Path | None,
        typer.Option("--draft", "-d", help="Also name a drafter GGUF's family (EAGLE 3 / 3.1, DFlash, or MTP)."),
    ] = None,
) -> None:
    """Check llama.cpp's build, backends, GPU offload, staging symbols, CPU features and package versions.

    Exit status 0 when nothing needs fixing for this setup, 1 when something does (each problem has a fix).
    """
    from local_eagle import doctor as doc

    report = doc.run(draft=draft)
    if as_json:
        print(json.dumps(report.to_dict()))
    else:
        t = Table(title="local-eagle doctor")
        t.add_column("check", style="bold", no_wrap=True)
        t.add_column("status", no_wrap=True)
        t.add_column("detail")
        t.add_column("fix")
        for c in report.checks:
            t.add_row(escape(c.name), _STATUS_STYLE.get(c.status, c.status), escape(c.detail), escape(c.fix))
        out.print(t)
        out.print("[green]nothing to fix[/]" if report.ok else "[red]fix the FAIL rows above[/]")
    if not report.ok:
        raise typer.Exit(1)

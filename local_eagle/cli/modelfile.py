"""``local-eagle modelfile ...``: Ollama Modelfiles read as Ollama reads them, with DRAFT for the drafter."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from local_eagle.cli.console import err, friendly

app = typer.Typer(no_args_is_help=True, help="Ollama Modelfiles: read them as Ollama does, with DRAFT for the drafter.")


@app.command("show")
@friendly
def show(
    file: Annotated[Path, typer.Option("--file", "-f", help="The Modelfile to read.")] = Path("Modelfile"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the parsed values as JSON.")] = False,
) -> None:
    """Print the Modelfile normalised, the way `ollama show --modelfile` prints one."""
    from local_eagle.ollama.modelfile import parse_file
    from local_eagle.ollama.modelfile import show as show_modelfile

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
    sys.stdout.write(show_modelfile(m))

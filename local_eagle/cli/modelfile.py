"""``local-eagle modelfile ...``: Ollama Modelfiles read as Ollama reads them, with DRAFT for the drafter."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from local_eagle.cli.console import friendly, warn
from local_eagle.errors import LocalEagleError

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
    from local_eagle.store import NamedStores

    m = parse_file(file, store=NamedStores())  # FROM a name of local-eagle's store, as of Ollama's
    for w in m.warnings:
        warn(w)
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


@app.command("render")
@friendly
def render(
    messages: Annotated[
        str,
        typer.Option(
            "--messages",
            help='Conversation JSON: [{"role": ..., "content": ...}, ...] or an /api/chat body; - = stdin.',
        ),
    ],
    file: Annotated[Path, typer.Option("--file", "-f", help="The Modelfile whose TEMPLATE renders it.")] = Path(
        "Modelfile"
    ),
    system: Annotated[str | None, typer.Option("--system", help="Replace the Modelfile's SYSTEM.")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="No template: the last message's content as is.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help='Print {"prompt": ...}.')] = False,
) -> None:
    """Print the exact prompt `chat` and `serve` would tokenize for a conversation; no model is loaded.

    The text goes to stdout byte for byte (UTF-8, no newline added), so `| xxd` or a diff shows
    every space and special token; on a terminal a newline ends it so the shell prompt stays apart.
    """
    from local_eagle.ollama.conversation import read_messages, render_conversation
    from local_eagle.ollama.modelfile import parse_file
    from local_eagle.store import NamedStores

    m = parse_file(file, store=NamedStores())  # FROM a name of local-eagle's store, as of Ollama's
    for w in m.warnings:
        warn(w)
    prompt = render_conversation(m, read_messages(messages), system=system, raw=raw)
    try:
        data = prompt.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate from a JSON "\ud800" escape or an undecodable argument
        raise LocalEagleError(
            f"the prompt is not valid Unicode text (character {e.start}: {prompt[e.start]!r})"
        ) from None
    if as_json:
        print(json.dumps({"prompt": prompt}))
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    if sys.stdout.isatty() and not prompt.endswith("\n"):
        sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()

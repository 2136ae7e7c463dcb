"""``pull``: fetch a model or drafter named on the Hugging Face Hub without running it, as ``ollama pull hf.co/...``."""

from __future__ import annotations

from typing import Annotated

import typer

from local_eagle.cli.console import err, friendly, out
from local_eagle.units import human_bytes

HubNameArg = Annotated[
    str,
    typer.Argument(
        help="hf.co/USER/REPO, with :QUANT (a GGUF's tag) or @REVISION if wanted: a GGUF or a drafter checkpoint.",
        show_default=False,
    ),
]


@friendly
def pull(name: HubNameArg) -> None:
    """Fetch a GGUF or a drafter checkpoint from the Hugging Face Hub into its cache (HF_HOME), ready for FROM / DRAFT.

    A GGUF repository gives the file its tag names (Q4_K_M when none is given; split files whole).
    A drafter checkpoint is converted against its target when a Modelfile's DRAFT or --draft first uses it.
    """
    from local_eagle.hub import HubError, is_hub_name
    from local_eagle.hub.fetch import pull as fetch

    if not is_hub_name(name):
        raise HubError(
            f"pull takes a Hugging Face name such as hf.co/USER/REPO:Q4_K_M, got {name!r}; "
            "models of Ollama's registry come with `ollama pull`, and local-eagle reads them from Ollama's store"
        )
    got = fetch(name, progress=True)
    size = sum(p.stat().st_size for p in got.files)
    where = "from the cache, offline" if got.from_cache else f"commit {got.commit[:12]}"
    what = "drafter checkpoint" if got.kind == "checkpoint" else "GGUF"
    err.print(f"pulled {got.ref.name}: {what}, {human_bytes(size)} ({where})", highlight=False, markup=False)
    if got.kind == "checkpoint":
        err.print("it is converted against the target where DRAFT or --draft first names it", highlight=False)
    out.print(str(got.path), highlight=False, markup=False, soft_wrap=True)

"""A model name given to ``generate``, ``chat``, ``run`` or ``serve``: local-eagle's store first, then Ollama's.

The order is Ollama's own habit turned around for one reason: a model created here carries a DRAFT,
which is the point of local-eagle, while the same name in Ollama's store would run without one. A
name found in neither store is one line naming both places.
"""

from __future__ import annotations

import os
from pathlib import Path

from local_eagle.errors import LocalEagleError
from local_eagle.hub.names import is_hub_name
from local_eagle.ollama.modelfile import Modelfile, _looks_like_path, parse
from local_eagle.ollama.modelfile_syntax import ModelfileError
from local_eagle.ollama.store import OllamaStore, StoreError, StoreModel, check_name
from local_eagle.store.models import LocalStore, StoreEntryError


class NamedStores(OllamaStore):
    """Where a Modelfile's ``FROM NAME`` is looked up: local-eagle's store first, then Ollama's (this object is
    Ollama's store otherwise). ``show --modelfile`` suggests ``FROM NAME`` for a model of local-eagle's store, so
    ``create``, ``modelfile render``, ``-f`` and ``/api/create`` must take that name as ``resolve_name`` does,
    inheriting its GGUF, drafter, template, system prompt, parameters, messages and license as a FROM of
    Ollama's store inherits them (``ollama.inherit``)."""

    def __init__(self, local: LocalStore | None = None, ollama: OllamaStore | None = None) -> None:
        super().__init__((ollama if ollama is not None else OllamaStore()).root)
        self.local = local if local is not None else LocalStore()

    def resolve(self, ref: str) -> StoreModel:
        entry = None if is_hub_name(ref) else self.local.find(ref)
        if entry is None:
            return super().resolve(ref)
        m = self.local.load(entry)
        where = entry.path if entry.path is not None else self.local.root
        return StoreModel(
            name=entry.name, manifest=where, model=m.model, template=m.template, system=m.system,
            parameters=dict(m.parameters), messages=[{"role": x.role, "content": x.content} for x in m.messages],
            license=list(m.license), draft=m.draft, renderer=m.renderer, parser=m.parser, requires=m.requires,
            sources={key: where for key in ("template", "system", "parameters", "messages")},
        )  # fmt: skip


def is_model_name(value: str | os.PathLike[str]) -> bool:
    """True when ``value`` is no existing file and is a Hugging Face name (``hf.co/USER/REPO[:QUANT]``), or
    does not read as a path and is a valid model name."""
    text = os.fspath(value)
    if not text or Path(text).exists():
        return False
    if is_hub_name(text):
        return True
    if _looks_like_path(text):
        return False
    try:
        check_name(text)
    except StoreError:
        return False
    return True


def resolve_name(ref: str, local: LocalStore | None = None, ollama: OllamaStore | None = None) -> Modelfile:
    """The Modelfile ``ref`` stands for, its files checked: a model created with ``local-eagle create``,
    else one Ollama has pulled (with what it inherits there, as ``FROM ref`` would)."""
    local = local if local is not None else LocalStore()
    ollama = ollama if ollama is not None else OllamaStore()
    entry = None if is_hub_name(ref) else local.find(ref)  # hf.co/USER/REPO: fetched, as FROM fetches it
    if entry is not None:
        return local.load(entry)
    try:
        return parse(f"FROM {ref}\n", base_dir=Path.cwd(), source=ref, store=ollama)
    except ModelfileError as e:
        if "no such model in Ollama's store" in str(e):
            raise StoreEntryError(
                f"model {ref!r} not found: not in local-eagle's store ({local.root}; `local-eagle create`) "
                f"nor in Ollama's ({ollama.root}; `ollama pull`)"
            ) from None
        lead = f"{ref}:1: FROM " + ("" if is_hub_name(ref) else f"{ref}: ")  # a Hub error starts with the name
        raise LocalEagleError(str(e).removeprefix(lead)) from None

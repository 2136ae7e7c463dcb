"""What a Modelfile ``FROM`` an Ollama model inherits from it, decided as ``ollama create`` decides it.

``ollama create`` with ``FROM llama3.1:8b`` copies every layer of that model (``server/model.go``
``parseFromModel``) and then applies the Modelfile's own instructions (``server/create.go``
``createModel`` and ``CreateHandler``; the Modelfile was turned into a request by
``parser/parser.go`` ``CreateRequest``):

- TEMPLATE and SYSTEM replace the inherited ones (``setTemplate``, ``setSystem``), but only when
  not empty: ``TEMPLATE ""`` or ``SYSTEM ""`` keeps what the model had.
- PARAMETERs merge key by key (``setParameters``): a parameter the Modelfile sets replaces the
  model's (a Modelfile's ``stop`` lines replace the whole inherited ``stop`` list), the others are kept.
- MESSAGEs replace the inherited history when the Modelfile has any (``setMessages``), else the
  model's history stays.
- LICENSE texts are added after the model's (``setLicense`` appends a layer).
- RENDERER, PARSER and REQUIRES come from the Modelfile, else from the model's config.
- DRAFT: the Modelfile's, else the model's own draft layer (``GetModel`` reads the last one) when
  it is an EAGLE 3 drafter; Ollama's other draft models are not something local-eagle can draft with.
  ``DRAFT none`` (local-eagle's) keeps neither: nothing drafts.

A parameter Ollama stored that local-eagle does not know is skipped with a warning, as Ollama's
``Options.FromMap`` skips an unknown option; a known one of the wrong type or out of range is an
error naming the blob. The inherited template is checked as Ollama's ``GetModel`` parses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.ollama.modelfile_syntax import ModelfileError
from local_eagle.ollama.parameters import DEPRECATED, PARAMETERS, ParameterError, check
from local_eagle.ollama.store import ModelNotFound, OllamaStore, StoreError, StoreModel
from local_eagle.ollama.template import GoTemplateError, parse_ollama


@dataclass
class Values:
    """The fields of a Modelfile that inheritance decides: what the Modelfile says, or the merged result."""

    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    messages: list[tuple[str, str]] = field(default_factory=list)
    license: list[str] = field(default_factory=list)
    draft: Path | None = None
    draft_off: bool = False  # DRAFT none: no drafter, not even the model's own draft layer or MTP head
    renderer: str | None = None
    parser: str | None = None
    requires: str | None = None


@dataclass
class Inherited:
    """The resolved FROM: the GGUF blob, the merged values, and where inherited values came from."""

    model: Path
    name: str  # Ollama's short form, e.g. llama3.1:8b
    values: Values
    origins: dict[str, str]  # "template" -> "llama3.1:8b (/.../blobs/sha256-...)", for error messages


def resolve(ref: str, own: Values, at: str, warnings: list[str], store: OllamaStore | None = None) -> Inherited:
    """Resolve ``FROM ref`` through Ollama's store and merge ``own`` over the model's values; errors
    are :class:`ModelfileError` starting with ``at`` (``file:line`` of the FROM)."""
    store = store if store is not None else OllamaStore()
    try:
        base = store.resolve(ref)
    except ModelNotFound:
        raise ModelfileError(
            f"{at}: FROM {ref}: no such file, and no such model in Ollama's store at {store.root}; run "
            f"`ollama pull {ref}` first (or set OLLAMA_MODELS), or download the GGUF (e.g. from Hugging Face) "
            "and write FROM ./file.gguf"
        ) from None
    except StoreError as e:
        raise ModelfileError(f"{at}: FROM {ref}: {e}") from None
    label = base.name.short
    origins = {key: f"{label} ({path})" for key, path in base.sources.items()}
    template = own.template or base.template
    if not own.template and base.template is not None:
        try:
            parse_ollama(base.template)
        except GoTemplateError as e:
            raise ModelfileError(f"{at}: FROM {ref}: the TEMPLATE of {origins['template']}: {e}") from None
    else:
        origins.pop("template", None)
    if own.system:
        origins.pop("system", None)
    if own.messages:
        origins.pop("messages", None)
    values = Values(
        template=template,
        system=own.system or base.system,
        parameters={**_parameters(base, at, warnings), **own.parameters},
        messages=own.messages or [(m["role"], m["content"]) for m in base.messages],
        license=base.license + own.license,
        draft=None if own.draft_off else own.draft or _draft(base, at, warnings),
        draft_off=own.draft_off,
        renderer=own.renderer or base.renderer,
        parser=own.parser or base.parser,
        requires=own.requires or base.requires,
    )
    return Inherited(model=base.model, name=label, values=values, origins=origins)


def _parameters(base: StoreModel, at: str, warnings: list[str]) -> dict[str, Any]:
    """The params layer's JSON with local-eagle's types: JSON numbers for ints and floats, a string
    or a list for ``stop``."""
    out: dict[str, Any] = {}
    blob = base.sources.get("parameters")
    for name, raw in base.parameters.items():
        if name in DEPRECATED:
            continue
        p = PARAMETERS.get(name)
        if p is None:
            warnings.append(f"{at}: FROM {base.name.short}: parameter {name} (in {blob}) is not one local-eagle "
                            "knows; ignored, as Ollama ignores an unknown option")  # fmt: skip
            continue
        value = raw
        if p.type is list and isinstance(value, str):
            value = [value]
        if p.type is int and isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            value = int(value)  # Ollama's JSON numbers are float64; a wider one stays a float and is refused
        try:
            out[name] = check(name, value)
        except ParameterError as e:
            raise ModelfileError(f"{at}: FROM {base.name.short}: parameter in {blob}: {e}") from None
    return out


def _draft(base: StoreModel, at: str, warnings: list[str]) -> Path | None:
    """The model's own draft layer, if it is an EAGLE 3 drafter local-eagle can use."""
    if base.draft is None:
        return None
    from gguf import Keys

    from local_eagle.gguf import DRAFTER_ARCH, read_header

    try:
        arch = read_header(base.draft, "draft GGUF").kv.get(Keys.General.ARCHITECTURE)
    except (LocalEagleError, OSError, ValueError) as e:
        raise ModelfileError(
            f"{at}: FROM {base.name.short}: its draft model {base.draft} cannot be read: {e}"
        ) from None
    if arch == DRAFTER_ARCH:
        return base.draft
    warnings.append(f"{at}: FROM {base.name.short}: its draft model ({arch}) is not an EAGLE 3 drafter, so it is "
                    "not used; add DRAFT ./drafter.gguf")  # fmt: skip
    return None

"""The catalog of public drafters (``drafters.json``), and which of them fit a target GGUF.

Each row names its drafter's ``family``: ``eagle3`` / ``eagle3.1`` (what local-eagle drafts with), ``mtp``, or a
block drafter's, ``dflash`` / ``dspark`` (DFlash checkpoints convert to llama.cpp's ``dflash`` GGUF, and ``fit``
prices them; a DFlash drafter drafts when a DRAFT names it, and ``DRAFT auto`` never picks such a row).

A drafter fits a model when the model's GGUF has the shape its target had: the architecture,
``embedding_length``, ``block_count`` and vocabulary size read from the header, not the file's
name, since a fine-tune or a renamed file keeps the shape and a different size of the same family
does not. Shapes are shared, though (Llama 3.1 8B and DeepSeek-R1-Distill-Llama-8B), and a drafter
trained on its own target's outputs drafts that target best, so among the fits the order is: a
drafter whose target's name appears in the GGUF's ``general.name`` or file name, then EAGLE 3.1
before EAGLE 3 (3.1's per-chunk FC norm and post-norm feedback keep acceptance up at deeper draft
steps), then the row's ``preference``: 1 for the drafter the target's engines test with or its
makers publish, larger for mirrors and alternatives. Rows llama.cpp's eagle3 graph cannot run
(``unsupported``) are listed, never picked.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.gguf import ModelInfo, read_model_info

FORMATS = ("speculators", "eagle3", "vllm", "modelopt")
BLOCK_FORMATS = ("dflash",)  # z-lab's DFlashDraftModel checkpoints (converters/dflash_gguf.py)
VERSIONS = ("3", "3.1")
FAMILIES = ("eagle3", "eagle3.1", "mtp", "dflash", "dspark")
DRAFTING_FAMILIES = ("eagle3", "eagle3.1")
"""The families local-eagle drafts with; the others are listed and never picked (``Drafter.why_not``)."""
BLOCK_NOT_YET = "block drafter: DRAFT auto picks EAGLE drafters (a DFlash drafter drafts when DRAFT names it)"


@dataclass(frozen=True)
class Target:
    """The model a drafter was trained for, as its GGUF shows it."""

    key: str
    repo: str
    arch: str
    hidden_size: int
    layers: int
    vocab: int
    ollama: tuple[str, ...]
    gguf: tuple[str, ...]


@dataclass(frozen=True)
class Drafter:
    """One row of the catalog."""

    repo: str
    source: str
    target: Target
    family: str
    format: str
    preference: int
    unsupported: str | None = None
    note: str | None = None

    @property
    def hub_name(self) -> str:
        """The name a Modelfile's DRAFT and ``local-eagle pull`` take."""
        return f"hf.co/{self.repo}"

    @property
    def eagle_version(self) -> str | None:
        """``3`` or ``3.1`` for an EAGLE drafter, None for another family."""
        return {"eagle3": "3", "eagle3.1": "3.1"}.get(self.family)

    @property
    def family_name(self) -> str:
        from local_eagle.gguf.info import family_name

        return family_name(self.family)

    @property
    def why_not(self) -> str | None:
        """Why ``DRAFT auto`` never picks this row (llama.cpp cannot run it, or local-eagle does not draft with its
        family yet), None when it may."""
        if self.unsupported is not None:
            return self.unsupported
        return None if self.family in DRAFTING_FAMILIES else BLOCK_NOT_YET

    @property
    def supported(self) -> bool:
        return self.why_not is None

    def mismatch(self, info: ModelInfo) -> str | None:
        """Why ``info``'s shape is not this drafter's target's (first difference), or None when it is."""
        t = self.target
        for what, want, got in (
            ("architecture", t.arch, info.arch),
            ("hidden size", t.hidden_size, info.n_embd),
            ("layers", t.layers, info.n_layer),
            ("vocabulary", t.vocab, info.n_vocab),
        ):
            if want != got:
                return f"{what} {got}, {t.repo} has {want}"
        return None

    def names_match(self, info: ModelInfo) -> bool:
        """Whether the target's name (``Llama-3.1-8B-Instruct``) shows in the GGUF's name or file name."""
        want = _squash(self.target.repo.split("/")[-1])
        return any(want in _squash(text) for text in (info.name or "", info.path.stem))

    def rank(self, info: ModelInfo | None = None) -> tuple[bool, bool, bool, int, str]:
        named = info is not None and self.names_match(info)
        return (not self.supported, not named, self.eagle_version != "3.1", self.preference, self.repo)


def _squash(text: str) -> str:
    """Letters and digits only, lower case: ``Meta Llama 3.1 8B Instruct`` and ``Llama-3.1-8B-Instruct`` compare."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _need(row: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = row.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise LocalEagleError(f"{where}: field '{key}' must be a {kind.__name__}, got {value!r}")
    return value


def parse_catalog(data: dict[str, Any], where: str = "drafters.json") -> list[Drafter]:
    """The rows of a catalog document; a row without a source, or with an unknown target or format, is refused."""
    targets: dict[str, Target] = {}
    for key, t in _need(data, "targets", dict, where).items():
        at = f"{where}: target {key}"
        targets[key] = Target(
            key=key,
            repo=_need(t, "repo", str, at),
            arch=_need(t, "arch", str, at),
            hidden_size=_need(t, "hidden_size", int, at),
            layers=_need(t, "layers", int, at),
            vocab=_need(t, "vocab", int, at),
            ollama=tuple(_need(t, "ollama", list, at)),
            gguf=tuple(_need(t, "gguf", list, at)),
        )
    out = []
    for i, row in enumerate(_need(data, "drafters", list, where)):
        at = f"{where}: drafter {i} ({row.get('repo', '?')})"
        repo = _need(row, "repo", str, at)
        if repo.count("/") != 1:
            raise LocalEagleError(f"{at}: repo must be USER/REPO, got {repo!r}")
        source = _need(row, "source", str, at)
        if "https://" not in source:
            raise LocalEagleError(f"{at}: source must give the address where the row was verified, got {source!r}")
        target = _need(row, "target", str, at)
        if target not in targets:
            raise LocalEagleError(f"{at}: target {target!r} is not in targets")
        family = _family(row, at)
        fmt = _need(row, "format", str, at)
        formats = FORMATS if family in DRAFTING_FAMILIES else BLOCK_FORMATS
        if fmt not in formats:
            raise LocalEagleError(f"{at}: a {family} drafter takes format one of {formats}, got {fmt!r}")
        out.append(
            Drafter(
                repo=repo,
                source=source,
                target=targets[target],
                family=family,
                format=fmt,
                preference=_need(row, "preference", int, at),
                unsupported=row.get("unsupported"),
                note=row.get("note"),
            )
        )
    return out


def _family(row: dict[str, Any], at: str) -> str:
    """A row's ``family``; an older row's ``eagle_version`` (``3`` / ``3.1``) names an EAGLE family, and where both are
    given they must agree."""
    family, version = row.get("family"), row.get("eagle_version")
    if family is None and version is None:
        raise LocalEagleError(f"{at}: field 'family' must be one of {FAMILIES}")
    if version is not None and version not in VERSIONS:
        raise LocalEagleError(f"{at}: eagle_version must be one of {VERSIONS}, got {version!r}")
    implied = None if version is None else "eagle3.1" if version == "3.1" else "eagle3"
    family = family if family is not None else implied
    if family not in FAMILIES:
        raise LocalEagleError(f"{at}: field 'family' must be one of {FAMILIES}, got {family!r}")
    if implied is not None and family != implied:
        raise LocalEagleError(f"{at}: family {family!r} and eagle_version {version!r} disagree")
    return family


@cache
def catalog() -> tuple[Drafter, ...]:
    """The shipped catalog, best-first within each target."""
    text = resources.files(__package__).joinpath("drafters.json").read_text(encoding="utf-8")
    return tuple(sorted(parse_catalog(json.loads(text)), key=lambda d: (d.target.key, d.rank())))


def fitting(info: ModelInfo, rows: tuple[Drafter, ...] | list[Drafter] | None = None) -> list[Drafter]:
    """The drafters whose target has ``info``'s shape, best first."""
    if info.is_drafter or info.is_block_drafter:
        article = "an" if info.arch[:1] in "aeiou" else "a"
        raise LocalEagleError(f"{info.path}: is {article} {info.arch} drafter; drafters fit a target model's GGUF")
    fits = [d for d in (rows if rows is not None else catalog()) if d.mismatch(info) is None]
    return sorted(fits, key=lambda d: d.rank(info))


def near_misses(info: ModelInfo, rows: tuple[Drafter, ...] | list[Drafter] | None = None) -> list[tuple[Drafter, str]]:
    """Drafters for the same architecture that do not fit, with the reason: what a user may have expected."""
    rows = rows if rows is not None else catalog()
    return [(d, why) for d in rows if d.target.arch == info.arch and (why := d.mismatch(info)) is not None]


def best(info: ModelInfo, rows: tuple[Drafter, ...] | list[Drafter] | None = None) -> Drafter:
    """The drafter ``DRAFT auto`` takes for a model, or one line saying why there is none."""
    fits = fitting(info, rows)
    usable = [d for d in fits if d.supported]
    if usable:
        return usable[0]
    name = info.name or info.path.name
    shape = f"{info.arch}, hidden size {info.n_embd}, {info.n_layer} layers, {info.n_vocab} tokens"
    if fits:
        raise LocalEagleError(f"no drafter for {name} ({shape}) that llama.cpp can run: {fits[0].why_not}")
    raise LocalEagleError(
        f"no drafter in the catalog fits {name} ({shape}); see `local-eagle drafters` for the targets it covers, "
        "or train one with `local-eagle train`"
    )


def for_gguf(path: str | os.PathLike[str]) -> tuple[ModelInfo, list[Drafter]]:
    """A target GGUF's header and the drafters that fit it."""
    info = read_model_info(Path(path), "target GGUF")
    return info, fitting(info)

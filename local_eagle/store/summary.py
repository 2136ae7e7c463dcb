"""What ``show NAME`` says about a model, as ``ollama show`` says it: read from the GGUF headers only.

The same facts feed the CLI's table and the server's ``/api/show`` ``details`` and ``model_info``,
so a model is described once. Nothing here loads weights; a header of a large GGUF reads in
milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from local_eagle.errors import GGUFError, LocalEagleError

T = TypeVar("T")


@dataclass
class Summary:
    """The model's and the drafter's facts, for ``show`` and ``/api/show``."""

    architecture: str
    parameters: int
    context_length: int | None
    embedding_length: int
    quantization: str
    draft_architecture: str | None = None
    draft_parameters: int | None = None
    eagle_version: str | None = None
    target_layers: list[int] | None = None
    draft_family: str | None = None  # the drafter's family as the catalog names it: eagle3, eagle3.1, dflash, ...
    block_size: int | None = None  # a block drafter's tokens per forward pass
    mtp_heads: int = 0  # the model's own MTP (NextN) heads, which draft when no drafter is named

    @property
    def family_name(self) -> str | None:
        """``EAGLE 3.1``, ``DFlash``, ...: the drafter's family; ``MTP`` for a model drafting with its own head."""
        from local_eagle.gguf.info import family_name

        if self.draft_family is not None:
            return family_name(self.draft_family)
        return family_name("mtp") if self.mtp_heads else None

    @property
    def drafts(self) -> bool:
        """Whether local-eagle drafts with this drafter (every known family now)."""
        from local_eagle.gguf.info import drafts_with

        return drafts_with(self.draft_family)

    @property
    def parameter_size(self) -> str:
        return human_count(self.parameters)

    def rows(self) -> list[tuple[str, str, str]]:
        """(section, key, value) rows in ``ollama show``'s order."""
        rows = [
            ("Model", "architecture", self.architecture),
            ("Model", "parameters", self.parameter_size),
            ("Model", "context length", str(self.context_length or "")),
            ("Model", "embedding length", str(self.embedding_length)),
            ("Model", "quantization", self.quantization),
        ]
        if self.draft_architecture is not None:
            rows += [
                ("Drafter", "architecture", self.draft_architecture),
                ("Drafter", "family", self.family_name or ""),
                ("Drafter", "parameters", human_count(self.draft_parameters or 0)),
            ]
            if self.eagle_version is not None:
                rows.append(("Drafter", "EAGLE version", self.eagle_version))
            if self.block_size is not None:
                rows.append(("Drafter", "block size", str(self.block_size)))
            rows.append(("Drafter", "target layers", ", ".join(map(str, self.target_layers or []))))
            if not self.drafts:
                rows.append(("Drafter", "drafts", "not yet: local-eagle does not draft this family"))
        elif self.mtp_heads:
            heads = f"{self.mtp_heads} NextN head{'s' if self.mtp_heads > 1 else ''}"
            rows.append(("Drafter", "family", f"{self.family_name} (the model's own: {heads})"))
        return rows


def human_count(n: int) -> str:
    """``8.0B``, ``270M``, ``12K``, as Ollama's ``format.HumanNumber`` writes a parameter count."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}" if unit == "B" else f"{n / div:.0f}{unit}"
    return str(n)


def _count(shapes: dict[str, tuple[int, ...]]) -> int:
    total = 0
    for shape in shapes.values():
        k = 1
        for d in shape:
            k *= int(d)
        total += k
    return total


def summarize(model: Path, draft: Path | None = None) -> Summary:
    """Read the headers of ``model`` (and ``draft``); raises a one-line error for a bad GGUF.

    Listings describe every stored model with this, so whatever a crafted header makes the readers
    raise past their own checks (``local_eagle.gguf.check``) comes out as the same one-line error
    naming the file, which a listing then reports for that model alone.
    """
    s = _described(model, lambda: _model_summary(model))
    if draft is not None:
        _described(draft, lambda: _add_drafter(s, draft))
    return s


def _described(path: Path, read: Callable[[], T]) -> T:
    try:
        return read()
    except LocalEagleError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
        raise GGUFError(f"{path}: a GGUF header that cannot be described ({type(e).__name__}: {e})") from None


def _model_summary(model: Path) -> Summary:
    from gguf import Keys

    from local_eagle.gguf import model_info, read_header

    header = read_header(model, "model GGUF")
    info = model_info(header, model)
    kv: dict[str, Any] = header.kv
    quant = info.quantization
    from local_eagle.gguf.keys import KEY_NEXTN_PREDICT_LAYERS

    ctx = kv.get(Keys.LLM.CONTEXT_LENGTH.format(arch=info.arch))
    s = Summary(info.arch, _count(info.tensor_shapes), int(ctx) if ctx else None, info.n_embd, quant)
    heads = kv.get(KEY_NEXTN_PREDICT_LAYERS.format(arch=info.arch), 0)
    s.mtp_heads = heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 else 0
    return s


def _add_drafter(s: Summary, draft: Path) -> None:
    from local_eagle.gguf import model_info, read_header

    header = read_header(draft, "drafter GGUF")
    d = model_info(header, draft)
    s.draft_architecture = d.arch
    s.draft_parameters = _count(d.tensor_shapes)
    s.eagle_version = d.eagle_version
    s.target_layers = list(d.target_layers or [])
    s.draft_family = d.family
    s.block_size = d.block_size

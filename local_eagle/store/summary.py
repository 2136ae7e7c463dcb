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

# llama.cpp's llama_ftype, the value of general.file_type, as Ollama names it (fs/ggml/type.go)
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}  # fmt: skip


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
                ("Drafter", "parameters", human_count(self.draft_parameters or 0)),
                ("Drafter", "EAGLE version", self.eagle_version or ""),
                ("Drafter", "target layers", ", ".join(map(str, self.target_layers or []))),
            ]
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
    from local_eagle.gguf import model_info, read_header

    header = read_header(model, "model GGUF")
    info = model_info(header, model)
    kv: dict[str, Any] = header.kv
    ftype = kv.get("general.file_type")
    quant = FILE_TYPES.get(int(ftype), f"type {ftype}") if isinstance(ftype, int) else ""
    if not quant and info.tensor_bytes:
        quant = max(info.tensor_bytes, key=lambda t: info.tensor_bytes[t]).upper()
    ctx = kv.get(f"{info.arch}.context_length")
    return Summary(info.arch, _count(info.tensor_shapes), int(ctx) if ctx else None, info.n_embd, quant)


def _add_drafter(s: Summary, draft: Path) -> None:
    from local_eagle.gguf import model_info, read_header

    header = read_header(draft, "drafter GGUF")
    d = model_info(header, draft)
    s.draft_architecture = d.arch
    s.draft_parameters = _count(d.tensor_shapes)
    s.eagle_version = d.eagle_version
    s.target_layers = list(d.target_layers or [])

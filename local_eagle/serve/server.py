"""The served model: what one server runs, how clients name it, and how the APIs describe it.

Both APIs' routes are module-level functions, so they find the one server on the app (``Server``) rather than
in a closure; this module sits below them so that each can import it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from local_eagle.runtime.engine import Engine
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import JobSlot


@dataclass
class ServeConfig:
    """What one server runs: the model pair, its public name and the per-server settings."""

    name: str
    model: Path
    draft: Path | None = None
    modelfile: Any = None  # a parsed local_eagle.ollama.modelfile.Modelfile, or None
    parameters: dict[str, Any] = field(default_factory=dict)
    draft_max: int = 4
    queue_timeout: float | None = 300.0
    generation_timeout: float | None = None


class EagleServer(JobSlot):
    """The engine, its lock and the model's public description, shared by both APIs."""

    config: ServeConfig

    def __init__(self, engine: Engine, config: ServeConfig) -> None:
        super().__init__(engine, config)
        self.created = int(time.time())
        self.info = _model_info(config.model)

    @property
    def tag(self) -> str:
        return f"{self.config.name}:latest"

    def check_model(self, name: Any) -> None:
        """Accept the server's name with or without the ``:latest`` tag, as Ollama does."""
        if not isinstance(name, str) or not name:
            raise ApiError(400, "model is required")
        if name not in (self.config.name, self.tag):
            raise ApiError(404, f"model '{name}' not found; this server runs '{self.config.name}'", "model_not_found")

    def details(self) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.info["arch"],
            "families": [self.info["arch"]],
            "parameter_size": self.info["parameter_size"],
            "quantization_level": self.info["quantization"],
        }

    def model_entry(self) -> dict[str, Any]:
        st = self.config.model.stat()
        return {
            "name": self.tag,
            "model": self.tag,
            "modified_at": datetime.fromtimestamp(st.st_mtime, UTC).isoformat().replace("+00:00", "Z"),
            "size": st.st_size + (self.config.draft.stat().st_size if self.config.draft else 0),
            "digest": f"{st.st_size:x}{int(st.st_mtime):x}",
            "details": self.details(),
        }


def _model_info(path: Path) -> dict[str, Any]:
    from local_eagle.gguf import read_model_info

    try:
        info = read_model_info(path)
    except Exception:  # a description must not stop the server from starting
        return {"arch": "unknown", "parameter_size": "", "quantization": "", "context_length": None}
    n = 0
    for shape in info.tensor_shapes.values():
        k = 1
        for d in shape:
            k *= int(d)
        n += k
    size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"
    quant = max(info.tensor_bytes, key=lambda t: info.tensor_bytes[t]).upper() if info.tensor_bytes else ""
    return {"arch": info.arch, "parameter_size": size, "quantization": quant, "n_layer": info.n_layer,
            "n_embd": info.n_embd, "n_vocab": info.n_vocab}  # fmt: skip


async def current_server(request: Request) -> EagleServer:
    """Async, so that FastAPI resolves it on the event loop instead of sending it to a thread pool."""
    return request.app.state.eagle


Server = Annotated[EagleServer, Depends(current_server)]


def model_name(model: Path, modelfile: Path | None = None) -> str:
    """The name clients use: the Modelfile's (``llama3.Modelfile`` -> ``llama3``), else the GGUF's stem."""
    if modelfile is not None:
        stem = modelfile.name.removesuffix(".Modelfile").removesuffix(".modelfile")
        if stem and stem.lower() != "modelfile":
            return stem
    return model.stem


def load(config: ServeConfig, options: Any) -> EagleServer:
    """Load the pair once; every request reuses it."""
    return EagleServer(Engine(config.model, config.draft, options), config)

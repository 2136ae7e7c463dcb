"""The served model: what one server runs, how clients name it, and how the APIs describe it.

Both APIs' routes are module-level functions, so they find the one server on the app (``Server``) rather than
in a closure; this module sits below them so that each can import it.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import usable_threads
from local_eagle.ollama import parameters
from local_eagle.ollama.parameters import ParameterError
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.tree import TreeShape
from local_eagle.serve.access import Access
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import JobSlot
from local_eagle.serve.runners import RunnerEngine
from local_eagle.serve.served import ServedEngine
from local_eagle.settings import Settings

# a 1M-token context's prompt, in JSON; bigger bodies are refused (413) before they are read
MAX_REQUEST_BYTES = 8 << 20


@dataclass
class ServeConfig:
    """What one server runs: the model pair, its public name and the per-server settings."""

    name: str
    model: Path
    draft: Path | None = None
    modelfile: Any = None  # a parsed local_eagle.ollama.modelfile.Modelfile, or None
    settings: Settings = field(default_factory=Settings)
    """The settings in force before a request's options (``local_eagle.settings.resolve``: the Modelfile's
    parameters, serve's flags, the draft mode), which each request layers its own on (``serve.models.settings``)."""
    queue_timeout: float | None = 300.0
    generation_timeout: float | None = None
    max_request_bytes: int = MAX_REQUEST_BYTES
    access: Access = field(default_factory=Access)  # the web pages and host names it answers

    @property
    def draft_max(self) -> int:
        return self.settings.draft_max

    @property
    def tree(self) -> TreeShape | None:
        """A tree drafted every round (serve --fixed --tree N); None: the engine's policy."""
        return self.settings.mode.shape


class EagleServer(JobSlot):
    """The engine, its lock and the model's public description, shared by both APIs."""

    config: ServeConfig

    def __init__(self, engine: Engine | ServedEngine, config: ServeConfig) -> None:
        super().__init__(engine, config)
        self.tree = config.tree
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

    def size_vram(self, size: int) -> int:
        """``/api/ps``'s ``size_vram``: the bytes of ``size`` on a GPU, as the share of the target's layers there
        (0 on a CPU-only machine, where Ollama's clients would read ``size_vram == size`` as "100% GPU")."""
        return int(size * self.engine.gpu_share)

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
    return {"arch": info.arch, "parameter_size": size, "quantization": info.quantization, "n_layer": info.n_layer,
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


# uvicorn's names for its log levels
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
# serve's options for the parameters they set
_FLAGS = {"num_ctx": "--ctx", "num_thread": "--threads", "num_gpu": "--gpu-layers", "draft_num_predict": "--draft-max"}


def check_config(
    config: ServeConfig, options: EngineOptions, host: str = "127.0.0.1", port: int = 11434, log_level: str = "info"
) -> EngineOptions:
    """Refuse a setting that cannot work before the model loads (a big one takes minutes), with the rules
    the Modelfile and the requests use; ``options`` with the thread count llama.cpp will really get."""
    values = {"num_ctx": options.n_ctx, "num_thread": options.n_threads, "num_gpu": options.n_gpu_layers,
              "draft_num_predict": config.draft_max}  # fmt: skip
    for name, value in values.items():
        try:
            parameters.check(name, value)
        except ParameterError as e:
            raise ParameterError(f"{_FLAGS[name]}{str(e).removeprefix(name)}") from None
    for flag, seconds in (("--timeout", config.generation_timeout), ("--queue-timeout", config.queue_timeout)):
        if seconds is not None and not seconds > 0:
            raise LocalEagleError(f"{flag} must be 0 (never) or a positive number of seconds, got {seconds:g}")
    if config.max_request_bytes < 1:
        raise LocalEagleError(f"the request size limit must be positive, got {config.max_request_bytes}")
    if log_level.lower() not in LOG_LEVELS:
        raise LocalEagleError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    if not 1 <= port <= 65535:
        raise LocalEagleError(f"--port must be between 1 and 65535, got {port}")
    _check_address(host, port)
    return dataclasses.replace(options, n_threads=usable_threads(options.n_threads))


def _check_address(host: str, port: int) -> None:
    """Bind once and let go, so that a port in use or a host that is not this machine's fails now."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise LocalEagleError(f"--host {host!r} is not an address: {e}") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind(address)
        except OSError as e:
            raise LocalEagleError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def load(
    config: ServeConfig, options: EngineOptions, host: str = "127.0.0.1", port: int = 11434, log_level: str = "info"
) -> EagleServer:
    """Check the settings, then load the pair once, in a runner process of its own (``runners``): every request
    reuses it, and a crash in llama.cpp fails that model's requests, not the server."""
    options = check_config(config, options, host, port, log_level)
    return EagleServer(RunnerEngine(config.name, config.model, config.draft, options), config)

"""``local-eagle serve`` with no model: the store server (:mod:`local_eagle.serve.store_app`).

Here, and not in the server, because pricing a model is the CLI's loading code: the weights plus the
KV cache and compute buffers the ``vram`` planner prices for the context it will get, against this
machine's memory (and GPU memory on a GPU build), the same numbers ``chat`` and ``serve -m`` check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local_eagle.cli.console import err
from local_eagle.cli.loading import LoadOptions, auto_parallel, buffer_bytes, physical_memory
from local_eagle.errors import LocalEagleError
from local_eagle.settings import DEFAULT_CTX, DraftMode, resolve

if TYPE_CHECKING:
    from local_eagle.serve.access import Access
    from local_eagle.serve.store_app import StoreConfig


def memory_budget(gpu_layers: int) -> int | None:
    """This machine's RAM, plus its GPUs' memory when layers go there; None where the OS does not say."""
    from local_eagle.llamacpp.backends import gpu_offload_supported

    have = physical_memory()
    if have is not None and gpu_offload_supported() and gpu_layers != 0:
        from local_eagle.vram.gpus import detect

        found = detect()
        if found is not None:
            have += found.total * found.count
    return have


def pair_bytes(load: LoadOptions, gpu: bool) -> Callable[[Path, Path | None, int], int]:
    """What a pair holds at a context: its GGUFs plus the planner's KV cache and compute buffers."""

    def size_of(model: Path, draft: Path | None, n_ctx: int) -> int:
        weights = model.stat().st_size + (draft.stat().st_size if draft is not None else 0)
        try:
            return weights + buffer_bytes(model, draft, n_ctx, load, gpu)
        except (LocalEagleError, ArithmeticError, LookupError, TypeError, ValueError):
            return weights  # a file the planner cannot price is left to llama.cpp

    return size_of


def store_config(
    host: str, port: int, log_level: str, *, ollama: bool, flags: Mapping[str, Any], mode: DraftMode, timeout: float,
    queue_timeout: float, max_memory: int | None, access: Access, parallel: int | None = 1, mtp: bool = True,
) -> StoreConfig:  # fmt: skip
    """The store server's settings from ``serve``'s flags: every model's defaults (``flags``, Ollama-named), under
    its Modelfile's parameters, resolved per model as it loads (``local_eagle.settings.resolve``), with the draft
    mode ``serve -m`` gives a pair (the cost-aware policy unless ``--fixed``, trees as ``--tree`` says); ``mtp``
    False (``--no-mtp``) keeps every model's own MTP head from drafting, as ``DRAFT none`` does for one."""
    from local_eagle.llamacpp.backends import gpu_offload_supported
    from local_eagle.ollama.store import OllamaStore
    from local_eagle.serve.server import ServeConfig, check_config
    from local_eagle.serve.store_app import StoreConfig
    from local_eagle.store import LocalStore

    trees = mode.tree.explicit and mode.tree.nodes > 1
    # no --parallel: each model serves as many requests at once as fit when it loads (auto_parallel), 1 with trees
    auto = parallel is None and not trees
    defaults = resolve(defaults=flags, mode=mode, parallel=parallel or 1, mtp=mtp)
    load = defaults.load()
    probe = ServeConfig(name="-", model=Path("-"), settings=defaults, queue_timeout=queue_timeout or None,
                        generation_timeout=timeout or None)  # fmt: skip
    check_config(probe, load.engine_options(defaults.ctx or DEFAULT_CTX), host, port, log_level)
    return StoreConfig(
        local=LocalStore(), ollama=OllamaStore() if ollama else None, defaults=defaults,
        queue_timeout=queue_timeout or None, generation_timeout=timeout or None,
        budget=max_memory or memory_budget(load.gpu_layers), size_of=pair_bytes(load, gpu_offload_supported()),
        access=access, parallel_of=auto_parallel if auto else None,
    )  # fmt: skip


def serve_store(host: str, port: int, log_level: str, **flags: Any) -> None:
    """Serve every model of local-eagle's store (and Ollama's with ``ollama``), each loaded on first use."""
    from local_eagle.serve import runner
    from local_eagle.serve.store_app import StoreFront

    config = store_config(host, port, log_level, **flags)
    local = config.local
    front = StoreFront(config)
    n = len(local.entries())
    also = f" and Ollama's store ({config.ollama.root})" if config.ollama else ""
    err.print(f"serving {n} model(s) of {local.root}{also} on http://{host}:{port}: Ollama API at /api, "
              "OpenAI API at /v1; each loads on first use", highlight=False, markup=False, soft_wrap=True)  # fmt: skip
    try:
        runner.run(front, host, port, log_level)
    finally:
        front.close()

"""``local-eagle serve``: one model pair behind Ollama's and OpenAI's HTTP APIs (:mod:`local_eagle.serve`)."""

from __future__ import annotations

from typing import Annotated

import typer

from local_eagle.cli.console import err, friendly
from local_eagle.cli.options import (
    AUTO,
    DEFAULT_CTX,
    DraftLengthOpt,
    DraftOpt,
    FixedOpt,
    GpuOpt,
    ModelfileOpt,
    OptionalModelOpt,
    ThreadsOpt,
    draft_bound,
    resolve_models,
)
from local_eagle.errors import LocalEagleError

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@friendly
def serve(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    modelfile: ModelfileOpt = None,
    name: Annotated[
        str | None, typer.Option(help="The model name clients ask for (default: the Modelfile's or GGUF's name).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind; keep 127.0.0.1 unless others must connect.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port (Ollama's is 11434).")] = 11434,
    draft_max: DraftLengthOpt = AUTO,
    fixed: FixedOpt = False,
    ctx: Annotated[
        int | None, typer.Option("--ctx", help=f"Context length, fixed for the server (default {DEFAULT_CTX}).")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Stop any generation after this many seconds (0: never).")] = 0.0,
    queue_timeout: Annotated[
        float, typer.Option("--queue-timeout", help="Answer 503 after waiting this long for the model (0: never).")
    ] = 300.0,
    gpu_layers: GpuOpt = -1,
    threads: ThreadsOpt = 0,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's: warning, info, debug.")] = "info",
) -> None:
    """Serve one model pair over Ollama's (/api) and OpenAI's (/v1) HTTP APIs; requests queue for it."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn")):
        raise LocalEagleError("serve needs FastAPI and uvicorn: pip install 'local-eagle[serve]'")
    from local_eagle.runtime.engine import EngineOptions
    from local_eagle.serve.app import ServeConfig, load, model_name
    from local_eagle.serve.app import serve as run_server

    pair = resolve_models(model, draft, modelfile)
    if timeout < 0 or queue_timeout < 0:
        raise LocalEagleError("--timeout and --queue-timeout must be 0 (never) or positive")
    n_ctx = ctx or pair.parameters.get("num_ctx", DEFAULT_CTX)
    config = ServeConfig(
        name=name or model_name(pair.model, modelfile), model=pair.model, draft=pair.draft, modelfile=pair.modelfile,
        parameters=pair.parameters, draft_max=draft_bound(pair, draft_max, fixed), queue_timeout=queue_timeout or None,
        generation_timeout=timeout or None,
    )  # fmt: skip
    # requests' draft_num_predict bounds the adaptive policy (or, with --fixed, is the draft length)
    server = load(config, EngineOptions(n_ctx=n_ctx, n_gpu_layers=gpu_layers, n_threads=threads, adaptive=not fixed))
    if host not in _LOOPBACK:
        err.print(f"[yellow]warning:[/] listening on {host}: whoever reaches it can use the model", soft_wrap=True)
    pair_name = pair.model.name + (f" + {pair.draft.name}" if pair.draft else "")
    err.print(
        f"serving [bold]{config.name}[/] ({pair_name}, ctx {server.engine.n_ctx}) "
        f"on http://{host}:{port}: Ollama API at /api, OpenAI API at /v1",
        highlight=False,
        soft_wrap=True,
    )
    run_server(server, host, port, log_level)

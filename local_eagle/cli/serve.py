"""``local-eagle serve``: one model pair behind Ollama's and OpenAI's HTTP APIs (:mod:`local_eagle.serve`)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from local_eagle.cli.console import err, friendly
from local_eagle.cli.loading import (
    BeyondTrainingOpt,
    auto_parallel,
    explain_load_failure,
    note_tree_refusal,
    plan_context,
)
from local_eagle.cli.options import (
    AUTO,
    DraftLengthOpt,
    DraftOpt,
    FixedOpt,
    ModelfileOpt,
    MtpOpt,
    OptionalGpuOpt,
    OptionalModelOpt,
    OptionalThreadsOpt,
    ParallelOpt,
    TreeOpt,
    checked_options,
    draft_mode,
    given,
    parse_draft_max,
    resolve_models,
    table_help,
)
from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.serve.access import ORIGINS_ENV

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@friendly
@checked_options
def serve(
    model: OptionalModelOpt = None,
    draft: DraftOpt = None,
    mtp: MtpOpt = True,
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
    tree: TreeOpt = AUTO,
    ctx: Annotated[
        int | None,
        typer.Option("--ctx", help=table_help("num_ctx") + " Fixed for the server; without -m/-f every model's "
                     "default, under its Modelfile's num_ctx."),
    ] = None,
    ctx_beyond_training: BeyondTrainingOpt = False,
    timeout: Annotated[float, typer.Option(help="Stop any generation after this many seconds (0: never).")] = 0.0,
    queue_timeout: Annotated[
        float, typer.Option("--queue-timeout", help="Answer 503 after waiting this long for the model (0: never).")
    ] = 300.0,
    gpu_layers: OptionalGpuOpt = None,
    threads: OptionalThreadsOpt = None,
    parallel: ParallelOpt = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's: warning, info, debug.")] = "info",
    ollama: Annotated[bool, typer.Option("--ollama", help="Without -m/-f: serve Ollama's models too.")] = False,
    max_memory: Annotated[
        int | None, typer.Option("--max-memory", help="Without -m/-f: bytes the loaded models may hold.")
    ] = None,
    origins: Annotated[
        str | None,
        typer.Option(
            "--origins",
            envvar=list(ORIGINS_ENV),
            show_default=False,
            help="Web pages allowed to call the server besides localhost's, comma-separated, * a wildcard "
            "(https://*.example.com), as Ollama's OLLAMA_ORIGINS; others get a 403.",
        ),
    ] = None,
) -> None:
    """Serve one model pair over Ollama's (/api) and OpenAI's (/v1) HTTP APIs; requests queue for it.

    Without -m or -f, serve every model of local-eagle's store (`local-eagle list`), each loaded
    when a request names it and kept for its keep_alive.
    """
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn")):
        raise LocalEagleError("serve needs FastAPI and uvicorn: pip install 'local-eagle[serve]'")
    from local_eagle.serve.access import Access
    from local_eagle.serve.app import ServeConfig, load, model_name
    from local_eagle.serve.app import serve as run_server

    access = Access.configured(host, origins)  # a bad origin is refused before a model loads
    mode = draft_mode(fixed, tree)
    trees_asked = mode.tree.explicit and mode.tree.nodes > 1
    if trees_asked and parallel is not None and parallel > 1:
        raise LocalEagleError("give --tree (one generation's draft trees) or --parallel (chains), not both")
    flags = given(draft_max=parse_draft_max(draft_max), ctx=ctx, gpu_layers=gpu_layers, threads=threads)

    if model is None and modelfile is None:  # the store server: every model by name
        from local_eagle.cli.serve_store import serve_store

        return serve_store(host, port, log_level, ollama=ollama, flags=flags, mode=mode, timeout=timeout,
                           queue_timeout=queue_timeout, max_memory=max_memory, access=access,
                           parallel=parallel, mtp=mtp)  # fmt: skip
    pair = resolve_models(model, draft, modelfile, mtp)
    if timeout < 0 or queue_timeout < 0:
        raise LocalEagleError("--timeout and --queue-timeout must be 0 (never) or positive")
    if parallel is None:  # Ollama's default: 4 where they fit the free memory, else 1 (1 where trees are asked for)
        alone = pair.settings(flags, mode, parallel=1, beyond_training=ctx_beyond_training).load()
        parallel = 1 if trees_asked else auto_parallel(pair.model, pair.draft,
                                                       plan_context(pair.model, pair.draft, alone), alone)  # fmt: skip
    settings = pair.settings(flags, mode, parallel=parallel, beyond_training=ctx_beyond_training)
    load_options = settings.load()
    n_ctx = plan_context(pair.model, pair.draft, load_options)
    name = name or pair.name or model_name(pair.model, modelfile)
    config = ServeConfig(
        name=name, model=pair.model, draft=pair.draft, modelfile=pair.modelfile, settings=settings,
        queue_timeout=queue_timeout or None, generation_timeout=timeout or None, access=access,
    )  # fmt: skip
    pair_name = pair.model.name + (f" + {pair.draft.name}" if pair.draft else "")
    # a load takes seconds (the GGUFs read, the grammar vocabulary built): say what is happening meanwhile
    err.print(f"loading {config.name} ({pair_name}, ctx {n_ctx})...", highlight=False, markup=False, soft_wrap=True)
    started = time.perf_counter()
    # requests' draft_num_predict bounds the adaptive policy (or, with --fixed, is the draft length)
    try:
        server = load(config, load_options.engine_options(n_ctx), host, port, log_level)
    except LlamaError as e:
        raise explain_load_failure(e, pair.model, pair.draft) from None
    loaded = time.perf_counter() - started
    note_tree_refusal(server.engine, trees_asked)
    if host not in _LOOPBACK:
        err.print(f"[yellow]warning:[/] listening on {host}: whoever reaches it can use the model", soft_wrap=True)
    err.print(
        f"ready in {loaded:.1f} s: serving [bold]{config.name}[/] ({pair_name}, ctx {server.engine.n_ctx}"
        + (f", {parallel} requests at once" if parallel > 1 else "")
        + ") "
        f'on http://{host}:{port}: Ollama API at /api, OpenAI API at /v1; clients ask for model "{config.name}"',
        highlight=False,
        soft_wrap=True,
    )
    run_server(server, host, port, log_level)

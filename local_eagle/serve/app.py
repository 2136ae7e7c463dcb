"""``local-eagle serve``: one target (+ EAGLE drafter) behind Ollama's and OpenAI's HTTP APIs.

The app is only wiring: the routes live in ``ollama_api`` and ``openai_api``, the queue they share in ``jobs``,
and the server they find on ``app.state`` in ``server``.
"""

from __future__ import annotations

import os
import sys

from fastapi import FastAPI

from local_eagle import __version__
from local_eagle.serve import embed_api, ollama_api, openai_api, runner
from local_eagle.serve.access import AccessGuard
from local_eagle.serve.errors import install_error_handlers
from local_eagle.serve.server import EagleServer, ServeConfig, load, model_name

__all__ = ["EagleServer", "ServeConfig", "create_app", "load", "model_name", "serve"]


def create_app(server: EagleServer, guarded: bool = True) -> FastAPI:
    """The FastAPI app: Ollama's API under /api, OpenAI's under /v1; errors in each one's shape. Web pages and
    host names the server does not know are refused (:mod:`~local_eagle.serve.access`) unless ``guarded`` is
    off, for an app behind a front that checked them already."""
    app = FastAPI(title="local-eagle", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.eagle = server
    install_error_handlers(app)
    if guarded:
        app.add_middleware(AccessGuard, access=lambda: server.config.access)
    app.include_router(ollama_api.router)
    app.include_router(openai_api.router)
    app.include_router(embed_api.router)
    return app


def serve(server: EagleServer, host: str = "127.0.0.1", port: int = 11434, log_level: str = "info") -> None:
    """Run until interrupted, then free the model once no thread is inside llama.cpp any more."""
    try:
        runner.run(create_app(server), host, port, log_level)
    finally:
        _shut_down(server)


def _shut_down(server: EagleServer) -> None:
    """Uvicorn returns once the requests' tasks are done, but a job whose client left may still be inside
    llama.cpp in its worker thread (a prefill, a tokenization): wait for it, since freeing the model under it
    crashed the process. A second Ctrl-C quits at once, without freeing anything (the OS does)."""
    if server.busy():
        print("waiting for the running job to stop (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)
    try:
        server.close()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        os._exit(130)

"""Embeddings in both APIs: Ollama's ``/api/embed`` and legacy ``/api/embeddings``, OpenAI's ``/v1/embeddings``.

Shapes as Ollama's ``server/routes.go`` (``EmbedHandler``, ``EmbeddingsHandler``) and its OpenAI middleware write
them: ``/api/embed`` takes ``input`` (a string or a list of strings; empty only loads the model, as Ollama's does),
``truncate`` (on by default: a text past the context is cut to it), ``dimensions`` and ``options``, and answers
L2-normalised ``embeddings`` with ``total_duration``, ``load_duration`` and ``prompt_eval_count``; the legacy
``/api/embeddings`` takes ``prompt`` and answers one raw ``embedding``; ``/v1/embeddings`` takes ``input``,
``encoding_format`` (``float``, or ``base64`` of little-endian float32, which the official client asks for by
default) and ``dimensions``, and answers ``data`` with ``usage``; it refuses empty input, as OpenAI does.

The vectors come from :mod:`local_eagle.llamacpp.embed` in the process that holds the model, under the model's
lock (one llama.cpp job at a time, generations included), a few texts at a time, so that a long list neither
holds the model from queued generations for its whole length nor outlives a client that left.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from local_eagle.errors import LocalEagleError
from local_eagle.serve.errors import ApiError
from local_eagle.serve.jobs import off_loop
from local_eagle.serve.models import Kind, check_fields, check_keep_alive, json_body, load_seconds, typed
from local_eagle.serve.runners import RemoteFailure, RunnerError
from local_eagle.serve.served import EmbedCancelled
from local_eagle.serve.server import EagleServer, Server

router = APIRouter()

GROUP = 16  # texts per turn on the model: a generation queued behind a long list waits for one group only
_EMBED: dict[str, Kind] = {"model": str, "input": (str, list), "truncate": bool, "dimensions": int,
                           "options": dict, "keep_alive": (str, int, float)}  # fmt: skip
_EMBEDDINGS: dict[str, Kind] = {"model": str, "prompt": str, "options": dict, "keep_alive": (str, int, float)}
_OPENAI: dict[str, Kind] = {"model": str, "input": (str, list), "encoding_format": str, "dimensions": int,
                            "user": str}  # fmt: skip


def texts_of(value: Any, where: str = "input", empty_ok: bool = True) -> list[str]:
    """The texts of an ``input``: a string is one (an empty one none, which only loads the model in Ollama's API),
    a list of strings each; any other element is a 400, as is an empty string in a list (nothing to embed)."""
    if value is None or value == "":
        texts: list[str] = []
    elif isinstance(value, str):
        texts = [value]
    elif isinstance(value, list):
        for i, x in enumerate(value):
            if not isinstance(x, str):
                what = "token arrays are not supported" if isinstance(x, int | list) else "invalid input type"
                raise ApiError(400, f"{where}[{i}] must be a string ({what})")
            if not x:
                raise ApiError(400, f"{where}[{i}] is empty: there is nothing to embed")
        texts = list(value)
    else:
        raise ApiError(400, f"{where} must be a string or a list of strings")
    if not texts and not empty_ok:
        raise ApiError(400, f"{where} is empty: give a string or a list of strings to embed")
    return texts


def _dimensions(value: Any) -> int | None:
    if value is None:
        return None
    if typed(value, int, "dimensions") < 1:
        raise ApiError(400, f"dimensions must be a positive number, got {value}")
    return int(value)


def _clip(server: EagleServer, text: str, truncate: bool) -> str:
    """A text that cannot fit the context whatever its tokens (``max_prompt_bytes``): cut to that many bytes
    when it is to be truncated anyway (a long word tokenizes slowly), else refused before it is tokenized."""
    limit = server.max_prompt_bytes
    if limit is None:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    if not truncate:
        raise ApiError(400, f"an input is {len(data)} bytes long, more than {server.engine.n_ctx} tokens of this "
                            "model can hold (truncate it, or leave truncate on)")  # fmt: skip
    return data[:limit].decode("utf-8", "ignore")


Vectors = list[list[float]]


async def embed_texts(server: EagleServer, request: Request, texts: list[str], *, truncate: bool = True,
                      normalize: bool = True, dimensions: int | None = None) -> tuple[Vectors, int, float]:  # fmt: skip
    """The vectors of ``texts``, the tokens read and the seconds spent waiting for the model (Ollama's
    ``load_duration``). Bad input is a 400, a runner that died a 500, a model busy past the queue timeout a 503."""
    texts = [_clip(server, t, truncate) for t in texts]
    vectors: Vectors = []
    tokens, waited = 0, 0.0
    cancel = threading.Event()  # set when this request ends early: the group running stops where it is
    try:
        for start in range(0, len(texts), GROUP):
            payload = {"texts": texts[start : start + GROUP], "truncate": truncate, "normalize": normalize,
                       "dimensions": dimensions}  # fmt: skip
            got, wait = await off_loop(request, _turn(server, payload, cancel))
            if "error" in got:
                raise ApiError(400, got["error"])
            vectors += got["embeddings"]
            tokens += int(got["tokens"])
            waited += wait
    finally:
        cancel.set()
    return vectors, tokens, waited


def _turn(server: EagleServer, payload: dict[str, Any], cancel: threading.Event
          ) -> Callable[[], tuple[dict[str, Any], float]]:  # fmt: skip
    """One group on the model, in a worker thread: wait for the model's lock, then embed (until ``cancel``)."""

    def run() -> tuple[dict[str, Any], float]:
        asked = time.perf_counter()
        timeout = server.config.queue_timeout
        if not server.lock.acquire(timeout=-1 if timeout is None else timeout):
            raise ApiError(503, f"the server is busy: waited {timeout:g}s for the model")
        waited = time.perf_counter() - asked
        try:
            if cancel.is_set():  # the client left while this group waited for the model
                raise ApiError(499, "client closed the request")
            with server.using_engine() as engine:
                return engine.embed(payload, cancel.is_set), waited
        except EmbedCancelled:
            raise ApiError(499, "client closed the request") from None
        except (RunnerError, RemoteFailure) as e:
            raise ApiError(500, f"embedding failed: {e}") from None
        except LocalEagleError as e:  # llama.cpp could not make the context or compute the vectors
            raise ApiError(500, f"embedding failed: {e}") from None
        finally:
            server.lock.release()

    return run


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@router.post("/api/embed")
async def embed(request: Request, server: Server) -> dict[str, Any]:
    received = time.perf_counter()
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _EMBED)
    check_keep_alive(body.get("keep_alive"))
    model = body.get("model")
    server.check_model(model)
    texts = texts_of(body.get("input"))
    truncate = body.get("truncate") is not False
    vectors, tokens, waited = await embed_texts(server, request, texts, truncate=truncate,
                                                dimensions=_dimensions(body.get("dimensions")))  # fmt: skip
    load = load_seconds(request)  # a load the store front did for this request
    return {"model": model, "embeddings": vectors, "total_duration": _ns(load + time.perf_counter() - received),
            "load_duration": _ns(load + waited), "prompt_eval_count": tokens}  # fmt: skip


@router.post("/api/embeddings")
async def embeddings(request: Request, server: Server) -> dict[str, Any]:
    """Ollama's older endpoint: one ``prompt``, its vector as the model gives it (not normalised)."""
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _EMBEDDINGS)
    check_keep_alive(body.get("keep_alive"))
    server.check_model(body.get("model"))
    prompt = body.get("prompt") or ""
    if not prompt:  # Ollama: an empty prompt only loads the model
        return {"embedding": []}
    vectors, _, _ = await embed_texts(server, request, [prompt], normalize=False)
    return {"embedding": vectors[0]}


@router.post("/v1/embeddings")
async def openai_embeddings(request: Request, server: Server) -> dict[str, Any]:
    body = await json_body(request, server.config.max_request_bytes)
    check_fields(body, _OPENAI)
    model = body.get("model")
    server.check_model(model)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise ApiError(400, f"encoding_format must be 'float' or 'base64', got {fmt!r}")
    texts = texts_of(body.get("input"), empty_ok=False)
    vectors, tokens, _ = await embed_texts(server, request, texts, dimensions=_dimensions(body.get("dimensions")))
    data = [{"object": "embedding", "index": i, "embedding": _encoded(v, fmt)} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip


def _encoded(vector: list[float], fmt: str) -> list[float] | str:
    """A vector as OpenAI sends it: floats, or base64 of its little-endian float32 bytes."""
    if fmt == "float":
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")

"""Embeddings from the store server and from ``serve -m``'s runner process: the request is routed to the model's
app, the model loaded for it, its vectors computed in the runner (``RunnerEngine.embed``) as in process, and
``keep_alive`` kept as for a generation."""

from __future__ import annotations

import numpy as np
import ollama
import openai
import pytest

from local_eagle.llamacpp.embed import embed as embed_here
from local_eagle.llamacpp.model import Model
from local_eagle.runtime.engine import EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running, start_server
from local_eagle.serve.runners import RunnerEngine
from local_eagle.serve.store_app import StoreConfig, StoreFront
from local_eagle.settings import resolve

TEXTS = ["hello world", "the cat and the hat"]


def expected(path, n_ctx: int) -> list[list[float]]:
    m = Model(path, n_gpu_layers=0)
    try:
        return embed_here(m, TEXTS, n_ctx=n_ctx, n_threads=1).vectors
    finally:
        m.close()


def test_the_store_server_embeds(store, pair) -> None:
    front = StoreFront(StoreConfig(local=store, defaults=resolve(flags={"num_ctx": 512, "num_thread": 1})))
    uv, thread, base = start_server(front)
    try:
        client = ollama.Client(host=base)
        assert client.ps().models == []
        r = client.embed(model="cyc", input=TEXTS)
        assert np.allclose(np.array(r.embeddings), np.array(expected(pair[1], 512)), atol=1e-6)
        assert [m.model for m in client.ps().models] == ["cyc:latest"], "loaded for it, as a generation loads it"
        o = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0).embeddings.create(model="cyc",
                                                                                               input=TEXTS)  # fmt: skip
        assert np.allclose([d.embedding for d in o.data], r.embeddings, atol=1e-6)
        assert len(client.embeddings(model="cyc", prompt="hello world").embedding) == len(r.embeddings[0])
        client.embed(model="cyc", input="a", keep_alive=0)
        assert client.ps().models == []
        with pytest.raises(ollama.ResponseError) as e:
            client.embed(model="nope", input="a")
        assert e.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as e:
            client.embed(model="cyc", input="x" * 5000, truncate=False)
        assert e.value.status_code == 400 and "more than" in e.value.error
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        front.close()


def test_serve_m_embeds_in_its_runner(pair) -> None:
    _, target, draft = pair
    server = EagleServer(RunnerEngine("cyc", target, draft, EngineOptions(n_ctx=256, n_threads=1)),
                         ServeConfig(name="cyc", model=target, draft=draft))  # fmt: skip
    try:
        with running(create_app(server)) as base:
            r = ollama.Client(host=base).embed(model="cyc", input=TEXTS)
            assert np.allclose(np.array(r.embeddings), np.array(expected(target, 256)), atol=1e-6)
            # and a generation after it is the model's own, unchanged
            g = ollama.Client(host=base).generate(model="cyc", prompt="hi", options={"temperature": 0,
                                                                                   "num_predict": 5})  # fmt: skip
            assert g.response == "PABCD"
    finally:
        assert server.close(timeout=60)

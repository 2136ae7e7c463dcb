"""Embeddings through the official clients: ``ollama.Client.embed`` / ``embeddings`` and ``openai``'s
``embeddings.create`` against ``serve -m``'s app on a tiny generated model (its last token's hidden state, as
Ollama serves a generation model), and the bad inputs a 400 names."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import ollama
import openai
import pytest

from local_eagle.llamacpp.embed import embed as embed_here
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running

TEXTS = ["hello world", "the cat and the hat", "a"]


@pytest.fixture(scope="module")
def served(target_gguf):
    engine = Engine(target_gguf, None, EngineOptions(n_ctx=256, n_threads=1))
    server = EagleServer(engine, ServeConfig(name="tiny", model=target_gguf))
    with running(create_app(server)) as base:
        yield server, base
    assert server.close(timeout=60)


@pytest.fixture(scope="module")
def expected(served):
    """The vectors computed directly on the same model (what the server must answer)."""
    server, _ = served
    return embed_here(server.engine.engine.model, TEXTS, n_ctx=256, n_threads=1)


def test_ollama_embed(served, expected) -> None:
    _, base = served
    client = ollama.Client(host=base)
    r = client.embed(model="tiny", input=TEXTS)
    assert r.model == "tiny" and len(r.embeddings) == 3
    assert np.allclose(np.array(r.embeddings), np.array(expected.vectors), atol=1e-6)
    assert np.allclose(np.linalg.norm(np.array(r.embeddings), axis=1), 1.0, atol=1e-5)
    assert r.prompt_eval_count == expected.tokens and r.total_duration > 0 and r.load_duration is not None
    one = client.embed(model="tiny:latest", input="hello world")
    assert np.allclose(one.embeddings[0], r.embeddings[0], atol=1e-6)
    assert client.embed(model="tiny", input="").embeddings == []  # Ollama: only loads the model
    assert len(client.embed(model="tiny", input="hello world", dimensions=64).embeddings[0]) == 64  # all of it
    short = client.embed(model="tiny", input="hello world", dimensions=8).embeddings[0]
    assert len(short) == 8 and abs(np.linalg.norm(short) - 1) < 1e-5
    cut = client.embed(model="tiny", input="x" * 5000)  # truncated to the context, as Ollama's default
    assert cut.prompt_eval_count == 256 and len(cut.embeddings[0]) == 64


def test_ollama_legacy_embeddings_are_raw(served, expected) -> None:
    _, base = served
    client = ollama.Client(host=base)
    raw = client.embeddings(model="tiny", prompt="hello world").embedding
    assert len(raw) == 64 and np.allclose(raw / np.linalg.norm(raw), expected.vectors[0], atol=1e-5)
    assert client.embeddings(model="tiny", prompt="").embedding == []


def test_openai_embeddings(served, expected) -> None:
    _, base = served
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    r = client.embeddings.create(model="tiny", input=TEXTS)  # the client asks for base64 and decodes it
    assert [d.index for d in r.data] == [0, 1, 2] and r.object == "list" and r.model == "tiny"
    assert np.allclose(np.array([d.embedding for d in r.data]), np.array(expected.vectors), atol=1e-6)
    assert r.usage.prompt_tokens == r.usage.total_tokens == expected.tokens
    floats = client.embeddings.create(model="tiny", input="hello world", encoding_format="float")
    assert np.allclose(floats.data[0].embedding, expected.vectors[0], atol=1e-6)
    raw = httpx.post(base + "/v1/embeddings", json={"model": "tiny", "input": "a", "encoding_format": "base64"})
    vec = np.frombuffer(base64.b64decode(raw.json()["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(vec, expected.vectors[2], atol=1e-6)
    assert len(client.embeddings.create(model="tiny", input="a", dimensions=4).data[0].embedding) == 4


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/api/embed", {"input": 5}, "input has the wrong type"),
        ("/api/embed", {"input": ["a", 3]}, "input[1] must be a string"),
        ("/api/embed", {"input": ["a", ""]}, "input[1] is empty"),
        ("/api/embed", {"input": "x" * 5000, "truncate": False}, "more than"),
        ("/api/embed", {"input": "a", "truncate": "no"}, "truncate has the wrong type"),
        ("/api/embed", {"input": "a", "dimensions": 0}, "dimensions must be a positive number"),
        ("/api/embed", {"input": "a", "dimensions": 10**9}, "dimensions must be at most 64, the length of"),
        ("/v1/embeddings", {"input": "a", "dimensions": 65}, "dimensions must be at most 64"),
        ("/api/embeddings", {"prompt": ["a"]}, "prompt has the wrong type"),
        ("/v1/embeddings", {"input": []}, "input is empty"),
        ("/v1/embeddings", {"input": ""}, "input is empty"),
        ("/v1/embeddings", {"input": [[1, 2, 3]]}, "token arrays are not supported"),
        ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ],
)
def test_bad_input_is_a_400(served, path, body, words) -> None:
    _, base = served
    r = httpx.post(base + path, json={"model": "tiny", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error["message"] if path.startswith("/v1") else error
    assert words in message, message


def test_bad_input_through_the_clients(served) -> None:
    _, base = served
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=base).embed(model="tiny", input="x" * 5000, truncate=False)
    assert e.value.status_code == 400 and "more than" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=base).embed(model="nope", input="a")
    assert e.value.status_code == 404
    with pytest.raises(openai.BadRequestError, match="input is empty"):
        openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0).embeddings.create(model="tiny", input=[])

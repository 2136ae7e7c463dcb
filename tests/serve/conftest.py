"""Fixtures the serve tests share: one model served directly, a local store holding it, and the official clients
of a module's ``served`` fixture (``(server, base URL)``)."""

from __future__ import annotations

from pathlib import Path

import ollama
import openai
import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig
from local_eagle.store import LocalStore


@pytest.fixture(scope="module")
def model_server(pair):
    _, target, draft = pair
    server = EagleServer(Engine(target, draft, EngineOptions(n_ctx=256, n_threads=1)),
                         ServeConfig(name="cyc", model=target, draft=draft))  # fmt: skip
    yield server
    server.close()


@pytest.fixture
def store(pair, tmp_path: Path) -> LocalStore:
    _, target, draft = pair
    local = LocalStore(tmp_path / "models")
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\nPARAMETER num_thread 1\nTEMPLATE {{{{ .Prompt }}}}\n")
    local.create("cyc", mf)
    return local


@pytest.fixture
def oll(served) -> ollama.Client:
    return ollama.Client(host=served[1])


@pytest.fixture
def oai(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="x", max_retries=0)

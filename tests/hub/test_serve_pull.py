"""``/api/pull`` on the store server through the official ``ollama`` client, against the local Hub of conftest.py:
Ollama's streamed progress, ``stream: false``, and errors as a 400 or a stream's last line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest
from hubserver import TARGET_REPO, FakeHub, TinyRepos

from local_eagle.serve.harness import start_server
from local_eagle.serve.store_app import StoreConfig, StoreFront
from local_eagle.settings import resolve
from local_eagle.store import LocalStore


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    front = StoreFront(StoreConfig(local=LocalStore(tmp_path / "models"), defaults=resolve(flags={"num_thread": 1})))
    uv, thread, url = start_server(front)
    try:
        yield url
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        front.close()


def test_pull_streams_ollamas_progress(hub: FakeHub, tiny_repos: TinyRepos, base: str, tmp_path: Path) -> None:
    parts = list(ollama.Client(host=base).pull(f"hf.co/{TARGET_REPO}", stream=True))
    assert parts[0].status == "pulling manifest" and parts[-1].status == "success"
    files = [p for p in parts if p.status == "pulling cycle-Q4_K_M.gguf"]
    assert files and all(p.digest == "cycle-Q4_K_M.gguf" for p in files)
    assert files[-1].total == files[-1].completed == len(tiny_repos.target)
    assert [p.completed for p in files] == sorted(p.completed for p in files)
    cached = list((tmp_path / "hf-home" / "hub").rglob("cycle-Q4_K_M.gguf"))
    assert len(cached) == 1 and cached[0].read_bytes() == tiny_repos.target  # where `local-eagle pull` puts it
    n = len(hub.seen("cdn", "GET"))
    assert ollama.Client(host=base).pull(f"hf.co/{TARGET_REPO}:Q4_K_M").status == "success"  # stream: false
    assert len(hub.seen("cdn", "GET")) == n  # already in the cache


def test_pull_errors(hub: FakeHub, base: str) -> None:
    client = ollama.Client(host=base)
    with pytest.raises(ollama.ResponseError) as e:
        client.pull("llama3.2")
    assert e.value.status_code == 400 and "hf.co/USER/REPO" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:  # the stream's last line
        list(client.pull("hf.co/nobody/missing-GGUF", stream=True))
    assert "nobody/missing-GGUF" in e.value.error
    r = httpx.post(base + "/api/pull", json={"model": "hf.co/nobody/missing-GGUF", "stream": False})
    assert r.status_code == 400 and "nobody/missing-GGUF" in r.json()["error"]
    assert httpx.post(base + "/api/pull", json={}).status_code == 400

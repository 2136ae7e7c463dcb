"""One bad entry is one bad entry: a stored model whose GGUF cannot be described is left out of ``/api/tags`` and
``/v1/models``, with a line in the log and an ``errors`` field naming it, and every other model is still listed.

The red-team case is a GGUF whose ``tokenizer.ggml.tokens`` holds integers (an array, or a single number) rather
than strings; each listing used to answer 500 for every model because of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from gguf import GGUFValueType
from test_store_serve import start

from local_eagle.files import sha256_file
from local_eagle.serve.store_app import StoreConfig, StoreFront
from local_eagle.settings import resolve
from local_eagle.store import LocalStore
from local_eagle.testing.gguf_edit import with_keys

LOCAL = "http://127.0.0.1:11434"


def with_tokens(src: Path, dst: Path, value: object, vtype: GGUFValueType, sub: GGUFValueType | None) -> Path:
    """A copy of ``src`` whose ``tokenizer.ggml.tokens`` is ``value`` (written with gguf-py's own writer)."""
    return with_keys(src, dst, typed={"tokenizer.ggml.tokens": (value, vtype, sub)})


def add_entry(store: LocalStore, name: str, gguf: Path, good: Path, tmp_path: Path) -> None:
    """An entry for ``gguf`` as if ``create`` had taken it (created from a good file, then recorded as this one)."""
    placed = tmp_path / f"{name}.gguf"
    placed.write_bytes(good.read_bytes())
    (tmp_path / f"{name}.Modelfile").write_text(f"FROM {placed}\n")
    entry = store.create(name, tmp_path / f"{name}.Modelfile")
    placed.write_bytes(gguf.read_bytes())
    raw = json.loads(entry.path.read_text())
    st = placed.stat()
    raw["files"][0] |= {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(placed)}
    entry.path.write_text(json.dumps(raw))


@pytest.fixture
def bad_store(store: LocalStore, pair, tmp_path: Path) -> LocalStore:
    good = pair[1]
    n = 265
    array = with_tokens(good, tmp_path / "array.gguf", list(range(n)), GGUFValueType.ARRAY, GGUFValueType.INT32)
    scalar = with_tokens(good, tmp_path / "scalar.gguf", 7, GGUFValueType.INT32, None)
    add_entry(store, "inttokens", array, good, tmp_path)
    add_entry(store, "onetoken", scalar, good, tmp_path)
    return store


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def server_log():
    """The server's log lines (attached once uvicorn has set up its loggers, which drops earlier handlers)."""
    handler = Lines()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def test_integer_tokens_leave_one_model_out_of_both_listings(bad_store: LocalStore) -> None:
    front, uv, thread, client = start(
        StoreConfig(local=bad_store, defaults=resolve(flags={"num_ctx": 256, "num_thread": 1}))
    )
    with server_log() as log_lines:
        try:
            assert [m.model for m in client.list().models] == ["cyc:latest"]
            base = str(client._client.base_url).rstrip("/")
            oai = openai.OpenAI(base_url=base + "/v1", api_key="local", max_retries=0)
            assert [m.id for m in oai.models.list()] == ["cyc:latest"]
            for path in ("/api/tags", "/v1/models"):
                r = httpx.get(base + path)
                assert r.status_code == 200, r.text
                errors = {e["model"]: e["error"] for e in r.json()["errors"]}
                assert sorted(errors) == ["inttokens:latest", "onetoken:latest"], r.text
                for name, error in errors.items():
                    assert "\n" not in error and f"{name.split(':')[0]}.gguf" in error, error
                    assert "tokenizer.ggml.tokens" in error, error
        finally:
            uv.should_exit = True
            thread.join(timeout=30)
            front.close()
        for name in ("inttokens:latest", "onetoken:latest"):
            assert any(name in line and "skipping" in line for line in log_lines), log_lines


def test_whatever_one_entry_raises_the_others_are_listed(store: LocalStore, monkeypatch) -> None:
    import local_eagle.store.summary as summary

    monkeypatch.setattr(summary, "summarize", lambda model, draft=None: 1 / 0)
    front = StoreFront(StoreConfig(local=store, defaults=resolve(flags={"num_ctx": 256})))
    try:
        with TestClient(front, base_url=LOCAL, raise_server_exceptions=False) as client:
            r = client.get("/api/tags")
            assert r.status_code == 200 and r.json()["models"] == [], r.text
            assert r.json()["errors"][0]["model"] == "cyc:latest"
            assert "ZeroDivisionError" in r.json()["errors"][0]["error"]
    finally:
        front.close()


def test_a_clean_store_has_no_errors_field(store: LocalStore) -> None:
    front = StoreFront(StoreConfig(local=store, defaults=resolve(flags={"num_ctx": 256})))
    try:
        with TestClient(front, base_url=LOCAL, raise_server_exceptions=False) as client:
            assert "errors" not in client.get("/api/tags").json()
            assert "errors" not in client.get("/v1/models").json()
    finally:
        front.close()

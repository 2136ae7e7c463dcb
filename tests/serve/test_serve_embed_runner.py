"""A long ``/api/embed`` in a model's runner (issue 47, item 1): it says it is alive to the watchdog while it works,
so that it answers rather than being killed as hung (with every request beside it), and it stops when its client
leaves. The watchdog here is 2 s, not 300, and the runner's ``slow`` test hook makes each step of an embedding (a
text's tokens, a decode batch) take a quarter of a second more, as a big model's do: 16 texts take about 8 s."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from local_eagle.runtime.engine import EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.runnerproc import FAULT_ENV
from local_eagle.serve.runners import RunnerEngine

TEXTS = [f"w{i} " * 120_000 for i in range(16)]  # the request: 6.5 MB of text


@pytest.fixture
def slow_runner(pair, tmp_path):
    _, target, draft = pair
    fault = tmp_path / "fault"
    engine = RunnerEngine("cyc", target, draft, EngineOptions(n_ctx=256, n_threads=1, parallel=2),
                          {FAULT_ENV: str(fault)})  # fmt: skip
    engine.answer_seconds = 2.0  # the watchdog: far less than the embedding takes
    server = EagleServer(engine, ServeConfig(name="cyc", model=target, draft=draft))
    with running(create_app(server)) as base:
        yield server, base, fault
    server.close()


def _generate(base: str) -> httpx.Response:
    body = {"model": "cyc", "prompt": "hi", "stream": False, "options": {"num_predict": 8, "temperature": 0}}
    return httpx.post(base + "/api/generate", json=body, timeout=120)


def test_a_long_embedding_answers_and_a_generation_beside_it_completes(slow_runner) -> None:
    server, base, fault = slow_runner
    pid = server.engine.pid
    expected = _generate(base).json()["response"]
    fault.write_text("slow")
    got: dict[str, httpx.Response] = {}
    embed = threading.Thread(target=lambda: got.__setitem__("embed", httpx.post(
        base + "/api/embed", json={"model": "cyc", "input": TEXTS}, timeout=300)))  # fmt: skip
    t0 = time.monotonic()
    embed.start()
    time.sleep(1.0)
    beside = _generate(base)  # the model serves two requests at once: this runs while the embedding does
    embed.join(timeout=300)
    seconds = time.monotonic() - t0
    fault.unlink()
    assert beside.status_code == 200 and beside.json()["response"] == expected, beside.text
    r = got["embed"]
    assert r.status_code == 200, r.text
    vectors = np.array(r.json()["embeddings"])
    assert vectors.shape == (16, 64) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert r.json()["prompt_eval_count"] == 16 * 256  # each text truncated to the context
    assert seconds > 2 * server.engine.answer_seconds  # it outlived the watchdog by saying it was alive
    assert server.engine.pid == pid and server.engine.process.alive()


def test_an_embedding_stops_when_its_client_leaves(slow_runner) -> None:
    """With one request at a time the model is held by the embedding; once its client is gone the runner stops
    it between two steps, and the next request gets the model at once, not after the 7 s that were left."""
    server, base, fault = slow_runner
    pid = server.engine.pid
    fault.write_text("slow")
    server.lock = threading.Semaphore(1)  # one request at a time: the generation waits for the embedding
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/api/embed", json={"model": "cyc", "input": TEXTS}, timeout=1.5)
    fault.unlink()
    r = _generate(base)
    assert r.status_code == 200, r.text
    waited = r.json()["load_duration"] / 1e9  # the time it waited for the model
    assert waited < 4.0, waited
    assert server.engine.pid == pid and server.engine.process.alive()

"""``serve --parallel N``: requests run together in one engine, each answer the target alone's."""

from __future__ import annotations

import threading

import httpx
import ollama
import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.server import load
from local_eagle.settings import resolve

PROMPTS = ["hi", "PAB", "ABC", "xyz", "MNOP", "a"]
WANT = 30


def _options(n: int) -> dict:
    return {"temperature": 0, "num_predict": WANT}


def _in_threads(fn, n: int) -> list:
    out: list = [None] * n

    def go(i: int) -> None:
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - handed to the test
            out[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


@pytest.fixture(scope="module")
def alone(pair) -> dict[str, str]:
    _, target, draft = pair
    with Engine(target, draft, EngineOptions(n_ctx=256, n_threads=1)) as engine:
        return {p: engine.generate(p, max_tokens=WANT, draft_max=0).text for p in PROMPTS}


@pytest.mark.parametrize("runner", [False, True], ids=["in-process", "runner"])
def test_requests_run_together_and_answer_as_the_target_alone(pair, alone, runner):
    _, target, draft = pair
    options = EngineOptions(n_ctx=256, n_threads=1, adaptive=True, parallel=3)
    config = ServeConfig(name="cyc", model=target, draft=draft, settings=resolve(flags={"draft_num_predict": 4}))
    server = load(config, options) if runner else EagleServer(Engine(target, draft, options), config)
    try:
        assert server.parallel == 3
        with running(create_app(server)) as base:
            client = ollama.Client(host=base)
            replies = _in_threads(
                lambda i: client.generate(model="cyc", prompt=PROMPTS[i], options=_options(i)), len(PROMPTS)
            )
        for prompt, reply in zip(PROMPTS, replies, strict=True):
            assert not isinstance(reply, Exception), reply
            assert reply.response == alone[prompt], prompt
            assert reply.eval_count == WANT
        records = list(server.records)[-len(PROMPTS) :]
        overlapping = sum(
            1 for a in records for b in records if a is not b and a.started < b.finished and b.started < a.finished
        )
        assert overlapping > 0  # some requests ran at the same time
    finally:
        server.close()


def test_a_client_that_leaves_frees_its_sequence(pair, alone):
    _, target, draft = pair
    engine = Engine(target, draft, EngineOptions(n_ctx=256, n_threads=1, adaptive=True, parallel=2))
    server = EagleServer(engine, ServeConfig(name="cyc", model=target, draft=draft))
    try:
        with running(create_app(server)) as base:
            body = {"model": "cyc", "prompt": "hi", "options": {"temperature": 0, "num_predict": 200}}
            with httpx.stream("POST", base + "/api/generate", json=body, timeout=30) as r:
                for _ in zip(r.iter_lines(), range(3), strict=False):
                    pass  # three pieces, then the client goes
            body = {"model": "cyc", "prompt": "PAB", "stream": False, "options": _options(0)}
            replies = _in_threads(lambda i: httpx.post(base + "/api/generate", json=body, timeout=60).json(), 2)
        assert [r["response"] for r in replies] == [alone["PAB"]] * 2
        for _ in range(100):
            if engine.batcher is not None and sorted(engine.batcher.free) == [0, 1]:
                break
            threading.Event().wait(0.05)
        assert sorted(engine.batcher.free) == [0, 1]
    finally:
        server.close()

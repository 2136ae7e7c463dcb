"""logprobs / top_logprobs through both APIs and the official clients (issue 36), on the tiny cycle pair: the target
writes P, A, B, ... so every token's text is known, and its logprobs come from the engine (the target's own
verification logits). Served in process and through a runner (the wire carries them)."""

from __future__ import annotations

import json
import math

import httpx
import ollama
import openai
import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.runners import RunnerEngine

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module", params=["in process", "runner"])
def served(request, pair):
    _, target, draft = request.getfixturevalue("pair")
    opts = EngineOptions(n_ctx=256, n_threads=1)
    engine = Engine(target, draft, opts) if request.param == "in process" else RunnerEngine("cyc", target, draft, opts)
    server = EagleServer(engine, ServeConfig(name="cyc", model=target, draft=draft))
    with running(create_app(server)) as base:
        yield server, base
    server.close()


def _check_entries(entries: list[dict], text: str, top: int) -> None:
    assert "".join(e["token"] for e in entries) == text
    for e in entries:
        assert e["logprob"] <= 0 and bytes(e["bytes"]) == e["token"].encode()
        alts = e.get("top_logprobs") or []
        assert len(alts) == top
        if top:
            assert alts[0]["logprob"] >= alts[-1]["logprob"]
            assert math.isclose(alts[0]["logprob"], e["logprob"], abs_tol=1e-4)  # greedy: the likeliest token


def test_openai_chat_logprobs_whole_and_streamed(served):
    _, base = served
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    r = client.chat.completions.create(model="cyc", messages=MSGS, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=3)  # fmt: skip
    ch = r.choices[0]
    entries = [c.model_dump() for c in ch.logprobs.content]
    assert len(entries) == 6
    _check_entries(entries, ch.message.content, 3)
    chunks = list(client.chat.completions.create(model="cyc", messages=MSGS, max_tokens=6, temperature=0,
                                                 logprobs=True, top_logprobs=2, stream=True))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    got = [e.model_dump() for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    _check_entries(got, text, 2)
    assert text == ch.message.content
    plain = client.chat.completions.create(model="cyc", messages=MSGS, max_tokens=3, temperature=0)
    assert plain.choices[0].logprobs is None


def test_openai_completions_legacy_logprobs(served):
    _, base = served
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    r = client.completions.create(model="cyc", prompt="AB", max_tokens=5, temperature=0, logprobs=2)
    ch = r.choices[0]
    lp = ch.logprobs
    assert "".join(lp.tokens) == ch.text and len(lp.token_logprobs) == 5
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]
    assert all(len(d) == 2 for d in lp.top_logprobs) and all(v <= 0 for v in lp.token_logprobs)
    chunks = list(client.completions.create(model="cyc", prompt="AB", max_tokens=5, temperature=0, logprobs=0,
                                            stream=True))  # fmt: skip
    last = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
    assert len(last) == 1 and "".join(last[0].tokens) == ch.text and last[0].top_logprobs == [{}] * 5


def test_ollama_logprobs_generate_and_chat(served):
    _, base = served
    client = ollama.Client(host=base)
    r = client.generate(model="cyc", prompt="AB", options={"num_predict": 5, "temperature": 0}, logprobs=True,
                        top_logprobs=2)  # fmt: skip
    _check_entries([e.model_dump() | {"bytes": list(e.token.encode())} for e in r.logprobs], r.response, 2)
    raw = httpx.post(base + "/api/chat", json={"model": "cyc", "messages": MSGS, "stream": False, "logprobs": True,
                                               "options": {"num_predict": 4, "temperature": 0}}).json()  # fmt: skip
    _check_entries(raw["logprobs"], raw["message"]["content"], 0)
    parts = list(client.chat(model="cyc", messages=MSGS, options={"num_predict": 4, "temperature": 0}, stream=True,
                             logprobs=True, top_logprobs=1))  # fmt: skip
    text = "".join(p.message.content for p in parts)
    got = [e for p in parts for e in (p.logprobs or [])]
    assert parts[-1].done and "".join(e.token for e in got) == text and all(len(e.top_logprobs) == 1 for e in got)
    plain = httpx.post(base + "/api/generate", json={"model": "cyc", "prompt": "AB", "stream": False,
                                                     "options": {"num_predict": 2}}).json()  # fmt: skip
    assert "logprobs" not in plain


@pytest.mark.parametrize(
    "path, body, words",
    [
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs must be between 0 and 20"),
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs requires logprobs: true"),
        ("/v1/completions", {"logprobs": 21}, "logprobs must be between 0 and 20"),
        ("/api/chat", {"logprobs": True, "top_logprobs": -1}, "top_logprobs must be between 0 and 20"),
        ("/api/generate", {"logprobs": "yes"}, "logprobs"),
    ],
)
def test_bad_logprobs_are_400s(served, path, body, words):
    _, base = served
    base_body = {"model": "cyc", "stream": False}
    base_body |= {"prompt": "AB"} if path in ("/v1/completions", "/api/generate") else {"messages": MSGS}
    r = httpx.post(base + path, json=base_body | body)
    assert r.status_code == 400, r.text
    assert words in json.dumps(r.json())


def test_the_vocabulary_in_process_and_through_a_runner(served):
    """Token texts (logprobs) and a call tag's tokens (tool calls) read the model's vocabulary, in either place."""
    server, _ = served
    assert server.pieces([2, 68, 264]) == [b"</s>", b"A", b" and"]
    assert server.tag_tokens("</s>") == ([2], [True])  # a control token: a grammar names it by id
    tokens, special = server.tag_tokens("<x>")
    assert tokens and not any(special)  # text the byte vocabulary spells

"""Tool calls and thinking through the official ``ollama`` and ``openai`` clients: the served model's text is made
a known answer (its engine's stream replaced), and the server must split it as Ollama does for its template."""

from __future__ import annotations

import json

import httpx
import ollama
import openai
import pytest
from canned import answer_with
from chat_templates import LLAMA31, QWEN3

from local_eagle.ollama import prompt as prompt_module
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
MSGS = [{"role": "user", "content": "Weather in Berlin?"}]
QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Berlin"}}\n</tool_call>'
THOUGHT = "<think>\nThe user wants the weather.\n</think>\n\n"


@pytest.fixture(scope="module")
def served(pair):
    _, target, draft = pair
    server = EagleServer(Engine(target, draft, EngineOptions(n_ctx=2048, n_threads=1)),
                         ServeConfig(name="m", model=target, draft=draft))  # fmt: skip
    with running(create_app(server)) as base:
        yield server, base
    server.close()


def _answer(server, monkeypatch, template: str, text: str, piece: int = 3) -> list[str]:
    """Serve ``template`` and answer every request ``text``, ``piece`` characters at a time; the prompts the
    template rendered are collected in the returned list."""
    prompts: list[str] = []
    real = prompt_module.render_prompt
    monkeypatch.setattr(prompt_module, "render_prompt", lambda *a, **k: prompts.append(real(*a, **k)) or prompts[-1])
    answer_with(server, monkeypatch, template, lambda kwargs: text, piece)
    return prompts


def test_ollama_chat_returns_tool_calls_whole_and_streamed(served, monkeypatch):
    server, base = served
    _answer(server, monkeypatch, QWEN3, THOUGHT + QWEN_CALL)
    client = ollama.Client(host=base)
    r = client.chat(model="m", messages=MSGS, tools=TOOLS, stream=False)
    assert r.message.content == "" and r.message.thinking == "The user wants the weather.\n"
    (call,) = r.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Berlin"}
    parts = list(client.chat(model="m", messages=MSGS, tools=TOOLS, stream=True))
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_weather", {"city": "Berlin"})]
    assert "".join(p.message.content for p in parts) == ""
    assert "".join(p.message.thinking or "" for p in parts) == "The user wants the weather.\n"
    assert parts[-1].done and parts[-1].done_reason == "stop"
    raw = httpx.post(base + "/api/chat", json={"model": "m", "messages": MSGS, "tools": TOOLS, "stream": False}).json()
    assert raw["message"]["tool_calls"][0]["id"].startswith("call_")
    assert raw["message"]["tool_calls"][0]["function"] == {"index": 0, "name": "get_weather",
                                                           "arguments": {"city": "Berlin"}}  # fmt: skip


def test_openai_chat_returns_tool_calls_and_reasoning(served, monkeypatch):
    server, base = served
    _answer(server, monkeypatch, QWEN3, THOUGHT + "Let me look. " + QWEN_CALL)
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    r = client.chat.completions.create(model="m", messages=MSGS, tools=TOOLS)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content == "Let me look. "
    assert ch.message.model_extra["reasoning_content"] == "The user wants the weather.\n"
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Berlin"}
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        (0, "get_weather", {"city": "Berlin"})
    ]
    assert "".join(d.content or "" for d in deltas) == "Let me look. "
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == (
        "The user wants the weather.\n"
    )
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_llama31_bare_json_calls_and_plain_answers(served, monkeypatch):
    server, base = served
    _answer(server, monkeypatch, LLAMA31, '{"name": "get_weather", "parameters": {"city": "Paris"}}', piece=1)
    client = ollama.Client(host=base)
    (call,) = client.chat(model="m", messages=MSGS, tools=TOOLS).message.tool_calls
    assert call.function.arguments == {"city": "Paris"}
    oai = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, stream=True))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    _answer(server, monkeypatch, LLAMA31, "It is {sunny} in Paris.")  # JSON-looking text that is no call
    r = client.chat(model="m", messages=MSGS, tools=TOOLS)
    assert r.message.content == "It is {sunny} in Paris." and not r.message.tool_calls
    ch = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS).choices[0]
    assert ch.finish_reason == "stop" and ch.message.content == "It is {sunny} in Paris." and not ch.message.tool_calls


def test_tool_results_go_back_through_the_template(served, monkeypatch):
    server, base = served
    prompts = _answer(server, monkeypatch, QWEN3, "It is 21 degrees.")
    oai = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Berlin"}'}}
    msgs = [*MSGS, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21"}]  # fmt: skip
    r = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    assert r.choices[0].message.content == "It is 21 degrees." and r.choices[0].finish_reason == "stop"
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Berlin"}}\n</tool_call>' in prompts[-1]
    assert "<tool_response>\n21\n</tool_response>" in prompts[-1]


def test_think_false_reaches_the_template_and_the_answer_is_content(served, monkeypatch):
    server, base = served
    prompts = _answer(server, monkeypatch, QWEN3, "Four.")
    client = ollama.Client(host=base)
    r = client.chat(model="m", messages=MSGS, think=False)
    assert r.message.content == "Four." and not r.message.thinking
    assert prompts[-1].endswith("<think>\n\n</think>\n\n") and "/no_think" in prompts[-1]
    oai = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    oai.chat.completions.create(model="m", messages=MSGS, reasoning_effort="none")
    assert prompts[-1].endswith("<think>\n\n</think>\n\n")
    _answer(server, monkeypatch, QWEN3, THOUGHT + "Four.")
    r = client.chat(model="m", messages=MSGS)  # a thinking model thinks by default
    assert r.message.content == "Four." and r.message.thinking == "The user wants the weather.\n"
    g = client.generate(model="m", prompt="2+2?", think=True)
    assert g.response == "Four." and g.thinking == "The user wants the weather.\n"


def test_ollamas_think_false_on_v1(served, monkeypatch):
    """Issue 46: ``think: false`` in a /v1 body (``extra_body``, as clients written for Ollama send it) turns the
    thinking off as on /api/chat; ``reasoning_effort`` wins where both are given; a bad value is a 400."""
    server, base = served
    prompts = _answer(server, monkeypatch, QWEN3, "Four.")
    oai = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    ch = oai.chat.completions.create(model="m", messages=MSGS, extra_body={"think": False}).choices[0]
    assert ch.message.content == "Four." and not (ch.message.model_extra or {}).get("reasoning_content")
    assert prompts[-1].endswith("<think>\n\n</think>\n\n") and "/no_think" in prompts[-1]
    oai.chat.completions.create(model="m", messages=MSGS, reasoning_effort="high", extra_body={"think": False})
    assert not prompts[-1].endswith("<think>\n\n</think>\n\n")
    with pytest.raises(openai.BadRequestError, match="invalid think value"):
        oai.chat.completions.create(model="m", messages=MSGS, extra_body={"think": "very"})


def test_a_call_written_inside_the_thinking_is_thinking(served, monkeypatch):
    """Issue 46: as Ollama's chat handler, tool calls are read from the content after the thinking; one the model
    writes inside its thinking stays there, and the call after it is the one answered."""
    server, base = served
    paris = QWEN_CALL.replace("Berlin", "Paris")
    inner = f"<think>\nMaybe {paris}\n</think>\n\n"
    _answer(server, monkeypatch, QWEN3, inner + QWEN_CALL)
    r = ollama.Client(host=base).chat(model="m", messages=MSGS, tools=TOOLS)
    assert '"Paris"' in r.message.thinking and [c.function.arguments for c in r.message.tool_calls] == [
        {"city": "Berlin"}]  # fmt: skip
    oai = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    ch = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS).choices[0]
    assert '"Paris"' in ch.message.model_extra["reasoning_content"]
    assert [json.loads(c.function.arguments) for c in ch.message.tool_calls] == [{"city": "Berlin"}]
    _answer(server, monkeypatch, QWEN3, inner + "No call after all.")
    ch = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS).choices[0]
    assert ch.finish_reason == "stop" and not ch.message.tool_calls and ch.message.content == "No call after all."


def test_think_on_a_model_that_does_not_think_is_a_400(served, monkeypatch):
    server, base = served
    _answer(server, monkeypatch, LLAMA31, "Hi.")
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=base).chat(model="m", messages=MSGS, think=True)
    assert e.value.status_code == 400 and '"m" does not support thinking' in e.value.error
    assert ollama.Client(host=base).chat(model="m", messages=MSGS, think=False).message.content == "Hi."

"""tool_choice "required" or a named function (issue 36): the output is constrained to one call in the template's
format whose arguments follow the tool's schema, so even the tiny cycle target (which would write P, A, B, ...)
answers a well-formed call, parsed into tool_calls through both official clients. And ``special``: a call tag that
is a control token (Mistral's [TOOL_CALLS]) makes the engine write control tokens, so that the tag reaches the
parser."""

from __future__ import annotations

import json
from typing import Any

import httpx
import ollama
import openai
import pytest
from canned import answer_with
from chat_templates import LLAMA31, MISTRAL, QWEN3, QWEN25

from local_eagle.ollama.modelfile import Modelfile
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.toolchoice import call_format, forced_tools, tool_call_grammar

WEATHER = {"type": "object", "required": ["city", "unit", "days"], "additionalProperties": False, "properties": {
    "city": {"type": "string", "enum": ["Berlin", "Paris"]}, "unit": {"type": "string", "enum": ["c", "f"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}}}  # fmt: skip
TIME = {"type": "object", "required": ["zone"], "properties": {"zone": {"type": "string", "maxLength": 6}},
        "additionalProperties": False}  # fmt: skip
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": TIME}},
]
MSGS = [{"role": "user", "content": "Weather in Berlin?"}]


def valid(args: dict[str, Any], schema: dict[str, Any]) -> bool:
    """The arguments against the test's schemas (jsonschema where it is installed, else by hand)."""
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.validate(args, schema)
    props = schema["properties"]
    assert set(schema["required"]) <= set(args) and set(args) <= set(props), args
    for k, v in args.items():
        p = props[k]
        assert isinstance(v, {"string": str, "integer": int}[p["type"]]) and not isinstance(v, bool), (k, v)
        assert "enum" not in p or v in p["enum"]
        assert "maximum" not in p or p["minimum"] <= v <= p["maximum"]
        assert "maxLength" not in p or len(v) <= p["maxLength"]
    return True


@pytest.fixture(scope="module")
def served(pair):
    _, target, draft = pair
    server = EagleServer(Engine(target, draft, EngineOptions(n_ctx=1024, n_threads=1)),
                         ServeConfig(name="m", model=target, draft=draft))  # fmt: skip
    with running(create_app(server)) as base:
        yield server, base
    server.close()


def _template(server, monkeypatch, template: str) -> list[dict[str, Any]]:
    """Serve ``template``; the keywords of each generation the engine starts are collected in the returned list."""
    monkeypatch.setattr(server.config, "modelfile", Modelfile(model=server.config.model, template=template))
    real = server.engine.stream
    seen: list[dict[str, Any]] = []

    def stream(*args: Any, **kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(server.engine, "stream", stream)
    return seen


@pytest.mark.parametrize("template", [QWEN25, LLAMA31, MISTRAL], ids=["qwen25", "llama31", "mistral"])
def test_openai_required_and_named_choices_give_a_valid_call(served, monkeypatch, template):
    server, base = served
    seen = _template(server, monkeypatch, template)
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    r = client.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=200,
                                       temperature=0)  # fmt: skip
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    (call,) = ch.message.tool_calls
    schema = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
    assert valid(json.loads(call.function.arguments), schema)
    assert seen[-1]["grammar"].kind == "lark"
    named = {"type": "function", "function": {"name": "get_time"}}
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, tool_choice=named,
                                                 max_tokens=200, temperature=0.8, seed=3, stream=True))  # fmt: skip
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["get_time"] and valid(json.loads(calls[0].function.arguments), TIME)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_and_auto_leave_the_output_free(served, monkeypatch):
    server, base = served
    seen = _template(server, monkeypatch, QWEN25)
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    for choice in ("none", "auto"):
        r = client.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, tool_choice=choice, max_tokens=5,
                                           temperature=0)  # fmt: skip
        assert "grammar" not in seen[-1] and r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_a_forced_call_through_the_ollama_client_after_openai_parsing(served, monkeypatch):
    """Ollama's own API has no tool_choice: its chat with tools stays free, and its client reads our OpenAI
    answer's call the same way (the arguments parsed out of the template's format)."""
    server, base = served
    seen = _template(server, monkeypatch, QWEN25)
    r = ollama.Client(host=base).chat(model="m", messages=MSGS, tools=TOOLS, options={"num_predict": 4})
    assert "grammar" not in seen[-1] and not r.message.tool_calls
    raw = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": MSGS, "tools": TOOLS,
                     "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                     "max_tokens": 200}).json()  # fmt: skip
    (call,) = raw["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and valid(json.loads(call["function"]["arguments"]), WEATHER)


def test_a_thinking_model_is_rendered_without_thinking_for_a_forced_call(served, monkeypatch):
    server, base = served
    _template(server, monkeypatch, QWEN3)
    body = {"model": "m", "messages": MSGS, "tools": TOOLS, "tool_choice": "required", "max_tokens": 200}
    r = httpx.post(base + "/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert valid(json.loads(call["function"]["arguments"]), WEATHER if call["function"]["name"] == "get_weather"
                 else TIME)  # fmt: skip
    r = httpx.post(base + "/v1/chat/completions", json=body | {"reasoning_effort": "high"})
    assert r.status_code == 400 and "no room for thinking" in r.text


@pytest.mark.parametrize(
    "choice, words",
    [
        ({"type": "function", "function": {"name": "nope"}}, "not among the tools"),
        ("always", "tool_choice must be"),
        ({"type": "function"}, "tool_choice.function.name"),
    ],
)
def test_bad_tool_choices_are_400s(served, choice, words):
    _, base = served
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": MSGS, "tools": TOOLS,
                                                        "tool_choice": choice})  # fmt: skip
    assert r.status_code == 400 and words in r.json()["error"]["message"]


def test_tool_choice_without_tools_or_with_a_response_format(served):
    _, base = served
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": MSGS, "tool_choice": "required"})
    assert r.status_code == 400 and "needs tools" in r.text
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": MSGS, "tools": TOOLS,
                   "tool_choice": "required", "response_format": {"type": "json_object"}})  # fmt: skip
    assert r.status_code == 400 and "response_format" in r.text


def test_call_formats_from_the_templates():
    assert call_format("<tool_call>", QWEN25) == ("<tool_call>", "arguments", "</tool_call>")
    assert call_format("{", LLAMA31) == ("", "parameters", "")
    assert call_format("[TOOL_CALLS][", MISTRAL) == ("[TOOL_CALLS][", "arguments", "]")
    assert call_format("[TOOL_CALLS]", '{{- "[TOOL_CALLS][" }}') == ("[TOOL_CALLS][", "arguments", "]")
    assert forced_tools("auto", TOOLS) is None and forced_tools(None, None) is None
    assert forced_tools("required", TOOLS) == TOOLS


def test_a_special_tag_is_named_by_its_token_id():
    """[TOOL_CALLS] as the one control token Mistral's vocabulary has for it: the grammar names it <[ID]>, the text
    around it stays text."""

    def tag_tokens(text: str) -> tuple[list[int], list[bool]]:
        assert text == "[TOOL_CALLS]["
        return [9, 91], [True, False]

    spec = tool_call_grammar(TOOLS[:1], TOOLS, "[TOOL_CALLS][", MISTRAL, tag_tokens, lambda ids: [b"[TOOL_CALLS]"])
    assert spec.source.startswith('start: <[9]> "[" call "]"\n')
    assert '"\\"name\\"" ": " "\\"get_weather\\""' in spec.source  # the name, written as the call's first key


def _answer(server, monkeypatch, template: str, text: str) -> list[dict[str, Any]]:
    """Serve ``template`` and answer ``text`` (when the engine is asked with ``special``; without it, the text less
    the control token, as llama.cpp writes it); the keywords of each call are returned."""

    def answer(kwargs: dict[str, Any]) -> str:
        return text if kwargs.get("special") else text.replace("[TOOL_CALLS]", "")

    return answer_with(server, monkeypatch, template, answer, 4)


def test_a_control_token_tag_makes_the_engine_write_it(served, monkeypatch):
    server, base = served
    monkeypatch.setattr(server, "_tags", {"[TOOL_CALLS][": ([9, 91], [True, False])})
    seen = _answer(server, monkeypatch, MISTRAL, '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}}]')
    r = ollama.Client(host=base).chat(model="m", messages=MSGS, tools=TOOLS)
    assert seen[-1].get("special") is True
    (call,) = r.message.tool_calls
    assert call.function.name == "get_time" and call.function.arguments == {"zone": "UTC"}
    oai = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    ch = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS).choices[0]
    assert seen[-1].get("special") is True and ch.finish_reason == "tool_calls"
    r = ollama.Client(host=base).chat(model="m", messages=MSGS)  # no tools: control tokens stay unwritten
    assert "special" not in seen[-1]
    monkeypatch.setattr(server, "_tags", {"<tool_call>": ([60, 61], [False, False])})
    seen = _answer(server, monkeypatch, QWEN25, '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}')
    ollama.Client(host=base).chat(model="m", messages=MSGS, tools=TOOLS)
    assert "special" not in seen[-1]  # a tag of plain text needs no special


def test_show_capabilities(served, monkeypatch, tmp_path):
    """/api/show's capabilities as Ollama works them out: completion (or embedding for a GGUF with a pooling),
    tools where the template reads .Tools, thinking where it has thinking tags."""
    from chat_templates import QWEN3_JINJA

    from local_eagle.serve.chatoutput import capabilities
    from local_eagle.testing.gguf_edit import with_keys

    server, base = served
    target = server.config.model
    assert capabilities(target, "{{ .Prompt }}") == ["completion"]
    assert capabilities(target, QWEN25) == ["completion", "tools"]
    assert capabilities(target, QWEN3) == ["completion", "tools", "thinking"]
    assert capabilities(target, None) == ["completion"]  # the tiny GGUF has no chat template
    embedder = with_keys(target, tmp_path / "embed.gguf", uint32={"llama.pooling_type": 1})
    assert capabilities(embedder, "{{ .Prompt }}") == ["embedding"]
    from local_eagle.serve import chatoutput

    monkeypatch.setattr(chatoutput, "_jinja_source", lambda path, mtime: QWEN3_JINJA)
    assert capabilities(target, None) == ["completion", "thinking"]  # the part of Qwen 3's writes no tools
    monkeypatch.setattr(server.config, "modelfile", Modelfile(model=target, template=QWEN3))
    assert ollama.Client(host=base).show("m").capabilities == ["completion", "tools", "thinking"]

"""Tools sent to a model whose template cannot take them (issue 46): Ollama decides a model's ``tools``
capability from its template and answers 400 ``"NAME" does not support tools``; so does serve, on /api/chat,
/api/generate and /v1/chat/completions, whatever the ``tool_choice``, through the official clients. A template that
reads ``.Tools`` still takes them, and ``/api/show`` lists the capability from the same test."""

from __future__ import annotations

import httpx
import ollama
import openai
import pytest
from chat_templates import QWEN25

from local_eagle.ollama.modelfile import Modelfile
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running

PLAIN = "{{ range .Messages }}{{ .Role }}: {{ .Content }}\n{{ end }}assistant: "
"""A template with no ``.Tools``: the tool definitions and ``role: tool`` results never reach the prompt."""
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "Time",
                                           "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip
MSGS = [{"role": "user", "content": "What time is it?"}]
REFUSED = '"m" does not support tools'


@pytest.fixture(scope="module")
def served(pair):
    _, target, _ = pair
    server = EagleServer(Engine(target, None, EngineOptions(n_ctx=1024, n_threads=1)),
                         ServeConfig(name="m", model=target, draft=None))  # fmt: skip
    with running(create_app(server)) as base:
        yield server, base
    server.close()


@pytest.fixture
def plain(served, monkeypatch):
    server, base = served
    monkeypatch.setattr(server.config, "modelfile", Modelfile(model=server.config.model, template=PLAIN))
    return base


def test_the_ollama_client_gets_a_400_naming_the_model(plain):
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=plain).chat(model="m", messages=MSGS, tools=TOOLS)
    assert e.value.status_code == 400 and e.value.error == REFUSED
    with pytest.raises(ollama.ResponseError) as e:  # streaming: refused before the stream starts
        list(ollama.Client(host=plain).chat(model="m", messages=MSGS, tools=TOOLS, stream=True))
    assert e.value.status_code == 400 and e.value.error == REFUSED


def test_generate_is_refused_as_well(plain):
    r = httpx.post(plain + "/api/generate", json={"model": "m", "prompt": "hi", "tools": TOOLS, "stream": False})
    assert r.status_code == 400 and r.json() == {"error": REFUSED}


@pytest.mark.parametrize("choice", [None, "auto", "none", "required", {"type": "function",
                                                                       "function": {"name": "get_time"}}])
def test_the_openai_client_gets_a_400_whatever_the_tool_choice(plain, choice):
    client = openai.OpenAI(base_url=plain + "/v1", api_key="x", max_retries=0)
    extra = {} if choice is None else {"tool_choice": choice}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, max_tokens=4, **extra)
    assert REFUSED in str(e.value)


def test_without_tools_the_model_answers_and_show_lists_no_tools(plain):
    client = ollama.Client(host=plain)
    r = client.chat(model="m", messages=MSGS, options={"num_predict": 2, "temperature": 0})
    assert r.done
    assert "tools" not in client.show("m").capabilities


def test_a_template_that_reads_tools_takes_them(served, monkeypatch):
    server, base = served
    monkeypatch.setattr(server.config, "modelfile", Modelfile(model=server.config.model, template=QWEN25))
    client = ollama.Client(host=base)
    r = client.chat(model="m", messages=MSGS, tools=TOOLS, options={"num_predict": 2, "temperature": 0})
    assert r.done
    assert "tools" in client.show("m").capabilities

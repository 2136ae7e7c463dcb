"""A client's mistakes are 4xx answers that name the field, never a 500 with a traceback in the log (issue 47, item 3):
lone surrogates anywhere in a body, a tool whose ``function`` is no object, JSON text nested past the body's bound
inside a string, and schemas that validate but fail once they run, through ``format``, ``response_format`` and
``tool_choice``. Served through a real runner process, whose pid must not change (no request may take it down)."""

from __future__ import annotations

import io
import json
import logging
import math
import threading
from typing import Any

import httpx
import pytest
from chat_templates import QWEN25

from local_eagle.ollama.modelfile import Modelfile
from local_eagle.runtime.engine import EngineOptions
from local_eagle.runtime.grammar import GrammarError, GrammarSpec
from local_eagle.runtime.jsontext import MAX_DEPTH, JSONTextError, loads
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.runners import RunnerEngine

HI = [{"role": "user", "content": "hi"}]
LONE = "hi \ud800"
DEEP = '{"a": ' * 100_000 + "1" + "}" * 100_000
RECURSIVE = {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["c"]}},
             "$ref": "#/$defs/n"}  # fmt: skip
HUGE_PATTERN = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x{4294967295}$"}},
                "required": ["a"]}  # fmt: skip


def _tool(name: Any = "f", parameters: Any = None) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": name, "parameters": parameters or {"type": "object"}}}]


def _schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


CASES = [
    ("/api/generate", {"prompt": LONE}, "prompt holds a lone UTF-16 surrogate"),
    ("/api/chat", {"messages": [{"role": "user", "content": LONE}]}, "messages[0].content holds a lone"),
    ("/v1/completions", {"prompt": LONE}, "prompt holds a lone UTF-16 surrogate"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONE}]}, "messages[0].content holds a lone"),
    ("/api/embed", {"input": ["fine", LONE]}, "input[1] holds a lone UTF-16 surrogate"),
    ("/v1/embeddings", {"input": LONE}, "input holds a lone UTF-16 surrogate"),
    ("/api/chat", {"messages": HI, "tools": _tool(LONE)}, "tools[0].function.name holds a lone"),
    ("/v1/chat/completions", {"messages": HI, "tools": _tool(LONE)}, "tools[0].function.name holds a lone"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x", LONE: 1}]}, "a key of messages[0]"),
    ("/api/chat", {"messages": HI, "tools": [{"type": "function", "function": [1]}]}, "tools[0].function must be an"),
    ("/api/chat", {"messages": HI, "tools": [{"type": "function", "function": "f"}]}, "tools[0].function must be an"),
    ("/v1/chat/completions", {"messages": HI, "tools": [{"function": {"name": 3}}]}, "tools[0].function.name has"),
    ("/api/chat", {"messages": HI, "tools": [{"function": {"name": "f", "parameters": []}}]},
     "tools[0].function.parameters has the wrong type"),
    ("/api/chat", {"messages": HI, "tools": ["f"]}, "tools[0] must be an object"),
    ("/v1/chat/completions",
     {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": DEEP}}]}, *HI]},
     f"messages[0].tool_calls[0].arguments is nested more than {MAX_DEPTH} levels deep"),
    ("/api/chat",
     {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[" * 100_000}}]}]},
     "messages[0].tool_calls[0].arguments is not a JSON object"),
    ("/api/generate", {"prompt": "hi", "format": RECURSIVE}, "format cannot be followed: parser error: Too many items"),
    ("/api/chat", {"messages": HI, "format": HUGE_PATTERN}, "format cannot be followed: lexer error: too many"),
    ("/v1/chat/completions", {"messages": HI, "response_format": _schema_format(RECURSIVE)},
     "response_format.json_schema.schema cannot be followed: parser error: Too many items"),
    ("/v1/chat/completions", {"messages": HI, "response_format": _schema_format(HUGE_PATTERN)},
     "response_format.json_schema.schema cannot be followed: lexer error"),
    ("/v1/chat/completions", {"messages": HI, "response_format": _schema_format(json.dumps(RECURSIVE))},
     "response_format.json_schema.schema cannot be followed"),
    ("/v1/chat/completions", {"messages": HI, "response_format": _schema_format(DEEP)},
     f"response_format.json_schema.schema is nested more than {MAX_DEPTH} levels deep"),
    ("/api/chat", {"messages": HI * 299 + [{"role": 5}]}, "messages[299] must be an object with a role"),  # off loop
    ("/api/generate", {"prompt": "hi", "options": {"stop": ["x"] * 257}}, "options.stop takes at most 256 strings"),
    ("/v1/chat/completions", {"messages": HI, "stop": [f"s{i}" for i in range(1000)]}, "stop takes at most 256"),
    ("/api/generate", {"prompt": "hi", "options": {"stop": [1] * 100_000}}, "options.stop must be a list of strings"),
    ("/api/generate", {"prompt": "hi", "format": {"type": "string", "maxLength": 10**30}},
     "format: Value is not JSON serializable"),
    ("/api/chat", {"messages": HI, "tools": _tool("f", {"type": "object", "properties": {"a": {"minimum": math.nan}}})},
     "tools[0].function.parameters.properties.a.minimum must be a finite number"),
    ("/v1/chat/completions", {"messages": HI, "tools": _tool("f", RECURSIVE), "tool_choice": "required"},
     "tool_choice: a tool's parameters cannot constrain the call: "
     "tools[0].function.parameters cannot be followed: parser"),
    ("/v1/chat/completions",
     {"messages": HI, "tools": _tool("f", HUGE_PATTERN),
      "tool_choice": {"type": "function", "function": {"name": "f"}}},
     "tool_choice: a tool's parameters cannot constrain the call: "
     "tools[0].function.parameters cannot be followed: lexer"),
]  # fmt: skip


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _config(target: Any, draft: Any) -> ServeConfig:
    """A template that takes tools: one that cannot answers a request with tools a 400 before its tools are read."""
    return ServeConfig(name="cyc", model=target, draft=draft, modelfile=Modelfile(model=target, template=QWEN25))


@pytest.fixture(scope="module")
def served(pair):
    _, target, draft = pair
    engine = RunnerEngine("cyc", target, draft, EngineOptions(n_ctx=256, n_threads=1))
    server = EagleServer(engine, _config(target, draft))
    with running(create_app(server)) as base:
        yield server, base
    server.close()


@pytest.fixture
def log() -> Any:
    """What the server logs (uvicorn's error logger, where an unhandled exception's traceback goes)."""
    handler = _Records()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


@pytest.mark.parametrize(("path", "body", "words"), CASES, ids=[f"{p}-{w[:40]}" for p, _, w in CASES])
def test_a_clients_mistake_is_a_400_naming_the_field(served, log, path, body, words) -> None:
    server, base = served
    pid = server.engine.pid
    content = json.dumps({"model": "cyc", "stream": False, **body}).encode()  # escapes keep the lone surrogates
    r = httpx.post(base + path, content=content, headers={"content-type": "application/json"}, timeout=120)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"] if path.startswith("/v1") else r.json()["error"]
    assert words in message and "\n" not in message and len(message) < 1000
    assert not [rec for rec in log if rec.exc_info or "Traceback" in rec.getMessage()]
    assert server.engine.pid == pid and server.engine.process.alive()


def test_valid_unicode_and_surrogate_pairs_still_pass(served) -> None:
    """An emoji sent as an escaped pair (Python's json.dumps writes it so) is one character, not a lone half."""
    _, base = served
    r = httpx.post(base + "/api/generate", content=json.dumps({"model": "cyc", "prompt": "hi \U0001f600",
                   "stream": False, "options": {"num_predict": 2}}), timeout=120)  # fmt: skip
    assert r.status_code == 200, r.text


def test_json_text_names_where_it_fails() -> None:
    assert loads(b'{"a": [1, "\\ud83d\\ude00"]}', "the request body") == {"a": [1, "\U0001f600"]}
    for text, words in [
        (b'{"a": [1, "x\\udc00"]}', "a[1] holds a lone UTF-16 surrogate (\\udc00 at character 1)"),
        (b'{"a": {"\\ud800k": 1}}', "a key of a holds a lone"),
        (b'{"\\ud800": 1}', "a key of the request body holds a lone"),
        (
            b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}",
            f"the request body is nested more than {MAX_DEPTH} levels deep (in a)",
        ),
        (b"[" * 100_000, f"the request body is nested more than {MAX_DEPTH} levels deep"),
        (b"9" * 5000, "has a number with more digits"),
        (b'{"options": {"seed": -Infinity}}', "options.seed must be a finite number, got -inf"),
        (b"{", "is not valid JSON"),
    ]:
        with pytest.raises(JSONTextError) as e:
            loads(text, "the request body")
        assert words in str(e.value), (text[:20], str(e.value))
        str(e.value).encode("utf-8")  # the message itself can be written out


def test_a_grammar_failing_while_it_runs_is_a_400_naming_its_field(pair, monkeypatch) -> None:
    """Past the dry run (a failure after a free choice): the generation's GrammarError is the request's 400, in the
    server's own process and through a runner's wire (``refused``), not a failed generation's 500."""
    from fastapi.testclient import TestClient

    from local_eagle.runtime.engine import Engine

    _, target, draft = pair
    server = EagleServer(Engine(target, draft, EngineOptions(n_ctx=1024, n_threads=1)), _config(target, draft))

    class Failing:
        result = None

        def __iter__(self) -> Any:
            raise GrammarError("json_schema grammar: parser error: Too many items")
            yield ""

    monkeypatch.setattr(server.engine, "stream", lambda *a, **k: Failing())
    try:
        with TestClient(create_app(server), base_url="http://127.0.0.1:11434") as client:
            r = client.post("/api/generate", json={"model": "cyc", "prompt": "hi", "format": {"type": "object"},
                                                   "stream": False})  # fmt: skip
            assert r.status_code == 400 and r.json()["error"].startswith("format cannot be followed: json_schema")
            r = client.post("/v1/chat/completions", json={"model": "cyc", "messages": HI, "tools": _tool(),
                                                          "tool_choice": "required"})  # fmt: skip
            assert r.status_code == 400 and r.json()["error"]["message"].startswith("tool_choice cannot be followed")
    finally:
        server.close()

    from local_eagle.serve.runnerproc import Runner

    class Engine2:
        def stream(self, prompt: Any, cancelled: Any = None, **kw: Any) -> Any:
            return Failing()

    runner = Runner(io.BytesIO())
    runner.engine = Engine2()
    runner.cancels[1] = threading.Event()
    out: list[dict[str, Any]] = []
    monkeypatch.setattr(runner, "send", out.append)
    runner._stream({"id": 1, "prompt": [1], "kwargs": {}})
    assert out[-1] == {"id": 1, "refused": "json_schema grammar: parser error: Too many items"}


def test_grammar_specs_refuse_what_fails_at_run_time_without_a_model() -> None:
    """The dry run over a byte vocabulary: the CLI's --json-schema gets the same refusal as the server."""
    with pytest.raises(GrammarError, match="schema cannot be followed: parser error: Too many items"):
        GrammarSpec.json_schema(RECURSIVE)
    with pytest.raises(GrammarError, match="schema cannot be followed: lexer error"):
        GrammarSpec.json_schema(HUGE_PATTERN)
    GrammarSpec.json_schema({"type": "string", "pattern": "^x{1000}$"})  # long but finite: fine
    optional = {"$defs": RECURSIVE["$defs"], "type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}
    GrammarSpec.json_schema(optional)  # the recursion left to a free choice: fine until a model takes it


def test_a_grammar_too_long_is_refused_before_any_work() -> None:
    from local_eagle.runtime.grammar import MAX_SOURCE_CHARS
    from local_eagle.runtime.jsontext import longer_than

    assert longer_than({"a": ["x" * 10]}, 12) and not longer_than({"a": [1, "xy"]}, 100)
    with pytest.raises(GrammarError, match=f"format is more than {MAX_SOURCE_CHARS} characters long as JSON"):
        GrammarSpec.json_schema({"enum": ["v" * 1000] * 1100}, "format")
    with pytest.raises(GrammarError, match=f"regex is {MAX_SOURCE_CHARS + 1} characters long, more than"):
        GrammarSpec.regex("a" * (MAX_SOURCE_CHARS + 1))


def test_negative_temperature_and_top_k_mean_what_ollama_reads_them_as(served) -> None:
    """Not mistakes (issue 47, item 5): as in Ollama (llama.cpp's sampler), a temperature of 0 or less is greedy and
    a top_k of 0 or less keeps every token; both APIs take them so, as Ollama's OpenAI middleware passes them on."""
    _, base = served

    def text(path: str, **options: Any) -> str:
        if path == "/api/generate":
            body = {"model": "cyc", "prompt": "hi", "stream": False, "options": {"num_predict": 12, **options}}
            return httpx.post(base + path, json=body, timeout=120).json()["response"]
        body = {"model": "cyc", "prompt": "hi", "max_tokens": 12, **options}
        return httpx.post(base + path, json=body, timeout=120).json()["choices"][0]["text"]

    for path in ("/api/generate", "/v1/completions"):
        assert text(path, temperature=-1) == text(path, temperature=0)
        assert text(path, temperature=0.9, top_k=-1, seed=7) == text(path, temperature=0.9, top_k=0, seed=7)


def test_a_prompt_far_past_the_context_is_refused_on_a_prefix(pair, monkeypatch) -> None:
    """As an embedding's text (``prefix_tokens``): a prompt whose first characters already hold more tokens than the
    context is refused without tokenizing the rest (llama.cpp's tokenizer takes its time on megabytes)."""
    from fastapi.testclient import TestClient

    from local_eagle.runtime.engine import Engine

    _, target, draft = pair
    server = EagleServer(Engine(target, draft, EngineOptions(n_ctx=256, n_threads=1)), _config(target, draft))
    seen: list[int] = []
    real = server.engine.tokenize
    monkeypatch.setattr(server.engine, "tokenize", lambda text: seen.append(len(text)) or real(text))
    from local_eagle.llamacpp import model as llama_model

    monkeypatch.setattr(llama_model, "_CHARS_PER_TOKEN", 1)  # this vocabulary's pieces are short: a shorter start
    prompt = ("PA" * server.max_prompt_bytes)[: server.max_prompt_bytes]  # as long as the byte check lets through
    assert len(prompt) > 2 * (256 + llama_model.PREFIX_MARGIN)
    try:
        with TestClient(create_app(server), base_url="http://127.0.0.1:11434") as client:
            r = client.post("/api/generate", json={"model": "cyc", "prompt": prompt, "raw": True, "stream": False})
    finally:
        server.close()
    assert r.status_code == 400 and "more than the context of 256 allows" in r.json()["error"], r.text
    assert seen and max(seen) < len(prompt), (len(prompt), seen)

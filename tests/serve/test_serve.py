"""`local-eagle serve` through the official ``ollama`` and ``openai`` clients, on a free localhost port.

The tiny cycle pair answers any prompt ending outside A..P with "PABCDEFGHIJKLMNOP..." greedily,
so every output below is known exactly.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import ollama
import openai
import pytest
from typer.testing import CliRunner

from converters import convert, write_checkpoint
from local_eagle.cli.app import app
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.harness import serve_process as serve_on_free_port
from local_eagle.serve.server import MAX_REQUEST_BYTES
from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

CYCLE = "P" + "ABCDEFGHIJKLMNOP" * 300
GREEDY = {"temperature": 0}


def greedy_body(n: int, stream: bool = False) -> dict:
    """A raw /api/generate request for n greedy tokens after "hi"."""
    return {"model": "cycle", "prompt": "hi", "stream": stream, "options": {**GREEDY, "num_predict": n}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    target = write_cycle_target(d / "target.gguf")
    m = make_cycle_drafter(True)
    draft = convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), target, d / "draft.gguf").outfile
    return d, target, draft


@pytest.fixture(scope="module")
def served(pair):
    _, target, draft = pair
    engine = Engine(target, draft, EngineOptions(n_ctx=4096, n_threads=1))
    server = EagleServer(engine, ServeConfig(name="cycle", model=target, draft=draft))
    with running(create_app(server)) as base:  # as serve runs it
        yield server, base
    assert server.close(timeout=60)


def test_ollama_generate_and_chat(oll):
    r = oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 20})
    assert r.response == CYCLE[:20]
    assert r.done and r.done_reason == "length"
    assert r.eval_count == 20 and r.prompt_eval_count > 0
    assert r.total_duration > 0 and r.eval_duration > 0 and r.load_duration is not None
    hi = [{"role": "user", "content": "hi"}]
    c = oll.chat(model="cycle:latest", messages=hi, options={**GREEDY, "num_predict": 9})
    assert c.message.role == "assistant" and c.message.content == CYCLE[:9]
    assert c.eval_count == 9 and c.done_reason == "length"
    # the ollama client drops fields it does not know: read our speculative stats raw
    raw = httpx.post(str(oll._client.base_url) + "/api/generate", json=greedy_body(40))
    stats = raw.json()["speculative"]
    assert stats["acceptance_length"] > 2 and stats["drafted_tokens"] > 0 and stats["generated_tokens"] == 40


def test_ollama_stop_draft_and_stream(oll):
    r = oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 50, "stop": ["G"],
                                                          "draft_num_predict": 0})  # fmt: skip
    assert r.response == "PABCDEF" and r.done_reason == "stop"
    parts = list(oll.generate(model="cycle", prompt="hi", stream=True, options={**GREEDY, "num_predict": 30}))
    assert len(parts) > 2 and all(not p.done for p in parts[:-1])
    assert "".join(p.response for p in parts) == CYCLE[:30]
    assert parts[-1].done and parts[-1].eval_count == 30
    chunks = list(oll.chat(model="cycle", messages=[{"role": "user", "content": "x"}], stream=True,
                           options={**GREEDY, "num_predict": 12}))  # fmt: skip
    assert "".join(c.message.content for c in chunks) == CYCLE[:12] and chunks[-1].done


def test_ollama_listing(oll):
    (m,) = oll.list().models
    assert m.model == "cycle:latest" and m.details.format == "gguf" and m.size > 0
    s = oll.show("cycle")
    assert "FROM" in s.modelfile and "DRAFT" in s.modelfile and s.details.format == "gguf"
    (p,) = oll.ps().models
    assert p.model == "cycle:latest" and p.context_length == 4096
    from local_eagle.llamacpp.backends import gpu_offload_supported

    assert p.size_vram == (p.size if gpu_offload_supported() else 0), "bytes on a GPU: none on a CPU build"
    assert httpx.get(str(oll._client.base_url) + "/api/version").json()["version"]


def test_ollama_errors(oll):
    with pytest.raises(ollama.ResponseError) as e:
        oll.generate(model="nope", prompt="hi")
    assert e.value.status_code == 404 and "not found" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        oll.generate(model="cycle", prompt="hi", options={"temperature": "hot"})
    assert e.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as e:
        list(oll.chat(model="cycle", messages=[{"role": "user", "content": "hi"}], stream=True, options={"top_p": 5}))
    assert e.value.status_code == 400 and "top_p" in e.value.error
    assert oll.chat(model="cycle", messages=[]).done_reason == "load"  # Ollama's way to preload a model
    # and to unload one (ollama stop): serve -m keeps its one model, but answers as Ollama does
    assert oll.chat(model="cycle", messages=[], keep_alive=0).done_reason == "unload"
    assert oll.generate(model="cycle", keep_alive="0s").done_reason == "unload"
    assert oll.generate(model="cycle", keep_alive="5m").done_reason == "load"
    base = str(oll._client.base_url)
    r = httpx.post(base + "/api/chat", content=b"{not json")
    assert r.status_code == 400 and "error" in r.json()
    r = httpx.post(base + "/api/generate", json={"model": "cycle", "prompt": "x" * 5000, "stream": True})
    assert r.status_code == 400 and "context" in r.json()["error"]
    r = httpx.post(base + "/api/chat", json={"model": "cycle", "messages": [{"content": "no role"}]})
    assert r.status_code == 400 and "role" in r.json()["error"]
    for bad in ({"repeat_penalty": 0}, {"top_p": 2}, {"seed": "x"}, {"num_predict": True}):
        r = httpx.post(base + "/api/generate", json={"model": "cycle", "prompt": "hi", "options": bad})
        assert r.status_code == 400 and isinstance(r.json()["error"], str), bad
    nan = b'{"model": "cycle", "prompt": "hi", "options": {"temperature": NaN}}'  # Python's json reads NaN
    r = httpx.post(base + "/api/generate", content=nan)
    assert r.status_code == 400 and "finite" in r.json()["error"]
    assert oll.generate(model="cycle", prompt="hi", options={"seed": -1, "num_predict": 2}).done  # -1: a random seed
    r = httpx.post(base + "/api/show", json={"model": "nope"})
    assert r.status_code == 404 and "not found" in r.json()["error"]
    assert httpx.get(base + "/api/nowhere").json() == {"error": "Not Found"}
    r = httpx.post(base + "/api/generate", json=["model"])
    assert r.status_code == 400 and isinstance(r.json()["error"], str)
    assert oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 3}).response == "PAB"


def test_openai_chat_and_completions(oai):
    r = oai.chat.completions.create(model="cycle", messages=[{"role": "user", "content": "hi"}], max_tokens=10,
                                    temperature=0)  # fmt: skip
    assert r.choices[0].message.content == CYCLE[:10] and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 10 and r.usage.total_tokens == r.usage.prompt_tokens + 10
    assert r.model_extra["speculative"]["acceptance_length"] > 2
    c = oai.completions.create(model="cycle", prompt="hi", max_tokens=40, temperature=0, stop=["H"])
    assert c.choices[0].text == "PABCDEFG" and c.choices[0].finish_reason == "stop"
    assert [m.id for m in oai.models.list()] == ["cycle"]


def test_openai_streaming(oai):
    s = oai.chat.completions.create(model="cycle", messages=[{"role": "user", "content": "hi"}], max_tokens=25,
                                    temperature=0, stream=True, stream_options={"include_usage": True})  # fmt: skip
    chunks = list(s)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == CYCLE[:25]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 25
    s = oai.completions.create(model="cycle", prompt="hi", max_tokens=7, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in s) == CYCLE[:7]


def test_openai_errors(oai):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["code"] == "model_not_found" and "not found" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="cycle", messages="hi")
    assert e.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        oai.completions.create(model="cycle", prompt="hi", max_tokens=-3, stream=True)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="cycle", messages=[{"role": "user", "content": "hi"}],
                                    response_format={"type": "yaml"})  # fmt: skip
    assert "response_format.type must be" in e.value.body["message"]
    r = httpx.get(str(oai.base_url) + "nowhere")
    assert r.status_code == 404 and r.json()["error"]["message"]
    assert oai.completions.create(model="cycle", prompt="hi", max_tokens=2, temperature=0).choices[0].text == "PA"


def test_two_concurrent_clients(served, oll, oai):
    server, _ = served
    n_before = len(server.records)
    results: dict[str, str] = {}

    def with_ollama() -> None:
        results["ollama"] = oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 300}).response

    def with_openai() -> None:
        s = oai.completions.create(model="cycle", prompt="hi", max_tokens=250, temperature=0, stream=True)
        results["openai"] = "".join(c.choices[0].text for c in s)

    threads = [threading.Thread(target=f) for f in (with_ollama, with_openai)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {"ollama": CYCLE[:300], "openai": CYCLE[:250]}
    a, b = sorted(list(server.records)[n_before:], key=lambda r: r.started)
    assert a.finished <= b.started  # one generation at a time
    assert (a.stop_reason, b.stop_reason) == ("length", "length")


def test_client_disconnect_cancels_generation(served, oll):
    server, base = served
    n_before = len(server.records)
    t0 = time.perf_counter()
    with httpx.stream("POST", base + "/api/generate", json=greedy_body(4000, stream=True)) as r:
        lines = r.iter_lines()
        assert '"response"' in next(lines)
    deadline = time.monotonic() + 30
    while len(server.records) == n_before:
        assert time.monotonic() < deadline, "the cancelled generation never ended"
        time.sleep(0.05)
    rec = server.records[-1]
    assert rec.stop_reason == "cancelled" and rec.pieces < 4000 and rec.finished - t0 < 5
    assert oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 5}).response == "PABCD"


def test_openai_stream_closed_early_cancels(served, oai):
    server, _ = served
    n_before = len(server.records)
    t0 = time.perf_counter()
    s = oai.chat.completions.create(model="cycle", messages=[{"role": "user", "content": "hi"}], max_tokens=4000,
                                    temperature=0, stream=True)  # fmt: skip
    assert next(iter(s)).choices[0].delta.content == "P"
    s.close()
    deadline = time.monotonic() + 30
    while len(server.records) == n_before:
        assert time.monotonic() < deadline, "the cancelled generation never ended"
        time.sleep(0.05)
    rec = server.records[-1]
    assert rec.stop_reason == "cancelled" and rec.pieces < 4000 and rec.finished - t0 < 5
    assert oai.completions.create(model="cycle", prompt="hi", max_tokens=3, temperature=0).choices[0].text == "PAB"


def test_a_failing_generation_is_a_500_and_the_server_goes_on(served, oll, oai, monkeypatch):
    server, _ = served

    def boom(*args, **kwargs):
        raise RuntimeError("llama.cpp fell over")

    monkeypatch.setattr(server.engine, "stream", boom)
    with pytest.raises(ollama.ResponseError) as e:
        oll.generate(model="cycle", prompt="hi")
    assert e.value.status_code == 500 and "fell over" in e.value.error
    with pytest.raises(openai.InternalServerError) as e:
        oai.completions.create(model="cycle", prompt="hi", max_tokens=3)
    assert e.value.body["type"] == "server_error"
    monkeypatch.undo()
    assert oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 2}).response == "PA"


def test_sampling_follows_the_seed(oai):
    def once(seed: int) -> str:
        return oai.completions.create(model="cycle", prompt="hi", max_tokens=30, temperature=1.5, top_p=1.0,
                                      seed=seed, extra_body={"top_k": 0, "min_p": 0.0}).choices[0].text  # fmt: skip

    assert once(7) == once(7)
    assert once(1) != once(2)  # at temperature 1.5 the cycle pair's samples differ by seed


def test_non_streaming_client_that_gives_up_cancels(served, oll):
    server, base = served
    n_before = len(server.records)
    t0 = time.perf_counter()  # the clock of the server's records
    with pytest.raises(httpx.ReadTimeout):  # 4000 tokens take tens of seconds here
        httpx.post(base + "/api/generate", json=greedy_body(4000), timeout=0.5)
    deadline = time.monotonic() + 30
    while len(server.records) == n_before:
        assert time.monotonic() < deadline, "the abandoned generation never ended"
        time.sleep(0.05)
    rec = server.records[-1]
    assert rec.stop_reason == "cancelled" and rec.pieces < 4000
    assert rec.finished - t0 < 5  # stopped soon after the client left, not at the end of the generation
    assert oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 4}).response == "PABC"


def test_timeouts(served, oll):
    server, base = served
    cfg = server.config
    cfg.generation_timeout = 0.05
    try:
        r = httpx.post(base + "/api/generate", json=greedy_body(4000)).json()
    finally:
        cfg.generation_timeout = None
    assert r["done_reason"] == "length" and r["speculative"]["stop_reason"] == "timeout"
    assert 0 < r["eval_count"] < 4000 and CYCLE.startswith(r["response"])
    cfg.queue_timeout = 0.2
    server.lock.acquire()  # another generation holds the engine
    try:
        with pytest.raises(ollama.ResponseError) as e:
            oll.generate(model="cycle", prompt="hi", options={"num_predict": 2})
        assert e.value.status_code == 503 and "busy" in e.value.error
    finally:
        server.lock.release()
        cfg.queue_timeout = 300.0
    assert oll.generate(model="cycle", prompt="hi", options={**GREEDY, "num_predict": 2}).response == "PA"


@contextlib.contextmanager
def serve_process(*args: str):
    """``local-eagle serve ARGS`` in a subprocess: an ollama client, the models it lists once up, and
    (after the block, once SIGINT stopped it) the server's output in a one-item list."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "local_eagle", "serve", *args, "--port", str(port), "--threads", "1",
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output: list[str] = []
    try:
        client = ollama.Client(host=f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while True:
            try:
                models = client.list().models
                break
            except (httpx.ConnectError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
                time.sleep(0.2)
        yield client, models, output
    finally:
        proc.send_signal(signal.SIGINT)
        output.append(proc.communicate(timeout=30)[0])


def test_serve_command_with_a_modelfile(pair):
    d, target, draft = pair
    mf = d / "cyc.Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\nPARAMETER temperature 0\nPARAMETER stop E\nPARAMETER num_ctx 512\n")
    with serve_process("-f", str(mf)) as (client, models, output):
        assert [m.model for m in models] == ["cyc:latest"]
        assert client.ps().models[0].context_length == 512
        assert client.generate(model="cyc", prompt="hi").response == "PABCD"  # the Modelfile's parameters
    assert "serving cyc" in output[0] and "Traceback" not in output[0]
    # issue 46: what it loads, before the seconds of loading, then when it is ready and the name clients send
    assert output[0].index("loading cyc (") < output[0].index("ready in ")
    assert 'clients ask for model "cyc"' in " ".join(output[0].split())
    # issue 46: several requests at once by default, as Ollama's OLLAMA_NUM_PARALLEL (the tiny pair fits 4)
    assert "4 requests at once" in " ".join(output[0].split())


def test_serve_command_without_a_model_serves_the_store(pair, tmp_path, monkeypatch):
    from local_eagle.store import LocalStore

    d, target, draft = pair
    mf = d / "cyc.Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\nPARAMETER temperature 0\nPARAMETER num_predict 5\n")
    LocalStore(tmp_path / "models").create("cyc", mf)
    monkeypatch.setenv("LOCAL_EAGLE_MODELS", str(tmp_path / "models"))
    with serve_process() as (client, models, output):
        assert [m.model for m in models] == ["cyc:latest"]
        assert client.generate(model="cyc", prompt="hi").response == "PABCD"
        assert [m.model for m in client.ps().models] == ["cyc:latest"]
    assert "serving 1 model(s)" in output[0] and "Traceback" not in output[0]


def test_options_follow_the_parameter_table(served, oll, oai):
    """One set of rules with the Modelfile, the CLI and chat's /set: type and range, a 400 naming the range."""
    base = served[1]
    for bad, words in (
        ({"draft_num_predict": 10_000_000}, "options.draft_num_predict must be between 0 and 64"),
        ({"num_thread": 100_000}, "options.num_thread must be between 0 and 512"),
        ({"num_ctx": 10**9}, "options.num_ctx must be between 16 and"),
        ({"num_gpu": -2}, "options.num_gpu must be"),
        ({"repeat_last_n": -5}, "options.repeat_last_n must be"),
        ({"top_k": 1.5}, "options.top_k must be an integer"),
        ({"stop": "x"}, "options.stop must be a list of strings"),
        ({"use_mmap": 1}, "options.use_mmap must be true or false"),
    ):
        t0 = time.perf_counter()
        r = httpx.post(base + "/api/generate", json={"model": "cycle", "prompt": "hi", "options": bad})
        assert r.status_code == 400 and words in r.json()["error"], (bad, r.text)
        assert time.perf_counter() - t0 < 2
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model="cycle", prompt="hi", max_tokens=2, extra_body={"draft_num_predict": 10**7})
    assert e.value.body["message"].startswith("draft_num_predict must be between 0 and 64")
    # what only a reload could change is checked, then left to the server; unknown names are ignored, as by Ollama
    ok = {**GREEDY, "num_predict": 3, "num_thread": 1, "num_ctx": 64, "mirostat": 2, "nonsense": [1]}
    assert oll.generate(model="cycle", prompt="hi", options=ok).response == "PAB"


def _slow_render(monkeypatch, seconds: float, error: Exception | None = None) -> threading.Event:
    """Make prompt rendering take ``seconds`` (a template that runs long), then fail with ``error`` if given."""
    import local_eagle.ollama.prompt as prompt

    started, real = threading.Event(), prompt.render_prompt

    def render_prompt(*args, **kwargs):
        started.set()
        time.sleep(seconds)
        if error is not None:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(prompt, "render_prompt", render_prompt)
    return started


def test_a_slow_template_does_not_stall_the_server(served, monkeypatch):
    base = served[1]
    started = _slow_render(monkeypatch, 3.0)
    chat = {"model": "cycle", "messages": [{"role": "user", "content": "hi"}], "stream": False,
            "options": {**GREEDY, "num_predict": 3}}  # fmt: skip
    result = {}
    t = threading.Thread(target=lambda: result.update(r=httpx.post(base + "/api/chat", json=chat, timeout=30)))
    t.start()
    assert started.wait(10)
    t0 = time.perf_counter()
    assert httpx.get(base + "/api/version").status_code == 200
    assert time.perf_counter() - t0 < 1.0  # answered while the template still ran
    t.join(30)
    assert result["r"].json()["message"]["content"] == "PAB"


def test_a_failing_template_is_a_400_and_keeps_the_connection(served, monkeypatch):
    base = served[1]
    _slow_render(monkeypatch, 0.0, RecursionError("maximum recursion depth exceeded"))
    chat = {"model": "cycle", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    with httpx.Client() as client:
        r = client.post(base + "/api/chat", json=chat)
        assert r.status_code == 400 and "template" in r.json()["error"]
        first = r.extensions["network_stream"].get_extra_info("client_addr")
        r = client.post(base + "/v1/chat/completions", json=chat)
        assert r.status_code == 400 and "template" in r.json()["error"]["message"]
        assert r.extensions["network_stream"].get_extra_info("client_addr") == first  # the same connection


def test_request_size_limit(served):
    server, base = served
    body = {"model": "cycle", "prompt": "x" * 20_000, "options": {"num_predict": 1}}
    server.config.max_request_bytes = 10_000
    try:
        r = httpx.post(base + "/api/generate", json=body)
        assert r.status_code == 413 and "10000 bytes" in r.json()["error"]
        r = httpx.post(base + "/v1/completions", json=body)
        assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(30):
                yield b" " * 1000

        r = httpx.post(base + "/api/chat", content=chunks())
        assert r.status_code == 413 and "limit" in r.json()["error"]
    finally:
        server.config.max_request_bytes = MAX_REQUEST_BYTES
    assert httpx.post(base + "/api/generate", json=greedy_body(2)).json()["response"] == "PA"


def test_a_prompt_that_cannot_fit_is_refused_without_the_slot(served):
    """Tokenizing is done before a job queues for the model, and a prompt over the context is a 400 at once, even
    while another job holds the model; a long word is refused before llama.cpp's tokenizer, quadratic on it, runs."""
    server, base = served
    server.config.queue_timeout = 1.0
    server.lock.acquire()
    try:
        for prompt in ("x" * 5000, "x" * 3_000_000):  # over the context in tokens; in bytes
            t0 = time.perf_counter()
            r = httpx.post(base + "/api/generate", json={"model": "cycle", "prompt": prompt, "raw": True}, timeout=30)
            assert r.status_code == 400 and "context" in r.json()["error"], r.text
            assert time.perf_counter() - t0 < 2
        r = httpx.post(base + "/v1/completions", json={"model": "cycle", "prompt": "x" * 5000})
        assert r.status_code == 400 and "4096" in r.json()["error"]["message"]
    finally:
        server.lock.release()
        server.config.queue_timeout = 300.0


def test_a_client_gone_while_its_prompt_is_made_never_takes_the_slot(served, monkeypatch):
    server, base = served
    n_before = len(server.records)
    _slow_render(monkeypatch, 1.0)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/api/chat", json={"model": "cycle", "messages": [{"role": "user", "content": "hi"}]},
                   timeout=0.3)  # fmt: skip
    time.sleep(1.5)
    assert len(server.records) == n_before  # no job ran for it


@pytest.mark.parametrize(
    "path, field, value",
    [
        ("/v1/chat/completions", "stream_options", "x"),
        ("/v1/completions", "stream_options", [1]),
        ("/v1/chat/completions", "stream_options", {"include_usage": "yes"}),
        ("/v1/chat/completions", "logprobs", 0),
        ("/v1/chat/completions", "n", True),
        ("/v1/chat/completions", "tools", [1]),
        ("/v1/chat/completions", "frequency_penalty", "x"),
        ("/v1/completions", "echo", 0),
        ("/api/generate", "raw", "yes"),
        ("/api/generate", "prompt", 0),
        ("/api/generate", "options", []),
        ("/api/generate", "keep_alive", []),
        ("/api/generate", "think", 1),
        ("/api/chat", "tools", {}),
        ("/api/chat", "messages", [{"role": "user", "content": [{"type": "text", "text": 1}]}]),
        ("/api/show", "verbose", "x"),
    ],
)
def test_a_field_of_the_wrong_json_type_is_a_400(served, path, field, value):
    hi = [{"role": "user", "content": "hi"}]
    body = {"model": "cycle", "stream": True, "messages": hi, "prompt": "hi", "max_tokens": 1,
            "options": {"num_predict": 1}}  # fmt: skip
    r = httpx.post(served[1] + path, json={**body, field: value})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"] if path.startswith("/v1") else r.json()["error"]
    assert isinstance(message, str) and ("wrong type" in message or "must be" in message), message


@pytest.mark.parametrize(
    "args, words",
    [
        (["--port", "70000"], "--port must be between 1 and 65535"),
        (["--log-level", "bogus"], "--log-level must be one of"),
        (["--draft-max", "-1"], "--draft-max: draft_num_predict must be between 0 and 64"),
        (["--threads", "100000"], "--threads: num_thread must be between 0 and 512"),
        (["--ctx", "5"], "--ctx: num_ctx must be between 16"),
        (["--host", "no.such.host.invalid"], "--host"),
        (["--parallel", "0"], "--parallel"),
        (["--parallel", "2", "--tree", "8"], "not both"),
    ],
)
def test_serve_refuses_bad_settings_before_loading(pair, monkeypatch, args, words):
    import local_eagle.serve.server as server_module

    def no_engine(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(server_module, "Engine", no_engine)
    _, target, draft = pair
    r = CliRunner().invoke(app, ["serve", "-m", str(target), "--draft", str(draft), *args])
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output


def test_serve_refuses_a_port_in_use(pair):
    _, target, _ = pair
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = CliRunner().invoke(app, ["serve", "-m", str(target), "--port", str(s.getsockname()[1])])
    assert r.exit_code == 2 and "cannot listen" in r.output


def test_ctrl_c_while_a_gone_client_s_job_runs(pair):
    """Ctrl-C once uvicorn is done but a worker thread is still inside llama.cpp (a long prefill, a tokenization):
    the model must not be freed under it (that segfaulted), and the process must exit cleanly."""
    _, target, draft = pair
    proc, base = serve_on_free_port(["-m", str(target), "--draft", str(draft), "--threads", "1", "--ctx", "16384",
                                     "--log-level", "warning"])  # fmt: skip
    try:
        def gone(prompt: str) -> None:  # a client that gives up at once
            with contextlib.suppress(httpx.TimeoutException):
                httpx.post(base + "/api/generate", json={"model": "target", "prompt": prompt, "raw": True}, timeout=0.3)

        threads = [threading.Thread(target=gone, args=(p,)) for p in ("x" * 8000, "y" * 80_000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=120)[0]
    assert proc.returncode in (0, 130), (proc.returncode, output)
    for crash in ("Segmentation fault", "Aborted", "terminate called", "Traceback"):
        assert crash not in output, output

"""``serve`` without a model: the store through the official ``ollama`` client (create, list, show, copy,
delete, ps, chat), models loaded on first use, swapped under a small memory budget, and keep_alive."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from local_eagle.ollama.store import OllamaStore
from local_eagle.serve.harness import free_port, start_server
from local_eagle.serve.store_app import StoreConfig, StoreFront
from local_eagle.settings import resolve
from local_eagle.store import LocalStore
from local_eagle.testing.ollama_store import write_model

GREEDY = {"temperature": 0, "num_predict": 5}
HI = [{"role": "user", "content": "hi"}]


def start(config: StoreConfig):
    front = StoreFront(config)
    uv, thread, base = start_server(front)  # as serve runs it
    return front, uv, thread, ollama.Client(host=base)


@pytest.fixture
def served(store: LocalStore, pair):
    size = pair[1].stat().st_size + pair[2].stat().st_size
    config = StoreConfig(local=store, defaults=resolve(flags={"num_ctx": 512, "num_thread": 1}), budget=int(size * 1.5))
    front, uv, thread, client = start(config)
    try:
        yield front, client
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        front.close()


def test_the_ollama_client_on_the_store(served, pair) -> None:
    front, client = served
    assert [m.model for m in client.list().models] == ["cyc:latest"]
    assert client.ps().models == []
    assert client.chat(model="cyc", messages=HI, options=GREEDY).message.content == "PABCD"
    ps = client.ps().models
    assert [m.model for m in ps] == ["cyc:latest"] and ps[0].size > 0 and ps[0].context_length == 512
    assert ps[0].name == "cyc:latest", "ps names a model as list does"
    shown = client.show("cyc")
    assert shown.template == "{{ .Prompt }}" and shown.modelinfo["local_eagle.eagle_version"] == "3.1"
    assert f"DRAFT {pair[2]}" in shown.modelfile

    assert client.create(model="brief", from_="cyc", system="be brief", parameters={"num_predict": 3}).status == (
        "success"
    )
    assert "SYSTEM be brief" in client.show("brief").modelfile
    assert client.chat(model="brief", messages=HI, options={"temperature": 0}).message.content == "PAB"
    client.copy("brief", "me/brief:v2")
    assert sorted(m.model for m in client.list().models) == ["brief:latest", "cyc:latest", "me/brief:v2"]
    client.delete("brief")
    assert sorted(m.model for m in client.list().models) == ["cyc:latest", "me/brief:v2"]
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="brief", messages=HI)
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        client.delete("brief")
    assert e.value.status_code == 404


def test_the_openai_client_lists_and_retrieves_store_models(served) -> None:
    front, client = served
    client.copy("cyc", "me/cyc:v2")
    oai = openai.OpenAI(base_url=str(client._client.base_url).rstrip("/") + "/v1", api_key="local", max_retries=0)
    assert sorted(m.id for m in oai.models.list()) == ["cyc:latest", "me/cyc:v2"]
    assert oai.models.retrieve("cyc").id == "cyc:latest"
    assert oai.models.retrieve("me/cyc:v2").id == "me/cyc:v2"
    with pytest.raises(openai.NotFoundError, match="not found"):
        oai.models.retrieve("nope")


def test_ollama_store_models_are_listed_with_ollamas_size_and_digest(store, pair, tmp_path: Path) -> None:
    """``Manifest.Size`` (every layer and the config) and ``Digest`` (the manifest file's sha256), as Ollama's
    /api/tags lists them; a model of both stores is listed once, from ours."""
    root = tmp_path / "ollama"
    manifest = write_model(root, "tiny", pair[1], template="{{ .Prompt }}")
    write_model(root, "cyc", pair[1])
    raw = json.loads(manifest.read_text())
    defaults = resolve(flags={"num_ctx": 512, "num_thread": 1})
    front, uv, thread, client = start(StoreConfig(local=store, ollama=OllamaStore(root), defaults=defaults))
    try:
        listed = {m.model: m for m in client.list().models}
        assert sorted(listed) == ["cyc:latest", "tiny:latest"]
        tiny = listed["tiny:latest"]
        assert tiny.size == sum(x["size"] for x in raw["layers"]) + raw["config"]["size"] > pair[1].stat().st_size
        assert tiny.digest == hashlib.sha256(manifest.read_bytes()).hexdigest()
        assert listed["cyc:latest"].digest == store.find("cyc").digest
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        front.close()


def test_create_streams_its_progress_and_its_error(served, pair, tmp_path: Path) -> None:
    """Ollama's create streams what it does as it does it; here, hashing the GGUFs it records."""
    front, client = served
    _, target, draft = pair
    lines = list(client.create(model="again", from_=str(target), stream=True))
    statuses = [x.status for x in lines]
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    hashing = [x for x in lines if x.status == f"hashing model {target.name}"]
    assert hashing and hashing[-1].completed == hashing[-1].total == target.stat().st_size
    assert statuses[-3:] == [f"using layer sha256:{digest}", "writing manifest", "success"]
    assert client.chat(model="again", messages=HI, options=GREEDY).message.content  # the target alone
    bad = tmp_path / "bad-drafter"
    bad.mkdir()
    body = {"model": "broken", "from": str(target), "draft": str(bad)}  # our extension: the client has no draft
    with httpx.stream("POST", f"{client._client.base_url}".rstrip("/") + "/api/create", json=body) as r:
        last = json.loads(list(r.iter_lines())[-1])
    assert r.status_code == 200 and "bad-drafter" in last["error"]
    assert "broken:latest" not in [m.model for m in client.list().models]


def test_api_create_takes_a_modelfile_from_a_store_name(served) -> None:
    """Issue 46: a Modelfile text ``FROM cyc`` (a name of local-eagle's store) is resolved as ``from`` is."""
    front, client = served
    body = {"model": "viafile", "modelfile": "FROM cyc\nPARAMETER num_predict 3\n", "stream": False}
    r = httpx.post(f"{client._client.base_url}".rstrip("/") + "/api/create", json=body)
    assert r.status_code == 200 and r.json() == {"status": "success"}, r.text
    assert client.chat(model="viafile", messages=HI, options={"temperature": 0}).message.content == "PAB"


def test_two_models_swap_under_a_small_budget(served) -> None:
    front, client = served
    client.copy("cyc", "other")
    assert client.chat(model="cyc", messages=HI, options=GREEDY).message.content == "PABCD"
    assert [m.model for m in client.ps().models] == ["cyc:latest"]
    assert client.chat(model="other", messages=HI, options=GREEDY).message.content == "PABCD"
    assert [m.model for m in client.ps().models] == ["other:latest"], "the least recently used went to make room"


def test_keep_alive(served) -> None:
    front, client = served
    client.chat(model="cyc", messages=HI, options=GREEDY, keep_alive=0)
    assert client.ps().models == [], "keep_alive 0 unloads at once"
    client.chat(model="cyc", messages=HI, options=GREEDY, keep_alive="600ms")
    assert [m.model for m in client.ps().models] == ["cyc:latest"]
    deadline = time.monotonic() + 10
    while client.ps().models:
        assert time.monotonic() < deadline, "keep_alive did not expire"
        time.sleep(0.1)
    client.chat(model="cyc", messages=HI, options=GREEDY, keep_alive=-1)
    assert client.ps().models[0].expires_at.year > 2100


def test_durations_include_the_load_and_size_vram_is_the_gpus(served) -> None:
    """Issue 46: after an unload, the next reply's ``load_duration`` (and ``total_duration``) cover the load it
    caused, as Ollama's do; once loaded, they do not. ``size_vram`` is the bytes on a GPU: 0 on a CPU build."""
    from local_eagle.llamacpp.backends import gpu_offload_supported

    front, client = served
    assert client.generate(model="cyc", keep_alive=0).done_reason == "unload"
    t0 = time.perf_counter()
    cold = client.chat(model="cyc", messages=HI, options=GREEDY)
    t1 = time.perf_counter()
    warm = client.chat(model="cyc", messages=HI, options=GREEDY)
    t2 = time.perf_counter()
    load = (t1 - t0) - (t2 - t1)  # the wall time the load added
    assert load > 0 and cold.load_duration / 1e9 > 0.5 * load, (cold.load_duration, load)
    assert cold.total_duration >= cold.load_duration and cold.total_duration / 1e9 > 0.5 * (t1 - t0)
    assert warm.load_duration < cold.load_duration / 10
    (p,) = client.ps().models
    assert p.size_vram == (p.size if gpu_offload_supported() else 0)


def test_keep_alive_zero_without_a_prompt_unloads(served) -> None:
    """Ollama's ``ollama stop``: no prompt and keep_alive 0 unload the model, answered ``done_reason: "unload"``,
    and a model that is not loaded is not loaded for it."""
    front, client = served
    assert client.generate(model="cyc", keep_alive=0).done_reason == "unload"
    assert client.ps().models == [] and front.registry.loaded == {}
    assert client.generate(model="cyc").done_reason == "load"
    assert [m.model for m in client.ps().models] == ["cyc:latest"]
    r = client.generate(model="cyc:latest", prompt="", keep_alive="0s")
    assert (r.done, r.done_reason, r.response) == (True, "unload", "")
    assert client.ps().models == []
    client.chat(model="cyc", messages=[])
    c = client.chat(model="cyc", messages=[], keep_alive=0)
    assert (c.done_reason, c.message.role, c.message.content) == ("unload", "assistant", "")
    assert client.ps().models == []
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="nope", keep_alive=0)
    assert e.value.status_code == 404 and "not found" in e.value.error


def test_answers_equal_a_lone_servers(served) -> None:
    front, client = served
    client.copy("cyc", "twin")
    results: dict[str, str] = {}

    def ask(name: str) -> None:
        results[name] = client.generate(model=name, prompt="hi", options={"temperature": 0, "num_predict": 40}).response

    front.registry.budget = None
    threads = [threading.Thread(target=ask, args=(n,)) for n in ("cyc", "twin")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results["cyc"] == results["twin"] == "PABCDEFGHIJKLMNOPABCDEFGHIJKLMNOPABCDEFG"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, 300.0), (0, 0.0), ("0", 0.0), (-1, None), ("-1m", None), ("5m", 300.0), ("1h30m", 5400.0),
     ("600ms", 0.6), (2.5, 2.5), ("10", 10.0)],
)  # fmt: skip
def test_keep_alive_durations(value, seconds) -> None:
    from local_eagle.serve.registry import keep_alive_seconds

    assert keep_alive_seconds(value) == seconds


@pytest.mark.parametrize("value", ["5 minutes", "m", True, "1x"])
def test_bad_keep_alive(value) -> None:
    from local_eagle.errors import LocalEagleError
    from local_eagle.serve.registry import keep_alive_seconds

    with pytest.raises(LocalEagleError):
        keep_alive_seconds(value)


def _store_config(store: LocalStore, monkeypatch, **flags):
    """The store server's settings as ``local-eagle serve`` (no -m) makes them from its flags."""
    from local_eagle.cli.options import draft_mode
    from local_eagle.cli.serve_store import store_config
    from local_eagle.serve.access import Access

    monkeypatch.setenv("LOCAL_EAGLE_MODELS", str(store.root))
    mode = draft_mode(flags.pop("fixed", False), flags.pop("tree", "auto"))
    parameters = {"num_ctx": 512, "num_gpu": 0, "num_thread": 1, **flags.pop("parameters", {})}
    given = {"ollama": False, "flags": parameters, "mode": mode, "timeout": 0, "queue_timeout": 300,
             "max_memory": None, "access": Access(), **flags}  # fmt: skip
    return store_config("127.0.0.1", free_port(), "warning", **given)


def _speculative(config, model: str = "cyc") -> tuple[dict, int, bool]:
    """A greedy answer's served statistics, with the draft bound and the policy the model was loaded with."""
    front, uv, thread, client = start(config)
    try:
        body = {"model": model, "prompt": "hi", "stream": False, "options": {"temperature": 0, "num_predict": 24}}
        r = httpx.post(f"{client._client.base_url}/api/generate", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["response"] == ("P" + "ABCDEFGHIJKLMNOP" * 2)[:24]  # the target alone's answer
        (loaded,) = front.registry.snapshot()
        return r.json()["speculative"], loaded.server.config.draft_max, loaded.server.engine.options.adaptive
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        front.close()


def test_the_store_server_drafts_with_the_cost_aware_policy_as_serve_m_does(store, monkeypatch) -> None:
    """It reported a fixed chain of 4 every round (no ``adaptive`` in its engine settings), where ``serve -m``
    runs the policy up to 8: both now take their settings from one resolver."""
    from local_eagle.runtime.policy.lengths import AUTO_DRAFT_MAX

    config = _store_config(store, monkeypatch)
    d = config.defaults
    assert d.mode.adaptive and "draft_num_predict" not in d.parameters and d.mode.shape is None
    st, bound, adaptive = _speculative(config)
    assert st["adaptive"] and st["policy"] is not None and adaptive and bound == AUTO_DRAFT_MAX


def test_the_store_server_takes_draft_max_and_fixed_and_the_modelfiles_bound(store, pair, monkeypatch,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    config = _store_config(store, monkeypatch, parameters={"draft_num_predict": 5}, fixed=True, tree="off")
    assert not config.defaults.mode.adaptive and config.defaults.load().tree_nodes == 0
    st, bound, adaptive = _speculative(config)
    assert not st["adaptive"] and not adaptive and bound == 5
    assert len(st["draft_lengths"]) == 6 and st["draft_lengths"][5] >= st["target_calls"] - 1  # 5 a round but
    # the last, which the answer's length cuts short
    _, target, draft = pair
    mf = tmp_path / "Modelfile3"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\nPARAMETER draft_num_predict 3\nPARAMETER num_thread 1\n"
                  "TEMPLATE {{ .Prompt }}\n")  # fmt: skip
    store.create("three", mf)
    st, bound, adaptive = _speculative(_store_config(store, monkeypatch), "three")
    assert st["adaptive"] and adaptive and bound == 3  # no flag: the Modelfile's draft_num_predict
    config = _store_config(store, monkeypatch, parameters={"draft_num_predict": 5})
    st, bound, adaptive = _speculative(config, "three")
    assert bound == 3  # serve's flags are every model's defaults: a Modelfile's own parameter wins, as in Ollama


def test_serve_without_a_model_passes_its_drafting_flags_on(monkeypatch) -> None:
    """``serve --draft-max 8`` without ``-m`` was accepted and silently ignored."""
    from typer.testing import CliRunner

    from local_eagle.cli import serve_store
    from local_eagle.cli.app import app

    seen: dict = {}
    monkeypatch.setattr(serve_store, "serve_store", lambda host, port, level, **flags: seen.update(flags))
    r = CliRunner().invoke(app, ["serve", "--draft-max", "8", "--fixed", "--tree", "off"])
    assert r.exit_code == 0, r.output
    assert seen["flags"] == {"draft_num_predict": 8} and seen["mode"].fixed and seen["mode"].tree.nodes == 0


def test_the_store_server_serves_parallel_requests_per_model(store, monkeypatch) -> None:
    """``serve --parallel 2`` without ``-m``: each loaded model's engine holds two sequences, its slot admits two
    requests at once, and the answers are the target alone's."""
    config = _store_config(store, monkeypatch, parallel=2)
    assert config.defaults.load().parallel == 2 and config.defaults.load().tree_nodes == 0
    front, uv, thread, client = start(config)
    try:
        body = {"model": "cyc", "prompt": "hi", "stream": False, "options": {"temperature": 0, "num_predict": 24}}
        base = f"{client._client.base_url}/api/generate"
        out: list = [None, None]

        def go(i: int) -> None:
            out[i] = httpx.post(base, json=body, timeout=120)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert [r.json()["response"] for r in out] == [("P" + "ABCDEFGHIJKLMNOP" * 2)[:24]] * 2
        (loaded,) = front.registry.snapshot()
        assert loaded.server.parallel == 2 and loaded.server.engine.options.parallel == 2
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        front.close()

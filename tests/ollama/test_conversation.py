"""Conversations from JSON and the prompt a Modelfile renders for them (``modelfile render``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.ollama.conversation import parse_messages, read_messages, render_conversation
from local_eagle.ollama.modelfile import parse_file

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = Path(__file__).parents[1] / "data" / "templates"

LLAMA3_HEAD = "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>"


def modelfile_with(tmp_path: Path, template: Path, system: str | None = None, messages: str = "") -> Path:
    body = f'FROM ./t.gguf\nTEMPLATE """{template.read_text()}"""\n'
    if system:
        body += f'SYSTEM """{system}"""\n'
    mf = tmp_path / "Modelfile"
    mf.write_text(body + messages)
    return mf


def test_llama31_modelfile_multi_turn() -> None:
    m = parse_file(REPO / "modelfiles" / "llama3.1-8b-instruct-eagle31.Modelfile")
    conv = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    want = (
        LLAMA3_HEAD.format("user", "Hi")
        + LLAMA3_HEAD.format("assistant", "Hello!")
        + LLAMA3_HEAD.format("user", "2+2?")
        + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert render_conversation(m, conv) == want


def test_system_option_goes_first_and_replaces_the_modelfile_system(tmp_path: Path) -> None:
    m = parse_file(modelfile_with(tmp_path, TEMPLATES / "llama3-instruct.gotmpl", system="Be brief."))
    user = [{"role": "user", "content": "Hi"}]
    tail = LLAMA3_HEAD.format("user", "Hi") + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert render_conversation(m, user) == LLAMA3_HEAD.format("system", "Be brief.") + tail
    assert render_conversation(m, user, system="Pirate.") == LLAMA3_HEAD.format("system", "Pirate.") + tail
    # a conversation that brings its own system message keeps it, as Ollama's chat handler does
    own = [{"role": "system", "content": "Own."}, *user]
    assert render_conversation(m, own) == LLAMA3_HEAD.format("system", "Own.") + tail


def test_system_only_conversation(tmp_path: Path) -> None:
    m = parse_file(modelfile_with(tmp_path, TEMPLATES / "chatml.gotmpl"))
    got = render_conversation(m, [{"role": "system", "content": "You are a bot."}])
    assert got == "<|im_start|>system\nYou are a bot.<|im_end|>\n<|im_start|>assistant\n"


def test_modelfile_message_history_comes_before_the_conversation(tmp_path: Path) -> None:
    mf = modelfile_with(tmp_path, TEMPLATES / "chatml.gotmpl", messages="MESSAGE user Ping\nMESSAGE assistant Pong\n")
    got = render_conversation(parse_file(mf), [{"role": "user", "content": "Again"}])
    assert got == (
        "<|im_start|>user\nPing<|im_end|>\n<|im_start|>assistant\nPong<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    )


# Ollama's llama3.1 template, shortened: a last assistant turn stays open (no <|eot_id|>)
LLAMA31_CONTINUE = (
    "{{- range $i, $_ := .Messages }}{{- $last := eq (len (slice $.Messages $i)) 1 }}"
    "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}"
    '{{ if not $last }}<|eot_id|>{{ else if ne .Role "assistant" }}'
    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{{ end }}{{- end }}"
)


def test_trailing_assistant_message_is_continued(tmp_path: Path) -> None:
    tmpl = tmp_path / "t.gotmpl"
    tmpl.write_text(LLAMA31_CONTINUE)
    m = parse_file(modelfile_with(tmp_path, tmpl))
    conv = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}]
    assert render_conversation(m, conv) == LLAMA3_HEAD.format("user", "Count") + (
        "<|start_header_id|>assistant<|end_header_id|>\n\n1, 2,"
    )
    asked = render_conversation(m, conv[:1])
    assert asked == LLAMA3_HEAD.format("user", "Count") + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def test_gemma3_template_closes_a_trailing_assistant_turn(tmp_path: Path) -> None:
    m = parse_file(modelfile_with(tmp_path, TEMPLATES / "gemma3-instruct.gotmpl"))
    conv = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}]
    assert render_conversation(m, conv) == (
        "<start_of_turn>user\nCount<end_of_turn>\n<start_of_turn>model\n1, 2,<end_of_turn>\n<start_of_turn>model\n\n"
    )


def test_raw_is_the_last_content_untouched(tmp_path: Path) -> None:
    m = parse_file(modelfile_with(tmp_path, TEMPLATES / "chatml.gotmpl", system="S"))
    assert render_conversation(m, [{"role": "user", "content": "<b>as is</b>"}], raw=True) == "<b>as is</b>"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"role": "user"}, "expected a JSON list"),
        (["hi"], r"messages\[0\]: expected an object"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\]\.role: expected one of system, user, assistant, tool"),
        ([{"role": "user", "content": 3}], r"messages\[0\]\.content: expected a string"),
    ],
)
def test_bad_conversations_name_the_item(data, message) -> None:
    with pytest.raises(LocalEagleError, match=message):
        parse_messages(data)


def test_read_messages_errors_name_the_file(tmp_path: Path, monkeypatch) -> None:
    bad = tmp_path / "conv.json"
    bad.write_text('[{"role": "user",]')
    with pytest.raises(LocalEagleError, match=r"conv\.json:1:\d+: invalid JSON"):
        read_messages(str(bad))
    with pytest.raises(LocalEagleError, match="nope.json: conversation JSON file not found"):
        read_messages(str(tmp_path / "nope.json"))
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(LocalEagleError, match="not UTF-8"):
        read_messages(str(bad))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps({"messages": []}).encode())))
    assert read_messages("-") == []


def test_template_errors_name_the_modelfile_and_line(tmp_path: Path) -> None:
    mf = tmp_path / "Modelfile"
    mf.write_text('FROM ./t.gguf\nTEMPLATE """{{ range .Messages }}\n{{ .Content }"""\n')
    with pytest.raises(LocalEagleError, match=r"Modelfile:3: TEMPLATE: unrecognized character"):
        parse_file(mf)  # a parse error stops the Modelfile itself
    mf.write_text('FROM ./t.gguf\nTEMPLATE """{{ range .Messages }}\n{{ index .Content 99 }}{{ end }}"""\n')
    with pytest.raises(LocalEagleError, match=r"Modelfile:3: TEMPLATE: executing template: .*index out of range") as e:
        render_conversation(parse_file(mf), [{"role": "user", "content": "x"}])
    assert "\n" not in str(e.value)

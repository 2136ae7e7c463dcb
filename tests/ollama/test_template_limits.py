"""The template engine is bounded: a template from a Modelfile or a request cannot loop for minutes,
grow to gigabytes, or overflow Python's stack; each limit is a one-line :class:`GoTemplateError`.

The cases come from a red-team pass on the server (``{{ range 1000000000 }}x{{ end }}``, templates
nested 500 deep). Sizes are chosen so that without the limits each test still ends, but fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.ollama.modelfile import ModelfileError, parse_file
from local_eagle.ollama.prompt import render_prompt
from local_eagle.ollama.template import GoJSON, GoTemplateError, parse, render_ollama
from local_eagle.ollama.template.limits import MAX_DEPTH, MAX_OUTPUT, MAX_SOURCE, MAX_STEPS, Budget

TEMPLATES = Path(__file__).parents[1] / "data" / "templates"


def fails(src: str, data: Any = None, budget: Budget | None = None) -> GoTemplateError:
    """The error rendering ``src`` raises, checked to be the one-line error callers turn into a 400."""
    with pytest.raises(GoTemplateError) as e:
        parse(src).execute(data, budget)
    assert isinstance(e.value, LocalEagleError)
    assert "\n" not in str(e.value)
    return e.value


# --------------------------------------------------------------------------------------------
# steps


@pytest.mark.parametrize("body", ["x", ""])
def test_a_long_range_stops_at_the_step_limit(body: str) -> None:
    e = fails(f"ok\n  {{{{ range {3 * MAX_STEPS} }}}}{body}{{{{ end }}}}")
    assert f"step limit exceeded: more than {MAX_STEPS} steps" in str(e)
    assert (e.line, e.col) == (2, 3)
    assert str(e).startswith("line 2, column 3: executing template: ")


def test_the_step_limit_counts_arguments_and_nested_loops() -> None:
    assert "step limit" in str(
        fails("{{ range 10 }}{{ range 10 }}{{ print 1 2 3 }}{{ end }}{{ end }}", None, Budget(300))
    )
    assert parse("{{ range 10 }}{{ print 1 2 3 }}{{ end }}").execute(None, Budget(60)) == "1 2 3" * 10


def test_string_work_in_builtins_costs_steps() -> None:
    """``len`` of a megabyte is one argument but a megabyte of work: it must not make a loop cheap."""
    e = fails("{{ range 1000 }}{{ len $.S }}{{ end }}", {"S": "é" * 1_000_000}, Budget(100_000))
    assert "step limit" in str(e)


def test_the_legacy_path_shares_one_budget_between_turns() -> None:
    """Ollama's legacy path runs the template once per turn: the limits are for the whole render."""
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}] * 3
    per_turn = MAX_STEPS // 2
    with pytest.raises(GoTemplateError, match="step limit"):
        render_ollama(f"{{{{ range {per_turn} }}}}{{{{ end }}}}{{{{ .Prompt }}}}{{{{ .Response }}}}", chat)


# --------------------------------------------------------------------------------------------
# output


def test_output_is_limited() -> None:
    e = fails("{{ range 9 }}{{ $.S }}{{ end }}", {"S": "x" * (MAX_OUTPUT // 8)})
    assert f"output limit exceeded: more than {MAX_OUTPUT} characters" in str(e)
    assert (e.line, e.col) == (1, 14)


def test_strings_built_by_functions_count_as_output() -> None:
    """Doubling a variable writes nothing until the end, but builds 2^n characters."""
    doubling = '{{ $x := "ab" }}{{ range 20 }}{{ $x = print $x $x }}{{ end }}{{ len $x }}'
    e = fails(doubling, None, Budget(max_output=10_000))
    assert "output limit exceeded" in str(e)
    assert (e.line, e.col) == (1, 31)


@pytest.mark.parametrize(
    "src",
    [
        '{{ printf "%10000000d" 1 }}',
        '{{ printf "%.10000000f" 1.5 }}',
        '{{ $x := printf "%5000s" "a" }}{{ print ' + "$x " * 4 + "}}",
        '{{ $x := printf "%5000s" "a" }}{{ println ' + "$x " * 4 + "}}",
        '{{ $x := printf "%5000s" "a" }}{{ printf "%s%s%s%s" ' + "$x " * 4 + "}}",
        "{{ json .L }}",
    ],
)
def test_print_functions_stop_before_building_past_the_limit(src: str) -> None:
    assert "output limit exceeded" in str(fails(src, {"L": ["x" * 100] * 1000}, Budget(max_output=12_000)))


# --------------------------------------------------------------------------------------------
# depth


def nested(kind: str, levels: int) -> str:
    """A template that renders ``x`` from ``levels`` levels deep, by one kind of nesting."""
    if kind == "else if":
        return "{{ if false }}" + "{{ else if false }}" * (levels - 1) + "{{ else }}x{{ end }}"
    if kind == "parentheses":
        return "{{ print " + "(print " * levels + '"x"' + ")" * levels + " }}"
    if kind == "block":
        return "".join(f'{{{{ block "b{i}" . }}}}' for i in range(levels)) + "x" + "{{ end }}" * levels
    opening = {"if": "{{ if true }}", "with": "{{ with 1 }}", "range": "{{ range 1 }}"}[kind]
    return opening * levels + "x" + "{{ end }}" * levels


KINDS = ["if", "with", "range", "else if", "parentheses", "block"]


@pytest.mark.parametrize("kind", KINDS)
def test_templates_nested_500_deep_fail_to_parse_with_one_line(kind: str) -> None:
    with pytest.raises(GoTemplateError) as e:
        parse(nested(kind, 500))
    assert f"depth limit exceeded: more than {MAX_DEPTH} nested" in str(e.value)
    assert e.value.line == 1 and e.value.col is not None and "\n" not in str(e.value)


def _at_stack_depth(frames: int, fn: Callable[[], str]) -> str:
    """Run ``fn`` with ``frames`` more frames on the stack, as under a web server's."""
    return _at_stack_depth(frames - 1, fn) if frames > 0 else fn()


@pytest.mark.parametrize("kind", KINDS)
def test_the_deepest_template_allowed_runs_under_a_server_sized_stack(kind: str) -> None:
    """What parses also executes (the two depths count alike), with room left on Python's stack."""
    with pytest.raises(GoTemplateError, match="depth limit"):
        parse(nested(kind, MAX_DEPTH + 1))
    render = lambda: render_ollama(nested(kind, MAX_DEPTH), [{"role": "user", "content": "hi"}])  # noqa: E731
    assert _at_stack_depth(200, render) == "x"


def test_recursive_templates_stop_at_the_depth_limit() -> None:
    e = fails('{{ define "a" }}x{{ template "a" . }}{{ end }}\n{{ template "a" . }}')
    assert "executing template: depth limit exceeded" in str(e)
    assert (e.line, e.col) == (1, 18)


def test_template_calls_and_blocks_add_up() -> None:
    """Each body nests 60 deep, but calling one from 60 deep makes 120 levels."""
    inner = nested("if", 60)
    e = fails(f'{{{{ define "t" }}}}{inner}{{{{ end }}}}' + inner.replace("x", '{{ template "t" }}'))
    assert "depth limit exceeded" in str(e)


def test_deeply_nested_values_print_with_a_one_line_error() -> None:
    """Request data (tool arguments) can nest deeper than Python's stack allows printing it."""
    deep = json.loads("[" * 900 + "]" * 900)
    for src in ("{{ .V }}", "{{ json .V }}", "{{ print .V }}", "{{ .G }}"):
        assert "a value nested more than" in str(fails(src, {"V": deep, "G": GoJSON(deep)}))


# --------------------------------------------------------------------------------------------
# callers, and values Python would refuse


def test_a_too_long_template_is_refused() -> None:
    with pytest.raises(GoTemplateError, match="size limit exceeded"):
        parse("x" * (MAX_SOURCE + 1))


def test_limits_reach_callers_as_their_errors(tmp_path: Path) -> None:
    """The Modelfile reader and the prompt builder (the server's 400) keep catching what they caught."""
    mf = tmp_path / "Modelfile"
    mf.write_text(f'FROM ./t.gguf\nTEMPLATE """{nested("if", 500)}"""\n')
    with pytest.raises(ModelfileError, match=r":2: TEMPLATE: depth limit exceeded"):
        parse_file(mf)
    with pytest.raises(LocalEagleError, match="step limit exceeded"):
        render_prompt([{"role": "user", "content": "hi"}], template=f"{{{{ range {2 * MAX_STEPS} }}}}{{{{ end }}}}")


@pytest.mark.parametrize(
    ("src", "data", "needle"),
    [
        ("{{ .V }}", {"V": GoJSON(float("nan"))}, "json: unsupported value: NaN"),
        ("{{ index .M .L }}", {"M": {"a": 1}, "L": [1]}, "error calling index"),
        # Go's parse.newNumber refuses an integer constant that does not fit a uint64, and one that does
        # not even fit a float64 as no number at all
        ('{{ printf "%f" ' + "9" * 30 + " }}", None, "integer overflow"),
        ('{{ printf "%f" ' + "9" * 400 + " }}", None, "illegal number syntax"),
    ],
)
def test_values_python_refuses_are_template_errors(src: str, data: Any, needle: str) -> None:
    assert needle in str(fails(src, data))


def test_printf_c_of_an_invalid_rune_prints_the_replacement_character_like_go() -> None:
    assert parse('{{ printf "%c|%c|%c" 99999999 -1 55296 }}').execute(None) == "\ufffd|\ufffd|\ufffd"


@pytest.mark.parametrize("name", sorted(p.name for p in TEMPLATES.glob("*.gotmpl")))
def test_real_templates_render_a_long_chat_within_the_limits(name: str) -> None:
    chat = [{"role": "system", "content": "s"}]
    for i in range(2000):
        chat += [{"role": "user", "content": f"q{i} " * 50}, {"role": "assistant", "content": f"a{i} " * 50}]
    assert len(render_ollama((TEMPLATES / name).read_text(), chat)) > 2000 * 100

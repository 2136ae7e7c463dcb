"""Cases from Go's and Ollama's own test tables, with the expected strings those tables give.

Sources: Go's ``text/template/exec_test.go`` (``execTests``: printf, indexing, slicing, range),
``text/template/parse/parse.go`` (``(*Tree).add``: a second non-empty definition is an error),
``fmt/fmt_test.go`` (``fmtTests``: flags, width, precision), and Ollama's
``template/template_test.go`` (``TestDateFunctions``, ``TestTemplateArgumentsJSON``/``Range``,
``TestTemplatePropertiesJSON``/``Range``, ``TestParseError``) and ``api/types_typescript_test.go``
(``TestToolParameterToTypeScriptType``). Where a case needs Go values Python has no twin for
(``map[string]int``, ``iter.Seq``), the nearest Ollama value is used and the comment says so.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from typing import Any

import pytest

from local_eagle.ollama.template import GoTemplateError, go_sprintf, parse, parse_ollama, render_ollama
from local_eagle.ollama.template import functions as template_functions

GO_DATA = {"SI": [3, 4, 5], "S": "xyz", "MSI": {"one": 1, "two": 2, "three": 3}, "Empty3": [7, 8]}
GO_DATA |= {"SMSI": [{"one": 1, "two": 2}, {"eleven": 11, "twelve": 12}]}


def run(src: str, data: Any = None) -> str:
    return parse(src).execute(data)


# --------------------------------------------------------------------------------------------
# Go: exec_test.go


@pytest.mark.parametrize(
    ("src", "want"),
    [
        ('{{printf "%04x" 127}}', "007f"),  # "printf int"
        ("{{printf `%T` 0xef}}", "int"),  # "bug12xe"
        ("{{printf `%T` 1.0}}", "float64"),  # "ideal float"
        ("{{index .SI 0}}", "3"),
        ("{{index .SI 1}}", "4"),
        ("{{index .MSI `one`}}", "1"),
        ("{{index .SMSI 1 `eleven`}}", "11"),  # "double index"
        ("{{index .Empty3 0}}", "7"),
        ("{{slice .SI}}", "[3 4 5]"),
        ("{{slice .SI 1}}", "[4 5]"),
        ("{{slice .SI 1 2}}", "[4]"),
        ("{{slice .S}}", "xyz"),
        ("{{slice .S 0 1}}", "x"),
        ("{{slice .S 1}}", "yz"),
        ("{{slice .S 1 2}}", "y"),
        ("{{slice .Empty3 0 1}}", "[7]"),
        ("{{len .SI}}", "3"),
        ("{{len .MSI }}", "3"),
        ("{{len .Empty3}}", "2"),
        # "i, c = range iter.Seq2[int,int]" over fVal2(2) yields (0,1), (1,2): a slice [1 2] does too
        ("{{$i := 0}}{{$c := 0}}{{range $i, $c = .SI2}}{{$i}}{{$c}}{{end}}", "0112"),
        # "i = range iter.Seq[int]": with one assigned variable it takes the element
        ("{{$i := 0}}{{range $i = .SI01}}{{$i}}{{end}}", "01"),
        ("{{range $x, $y := .SI}}<{{$x}}={{$y}}>{{end}}", "<0=3><1=4><2=5>"),
    ],
)
def test_go_exec_tests(src: str, want: str) -> None:
    assert run(src, {**GO_DATA, "SI2": [1, 2], "SI01": [0, 1]}) == want


@pytest.mark.parametrize(
    ("src", "needle"),
    [
        ("{{index .SI 10}}", "index out of range: 10"),  # "slice[HUGE]"
        ("{{index .SI `hello`}}", "cannot index slice/array with type string"),  # "slice[WRONG]"
        ("{{index .SI nil}}", "cannot index slice/array with nil"),  # "slice[nil]"
        ("{{index .MSI nil}}", "value is nil; should be of type string"),  # "map[nil]"
        ("{{index .MSI 10}}", "value has type int; should be string"),  # "map[WRONG]"
        ("{{index nil 1}}", "index of untyped nil"),  # "nil[1]"
        ("{{slice .SI -1}}", "index out of range: -1"),  # "slice[-1:]"
        ("{{slice .SI 1 -2}}", "index out of range: -2"),
        ("{{slice .SI 1 2 -1}}", "index out of range: -1"),
        ("{{slice .SI 2 1}}", "invalid slice index: 2 > 1"),  # "slice[2:1]"
        ("{{slice .SI 2 2 1}}", "invalid slice index: 2 > 1"),  # "slice[2:2:1]"
        ("{{slice .SI 4 5}}", "index out of range: 4"),  # "out of range"
        ("{{slice .SI 2 2 5}}", "index out of range: 5"),
        ("{{slice .S 1 5}}", "index out of range: 5"),
        ("{{slice .S 1 2 2}}", "cannot 3-index slice a string"),  # "3-index slice of string"
        ("{{len 3}}", "len of type int"),  # "len of int"
        ("{{len .Empty0}}", "len of nil pointer"),  # "len of nothing" (a map[string]any key, as Ollama's)
        ("{{$i := 0}}{{range $i, $c = .SI}}{{end}}", "undefined variable: $c"),  # Go: exec's setVar
    ],
)
def test_go_exec_errors(src: str, needle: str) -> None:
    with pytest.raises(GoTemplateError) as e:
        run(src, GO_DATA)
    assert needle in str(e.value)


def test_index_of_a_missing_key_is_the_zero_value_not_an_error() -> None:
    """Go's ``index`` returns the map's zero value for a missing key; for Ollama's ``map[string]any``
    values (tool arguments) that is a nil interface, which prints ``<no value>``."""
    assert run('{{ index .Args "missing" }}|{{ if index .Args "missing" }}y{{ else }}n{{ end }}', {"Args": {}}) == (
        "<no value>|n"
    )


def test_range_assigns_keys_and_values_of_a_map_to_declared_variables() -> None:
    src = '{{ $k := "" }}{{ $v := 0 }}{{ range $k, $v = .M }}{{ $k }}={{ $v }};{{ end }}{{ $k }}'
    assert run(src, {"M": {"b": 2, "a": 1}}) == "a=1;b=2;b"


# --------------------------------------------------------------------------------------------
# Go: parse.go's (*Tree).add


def test_a_second_definition_of_a_template_is_an_error() -> None:
    with pytest.raises(GoTemplateError, match='multiple definition of template "a"') as e:
        parse('{{ define "a" }}x{{ end }}\n{{ define "a" }}y{{ end }}')
    assert e.value.line == 2
    with pytest.raises(GoTemplateError, match='multiple definition of template "b"'):
        parse('{{ define "b" }}x{{ end }}{{ block "b" . }}y{{ end }}')


def test_an_empty_definition_neither_conflicts_nor_replaces() -> None:
    assert run('{{ define "a" }} {{ end }}{{ define "a" }}x{{ end }}{{ template "a" }}') == "x"
    assert run('{{ define "a" }}x{{ end }}{{ define "a" }}\n{{ end }}{{ template "a" }}') == "x"


# --------------------------------------------------------------------------------------------
# Go: fmt_test.go (fmtTests), through printf's Sprintf


@pytest.mark.parametrize(
    ("fmt", "value", "want"),
    [
        ("%x", "xyz", "78797a"),
        ("% x", "xyz", "78 79 7a"),
        ("%#x", "xyz", "0x78797a"),
        ("%# X", "xyz", "0X78 0X79 0X7A"),
        ("%q", "abc", '"abc"'),
        ("%#q", "abc", "`abc`"),
        ("%q", '\a\b\f\n\r\t\v"\\', '"\\a\\b\\f\\n\\r\\t\\v\\"\\\\"'),
        ("%+q", "日本語", '"\\u65e5\\u672c\\u8a9e"'),
        ("%q", "\U0010ffff", '"\\U0010ffff"'),
        ("%010q", "⌘", '0000000"⌘"'),
        ("%+010q", "⌘", '00"\\u2318"'),
        ("%-010q", "⌘", '"⌘"       '),
        ("%#-8q", "\t", "`\t`     "),
        ("%5s", "abc", "  abc"),
        ("%-5s", "abc", "abc  "),
        ("%05s", "abc", "00abc"),
        ("%.5s", "日本語日本語", "日本語日本"),
        ("%08q", "abc", '000"abc"'),
        ("%.1x", "日本語", "e6"),
        ("%10.1q", "日本語日本語", '       "日"'),
        ("%10v", None, "     <nil>"),
        ("%c", 0x672C, "本"),
        ("%3c", ord("⌘"), "  ⌘"),
        ("%c", -1, "\ufffd"),
        ("%q", ord("☺"), "'☺'"),
        ("%+q", ord("☺"), "'\\u263a'"),
        ("%q", -1, "%!q(int=-1)"),
        ("%.d", 0, ""),
        ("%6.0d", 0, "      "),
        ("%06.0d", 0, "      "),
        ("% d", 12345, " 12345"),
        ("%+d", -12345, "-12345"),
        ("%#b", -6, "-0b110"),
        ("%#o", 0o1234, "01234"),
        ("%O", -0o1234, "-0o1234"),
        ("%#X", 0, "0X0"),
        ("%.20b", 7, "00000000000000000111"),
        ("%+10d", 12345, "    +12345"),
        ("%010d", -12345, "-000012345"),
        ("%020.8d", -1234, "           -00001234"),
        ("%-#20.8x", 0x1234ABC, "0x01234abc          "),
        ("%068d", -1, "-" + "0" * 66 + "1"),
        ("%#.68x", 42, "0x" + "0" * 66 + "2a"),
        ("%U", -1, "U+FFFFFFFFFFFFFFFF"),
        ("%#14.6U", ord("⌘"), "  U+002318 '⌘'"),
        ("%+.3e", 1.0, "+1.000e+00"),
        ("%+07.2f", -1.0, "-001.00"),
        ("%-07.2f", 1.0, "1.00   "),
        ("% .3E", -1.0, "-1.000E+00"),
        ("%+.3g", 0.0, "+0"),
        ("%#g", 1.1, "1.10000"),
        ("%#g", 123456.0, "123456."),
        ("%#g", 1234567.0, "1.234567e+06"),
        ("%#.0g", 1100000.0, "1.e+06"),
        ("%#.4g", 0.012, "0.01200"),
        ("%#9.4g", 1.0, "    1.000"),
        ("%f", float("inf"), "+Inf"),
        ("% 20F", float("inf"), "                 Inf"),
        ("%+020e", float("inf"), "                +Inf"),
        ("% -20g", float("nan"), " NaN                "),
    ],
)
def test_go_fmt_tests(fmt: str, value: Any, want: str) -> None:
    assert go_sprintf(fmt, [value]) == want


@pytest.mark.parametrize(
    ("fmt", "args", "want"),
    [
        ("%d %d", [1], "1 %!d(MISSING)"),
        ("%d", [1, "x"], "1%!(EXTRA string=x)"),
        ("%f", [3], "%!f(int=3)"),  # an int constant under a float verb: Go's bad verb, not 3.000000
        ("%s", [True], "%!s(bool=true)"),
        ("%*d|%-*d", [4, 7, 3, 1], "   7|1  "),
        ("100%", [], "100%!(NOVERB)"),
    ],
)
def test_go_fmt_markers(fmt: str, args: list[Any], want: str) -> None:
    assert go_sprintf(fmt, args) == want


# --------------------------------------------------------------------------------------------
# Ollama: template/template_test.go, api/types_typescript_test.go

USER_HELLO = [{"role": "user", "content": "Hello"}]


def test_current_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """TestDateFunctions/currentDate: today as YYYY-MM-DD; a format argument is accepted and ignored."""
    src = "{{- range .Messages }}{{ .Content }}{{ end }} Today is {{ currentDate }}"
    assert render_ollama(src, USER_HELLO) == "Hello Today is " + datetime.now().strftime("%Y-%m-%d")
    monkeypatch.setattr(template_functions, "_today", lambda: date(2025, 3, 1))
    assert render_ollama(src, USER_HELLO) == "Hello Today is 2025-03-01"
    assert render_ollama('{{ range .Messages }}{{ end }}{{ currentDate "%B" }}', USER_HELLO) == "2025-03-01"


def test_yesterday_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """TestDateFunctions/yesterdayDate and /yesterdayDate format: the day before, across a month end."""
    src = "{{- range .Messages }}{{ .Content }}{{ end }} Yesterday was {{ yesterdayDate }}"
    want = (datetime.now() - timedelta(days=1)).strftime("%Y-%m-%d")
    assert render_ollama(src, USER_HELLO) == "Hello Yesterday was " + want
    monkeypatch.setattr(template_functions, "_today", lambda: date(2024, 3, 1))
    assert render_ollama("{{- range .Messages }}{{ end }}{{ yesterdayDate }}", USER_HELLO) == "2024-02-29"


def test_date_functions_take_only_strings() -> None:
    """Ollama declares them ``func(args ...string)``; Go refuses an argument of another type."""
    with pytest.raises(GoTemplateError, match="expected string; got int"):
        render_ollama("{{ range .Messages }}{{ end }}{{ currentDate 1 }}", USER_HELLO)


def weather_tool(properties: dict[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object"}
    if properties is not None:
        params["properties"] = properties
    return {
        "type": "function",
        "function": {"name": "get_weather", "description": "Get weather", "parameters": params},
    }


def test_properties_print_as_json() -> None:
    """TestTemplatePropertiesJSON: ``{{ .Function.Parameters.Properties }}`` is JSON, not ``map[...]``."""
    src = "{{- range .Messages }}{{- end }}{{- range .Tools }}{{ .Function.Parameters.Properties }}{{- end }}"
    tools = [weather_tool({"location": {"type": "string", "description": "City name"}})]
    got = render_ollama(src, [{"role": "user", "content": "test"}], tools=tools)
    assert got == '{"location":{"type":"string","description":"City name"}}'
    assert json.loads(got) == {"location": {"type": "string", "description": "City name"}}
    # templateProperties.String of a nil map is "{}", and json.Marshal of it is null
    none = render_ollama(
        src + "|{{ range .Tools }}{{ json .Function.Parameters }}{{ end }}", USER_HELLO, [weather_tool(None)]
    )
    assert none == '{}|{"type":"object","properties":null}'


def test_properties_range() -> None:
    """TestTemplatePropertiesRange: a property's ``.Type`` (``api.PropertyType``) prints the type alone."""
    src = (
        "{{- range .Messages }}{{- end }}{{- range .Tools }}"
        "{{- range $name, $prop := .Function.Parameters.Properties }}{{ $name }}:{{ $prop.Type }};{{- end }}{{- end }}"
    )
    tools = [weather_tool({"location": {"type": "string"}, "unit": {"type": ["string", "null"]}})]
    assert (
        render_ollama(src, [{"role": "user", "content": "test"}], tools=tools) == "location:string;unit:[string null];"
    )


def tool_call_message(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    call = {"function": {"name": "get_weather", "arguments": arguments}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]}]


def test_arguments_print_as_json_and_range() -> None:
    """TestTemplateArgumentsJSON and TestTemplateArgumentsRange."""
    src = "{{- range .Messages }}{{- range .ToolCalls }}{{ .Function.Arguments }}{{- end }}{{- end }}"
    got = render_ollama(src, tool_call_message({"location": "Tokyo", "unit": "celsius"}))
    assert json.loads(got) == {"location": "Tokyo", "unit": "celsius"} and not got.startswith("map[")
    src = "{{- range .Messages }}{{- range .ToolCalls }}{{- range $k, $v := .Function.Arguments }}{{ $k }}={{ $v }};"
    src += "{{- end }}{{- end }}{{- end }}"
    assert render_ollama(src, tool_call_message({"city": "Tokyo"})) == "city=Tokyo;"


@pytest.mark.parametrize(
    ("prop", "want"),
    [  # api/types_typescript_test.go
        ({"type": "string"}, "string"),
        ({"type": "number"}, "number"),
        ({"type": "integer"}, "number"),
        ({"type": "boolean"}, "boolean"),
        ({"type": "array"}, "any[]"),
        ({"type": "object"}, "Record<string, any>"),
        ({"type": "null"}, "null"),
        ({"type": ["string", "number"]}, "string | number"),
        ({"type": ["string", "null"]}, "string | null"),
        ({"anyOf": [{"type": "string"}, {"type": "number"}]}, "string | number"),
        ({"anyOf": [{"type": ["string", "null"]}, {"type": "number"}]}, "string | null | number"),
        (
            {"anyOf": [{"type": "boolean"}, {"anyOf": [{"type": "string"}, {"type": "number"}]}]},
            "boolean | string | number",
        ),
        ({"type": []}, "any"),
        ({"type": "unknown_type"}, "any"),
        ({"type": ["string", "array", "null"]}, "string | any[] | null"),
    ],
)
def test_to_typescript_type(prop: dict[str, Any], want: str) -> None:
    src = (
        "{{- range .Messages }}{{ end }}{{ range .Tools }}{{ range $n, $p := .Function.Parameters.Properties }}"
        "{{ $n }}: {{ toTypeScriptType $p }}{{ end }}{{ end }}"
    )
    assert render_ollama(src, USER_HELLO, tools=[weather_tool({"x": prop})]) == f"x: {want}"


def test_to_typescript_type_of_anything_else_is_any() -> None:
    assert render_ollama('{{ range .Messages }}{{ end }}{{ toTypeScriptType "string" }}', USER_HELLO) == "any"


def test_template_without_an_argument_is_refused_when_parsed() -> None:
    """TestParseError/Template: Ollama's Vars() refuses ``{{ template "x" }}`` without an argument,
    which is how Ollama finds this recursion when the template is created; Go itself parses it."""
    src = '{{define "x"}}{{template "x"}}{{end}}{{template "x"}}'
    with pytest.raises(GoTemplateError, match="undefined template specified"):
        parse_ollama(src)
    with pytest.raises(GoTemplateError, match="undefined template specified"):
        render_ollama(src, USER_HELLO)
    parse(src)


def test_think_level_is_an_empty_string_by_default() -> None:
    """Ollama's Execute always passes ThinkLevel (a string), on both paths."""
    assert render_ollama("{{ range .Messages }}{{ end }}[{{ .ThinkLevel }}]", USER_HELLO) == "[]"
    assert render_ollama("[{{ .ThinkLevel }}]{{ .Prompt }}", USER_HELLO) == "[]Hello"
    got = render_ollama("{{ range .Messages }}{{ end }}{{ .ThinkLevel }}", USER_HELLO, think=True, think_level="high")
    assert got == "high"


def test_tools_without_tools_print_null() -> None:
    """``.Tools`` is ``templateTools``, whose String is its JSON: a nil slice prints ``null``."""
    src = "{{ range .Messages }}{{ end }}{{ .Tools }}|{{ len .Tools }}|{{ if .Tools }}y{{ else }}n{{ end }}"
    assert render_ollama(src, USER_HELLO) == "null|0|n"
    assert render_ollama(src, USER_HELLO, tools=[]) == "[]|0|n"

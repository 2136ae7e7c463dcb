"""The Go text/template engine: Go's rules for trimming, scopes, functions, printing and errors.

Expected strings are worked out by hand from Go's text/template rules (trim markers eat all
adjacent spaces and newlines, a missing map key prints ``<no value>``, ...).
"""

from __future__ import annotations

import pytest

from local_eagle.ollama.template import GoStruct, GoTemplateError, go_float, parse


def run(src: str, data: object = None) -> str:
    return parse(src).execute(data)


# --------------------------------------------------------------------------------------------
# Go text/template rules


@pytest.mark.parametrize(
    ("src", "data", "want"),
    [
        ("a  {{- .X -}}  b", {"X": 1}, "a1b"),
        ("a \n\t{{- .X }}\n", {"X": "b"}, "ab\n"),
        ("x {{-3}} y", None, "x -3 y"),  # '-' not followed by a space is a minus sign
        ("a \n{{- /* note */ -}}\n b", None, "ab"),
        ("a {{/* note */}} b", None, "a  b"),
        ("{{ if eq .N 1 }}one{{ else if eq .N 2 }}two{{ else }}many{{ end }}", {"N": 2}, "two"),
        ("{{ if eq .N 1 }}one{{ else if eq .N 2 }}two{{ else }}many{{ end }}", {"N": 3}, "many"),
        ("{{ with .A }}[{{ . }}]{{ else }}none{{ end }}", {"A": "x"}, "[x]"),
        ("{{ with .A }}[{{ . }}]{{ else }}none{{ end }}", {"A": ""}, "none"),
        ("{{ with .A }}a{{ else with .B }}b={{ . }}{{ end }}", {"A": 0, "B": 2}, "b=2"),
        ("{{ range $i, $m := .L }}{{ $i }}:{{ $m }} {{ end }}", {"L": ["a", "b"]}, "0:a 1:b "),
        ("{{ range $k, $v := .M }}{{ $k }}={{ $v }} {{ end }}", {"M": {"b": 2, "a": 1}}, "a=1 b=2 "),
        ("{{ range .L }}x{{ else }}empty{{ end }}", {"L": []}, "empty"),
        ("{{ range .L }}{{ $.P }}{{ . }}{{ end }}", {"L": ["a", "b"], "P": "-"}, "-a-b"),
        (
            "{{ range .L }}{{ if eq . 3 }}{{ break }}{{ end }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ . }}{{ end }}",
            {"L": [0, 1, 2, 3, 4]},
            "02",
        ),
        ("{{ range 3 }}{{ . }}{{ end }}", None, "012"),
        ("{{ $n := 0 }}{{ range .L }}{{ $n = . }}{{ end }}{{ $n }}", {"L": [1, 2, 3]}, "3"),
        ("{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}", None, "21"),
        ('{{ and 1 0 2 }}|{{ and 1 2 }}|{{ or 0 "" "x" }}|{{ or 0 "" }}|', None, "0|2|x||"),
        ("{{ and false (index .L 5) }} {{ or true (index .L 5) }}", {"L": []}, "false true"),
        ('{{ not "" }} {{ not 1 }}', None, "true false"),
        ('{{ eq .S "a" "b" }} {{ eq .Missing "x" }} {{ ne 1 2 }}', {"S": "b"}, "true false true"),
        ('{{ lt "a" "b" }} {{ le 2 2 }} {{ gt 1.5 2.5 }} {{ ge 3 2 }}', None, "true true false true"),
        ('{{ len "é" }} {{ len .L }} {{ index .L 1 }} {{ index .M "k" }}', {"L": [5, 6], "M": {"k": "v"}}, "2 2 6 v"),
        ('{{ slice "hello" 1 3 }} {{ slice .L 1 }} {{ .L | len }}', {"L": [1, 2, 3]}, "el [2 3] 3"),
        ('{{ print 1 2 }}|{{ print "a" "b" }}|{{ print 1 "a" 2 }}|{{ println "a" 1 }}', None, "1 2|ab|1a2|a 1\n"),
        ('{{ printf "%s=%d %q %v%%" "x" 3 "y" true }}|{{ printf "%s" }}', None, 'x=3 "y" true%|%!s(MISSING)'),
        ("{{ json .V }}", {"V": {"b": "<&>", "a": [1, 2.5, None]}}, '{"a":[1,2.5,null],"b":"\\u003c\\u0026\\u003e"}'),
        (
            "{{ .F }} {{ .G }} {{ .L }} {{ .M }} {{ .B }}",
            {"F": 1e6, "G": 0.5, "L": ["a", "b"], "M": {"b": 1, "a": 2}, "B": True},
            "1e+06 0.5 [a b] map[a:2 b:1] true",
        ),
        ("{{ .Missing }}|{{ print .Missing }}", {}, "<no value>|<nil>"),
        ("{{ 1.0 }} {{ 0x10 }} {{ 'a' }} {{ \"a\\tb\" }} {{ `a\\n` }}", None, "1 16 97 a\tb a\\n"),
        ('{{ define "T" }}<{{ . }}>{{ end }}{{ template "T" .X }}', {"X": 1}, "<1>"),
        ('{{ block "B" .X }}[{{ . }}]{{ end }}', {"X": 1}, "[1]"),
        ('{{ define "T" }}{{ . }}{{ end }}{{ template "T" }}', {"X": 1}, "<no value>"),
        ("{{ print nil }} {{ eq nil .Missing }}", {}, "<nil> true"),
        ("{{ (index .L 0).Name }}", {"L": [{"Name": "n"}]}, "n"),
    ],
)
def test_go_template_rules(src: str, data: object, want: str) -> None:
    assert run(src, data) == want


@pytest.mark.parametrize(
    ("x", "want"),
    [(1e6, "1e+06"), (123456.0, "123456"), (1234567.0, "1.234567e+06"), (1e-4, "0.0001"), (1e-5, "1e-05"), (3.0, "3")],
)
def test_floats_print_like_go(x: float, want: str) -> None:
    assert go_float(x) == want


@pytest.mark.parametrize(
    ("src", "line", "needle"),
    [
        ("a\nb\n{{ if .X }}", 3, "no {{end}}"),
        ("{{ end }}", 1, "unexpected {{end}}"),
        ("{{ if true }}{{ $x := 1 }}{{ end }}\n{{ $x }}", 2, 'undefined variable "$x"'),
        ("{{ foo }}", 1, 'function "foo" not defined'),
        ("{{ html .X }}", 1, "not supported"),
        ("\n{{ break }}", 2, "{{break}} outside {{range}}"),
        ("{{ .X ", 1, "unclosed action"),
        ("{{ if .A }}{{ else }}{{ else }}{{ end }}", 1, "expected {{end}}"),
        ("{{ 3 | 4 }}", 1, "non executable command"),
    ],
)
def test_parse_errors_name_the_line(src: str, line: int, needle: str) -> None:
    with pytest.raises(GoTemplateError) as e:
        parse(src)
    assert e.value.line == line
    assert needle in str(e.value)


@pytest.mark.parametrize(
    ("src", "data", "needle"),
    [
        # a JSON null is a nil interface, which Go cannot follow (a field of a missing key is no value)
        ("{{ .Missing.Field }}", {"Missing": None}, "nil pointer evaluating .Missing.Field"),
        ('{{ eq 1 "1" }}', None, "incompatible types for comparison"),
        ("{{ lt 1 1.5 }}", None, "incompatible types for comparison"),
        ("{{ index .L 9 }}", {"L": [1]}, "index out of range: 9"),
        ("{{ .M.Foo }}", {"M": GoStruct(Role="user")}, "can't evaluate field Foo"),
        ("{{ .X 1 }}", {"X": 1}, "can't give argument to non-function"),
        ("{{ nil }}", None, "nil is not a command"),
        # Go finds these only when executing (exec.go walkTemplate, setVar), so a template that never
        # reaches them runs
        ('{{ template "nope" . }}', None, 'template "nope" not defined'),
        ("{{ $x = 1 }}", None, "undefined variable: $x"),
    ],
)
def test_execution_errors(src: str, data: object, needle: str) -> None:
    with pytest.raises(GoTemplateError, match=None) as e:
        run(src, data)
    assert needle in str(e.value)

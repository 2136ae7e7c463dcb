"""Go's own parser tables, run here: ``numberTests``, ``parseTests`` and ``errorTests`` from
``text/template/parse/parse_test.go``.

``parseTests`` compare Go's printed tree; this engine prints none, so a case checks that the
template parses (or fails to) as Go's does. Left out: the three cases that exceed the
expression depth Go's test lowers to 3 (this engine's limit is :data:`.MAX_DEPTH`, tested in
``test_template_limits.py``). ``errorTests`` give a part of Go's message and, where Go names
one, the line; messages are checked without Go's ``name:`` prefix, which becomes ``line N:``.
"""

from __future__ import annotations

from typing import Any

import pytest

from local_eagle.ollama.template import GoTemplateError, parse
from local_eagle.ollama.template.nodes import Action

# numberTests: the text and the value Go's executor makes of it (an int, a float64 or a complex128)
NUMBER_TESTS: list[tuple[str, Any]] = [
    ("0", 0),
    ("-0", 0),
    ("73", 73),
    ("7_3", 73),
    ("0b10_010_01", 73),
    ("0B10_010_01", 73),
    ("073", 0o73),
    ("0o73", 0o73),
    ("0O73", 0o73),
    ("0x73", 0x73),
    ("0X73", 0x73),
    ("0x7_3", 0x73),
    ("-73", -73),
    ("+73", 73),
    ("100", 100),
    ("1e9", 1e9),
    ("-1e9", -1e9),
    ("-1.2", -1.2),
    ("1e19", 1e19),
    ("1e1_9", 1e19),
    ("1E19", 1e19),
    ("-1e19", -1e19),
    ("0x_1p4", 16.0),
    ("0X_1P4", 16.0),
    ("0x_1p-4", 1 / 16),
    ("4i", 4j),
    ("-1.2+4.2i", complex(-1.2, 4.2)),
    ("073i", 73j),
    ("0i", 0j),
    ("-1.2+0i", complex(-1.2, 0)),
    ("-12+0i", complex(-12, 0)),
    ("13+0i", complex(13, 0)),
    ("0123", 0o123),
    ("-0x0", 0),
    ("0xdeadbeef", 0xDEADBEEF),
    ("'a'", ord("a")),
    ("'\\n'", ord("\n")),
    ("'\\\\'", ord("\\")),
    ("'\\''", ord("'")),
    ("'\\xFF'", 0xFF),
    ("'パ'", 0x30D1),
    ("'\\u30d1'", 0x30D1),
    ("'\\U000030d1'", 0x30D1),
    ("0xef", 0xEF),
]

BAD_NUMBERS = ["+-2", "0x123.", "1e.", "0xi.", "1+2.", "'x", "'xx'", "'433937734937734969526500969526500'"]


@pytest.mark.parametrize(("text", "want"), NUMBER_TESTS, ids=[t for t, _ in NUMBER_TESTS])
def test_go_number_parse(text: str, want: Any) -> None:
    node = parse("{{" + text + "}}").root[0]
    assert isinstance(node, Action)
    got = node.pipe.cmds[0].args[0].value
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text", BAD_NUMBERS)
def test_go_number_parse_errors(text: str) -> None:
    with pytest.raises(GoTemplateError):
        parse("{{print " + text + "}}")


# parseTests: (name, input, parses)
PARSE_TESTS: list[tuple[str, str, bool]] = [
    ("empty", "", True),
    ("comment", "{{/*\n\n\n*/}}", True),
    ("spaces", " \t\n", True),
    ("text", "some text", True),
    ("emptyAction", "{{}}", False),
    ("field", "{{.X}}", True),
    ("simple command", "{{printf}}", True),
    ("$ invocation", "{{$}}", True),
    ("variable invocation", "{{with $x := 3}}{{$x 23}}{{end}}", True),
    ("variable with fields", "{{$.I}}", True),
    ("multi-word command", "{{printf `%d` 23}}", True),
    ("pipeline", "{{.X|.Y}}", True),
    ("pipeline with decl", "{{$x := .X|.Y}}", True),
    ("nested pipeline", "{{.X (.Y .Z) (.A | .B .C) (.E)}}", True),
    ("field applied to parentheses", "{{(.Y .Z).Field}}", True),
    ("simple if", "{{if .X}}hello{{end}}", True),
    ("if with else", "{{if .X}}true{{else}}false{{end}}", True),
    ("if with else if", "{{if .X}}true{{else if .Y}}false{{end}}", True),
    ("if else chain", "+{{if .X}}X{{else if .Y}}Y{{else if .Z}}Z{{end}}+", True),
    ("simple range", "{{range .X}}hello{{end}}", True),
    ("chained field range", "{{range .X.Y.Z}}hello{{end}}", True),
    ("nested range", "{{range .X}}hello{{range .Y}}goodbye{{end}}{{end}}", True),
    ("range with else", "{{range .X}}true{{else}}false{{end}}", True),
    ("range over pipeline", "{{range .X|.M}}true{{else}}false{{end}}", True),
    ("range []int", "{{range .SI}}{{.}}{{end}}", True),
    ("range 1 var", "{{range $x := .SI}}{{.}}{{end}}", True),
    ("range 2 vars", "{{range $x, $y := .SI}}{{.}}{{end}}", True),
    ("range with break", "{{range .SI}}{{.}}{{break}}{{end}}", True),
    ("range with continue", "{{range .SI}}{{.}}{{continue}}{{end}}", True),
    ("constants", "{{range .SI 1 -3.2i true false 'a' nil}}{{end}}", True),
    ("template", "{{template `x`}}", True),
    ("template with arg", "{{template `x` .Y}}", True),
    ("with", "{{with .X}}hello{{end}}", True),
    ("with with else", "{{with .X}}hello{{else}}goodbye{{end}}", True),
    ("with with else with", "{{with .X}}hello{{else with .Y}}goodbye{{end}}", True),
    ("with else chain", "{{with .X}}X{{else with .Y}}Y{{else with .Z}}Z{{end}}", True),
    ("trim left", "x \r\n\t{{- 3}}", True),
    ("trim right", "{{3 -}}\n\n\ty", True),
    ("trim left and right", "x \r\n\t{{- 3 -}}\n\n\ty", True),
    ("trim with extra spaces", "x\n{{-  3   -}}\ny", True),
    ("comment trim left", "x \r\n\t{{- /* hi */}}", True),
    ("comment trim right", "{{/* hi */ -}}\n\n\ty", True),
    ("comment trim left and right", "x \r\n\t{{- /* */ -}}\n\n\ty", True),
    ("block definition", '{{block "foo" .}}hello{{end}}', True),
    ("newline in assignment", "{{ $x \n := \n 1 \n }}", True),
    ("newline in empty action", "{{\n}}", False),
    ("newline in pipeline", '{{\n"x"\n|\nprintf\n}}', True),
    ("newline in comment", "{{/*\nhello\n*/}}", True),
    ("newline in comment", "{{-\n/*\nhello\n*/\n-}}", True),
    ("spaces around continue", "{{range .SI}}{{.}}{{ continue }}{{end}}", True),
    ("spaces around break", "{{range .SI}}{{.}}{{ break }}{{end}}", True),
    ("unclosed action", "hello{{range", False),
    ("unmatched end", "{{end}}", False),
    ("unmatched else", "{{else}}", False),
    ("unmatched else after if", "{{if .X}}hello{{end}}{{else}}", False),
    ("multiple else", "{{if .X}}1{{else}}2{{else}}3{{end}}", False),
    ("missing end", "hello{{range .x}}", False),
    ("missing end after else", "hello{{range .x}}{{else}}", False),
    ("undefined function", "hello{{undefined}}", False),
    ("undefined variable", "{{$x}}", False),
    ("variable undefined after end", "{{with $x := 4}}{{end}}{{$x}}", False),
    ("variable undefined in template", "{{template $v}}", False),
    ("declare with field", "{{with $x.Y := 4}}{{end}}", False),
    ("template with field ref", "{{template .X}}", False),
    ("template with var", "{{template $v}}", False),
    ("invalid punctuation", "{{printf 3, 4}}", False),
    ("multidecl outside range", "{{with $v, $u := 3}}{{end}}", False),
    ("too many decls in range", "{{range $u, $v, $w := 3}}{{end}}", False),
    ("dot applied to parentheses", "{{printf (printf .).}}", False),
    ("adjacent args", "{{printf 3`x`}}", False),
    ("adjacent args with .", "{{printf `x`.}}", False),
    ("extra end after if", "{{if .X}}a{{else if .Y}}b{{end}}{{end}}", False),
    ("break outside range", "{{range .}}{{end}} {{break}}", False),
    ("continue outside range", "{{range .}}{{end}} {{continue}}", False),
    ("break in range else", "{{range .}}{{else}}{{break}}{{end}}", False),
    ("continue in range else", "{{range .}}{{else}}{{continue}}{{end}}", False),
    ("bug0a", "{{$x := 0}}{{$x}}", True),
    ("bug0b", "{{$x += 1}}{{$x}}", False),
    ("bug0c", "{{$x ! 2}}{{$x}}", False),
    ("bug0d", "{{$x % 3}}{{$x}}", False),
    ("bug0e", "{{range $x := $y := 3}}{{end}}", False),
    ("bug1a", "{{$x:=.}}{{$x!2}}", False),
    ("bug1b", "{{$x:=.}}{{$x+2}}", False),
    ("bug1c", "{{$x:=.}}{{$x +2}}", True),
    ("bug2a", "{{range $x := 0}}{{$x}}{{end}}", True),
    ("bug2b", "{{range $x = 0}}{{$x}}{{end}}", True),
    ("dot after integer", "{{1.E}}", False),
    ("dot after float", "{{0.1.E}}", False),
    ("dot after boolean", "{{true.E}}", False),
    ("dot after char", "{{'a'.any}}", False),
    ("dot after string", '{{"hello".guys}}', False),
    ("dot after dot", "{{..E}}", False),
    ("dot after nil", "{{nil.E}}", False),
    ("wrong pipeline dot", "{{12|.}}", False),
    ("wrong pipeline number", "{{.|12|printf}}", False),
    ("wrong pipeline string", '{{.|printf|"error"}}', False),
    ("wrong pipeline char", "{{12|printf|'e'}}", False),
    ("wrong pipeline boolean", "{{.|true}}", False),
    ("wrong pipeline nil", "{{'c'|nil}}", False),
    ("empty pipeline", '{{printf "%d" ( ) }}', False),
    ("block definition", '{{block "foo"}}hello{{end}}', False),
    ("paren nesting normal", "{{ (( 1 )) }}", True),
    ("paren nesting at limit", "{{ ((( 1 ))) }}", True),
    ("paren nesting in pipeline", "{{ ((( 1 ))) | printf }}", True),
    ("paren nesting with other constructs", "{{ if ((( true ))) }}YES{{ end }}", True),
]


@pytest.mark.parametrize(("name", "src", "ok"), PARSE_TESTS, ids=[f"{c[0]}-{i}" for i, c in enumerate(PARSE_TESTS)])
def test_go_parse(name: str, src: str, ok: bool) -> None:
    if ok:
        parse(src)
    else:
        with pytest.raises(GoTemplateError) as e:
            parse(src)
        assert "\n" not in str(e.value)


# errorTests: (name, input, a part of Go's message, the line Go names or None)
ERROR_TESTS: list[tuple[str, str, str, int | None]] = [
    ("unclosed1", "line1\n{{", "unclosed action", 2),
    ("unclosed2", "line1\n{{define `x`}}line2\n{{", "unclosed action", 3),
    ("unclosed3", 'line1\n{{"x"\n"y"\n', "unclosed action started at line 2", 4),
    ("unclosed4", "{{\n\n\n\n\n", "unclosed action started at line 1", 6),
    ("var1", "line1\n{{\nx\n}}", 'function "x" not defined', 3),
    ("function", "{{foo}}", 'function "foo" not defined', None),
    ("comment1", "{{/*}}", "unclosed comment", 1),
    ("comment2", "{{/*\nhello\n}}", "unclosed comment", 1),
    ("lparen", "{{.X (1 2 3}}", "unclosed left paren", None),
    ("rparen", "{{.X 1 2 3 ) }}", "unexpected right paren", None),
    ("rparen2", "{{(.X 1 2 3", "unclosed action", None),
    ("space", "{{`x`3}}", "in operand", None),
    ("idchar", "{{a#}}", "'#'", None),
    ("charconst", "{{'a}}", "unterminated character constant", None),
    ("stringconst", '{{"a}}', "unterminated quoted string", None),
    ("rawstringconst", "{{`a}}", "unterminated raw quoted string", None),
    ("number", "{{0xi}}", "number syntax", None),
    ("multidefine", "{{define `a`}}a{{end}}{{define `a`}}b{{end}}", "multiple definition of template", None),
    ("eof", "{{range .X}}", "unexpected EOF", None),
    ("variable", "{{$x := 23}}{{with $x.y := 3}}{{$x 23}}{{end}}", 'unexpected ":="', None),
    ("multidecl", "{{$a,$b,$c := 23}}", "too many declarations", None),
    ("undefvar", "{{$a}}", "undefined variable", None),
    ("wrongdot", "{{true.any}}", "unexpected . after term", None),
    ("wrongpipeline", "{{12|false}}", "non executable command in pipeline", None),
    ("emptypipeline", "{{ ( ) }}", "missing value for parenthesized pipeline", None),
    ("multilinerawstring", "{{ $v := `\n` }} {{", "unclosed action", 2),
    ("rangeundefvar", "{{range $k}}{{end}}", "undefined variable", None),
    ("rangeundefvars", "{{range $k, $v}}{{end}}", "undefined variable", None),
    ("rangemissingvalue1", "{{range $k,}}{{end}}", "missing value for range", None),
    ("rangemissingvalue2", "{{range $k, $v := }}{{end}}", "missing value for range", None),
    ("rangenotvariable1", "{{range $k, .}}{{end}}", "range can only initialize variables", None),
    ("rangenotvariable2", "{{range $k, 123 := .}}{{end}}", "range can only initialize variables", None),
]


@pytest.mark.parametrize(("name", "src", "needle", "line"), ERROR_TESTS, ids=[c[0] for c in ERROR_TESTS])
def test_go_parse_errors(name: str, src: str, needle: str, line: int | None) -> None:
    with pytest.raises(GoTemplateError) as e:
        parse(src)
    assert needle in str(e.value) and "\n" not in str(e.value)
    if line is not None:
        assert e.value.line == line


@pytest.mark.parametrize(
    ("src", "want"),
    [
        ('{{ "\\377\\x41\\u00e9\\U0001F600\\a\\"" }}', 'ÿAé\U0001f600\a"'),
        ("{{ print '\\'' '\\\\' '\\x41' }}", "39 92 65"),
        ('{{ "\\\'" }}', None),  # \' only in a character constant
        ("{{ '\\\"' }}", None),  # \" only in a string
        ('{{ "\\400" }}', None),  # an octal escape is a byte
        ('{{ "\\ud800" }}', None),  # a surrogate half is no rune
        ('{{ "' + "a" * 500 + '\\q" }}', None),  # the error shows the start of the string, not all of it
    ],
)
def test_go_unquote_rules(src: str, want: str | None) -> None:
    """``strconv.Unquote``/``UnquoteChar``, which Go's parser applies to strings and characters."""
    if want is not None:
        assert parse(src).execute(None) == want
        return
    with pytest.raises(GoTemplateError, match="invalid syntax in") as e:
        parse(src)
    assert len(str(e.value)) < 120

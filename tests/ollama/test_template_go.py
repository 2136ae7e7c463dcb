"""Go's own ``text/template`` tables, run here: ``execTests``, ``cmpTests``, ``TestInterfaceValues`` and
``TestIsTrue`` from ``exec_test.go``, with the inputs and expected outputs as Go gives them.

Only the cases this engine can run are here: Go's test data has methods, ``call``, custom functions
(``typeOf``, ``add``, ``echo``...), ``html``/``js``/``urlquery``, pointers compared by identity,
sized integer types and ``iter.Seq`` values, none of which a TEMPLATE sees in Ollama; a case is
left out only for that. The Go values become their nearest twins: a struct is a
:class:`GoStruct`, a value with a ``String`` method a :class:`GoStringer`, a nil map or slice a
:class:`NilMap`/:class:`NilSlice`, a nil interface ``MISSING`` and a nil pointer ``None``. Go's
harness wants a case marked failing to fail when executed; here it may fail when parsed too.
"""

from __future__ import annotations

from typing import Any

import pytest

from local_eagle.ollama.template import MISSING, GoStringer, GoStruct, GoTemplateError, NilMap, NilSlice, parse

T = GoStruct(
    True_=True,
    I=17,
    U16=16,
    X="x",
    S="xyz",
    FloatZero=0.0,
    ComplexZero=0j,
    U=GoStruct(V="v"),
    V0=GoStringer(GoStruct(j=6666), "<6666>"),
    V1=GoStringer(GoStruct(j=7777), "<7777>"),
    V2=GoStringer(None, "nilV"),
    W0=GoStringer(GoStruct(k=888), "[888]"),
    W1=GoStringer(GoStruct(k=999), "[999]"),
    W2=GoStringer(None, "nilW"),
    SI=[3, 4, 5],
    SIEmpty=NilSlice(),
    SB=[True, False],
    AI=[3, 4, 5],
    MSI={"one": 1, "two": 2, "three": 3},
    MSIone={"one": 1},
    MSIEmpty=NilMap(),
    MXI={"one": 1},
    MII={1: 1},
    MI32S={1: "one", 2: "two"},
    MI64S={2: "i642", 3: "i643"},
    MUI32S={2: "u322", 3: "u323"},
    MUI64S={2: "ui642", 3: "ui643"},
    MI8S={2: "i82", 3: "i83"},
    MUI8S={2: "u82", 3: "u83"},
    SMSI=[{"one": 1, "two": 2}, {"eleven": 11, "twelve": 12}],
    Empty0=MISSING,
    Empty1=3,
    Empty2="empty2",
    Empty3=[7, 8],
    Empty4=GoStruct(V="UinEmpty"),
    PI=23,
    PS="a string",
    PSI=[21, 22, 23],
    NIL=None,
    Str=GoStringer(b"foozle", "foozle"),
    Err=GoStringer(None, "erroozle"),
)
T["True"] = T.pop("True_")  # a Python keyword as a field name

BIG_INT = "0x7fffffffffffffff"
BIG_UINT = "0x8000000000000000"

# (name, input, output, data, ok): execTests in Go's order, the runnable ones
EXEC_TESTS: list[tuple[str, str, str, Any, bool]] = [
    ("empty", "", "", None, True),
    ("text", "some text", "some text", None, True),
    ("nil action", "{{nil}}", "", None, False),
    ("ideal too big", "{{print " + BIG_UINT + "}}", "", 0, False),
    ("ideal int", "{{print " + BIG_INT + "}}", "9223372036854775807", 0, True),
    ("ideal nil without type", "{{nil}}", "", 0, False),
    (".X", "-{{.X}}-", "-x-", T, True),
    (".U.V", "-{{.U.V}}-", "-v-", T, True),
    (".unexported", "{{.unexported}}", "", T, False),
    ("map .one", "{{.MSI.one}}", "1", T, True),
    ("map .two", "{{.MSI.two}}", "2", T, True),
    ("map .NO", "{{.MSI.NO}}", "<no value>", T, True),
    ("map .one interface", "{{.MXI.one}}", "1", T, True),
    ("map .WRONG args", "{{.MSI.one 1}}", "", T, False),
    ("map .WRONG type", "{{.MII.one}}", "", T, False),
    ("dot int", "<{{.}}>", "<13>", 13, True),
    ("dot float", "<{{.}}>", "<15.1>", 15.1, True),
    ("dot bool", "<{{.}}>", "<true>", True, True),
    ("dot complex", "<{{.}}>", "<(16.2-17i)>", 16.2 - 17j, True),
    ("dot string", "<{{.}}>", "<hello>", "hello", True),
    ("dot slice", "<{{.}}>", "<[-1 -2 -3]>", [-1, -2, -3], True),
    ("dot map", "<{{.}}>", "<map[two:22]>", {"two": 22}, True),
    ("dot struct", "<{{.}}>", "<{7 seven}>", GoStruct(a=7, b="seven"), True),
    ("$ int", "{{$}}", "123", 123, True),
    ("$.I", "{{$.I}}", "17", T, True),
    ("$.U.V", "{{$.U.V}}", "v", T, True),
    ("declare in action", "{{$x := $.U.V}}{{$x}}", "v", T, True),
    ("simple assignment", "{{$x := 2}}{{$x = 3}}{{$x}}", "3", T, True),
    ("nested assignment", "{{$x := 2}}{{if true}}{{$x = 3}}{{end}}{{$x}}", "3", T, True),
    (
        "nested assignment changes the last declaration",
        "{{$x := 1}}{{if true}}{{$x := 2}}{{if true}}{{$x = 3}}{{end}}{{end}}{{$x}}",
        "1",
        T,
        True,
    ),
    ("V{6666}.String()", "-{{.V0}}-", "-<6666>-", T, True),
    ("&V{7777}.String()", "-{{.V1}}-", "-<7777>-", T, True),
    ("(*V)(nil).String()", "-{{.V2}}-", "-nilV-", T, True),
    ("W{888}.Error()", "-{{.W0}}-", "-[888]-", T, True),
    ("&W{999}.Error()", "-{{.W1}}-", "-[999]-", T, True),
    ("(*W)(nil).Error()", "-{{.W2}}-", "-nilW-", T, True),
    ("*int", "{{.PI}}", "23", T, True),
    ("*string", "{{.PS}}", "a string", T, True),
    ("*[]int", "{{.PSI}}", "[21 22 23]", T, True),
    ("*[]int[1]", "{{index .PSI 1}}", "22", T, True),
    ("NIL", "{{.NIL}}", "<nil>", T, True),
    ("empty nil", "{{.Empty0}}", "<no value>", T, True),
    ("empty with int", "{{.Empty1}}", "3", T, True),
    ("empty with string", "{{.Empty2}}", "empty2", T, True),
    ("empty with slice", "{{.Empty3}}", "[7 8]", T, True),
    ("empty with struct", "{{.Empty4}}", "{UinEmpty}", T, True),
    ("empty with struct, field", "{{.Empty4.V}}", "UinEmpty", T, True),
    ("field on interface", "{{.foo}}", "<no value>", None, True),
    ("field on parenthesized interface", "{{(.).foo}}", "<no value>", None, True),
    ("unparenthesized non-function", "{{1 2}}", "", None, False),
    ("parenthesized non-function", "{{(1) 2}}", "", None, False),
    ("parenthesized non-function with no args", "{{(1)}}", "1", None, True),
    ("parens: $ in paren", "{{($).X}}", "x", T, True),
    ("if true", "{{if true}}TRUE{{end}}", "TRUE", T, True),
    ("if false", "{{if false}}TRUE{{else}}FALSE{{end}}", "FALSE", T, True),
    ("if nil", "{{if nil}}TRUE{{end}}", "", T, False),
    ("if 1", "{{if 1}}NON-ZERO{{else}}ZERO{{end}}", "NON-ZERO", T, True),
    ("if 0", "{{if 0}}NON-ZERO{{else}}ZERO{{end}}", "ZERO", T, True),
    ("if 1.5", "{{if 1.5}}NON-ZERO{{else}}ZERO{{end}}", "NON-ZERO", T, True),
    ("if 0.0", "{{if .FloatZero}}NON-ZERO{{else}}ZERO{{end}}", "ZERO", T, True),
    ("if 1.5i", "{{if 1.5i}}NON-ZERO{{else}}ZERO{{end}}", "NON-ZERO", T, True),
    ("if 0.0i", "{{if .ComplexZero}}NON-ZERO{{else}}ZERO{{end}}", "ZERO", T, True),
    ("if nonNilPointer", "{{if .PI}}NON-ZERO{{else}}ZERO{{end}}", "NON-ZERO", T, True),
    ("if nilPointer", "{{if .NIL}}NON-ZERO{{else}}ZERO{{end}}", "ZERO", T, True),
    ("if emptystring", "{{if ``}}NON-EMPTY{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("if string", "{{if `notempty`}}NON-EMPTY{{else}}EMPTY{{end}}", "NON-EMPTY", T, True),
    ("if emptyslice", "{{if .SIEmpty}}NON-EMPTY{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("if slice", "{{if .SI}}NON-EMPTY{{else}}EMPTY{{end}}", "NON-EMPTY", T, True),
    ("if emptymap", "{{if .MSIEmpty}}NON-EMPTY{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("if map", "{{if .MSI}}NON-EMPTY{{else}}EMPTY{{end}}", "NON-EMPTY", T, True),
    ("if map unset", "{{if .MXI.none}}NON-ZERO{{else}}ZERO{{end}}", "ZERO", T, True),
    ("if map not unset", "{{if not .MXI.none}}ZERO{{else}}NON-ZERO{{end}}", "ZERO", T, True),
    ("if $x with $y int", "{{if $x := true}}{{with $y := .I}}{{$x}},{{$y}}{{end}}{{end}}", "true,17", T, True),
    ("if $x with $x int", "{{if $x := true}}{{with $x := .I}}{{$x}},{{end}}{{$x}}{{end}}", "17,true", T, True),
    ("if else if", "{{if false}}FALSE{{else if true}}TRUE{{end}}", "TRUE", T, True),
    ("if else chain", "{{if eq 1 3}}1{{else if eq 2 3}}2{{else if eq 3 3}}3{{end}}", "3", T, True),
    ("print", '{{print "hello, print"}}', "hello, print", T, True),
    ("print 123", "{{print 1 2 3}}", "1 2 3", T, True),
    ("print nil", "{{print nil}}", "<nil>", T, True),
    ("println", "{{println 1 2 3}}", "1 2 3\n", T, True),
    ("printf int", '{{printf "%04x" 127}}', "007f", T, True),
    ("printf float", '{{printf "%g" 3.5}}', "3.5", T, True),
    ("printf complex", '{{printf "%g" 1+7i}}', "(1+7i)", T, True),
    ("printf string", '{{printf "%s" "hello"}}', "hello", T, True),
    ("printf field", '{{printf "%s" .U.V}}', "v", T, True),
    ("printf dot", '{{with .I}}{{printf "%d" .}}{{end}}', "17", T, True),
    ("printf var", '{{with $x := .I}}{{printf "%d" $x}}{{end}}', "17", T, True),
    ("not", "{{not true}} {{not false}}", "false true", None, True),
    ("and", "{{and false 0}} {{and 1 0}} {{and 0 true}} {{and 1 1}}", "false 0 0 1", None, True),
    ("or", "{{or 0 0}} {{or 1 0}} {{or 0 true}} {{or 1 1}}", "0 1 true 1", None, True),
    ("and pipe-true", "{{1 | and 1}}", "1", None, True),
    ("and pipe-false", "{{0 | and 1}}", "0", None, True),
    ("or pipe-true", "{{1 | or 0}}", "1", None, True),
    ("or pipe-false", "{{0 | or 0}}", "0", None, True),
    ("and undef", "{{and 1 .Unknown}}", "<no value>", None, True),
    ("or undef", "{{or 0 .Unknown}}", "<no value>", None, True),
    ("boolean if", "{{if and true 1 `hi`}}TRUE{{else}}FALSE{{end}}", "TRUE", T, True),
    ("boolean if not", "{{if and true 1 `hi` | not}}TRUE{{else}}FALSE{{end}}", "FALSE", None, True),
    ("boolean if pipe", "{{if true | not | and 1}}TRUE{{else}}FALSE{{end}}", "FALSE", None, True),
    ("slice[0]", "{{index .SI 0}}", "3", T, True),
    ("slice[1]", "{{index .SI 1}}", "4", T, True),
    ("slice[HUGE]", "{{index .SI 10}}", "", T, False),
    ("slice[WRONG]", "{{index .SI `hello`}}", "", T, False),
    ("slice[nil]", "{{index .SI nil}}", "", T, False),
    ("map[one]", "{{index .MSI `one`}}", "1", T, True),
    ("map[two]", "{{index .MSI `two`}}", "2", T, True),
    ("map[nil]", "{{index .MSI nil}}", "", T, False),
    ("map[WRONG]", "{{index .MSI 10}}", "", T, False),
    ("double index", "{{index .SMSI 1 `eleven`}}", "11", T, True),
    ("nil[1]", "{{index nil 1}}", "", T, False),
    ("map MI64S", "{{index .MI64S 2}}", "i642", T, True),
    ("map MI32S", "{{index .MI32S 2}}", "two", T, True),
    ("map MUI64S", "{{index .MUI64S 3}}", "ui643", T, True),
    ("map MI8S", "{{index .MI8S 3}}", "i83", T, True),
    ("map MUI8S", "{{index .MUI8S 2}}", "u82", T, True),
    ("index of an interface field", "{{index .Empty3 0}}", "7", T, True),
    ("slice[:]", "{{slice .SI}}", "[3 4 5]", T, True),
    ("slice[1:]", "{{slice .SI 1}}", "[4 5]", T, True),
    ("slice[1:2]", "{{slice .SI 1 2}}", "[4]", T, True),
    ("slice[-1:]", "{{slice .SI -1}}", "", T, False),
    ("slice[1:-2]", "{{slice .SI 1 -2}}", "", T, False),
    ("slice[1:2:-1]", "{{slice .SI 1 2 -1}}", "", T, False),
    ("slice[2:1]", "{{slice .SI 2 1}}", "", T, False),
    ("slice[2:2:1]", "{{slice .SI 2 2 1}}", "", T, False),
    ("out of range", "{{slice .SI 4 5}}", "", T, False),
    ("out of range", "{{slice .SI 2 2 5}}", "", T, False),
    ("array[:]", "{{slice .AI}}", "[3 4 5]", T, True),
    ("array[1:]", "{{slice .AI 1}}", "[4 5]", T, True),
    ("array[1:2]", "{{slice .AI 1 2}}", "[4]", T, True),
    ("string[:]", "{{slice .S}}", "xyz", T, True),
    ("string[0:1]", "{{slice .S 0 1}}", "x", T, True),
    ("string[1:]", "{{slice .S 1}}", "yz", T, True),
    ("string[1:2]", "{{slice .S 1 2}}", "y", T, True),
    ("out of range", "{{slice .S 1 5}}", "", T, False),
    ("3-index slice of string", "{{slice .S 1 2 2}}", "", T, False),
    ("slice of an interface field", "{{slice .Empty3 0 1}}", "[7]", T, True),
    ("slice", "{{len .SI}}", "3", T, True),
    ("map", "{{len .MSI }}", "3", T, True),
    ("len of int", "{{len 3}}", "", T, False),
    ("len of nothing", "{{len .Empty0}}", "", T, False),
    ("len of an interface field", "{{len .Empty3}}", "2", T, True),
    ("with true", "{{with true}}{{.}}{{end}}", "true", T, True),
    ("with false", "{{with false}}{{.}}{{else}}FALSE{{end}}", "FALSE", T, True),
    ("with 1", "{{with 1}}{{.}}{{else}}ZERO{{end}}", "1", T, True),
    ("with 0", "{{with 0}}{{.}}{{else}}ZERO{{end}}", "ZERO", T, True),
    ("with 1.5", "{{with 1.5}}{{.}}{{else}}ZERO{{end}}", "1.5", T, True),
    ("with 0.0", "{{with .FloatZero}}{{.}}{{else}}ZERO{{end}}", "ZERO", T, True),
    ("with 1.5i", "{{with 1.5i}}{{.}}{{else}}ZERO{{end}}", "(0+1.5i)", T, True),
    ("with 0.0i", "{{with .ComplexZero}}{{.}}{{else}}ZERO{{end}}", "ZERO", T, True),
    ("with emptystring", "{{with ``}}{{.}}{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("with string", "{{with `notempty`}}{{.}}{{else}}EMPTY{{end}}", "notempty", T, True),
    ("with emptyslice", "{{with .SIEmpty}}{{.}}{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("with slice", "{{with .SI}}{{.}}{{else}}EMPTY{{end}}", "[3 4 5]", T, True),
    ("with emptymap", "{{with .MSIEmpty}}{{.}}{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("with map", "{{with .MSIone}}{{.}}{{else}}EMPTY{{end}}", "map[one:1]", T, True),
    ("with empty interface, struct field", "{{with .Empty4}}{{.V}}{{end}}", "UinEmpty", T, True),
    ("with $x int", "{{with $x := .I}}{{$x}}{{end}}", "17", T, True),
    ("with $x struct.U.V", "{{with $x := $}}{{$x.U.V}}{{end}}", "v", T, True),
    ("with variable and action", "{{with $x := $}}{{$y := $.U.V}}{{$y}}{{end}}", "v", T, True),
    ("with else with", "{{with 0}}{{.}}{{else with true}}{{.}}{{end}}", "true", T, True),
    (
        "with else with chain",
        "{{with 0}}{{.}}{{else with false}}{{.}}{{else with `notempty`}}{{.}}{{end}}",
        "notempty",
        T,
        True,
    ),
    ("range []int", "{{range .SI}}-{{.}}-{{end}}", "-3--4--5-", T, True),
    ("range empty no else", "{{range .SIEmpty}}-{{.}}-{{end}}", "", T, True),
    ("range []int else", "{{range .SI}}-{{.}}-{{else}}EMPTY{{end}}", "-3--4--5-", T, True),
    ("range empty else", "{{range .SIEmpty}}-{{.}}-{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("range []int break else", "{{range .SI}}-{{.}}-{{break}}NOTREACHED{{else}}EMPTY{{end}}", "-3-", T, True),
    (
        "range []int continue else",
        "{{range .SI}}-{{.}}-{{continue}}NOTREACHED{{else}}EMPTY{{end}}",
        "-3--4--5-",
        T,
        True,
    ),
    ("range []bool", "{{range .SB}}-{{.}}-{{end}}", "-true--false-", T, True),
    ("range map", "{{range .MSI}}-{{.}}-{{end}}", "-1--3--2-", T, True),
    ("range empty map no else", "{{range .MSIEmpty}}-{{.}}-{{end}}", "", T, True),
    ("range map else", "{{range .MSI}}-{{.}}-{{else}}EMPTY{{end}}", "-1--3--2-", T, True),
    ("range empty map else", "{{range .MSIEmpty}}-{{.}}-{{else}}EMPTY{{end}}", "EMPTY", T, True),
    ("range empty interface", "{{range .Empty3}}-{{.}}-{{else}}EMPTY{{end}}", "-7--8-", T, True),
    ("range empty nil", "{{range .Empty0}}-{{.}}-{{end}}", "", T, True),
    ("range $x SI", "{{range $x := .SI}}<{{$x}}>{{end}}", "<3><4><5>", T, True),
    ("range $x $y SI", "{{range $x, $y := .SI}}<{{$x}}={{$y}}>{{end}}", "<0=3><1=4><2=5>", T, True),
    ("range $x MSIone", "{{range $x := .MSIone}}<{{$x}}>{{end}}", "<1>", T, True),
    ("range $x $y MSIone", "{{range $x, $y := .MSIone}}<{{$x}}={{$y}}>{{end}}", "<one=1>", T, True),
    ("range $x PSI", "{{range $x := .PSI}}<{{$x}}>{{end}}", "<21><22><23>", T, True),
    ("declare in range", "{{range $x := .PSI}}<{{$foo:=$x}}{{$x}}>{{end}}", "<21><22><23>", T, True),
    ("range int", '{{range $v := .}}{{printf "%T%d" $v $v}}{{end}}', "int0int1int2int3int4", 5, True),
    ("range 5", '{{range $v := 5}}{{printf "%T%d" $v $v}}{{end}}', "int0int1int2int3int4", None, True),
    ("or as if true", '{{or .SI "slice is empty"}}', "[3 4 5]", T, True),
    ("or as if false", '{{or .SIEmpty "slice is empty"}}', "slice is empty", T, True),
    ("decimal", "{{print 1234}}", "1234", T, True),
    ("decimal _", "{{print 12_34}}", "1234", T, True),
    ("binary", "{{print 0b101}}", "5", T, True),
    ("binary _", "{{print 0b_1_0_1}}", "5", T, True),
    ("BINARY", "{{print 0B101}}", "5", T, True),
    ("octal0", "{{print 0377}}", "255", T, True),
    ("octal", "{{print 0o377}}", "255", T, True),
    ("octal _", "{{print 0o_3_7_7}}", "255", T, True),
    ("OCTAL", "{{print 0O377}}", "255", T, True),
    ("hex", "{{print 0x123}}", "291", T, True),
    ("hex _", "{{print 0x1_23}}", "291", T, True),
    ("HEX", "{{print 0X123ABC}}", "1194684", T, True),
    ("float", "{{print 123.4}}", "123.4", T, True),
    ("float _", "{{print 0_0_1_2_3.4}}", "123.4", T, True),
    ("hex float", "{{print +0x1.ep+2}}", "7.5", T, True),
    ("hex float _", "{{print +0x_1.e_0p+0_2}}", "7.5", T, True),
    ("HEX float", "{{print +0X1.EP+2}}", "7.5", T, True),
    ("print multi", "{{print 1_2_3_4 7.5_00_00_00}}", "1234 7.5", T, True),
    ("print multi2", "{{print 1234 0x0_1.e_0p+02}}", "1234 7.5", T, True),
    ("bug4", "{{if .Empty0}}non-nil{{else}}nil{{end}}", "nil", T, True),
    ("bug5", "{{.Str}}", "foozle", T, True),
    ("bug5a", "{{.Err}}", "erroozle", T, True),
    ("bug7a", "{{3 2}}", "", T, False),
    ("bug7b", "{{$x := 1}}{{$x 2}}", "", T, False),
    ("bug7c", "{{$x := 1}}{{3 | $x}}", "", T, False),
    ("bug9", "{{.cause}}", "neglect", {"cause": "neglect"}, True),
    ("bug12xe", "{{printf `%T` 0xef}}", "int", GoStruct(), True),
    ("bug12xE", "{{printf `%T` 0xEE}}", "int", GoStruct(), True),
    ("bug12Xe", "{{printf `%T` 0Xef}}", "int", GoStruct(), True),
    ("bug12XE", "{{printf `%T` 0XEE}}", "int", GoStruct(), True),
    ("bug14a", "{{(nil).True}}", "", T, False),
    ("bug14b", "{{$x := nil}}{{$x.anything}}", "", T, False),
    ("bug14c", '{{$x := (1.0)}}{{$y := ("hello")}}{{$x.anything}}{{$y.true}}', "", T, False),
    ("bug16a", "{{true|printf}}", "", T, False),
    ("bug16b", "{{1|printf}}", "", T, False),
    ("bug16c", "{{1.1|printf}}", "", T, False),
    ("bug16d", "{{'x'|printf}}", "", T, False),
    ("bug16e", "{{0i|printf}}", "", T, False),
    ("bug16j", '{{1+2i|printf "%v"}}', "(1+2i)", T, True),
    ("bug16k", '{{"aaa"|printf }}', "aaa", T, True),
    ("bug18a", "{{eq . '.'}}", "true", ord("."), True),
    ("bug18b", "{{eq . 'e'}}", "true", ord("e"), True),
    ("bug18c", "{{eq . 'P'}}", "true", ord("P"), True),
    ("issue56490", "{{$i := 0}}{{$x := 0}}{{range $i = .AI}}{{end}}{{$i}}", "5", T, True),
    ("issue60801", "{{$k := 0}}{{$v := 0}}{{range $k, $v = .AI}}{{$k}}={{$v}} {{end}}", "0=3 1=4 2=5 ", T, True),
]


def run(src: str, data: Any) -> str:
    return parse(src).execute(data)


@pytest.mark.parametrize(("name", "src", "want", "data", "ok"), EXEC_TESTS, ids=[c[0] for c in EXEC_TESTS])
def test_go_exec_tests(name: str, src: str, want: str, data: Any, ok: bool) -> None:
    if ok:
        assert run(src, data) == want
    else:
        with pytest.raises(GoTemplateError) as e:
            run(src, data)
        assert "\n" not in str(e.value)


CMP = GoStruct(
    Uthree=3,
    Ufour=4,
    NegOne=-1,
    Three=3,
    NonNilMap={},
    Map=NilMap(),
    V1=GoStruct(j=0, type_name="template.V"),
    V2=GoStruct(j=0, type_name="template.V"),
    NilIface=MISSING,
)

# cmpTests: (expression, truth, ok); those on pointers and on an interface holding one are left out
CMP_TESTS: list[tuple[str, str, bool]] = [
    ("eq true true", "true", True),
    ("eq true false", "false", True),
    ("eq 1+2i 1+2i", "true", True),
    ("eq 1+2i 1+3i", "false", True),
    ("eq 1.5 1.5", "true", True),
    ("eq 1.5 2.5", "false", True),
    ("eq 1 1", "true", True),
    ("eq 1 2", "false", True),
    ("eq `xy` `xy`", "true", True),
    ("eq `xy` `xyz`", "false", True),
    ("eq .Uthree .Uthree", "true", True),
    ("eq .Uthree .Ufour", "false", True),
    ("eq 3 4 5 6 3", "true", True),
    ("eq 3 4 5 6 7", "false", True),
    ("ne true true", "false", True),
    ("ne true false", "true", True),
    ("ne 1+2i 1+2i", "false", True),
    ("ne 1+2i 1+3i", "true", True),
    ("ne 1.5 1.5", "false", True),
    ("ne 1.5 2.5", "true", True),
    ("ne 1 1", "false", True),
    ("ne 1 2", "true", True),
    ("ne `xy` `xy`", "false", True),
    ("ne `xy` `xyz`", "true", True),
    ("ne .Uthree .Uthree", "false", True),
    ("ne .Uthree .Ufour", "true", True),
    ("lt 1.5 1.5", "false", True),
    ("lt 1.5 2.5", "true", True),
    ("lt 1 1", "false", True),
    ("lt 1 2", "true", True),
    ("lt `xy` `xy`", "false", True),
    ("lt `xy` `xyz`", "true", True),
    ("lt .Uthree .Uthree", "false", True),
    ("lt .Uthree .Ufour", "true", True),
    ("le 1.5 1.5", "true", True),
    ("le 1.5 2.5", "true", True),
    ("le 2.5 1.5", "false", True),
    ("le 1 1", "true", True),
    ("le 1 2", "true", True),
    ("le 2 1", "false", True),
    ("le `xy` `xy`", "true", True),
    ("le `xy` `xyz`", "true", True),
    ("le `xyz` `xy`", "false", True),
    ("le .Uthree .Uthree", "true", True),
    ("le .Uthree .Ufour", "true", True),
    ("le .Ufour .Uthree", "false", True),
    ("gt 1.5 1.5", "false", True),
    ("gt 1.5 2.5", "false", True),
    ("gt 1 1", "false", True),
    ("gt 2 1", "true", True),
    ("gt 1 2", "false", True),
    ("gt `xy` `xy`", "false", True),
    ("gt `xy` `xyz`", "false", True),
    ("gt .Uthree .Uthree", "false", True),
    ("gt .Uthree .Ufour", "false", True),
    ("gt .Ufour .Uthree", "true", True),
    ("ge 1.5 1.5", "true", True),
    ("ge 1.5 2.5", "false", True),
    ("ge 2.5 1.5", "true", True),
    ("ge 1 1", "true", True),
    ("ge 1 2", "false", True),
    ("ge 2 1", "true", True),
    ("ge `xy` `xy`", "true", True),
    ("ge `xy` `xyz`", "false", True),
    ("ge `xyz` `xy`", "true", True),
    ("ge .Uthree .Uthree", "true", True),
    ("ge .Uthree .Ufour", "false", True),
    ("ge .Ufour .Uthree", "true", True),
    ("eq .Uthree .Three", "true", True),
    ("eq .Three .Uthree", "true", True),
    ("le .Uthree .Three", "true", True),
    ("le .Three .Uthree", "true", True),
    ("ge .Uthree .Three", "true", True),
    ("ge .Three .Uthree", "true", True),
    ("lt .Uthree .Three", "false", True),
    ("lt .Three .Uthree", "false", True),
    ("gt .Uthree .Three", "false", True),
    ("gt .Three .Uthree", "false", True),
    ("eq .Ufour .Three", "false", True),
    ("lt .Ufour .Three", "false", True),
    ("gt .Ufour .Three", "true", True),
    ("eq .NegOne .Uthree", "false", True),
    ("eq .Uthree .NegOne", "false", True),
    ("ne .NegOne .Uthree", "true", True),
    ("ne .Uthree .NegOne", "true", True),
    ("lt .NegOne .Uthree", "true", True),
    ("lt .Uthree .NegOne", "false", True),
    ("le .NegOne .Uthree", "true", True),
    ("le .Uthree .NegOne", "false", True),
    ("gt .NegOne .Uthree", "false", True),
    ("gt .Uthree .NegOne", "true", True),
    ("ge .NegOne .Uthree", "false", True),
    ("ge .Uthree .NegOne", "true", True),
    ("eq (index `x` 0) 'x'", "true", True),
    ("eq (index `x` 0) 'y'", "false", True),
    ("eq .V1 .V2", "true", True),
    ("eq .NilIface .NilIface", "true", True),
    ("eq .NilIface 0", "false", True),
    ("eq 0 .NilIface", "false", True),
    ("eq .Map .Map", "true", True),
    ("eq .Map nil", "true", True),
    ("eq nil .Map", "true", True),
    ("eq .Map .NonNilMap", "false", True),
    ("eq `xy` 1", "", False),
    ("eq 2 2.0", "", False),
    ("lt true true", "", False),
    ("lt 1+0i 1+0i", "", False),
    ("eq .Map .V1", "", False),
    ("eq .NonNilMap .NonNilMap", "", False),
]


@pytest.mark.parametrize(("expr", "truth", "ok"), CMP_TESTS, ids=[c[0] for c in CMP_TESTS])
def test_go_comparison(expr: str, truth: str, ok: bool) -> None:
    src = f"{{{{if {expr}}}}}true{{{{else}}}}false{{{{end}}}}"
    if ok:
        assert run(src, CMP) == truth
    else:
        with pytest.raises(GoTemplateError):
            run(src, CMP)


INTERFACE_DATA = {"Slice": [0, 1, 2, 3], "One": 1, "Two": 2, "Nil": MISSING, "Zero": 0}

# TestInterfaceValues, less its two cases that use call
INTERFACE_TESTS = [
    ("{{index .Nil 1}}", "ERROR: index of untyped nil"),
    ("{{index .Slice 2}}", "2"),
    ("{{index .Slice .Two}}", "2"),
    ("{{and (index .Slice 0) true}}", "0"),
    ("{{and .Zero true}}", "0"),
    ("{{and (index .Slice 1) false}}", "false"),
    ("{{and .One false}}", "false"),
    ("{{or (index .Slice 0) false}}", "false"),
    ("{{or .Zero false}}", "false"),
    ("{{or (index .Slice 1) true}}", "1"),
    ("{{or .One true}}", "1"),
    ("{{not (index .Slice 0)}}", "true"),
    ("{{not .Zero}}", "true"),
    ("{{not (index .Slice 1)}}", "false"),
    ("{{not .One}}", "false"),
    ("{{eq (index .Slice 0) .Zero}}", "true"),
    ("{{eq (index .Slice 1) .One}}", "true"),
    ("{{ne (index .Slice 0) .Zero}}", "false"),
    ("{{ne (index .Slice 1) .One}}", "false"),
    ("{{ge (index .Slice 0) .One}}", "false"),
    ("{{ge (index .Slice 1) .Zero}}", "true"),
    ("{{gt (index .Slice 0) .One}}", "false"),
    ("{{gt (index .Slice 1) .Zero}}", "true"),
    ("{{le (index .Slice 0) .One}}", "true"),
    ("{{le (index .Slice 1) .Zero}}", "false"),
    ("{{lt (index .Slice 0) .One}}", "true"),
    ("{{lt (index .Slice 1) .Zero}}", "false"),
]


@pytest.mark.parametrize(("src", "want"), INTERFACE_TESTS)
def test_go_interface_values(src: str, want: str) -> None:
    if want.startswith("ERROR:"):
        with pytest.raises(GoTemplateError, match=want.removeprefix("ERROR: ")):
            run(src, INTERFACE_DATA)
    else:
        assert run(src, INTERFACE_DATA) == want


# TestIsTrue, through {{if}}; channels and unsafe pointers have no twin
IS_TRUE = [
    (1, True),
    (0, False),
    (1.0, True),
    (0.0, False),
    (1 + 0j, True),
    (0j, False),
    (True, True),
    (False, False),
    ([1, 2], True),
    ([], False),
    (b"abc", True),
    (b"", False),
    ({"a": 1, "b": 2}, True),
    ({}, False),
    (None, False),
]


@pytest.mark.parametrize(("value", "want"), IS_TRUE)
def test_go_is_true(value: Any, want: bool) -> None:
    assert run("{{if .V}}true{{else}}false{{end}}", {"V": value}) == str(want).lower()


def test_go_missing_map_key() -> None:
    """TestMissingMapKey, Go's default option: a missing key prints ``<no value>``."""
    assert run("{{.x}} {{.y}}", {"x": 99}) == "99 <no value>"


def test_go_unterminated_string_error_names_the_line_of_the_quote() -> None:
    """TestUnterminatedStringError: the line of the opening quote, not of the end of the text."""
    with pytest.raises(GoTemplateError, match="unterminated raw quoted string") as e:
        parse("hello\n\n{{`unterminated\n\n\n\n}}\n some more\n\n")
    assert e.value.line == 3


def test_go_execute_gives_exec_error() -> None:
    """TestExecuteGivesExecError: a field of an int is an error naming the type."""
    with pytest.raises(GoTemplateError, match="field X in type int"):
        run("hello, {{.X.Y}}", 0)


def test_go_exec_error_in_a_nested_template() -> None:
    """TestExecError: an error three templates down keeps its message and line."""
    text = (
        'line 1\nline 2\nline 3\n{{template "one" .}}\n{{define "one"}}{{template "two" .}}{{end}}\n'
        '{{define "two"}}{{template "three" .}}{{end}}\n{{define "three"}}{{index "hi" $}}{{end}}'
    )
    with pytest.raises(GoTemplateError, match="error calling index: index out of range: 5") as e:
        run(text, 5)
    assert e.value.line == 7


def test_go_block() -> None:
    """TestBlock, its first half: a block is a definition and a call. (The second half redefines the
    block in a later Parse of a Clone, which Ollama never does; within one text it is Go's error.)"""
    assert run('a({{block "inner" .}}bar({{.}})baz{{end}})b', "hello") == "a(bar(hello)baz)b"
    with pytest.raises(GoTemplateError, match='multiple definition of template "inner"'):
        parse('a({{block "inner" .}}bar({{.}})baz{{end}})b{{define "inner"}}foo({{.}})bar{{end}}')


def test_go_issue31810_parenthesized_dot() -> None:
    assert run("{{ (.)  }}", "result") == "result"


def test_go_max_exec_depth() -> None:
    """TestMaxExecDepth: endless recursion ends in an error (here at this engine's depth limit)."""
    with pytest.raises(GoTemplateError, match="depth limit exceeded"):
        run('{{define "tmpl"}}{{template "tmpl" .}}{{end}}{{template "tmpl" .}}', None)

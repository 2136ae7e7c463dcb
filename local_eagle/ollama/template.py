"""Go ``text/template``, the part Ollama's TEMPLATE instruction uses, and Ollama's way of running it.

A prompt that differs from Ollama's by one newline is a different token sequence for the target
(and a worse one for a drafter trained on Ollama-formatted chats), so this follows Go's rules
rather than approximating them: the lexer and its ``{{-``/``-}}`` trimming, variable scopes,
truth, ``eq``/``lt`` typing, ``and``/``or`` short-circuiting, and how values print (a missing
map key prints ``<no value>``, a float prints like ``%v``).

Supported: text, comments, actions, pipelines with ``|``, parenthesised pipelines, fields,
variables (``$``, ``$x := ...``, ``$x = ...``), ``if``/``else if``/``else``, ``range`` (one or
two variables, ``else``, ``break``, ``continue``), ``with``/``else with``, ``define``/``template``/
``block``, and the functions ``and or not len index slice eq ne lt le gt ge print printf println
json``. Not supported: method calls, ``call``, ``html``, ``js``, ``urlquery``; they fail to parse
with a clear message.

:func:`render_ollama` adds what Ollama's ``template.Execute`` does around Go: merging
consecutive messages, collecting the system prompt, the ``.Messages`` path, and the legacy
``.System``/``.Prompt``/``.Response`` path that renders one turn at a time and cuts the last
turn after ``{{ .Response }}``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_eagle.errors import LocalEagleError

_SPACE = " \t\r\n"
_KEYWORDS = {"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"}
_FUNCS = {"and", "or", "not", "len", "index", "slice", "eq", "ne", "lt", "le", "gt", "ge", "print", "printf", "println"}
_FUNCS |= {"json"}
_UNSUPPORTED_FUNCS = {"call", "html", "js", "urlquery"}
_MAX_DEPTH = 100


class GoTemplateError(LocalEagleError):
    """A template that does not parse, or fails while executing; ``line`` counts from 1 in the template."""

    def __init__(self, msg: str, line: int | None = None) -> None:
        self.msg = msg
        self.line = line
        super().__init__(f"line {line}: {msg}" if line else msg)


class _Missing:
    """Go's invalid value: what a missing map key yields. Prints ``<no value>``, is false."""

    _inst: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class GoStruct(dict):  # type: ignore[type-arg]
    """A Go struct seen from a template: a missing field is an error, not a zero value (unlike a map).

    Keys are Go field names (``Role``, ``Content``); ``json_tags`` maps them to the names and
    ``omitempty`` options ``json.Marshal`` uses, e.g. ``{"Name": "name", "ID": "id,omitempty"}``.
    """

    def __init__(self, *args: Any, json_tags: Mapping[str, str] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.json_tags = dict(json_tags or {})


class GoJSON:
    """A value that prints as its JSON, like Ollama's ``api.Tools`` / ``ToolCallFunctionArguments``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GoJSON) and other.value == self.value

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"GoJSON({self.value!r})"


# ----------------------------------------------------------------------------------------------
# lexer


@dataclass(frozen=True)
class _Tok:
    kind: str  # space field var dot ident keyword bool nil number string lparen rparen pipe declare assign comma
    val: str
    line: int


@dataclass
class _Text:
    text: str
    line: int


@dataclass
class _ActionItem:
    toks: list[_Tok]
    line: int
    comment: bool = False


def _lex(src: str) -> list[_Text | _ActionItem]:
    items: list[_Text | _ActionItem] = []
    ltrims: list[bool] = []
    rtrims: list[bool] = []
    i, n, line = 0, len(src), 1
    while i < n:
        j = src.find("{{", i)
        if j < 0:
            items.append(_Text(src[i:], line))
            ltrims.append(False)
            rtrims.append(False)
            break
        if j > i:
            items.append(_Text(src[i:j], line))
            ltrims.append(False)
            rtrims.append(False)
            line += src.count("\n", i, j)
        start_line = line
        k = j + 2
        ltrim = k + 1 < n and src[k] == "-" and src[k + 1] in _SPACE
        if ltrim:
            line += src[k + 1] == "\n"
            k += 2
        if src.startswith("/*", k):
            end = src.find("*/", k + 2)
            if end < 0:
                raise GoTemplateError("unclosed comment", start_line)
            line += src.count("\n", k, end)
            k = end + 2
            rtrim = k < n and src[k] in _SPACE and src.startswith("-}}", k + 1)
            if rtrim:
                line += src[k] == "\n"
                k += 4
            elif src.startswith("}}", k):
                k += 2
            else:
                raise GoTemplateError("comment ends before closing delimiter", line)
            items.append(_ActionItem([], start_line, comment=True))
        else:
            toks, k, line, rtrim = _lex_action(src, k, line)
            items.append(_ActionItem(toks, start_line))
        ltrims.append(ltrim)
        rtrims.append(rtrim)
        i = k
    for idx, it in enumerate(items):
        if not isinstance(it, _ActionItem):
            continue
        if ltrims[idx] and idx > 0 and isinstance(items[idx - 1], _Text):
            prev = items[idx - 1]
            assert isinstance(prev, _Text)
            prev.text = prev.text.rstrip(_SPACE)
        if rtrims[idx] and idx + 1 < len(items) and isinstance(items[idx + 1], _Text):
            nxt = items[idx + 1]
            assert isinstance(nxt, _Text)
            nxt.text = nxt.text.lstrip(_SPACE)
    return [it for it in items if not (isinstance(it, _Text) and it.text == "")]


_IDENT_RE = re.compile(r"[A-Za-z0-9_]*")
_NUMBER_RE = re.compile(
    r"[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][+-]?\d+)?)i?"
)


def _lex_action(src: str, k: int, line: int) -> tuple[list[_Tok], int, int, bool]:
    """Tokens of one action starting at ``k``; returns (tokens, index after '}}', line, right trim)."""
    toks: list[_Tok] = []
    n = len(src)
    depth = 0
    while True:
        if k >= n:
            raise GoTemplateError("unclosed action", line)
        c = src[k]
        if c in _SPACE and src.startswith("-}}", k + 1):
            line += c == "\n"
            if depth:
                raise GoTemplateError("unclosed left paren", line)
            return toks, k + 4, line, True
        if src.startswith("}}", k):
            if depth:
                raise GoTemplateError("unclosed left paren", line)
            return toks, k + 2, line, False
        if c in _SPACE:
            e = k + 1
            while e < n and src[e] in _SPACE and not src.startswith("-}}", e + 1):
                e += 1
            toks.append(_Tok("space", src[k:e], line))
            line += src.count("\n", k, e)
            k = e
            continue
        if c == "=":
            toks.append(_Tok("assign", "=", line))
            k += 1
        elif c == ":":
            if not src.startswith(":=", k):
                raise GoTemplateError("expected :=", line)
            toks.append(_Tok("declare", ":=", line))
            k += 2
        elif c == "|":
            toks.append(_Tok("pipe", "|", line))
            k += 1
        elif c == ",":
            toks.append(_Tok("comma", ",", line))
            k += 1
        elif c == "(":
            depth += 1
            toks.append(_Tok("lparen", "(", line))
            k += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise GoTemplateError("unexpected right paren", line)
            toks.append(_Tok("rparen", ")", line))
            k += 1
        elif c == '"':
            e = k + 1
            while e < n and src[e] != '"':
                if src[e] == "\\":
                    e += 1
                if e < n and src[e] == "\n":
                    raise GoTemplateError("unterminated quoted string", line)
                e += 1
            if e >= n:
                raise GoTemplateError("unterminated quoted string", line)
            toks.append(_Tok("string", _unquote(src[k : e + 1], line), line))
            k = e + 1
        elif c == "`":
            e = src.find("`", k + 1)
            if e < 0:
                raise GoTemplateError("unterminated raw quoted string", line)
            toks.append(_Tok("string", src[k + 1 : e].replace("\r", ""), line))
            line += src.count("\n", k, e)
            k = e + 1
        elif c == "'":
            m = re.compile(r"'(\\.[^']*|[^'\\])'").match(src, k)
            if not m:
                raise GoTemplateError("unterminated character constant", line)
            ch = _unquote('"' + m.group(1) + '"', line) if m.group(1) != '"' else '"'
            toks.append(_Tok("number", str(ord(ch)), line))
            k = m.end()
        elif c == "$":
            m = _IDENT_RE.match(src, k + 1)
            assert m is not None
            toks.append(_Tok("var", "$" + m.group(0), line))
            k = m.end()
        elif c == "." and not (k + 1 < n and src[k + 1].isdigit()):
            m = _IDENT_RE.match(src, k + 1)
            assert m is not None
            if m.group(0):
                toks.append(_Tok("field", m.group(0), line))
            else:
                toks.append(_Tok("dot", ".", line))
            k = m.end()
        elif c.isdigit() or c in "+-." and k + 1 < n and (src[k + 1].isdigit() or src[k + 1] == "."):
            m = _NUMBER_RE.match(src, k)
            if not m or m.end() == k:
                raise GoTemplateError(f"bad number syntax: {src[k : k + 10]!r}", line)
            toks.append(_Tok("number", m.group(0), line))
            k = m.end()
        elif c.isalpha() or c == "_":
            m = _IDENT_RE.match(src, k)
            assert m is not None
            word = m.group(0)
            k = m.end()
            if k < n and not (src[k] in _SPACE or src[k] in ".,|:)(" or src.startswith("}}", k)):
                raise GoTemplateError(f"bad character {src[k]!r}", line)
            if word in ("true", "false"):
                toks.append(_Tok("bool", word, line))
            elif word == "nil":
                toks.append(_Tok("nil", word, line))
            elif word in _KEYWORDS:
                toks.append(_Tok("keyword", word, line))
            else:
                toks.append(_Tok("ident", word, line))
        else:
            raise GoTemplateError(f"unrecognized character in action: {c!r}", line)


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def _unquote(s: str, line: int) -> str:
    body, out, i = s[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(body):
            raise GoTemplateError(f"invalid syntax in string {s}", line)
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise GoTemplateError(f"invalid syntax in string {s}", line)
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif e in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or not all(d in "01234567" for d in digits):
                raise GoTemplateError(f"invalid syntax in string {s}", line)
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            raise GoTemplateError(f"invalid syntax in string {s}", line)
    return "".join(out)


# ----------------------------------------------------------------------------------------------
# parse tree


@dataclass
class Field:
    idents: tuple[str, ...]


@dataclass
class Variable:
    name: str
    idents: tuple[str, ...] = ()


@dataclass
class Dot:
    pass


@dataclass
class Nil:
    pass


@dataclass
class Literal:
    value: bool | int | float | str


@dataclass
class Identifier:
    name: str


@dataclass
class Chain:
    node: Any
    idents: tuple[str, ...]


@dataclass
class Command:
    args: list[Any]


@dataclass
class Pipe:
    cmds: list[Command]
    decl: list[str] = field(default_factory=list)
    assign: bool = False
    line: int = 0


@dataclass
class TextNode:
    text: str


@dataclass
class Action:
    pipe: Pipe


@dataclass
class If:
    pipe: Pipe
    body: list[Any]
    else_: list[Any] | None


@dataclass
class With:
    pipe: Pipe
    body: list[Any]
    else_: list[Any] | None


@dataclass
class Range:
    pipe: Pipe
    body: list[Any]
    else_: list[Any] | None


@dataclass
class TemplateCall:
    name: str
    pipe: Pipe | None
    line: int


@dataclass
class Break:
    pass


@dataclass
class Continue:
    pass


class _Cursor:
    def __init__(self, toks: list[_Tok], line: int) -> None:
        self.toks = toks
        self.i = 0
        self.line = line

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self) -> _Tok | None:
        t = self.peek()
        if t is not None:
            self.i += 1
            self.line = t.line
        return t

    def skip_space(self) -> None:
        while (t := self.peek()) is not None and t.kind == "space":
            self.i += 1

    def peek_nonspace(self) -> _Tok | None:
        self.skip_space()
        return self.peek()

    def next_nonspace(self) -> _Tok | None:
        self.skip_space()
        return self.next()

    def expect_end(self, context: str) -> None:
        t = self.next_nonspace()
        if t is not None:
            raise GoTemplateError(f"unexpected {t.val!r} in {context}", t.line)


class _Parser:
    def __init__(self, items: list[_Text | _ActionItem]) -> None:
        self.items = items
        self.i = 0
        self.vars: list[str] = ["$"]
        self.range_depth = 0
        self.defines: dict[str, list[Any]] = {}

    def parse(self) -> list[Any]:
        nodes, term, cur, line = self.parse_list(top=True)
        if term != "eof":
            raise GoTemplateError(f"unexpected {{{{{term}}}}}", line)
        return nodes

    def parse_list(self, top: bool = False) -> tuple[list[Any], str, _Cursor | None, int]:
        nodes: list[Any] = []
        while self.i < len(self.items):
            item = self.items[self.i]
            self.i += 1
            if isinstance(item, _Text):
                nodes.append(TextNode(item.text))
                continue
            if item.comment:
                continue
            cur = _Cursor(item.toks, item.line)
            first = cur.peek_nonspace()
            if first is None:
                raise GoTemplateError("missing value for command", item.line)
            if first.kind == "keyword":
                cur.next_nonspace()
                kw = first.val
                if kw in ("end", "else"):
                    if kw == "end":
                        cur.expect_end("end")
                    return nodes, kw, cur, item.line
                if kw in ("if", "with", "range"):
                    nodes.append(self.parse_control(kw, cur, item.line))
                elif kw in ("break", "continue"):
                    if self.range_depth == 0:
                        raise GoTemplateError(f"{{{{{kw}}}}} outside {{{{range}}}}", item.line)
                    cur.expect_end(kw)
                    nodes.append(Break() if kw == "break" else Continue())
                elif kw == "template":
                    nodes.append(self.parse_template_call(cur, item.line))
                elif kw in ("define", "block"):
                    if kw == "define" and not top:
                        raise GoTemplateError("unexpected {{define}}: define only at the top level", item.line)
                    name = self.expect_name(cur, kw, item.line)
                    pipe = None
                    if kw == "block":
                        pipe = self.parse_pipeline(cur, "block", item.line)
                    else:
                        cur.expect_end("define")
                    saved_vars, saved_depth = self.vars, self.range_depth
                    self.vars, self.range_depth = ["$"], 0
                    body, term, _, line = self.parse_list()
                    self.vars, self.range_depth = saved_vars, saved_depth
                    if term != "end":
                        raise GoTemplateError(f"unexpected EOF in {{{{{kw}}}}}", item.line)
                    self.defines[name] = body
                    if kw == "block":
                        nodes.append(TemplateCall(name, pipe, item.line))
                continue
            nodes.append(Action(self.parse_pipeline(cur, "command", item.line)))
        return nodes, "eof", None, self.items[-1].line if self.items else 1

    def expect_name(self, cur: _Cursor, context: str, line: int) -> str:
        t = cur.next_nonspace()
        if t is None or t.kind != "string":
            raise GoTemplateError(f"expected a quoted template name in {{{{{context}}}}}", line)
        return t.val

    def parse_template_call(self, cur: _Cursor, line: int) -> TemplateCall:
        name = self.expect_name(cur, "template", line)
        if cur.peek_nonspace() is None:
            return TemplateCall(name, None, line)
        return TemplateCall(name, self.parse_pipeline(cur, "template", line), line)

    def parse_control(self, kind: str, cur: _Cursor, line: int) -> Any:
        mark = len(self.vars)
        pipe = self.parse_pipeline(cur, kind, line)
        if kind == "range":
            self.range_depth += 1
        body, term, tcur, tline = self.parse_list()
        if kind == "range":
            self.range_depth -= 1
        else_: list[Any] | None = None
        if term == "eof":
            raise GoTemplateError(f"unexpected EOF: {{{{{kind}}}}} from line {line} has no {{{{end}}}}", line)
        if term == "else":
            assert tcur is not None
            nxt = tcur.peek_nonspace()
            if nxt is not None and nxt.kind == "keyword" and nxt.val in ("if", "with"):
                if nxt.val != kind:
                    raise GoTemplateError(f"{{{{else {nxt.val}}}}} inside {{{{{kind}}}}}", tline)
                tcur.next_nonspace()
                else_ = [self.parse_control(kind, tcur, tline)]
            else:
                tcur.expect_end("else")
                else_, term2, _, eline = self.parse_list()
                if term2 != "end":
                    what = "EOF" if term2 == "eof" else "{{else}}"
                    raise GoTemplateError(f"expected {{{{end}}}}; found {what}", eline)
        del self.vars[mark:]
        cls = {"if": If, "with": With, "range": Range}[kind]
        return cls(pipe, body, else_)

    def parse_pipeline(self, cur: _Cursor, context: str, line: int) -> Pipe:
        pipe = Pipe([], line=line)
        t = cur.peek_nonspace()
        if t is not None and t.kind == "var":
            save = cur.i
            cur.next_nonspace()
            after = cur.peek_nonspace()
            if after is not None and after.kind in ("declare", "assign"):
                cur.next_nonspace()
                pipe.decl.append(t.val)
                pipe.assign = after.kind == "assign"
                if not pipe.assign:
                    self.vars.append(t.val)
                elif t.val not in self.vars:
                    raise GoTemplateError(f"undefined variable {t.val!r}", t.line)
            elif after is not None and after.kind == "comma" and context == "range":
                cur.next_nonspace()
                t2 = cur.next_nonspace()
                after2 = cur.next_nonspace()
                if t2 is None or t2.kind != "var" or after2 is None or after2.kind != "declare":
                    raise GoTemplateError("range can only initialize variables", line)
                pipe.decl += [t.val, t2.val]
                self.vars += [t.val, t2.val]
            elif after is not None and after.kind == "comma":
                raise GoTemplateError(f"too many declarations in {context}", line)
            else:
                cur.i = save
        while True:
            t = cur.peek_nonspace()
            if t is None:
                break
            if t.kind == "pipe":
                if not pipe.cmds:
                    raise GoTemplateError("missing command before '|'", t.line)
                cur.next_nonspace()
                continue
            pipe.cmds.append(self.parse_command(cur, context))
        self.check_pipeline(pipe, context, line)
        return pipe

    def check_pipeline(self, pipe: Pipe, context: str, line: int) -> None:
        if not pipe.cmds:
            raise GoTemplateError(f"missing value for {context}", line)
        for i, c in enumerate(pipe.cmds[1:], start=2):
            if isinstance(c.args[0], Literal | Dot | Nil):
                raise GoTemplateError(f"non executable command in pipeline stage {i}", line)

    def parse_command(self, cur: _Cursor, context: str) -> Command:
        cmd = Command([])
        while True:
            cur.skip_space()
            t = cur.peek()
            if t is None or t.kind in ("pipe", "rparen"):
                break
            cmd.args.append(self.parse_operand(cur))
            t = cur.peek()
            if t is None or t.kind in ("pipe", "rparen"):
                break
            if t.kind != "space":
                raise GoTemplateError(f"unexpected {t.val!r} in operand", t.line)
        if not cmd.args:
            raise GoTemplateError("empty command", cur.line)
        return cmd

    def parse_operand(self, cur: _Cursor) -> Any:
        node = self.parse_term(cur)
        t = cur.peek()
        if t is not None and t.kind == "field":
            idents: list[str] = []
            while (t := cur.peek()) is not None and t.kind == "field":
                idents.append(t.val)
                cur.next()
            if isinstance(node, Field):
                return Field(node.idents + tuple(idents))
            if isinstance(node, Variable):
                return Variable(node.name, node.idents + tuple(idents))
            if isinstance(node, Literal | Nil | Dot):
                raise GoTemplateError("unexpected . after term", cur.line)
            return Chain(node, tuple(idents))
        return node

    def parse_term(self, cur: _Cursor) -> Any:
        t = cur.next_nonspace()
        assert t is not None
        if t.kind == "ident":
            if t.val in _UNSUPPORTED_FUNCS:
                raise GoTemplateError(f"function {t.val!r} is not supported by local-eagle's template engine", t.line)
            if t.val not in _FUNCS:
                raise GoTemplateError(f"function {t.val!r} not defined", t.line)
            return Identifier(t.val)
        if t.kind == "dot":
            return Dot()
        if t.kind == "nil":
            return Nil()
        if t.kind == "var":
            if t.val not in self.vars:
                raise GoTemplateError(f"undefined variable {t.val!r}", t.line)
            return Variable(t.val)
        if t.kind == "field":
            return Field((t.val,))
        if t.kind == "bool":
            return Literal(t.val == "true")
        if t.kind == "number":
            return Literal(_parse_number(t.val, t.line))
        if t.kind == "string":
            return Literal(t.val)
        if t.kind == "lparen":
            pipe = Pipe([], line=t.line)
            while True:
                p = cur.peek_nonspace()
                if p is None:
                    raise GoTemplateError("unclosed left paren", t.line)
                if p.kind == "rparen":
                    cur.next_nonspace()
                    break
                if p.kind == "pipe":
                    cur.next_nonspace()
                    continue
                pipe.cmds.append(self.parse_command(cur, "parenthesized pipeline"))
            self.check_pipeline(pipe, "parenthesized pipeline", t.line)
            return pipe
        raise GoTemplateError(f"unexpected {t.val!r} in command", t.line)


def _parse_number(text: str, line: int) -> int | float:
    """Go's rule for constants in a template: hex/octal/binary and plain digits are ints, anything
    with a point or an exponent is a float64."""
    s = text.replace("_", "")
    if s.endswith("i"):
        raise GoTemplateError(f"complex numbers are not supported: {text}", line)
    body = s.lstrip("+-")
    try:
        if body[:2].lower() in ("0x", "0b", "0o"):
            return int(s, 0)
        if any(c in body for c in ".eE"):
            return float(s)
        if len(body) > 1 and body.startswith("0"):
            return int(s, 8)
        return int(s, 10)
    except ValueError:
        raise GoTemplateError(f"bad number syntax: {text!r}", line) from None


# ----------------------------------------------------------------------------------------------
# template


@dataclass
class Template:
    """A parsed template. ``execute(data)`` renders it; ``identifiers()`` is Ollama's ``Vars()``."""

    root: list[Any]
    defines: dict[str, list[Any]] = field(default_factory=dict)
    source: str = ""

    def execute(self, data: Any) -> str:
        state = _State(self, data)
        state.walk_list(data, self.root)
        return "".join(state.out)

    def identifiers(self) -> set[str]:
        """Lower-cased field and variable names, as Ollama's ``Template.Vars`` collects them."""
        names: set[str] = set()
        for nodes in [self.root, *self.defines.values()]:
            for n in nodes:
                _identifiers(n, names)
        return {x.lower() for x in names}


def parse(source: str) -> Template:
    """Parse Go template text; raises :class:`GoTemplateError` with the line at fault."""
    p = _Parser(_lex(source))
    root = p.parse()
    t = Template(root, p.defines, source)
    _check_template_calls(t)
    return t


def _check_template_calls(t: Template) -> None:
    def visit(nodes: list[Any]) -> None:
        for n in nodes:
            if isinstance(n, TemplateCall) and n.name not in t.defines:
                raise GoTemplateError(f"no such template {n.name!r}", n.line)
            if isinstance(n, If | With | Range):
                visit(n.body)
                visit(n.else_ or [])

    for nodes in [t.root, *t.defines.values()]:
        visit(nodes)


def _identifiers(n: Any, out: set[str]) -> None:
    if isinstance(n, list):
        for c in n:
            _identifiers(c, out)
    elif isinstance(n, Action):
        _identifiers(n.pipe, out)
    elif isinstance(n, TemplateCall):
        if n.pipe is not None:
            _identifiers(n.pipe, out)
    elif isinstance(n, If | With | Range):
        _identifiers(n.pipe, out)
        _identifiers(n.body, out)
        if n.else_ is not None:
            _identifiers(n.else_, out)
    elif isinstance(n, Pipe):
        for c in n.cmds:
            for a in c.args:
                _identifiers(a, out)
    elif isinstance(n, Field):
        out.update(n.idents)
    elif isinstance(n, Variable):
        out.add(n.name)
        out.update(n.idents)


# ----------------------------------------------------------------------------------------------
# execution


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _State:
    def __init__(self, tmpl: Template, root: Any) -> None:
        self.tmpl = tmpl
        self.vars: list[tuple[str, Any]] = [("$", root)]
        self.out: list[str] = []
        self.depth = 0
        self.line = 0

    def error(self, msg: str) -> GoTemplateError:
        return GoTemplateError(f"executing template: {msg}", self.line or None)

    def walk_list(self, dot: Any, nodes: list[Any]) -> None:
        for n in nodes:
            self.walk(dot, n)

    def walk(self, dot: Any, n: Any) -> None:
        if isinstance(n, TextNode):
            self.out.append(n.text)
        elif isinstance(n, Action):
            self.line = n.pipe.line
            val = self.eval_pipeline(dot, n.pipe)
            if not n.pipe.decl:
                self.out.append(self.printable(val))
        elif isinstance(n, If | With):
            mark = len(self.vars)
            self.line = n.pipe.line
            val = self.eval_pipeline(dot, n.pipe)
            if truth(val):
                self.walk_list(val if isinstance(n, With) else dot, n.body)
            elif n.else_ is not None:
                self.walk_list(dot, n.else_)
            del self.vars[mark:]
        elif isinstance(n, Range):
            self.walk_range(dot, n)
        elif isinstance(n, TemplateCall):
            self.line = n.line
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                raise self.error(f"exceeded maximum template depth ({_MAX_DEPTH})")
            new_dot = self.eval_pipeline(dot, n.pipe) if n.pipe is not None else MISSING
            saved = self.vars
            self.vars = [("$", new_dot)]
            self.walk_list(new_dot, self.tmpl.defines[n.name])
            self.vars = saved
            self.depth -= 1
        elif isinstance(n, Break):
            raise _Break
        elif isinstance(n, Continue):
            raise _Continue
        else:  # pragma: no cover - the parser makes no other nodes
            raise self.error(f"unknown node {n!r}")

    def walk_range(self, dot: Any, n: Range) -> None:
        mark = len(self.vars)
        self.line = n.pipe.line
        val = self.eval_pipe_value(dot, n.pipe)
        if isinstance(val, GoJSON):
            val = val.value
        pairs: Iterator[tuple[Any, Any]]
        if val is MISSING or val is None:
            pairs = iter(())
        elif isinstance(val, list | tuple):
            pairs = iter(enumerate(val))
        elif isinstance(val, dict):
            pairs = iter((k, val[k]) for k in sorted(val, key=_sort_key))
        elif isinstance(val, int) and not isinstance(val, bool):
            if len(n.pipe.decl) > 1:
                raise self.error("can't use two variables when ranging over an int")
            pairs = iter((i, i) for i in range(val))
        else:
            raise self.error(f"range can't iterate over {self.printable(val)}")
        ran = False
        for key, elem in pairs:
            ran = True
            inner = len(self.vars)
            if n.pipe.assign:
                if len(n.pipe.decl) == 1:
                    self.set_var(n.pipe.decl[0], elem)
                elif len(n.pipe.decl) == 2:
                    self.set_var(n.pipe.decl[0], key)
                    self.set_var(n.pipe.decl[1], elem)
            elif len(n.pipe.decl) == 1:
                self.vars.append((n.pipe.decl[0], elem))
            elif len(n.pipe.decl) == 2:
                self.vars.append((n.pipe.decl[0], key))
                self.vars.append((n.pipe.decl[1], elem))
            try:
                self.walk_list(elem, n.body)
            except _Continue:
                pass
            except _Break:
                del self.vars[inner:]
                break
            del self.vars[inner:]
        if not ran and n.else_ is not None:
            self.walk_list(dot, n.else_)
        del self.vars[mark:]

    def set_var(self, name: str, value: Any) -> None:
        for i in range(len(self.vars) - 1, -1, -1):
            if self.vars[i][0] == name:
                self.vars[i] = (name, value)
                return
        raise self.error(f"undefined variable: {name}")

    def get_var(self, name: str) -> Any:
        for n, v in reversed(self.vars):
            if n == name:
                return v
        raise self.error(f"undefined variable: {name}")

    def eval_pipe_value(self, dot: Any, pipe: Pipe) -> Any:
        value: Any = _NO_FINAL
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        return value

    def eval_pipeline(self, dot: Any, pipe: Pipe) -> Any:
        value = self.eval_pipe_value(dot, pipe)
        for name in pipe.decl:
            if pipe.assign:
                self.set_var(name, value)
            else:
                self.vars.append((name, value))
        return value

    def eval_command(self, dot: Any, cmd: Command, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, Identifier):
            return self.call(dot, first.name, cmd.args[1:], final)
        if len(cmd.args) > 1 or final is not _NO_FINAL:
            raise self.error(f"can't give argument to non-function {_describe(first)}")
        if isinstance(first, Nil):
            raise self.error("nil is not a command")
        return self.eval_arg(dot, first)

    def eval_arg(self, dot: Any, node: Any) -> Any:
        if isinstance(node, Field):
            return self.eval_fields(dot, node.idents, ".")
        if isinstance(node, Variable):
            return self.eval_fields(self.get_var(node.name), node.idents, node.name)
        if isinstance(node, Chain):
            return self.eval_fields(self.eval_arg(dot, node.node), node.idents, "(...)")
        if isinstance(node, Pipe):
            mark = len(self.vars)
            v = self.eval_pipeline(dot, node)
            del self.vars[mark:]
            return v
        if isinstance(node, Dot):
            return dot
        if isinstance(node, Nil):
            return None
        if isinstance(node, Literal):
            return node.value
        if isinstance(node, Identifier):
            return self.call(dot, node.name, [], _NO_FINAL)
        raise self.error(f"can't evaluate {node!r}")  # pragma: no cover

    def eval_fields(self, receiver: Any, idents: Sequence[str], start: str) -> Any:
        path = start
        for name in idents:
            path = f"{path.rstrip('.')}.{name}"
            if receiver is MISSING or receiver is None:
                raise self.error(f"nil pointer evaluating {path}")
            if isinstance(receiver, GoJSON):
                receiver = receiver.value
            if isinstance(receiver, GoStruct):
                if name not in receiver:
                    raise self.error(f"can't evaluate field {name} in {path}")
                receiver = receiver[name]
            elif isinstance(receiver, Mapping):
                receiver = receiver.get(name, MISSING)
            else:
                raise self.error(f"can't evaluate field {name} in type {_go_type(receiver)}")
        return receiver

    def call(self, dot: Any, name: str, args: list[Any], final: Any) -> Any:
        if name in ("and", "or"):
            nodes = list(args)
            if not nodes and final is _NO_FINAL:
                raise self.error(f"wrong number of args for {name}: want at least 1 got 0")
            values: list[Callable[[], Any]] = [lambda a=a: self.eval_arg(dot, a) for a in nodes]
            if final is not _NO_FINAL:
                values.append(lambda: final)
            v: Any = None
            for get in values:
                v = get()
                if truth(v) != (name == "and"):
                    return v
            return v
        vals = [self.eval_arg(dot, a) for a in args]
        if final is not _NO_FINAL:
            vals.append(final)
        try:
            return _call_builtin(name, vals)
        except _FuncError as e:
            raise self.error(f"error calling {name}: {e}") from None

    def printable(self, v: Any) -> str:
        if v is MISSING:
            return "<no value>"
        return go_format(v)


class _NoFinal:
    pass


_NO_FINAL = _NoFinal()


def _describe(node: Any) -> str:
    if isinstance(node, Field):
        return "." + ".".join(node.idents)
    if isinstance(node, Variable):
        return node.name + "".join("." + i for i in node.idents)
    if isinstance(node, Literal):
        return repr(node.value)
    return type(node).__name__.lower()


def truth(v: Any) -> bool:
    """Go template truth: false, 0, nil, a missing value, and empty strings, slices and maps are false."""
    if v is MISSING or v is None:
        return False
    if isinstance(v, GoJSON):
        return truth(v.value)
    if isinstance(v, GoStruct):
        return True
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v != 0
    if isinstance(v, str | list | tuple | dict):
        return len(v) > 0
    return True


def _go_type(v: Any) -> str:
    if v is None or v is MISSING:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "slice"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _sort_key(k: Any) -> tuple[int, Any]:
    return (0, k) if isinstance(k, int | float) else (1, str(k))


# ----------------------------------------------------------------------------------------------
# functions


class _FuncError(Exception):
    pass


def _kind(v: Any) -> str:
    if isinstance(v, GoJSON):
        return _kind(v.value)
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if v is None or v is MISSING:
        return "nil"
    return "other"


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise _FuncError("missing argument for comparison")
    ka = _kind(a)
    for b in others:
        kb = _kind(b)
        if ka == "nil" or kb == "nil":
            if ka == kb:
                return True
            continue
        if ka != kb:
            raise _FuncError("incompatible types for comparison")
        if ka == "other":
            raise _FuncError("non-comparable type")
        if a == b:
            return True
    return False


def _less(a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka not in ("int", "float", "string") or kb not in ("int", "float", "string"):
        raise _FuncError("invalid type for comparison")
    if ka != kb:
        raise _FuncError("incompatible types for comparison")
    return bool(a < b)


def _index_arg(v: Any, cap: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise _FuncError(f"cannot index slice/array with type {_go_type(v)}")
    if v < 0 or v > cap:
        raise _FuncError(f"index out of range: {v}")
    return v


def _call_builtin(name: str, a: list[Any]) -> Any:
    def n_args(want: int) -> None:
        if len(a) != want:
            raise _FuncError(f"wrong number of args for {name}: want {want} got {len(a)}")

    if name == "not":
        n_args(1)
        return not truth(a[0])
    if name == "eq":
        if not a:
            raise _FuncError("wrong number of args for eq: want at least 1 got 0")
        return _eq(a[0], *a[1:])
    if name == "ne":
        n_args(2)
        return not _eq(a[0], a[1])
    if name in ("lt", "le", "gt", "ge"):
        n_args(2)
        x, y = a
        if name == "lt":
            return _less(x, y)
        if name == "le":
            return _less(x, y) or _eq(x, y)
        if name == "gt":
            return not (_less(x, y) or _eq(x, y))
        return not _less(x, y)
    if name == "len":
        n_args(1)
        v = a[0].value if isinstance(a[0], GoJSON) else a[0]
        if isinstance(v, str):
            return len(v.encode("utf-8"))
        if isinstance(v, list | tuple | dict):
            return len(v)
        raise _FuncError(f"len of type {_go_type(v)}")
    if name == "index":
        if not a:
            raise _FuncError("wrong number of args for index: want at least 1 got 0")
        v = a[0]
        for ix in a[1:]:
            v = v.value if isinstance(v, GoJSON) else v
            if isinstance(v, list | tuple):
                i = _index_arg(ix, len(v) - 1)
                v = v[i]
            elif isinstance(v, str):
                i = _index_arg(ix, len(v.encode()) - 1)
                v = v.encode()[i]
            elif isinstance(v, dict):
                v = v.get(ix, MISSING)
            elif v is None or v is MISSING:
                raise _FuncError("index of untyped nil")
            else:
                raise _FuncError(f"can't index item of type {_go_type(v)}")
        return v
    if name == "slice":
        if not a:
            raise _FuncError("wrong number of args for slice: want at least 1 got 0")
        v = a[0].value if isinstance(a[0], GoJSON) else a[0]
        if len(a) > 4:
            raise _FuncError(f"too many slice indexes: {len(a) - 1}")
        if isinstance(v, str):
            if len(a) == 4:
                raise _FuncError("cannot 3-index slice a string")
            b = v.encode("utf-8")
            idx = [_index_arg(x, len(b)) for x in a[1:]]
            lo, hi = (idx + [len(b)])[:2] if idx else (0, len(b))
            if lo > hi:
                raise _FuncError(f"invalid slice index: {lo} > {hi}")
            return b[lo:hi].decode("utf-8", errors="replace")
        if isinstance(v, list | tuple):
            idx = [_index_arg(x, len(v)) for x in a[1:]]
            lo = idx[0] if idx else 0
            hi = idx[1] if len(idx) > 1 else len(v)
            if lo > hi:
                raise _FuncError(f"invalid slice index: {lo} > {hi}")
            return list(v[lo:hi])
        if v is None or v is MISSING:
            raise _FuncError("slice of untyped nil")
        raise _FuncError(f"can't slice item of type {_go_type(v)}")
    args = [None if x is MISSING else x for x in a]
    if name == "json":
        n_args(1)
        return go_json(args[0])
    if name == "print":
        out = []
        for i, x in enumerate(args):
            if i > 0 and not isinstance(x, str) and not isinstance(args[i - 1], str):
                out.append(" ")
            out.append(go_format(x))
        return "".join(out)
    if name == "println":
        return " ".join(go_format(x) for x in args) + "\n"
    if name == "printf":
        if not args or not isinstance(args[0], str):
            raise _FuncError("printf needs a format string")
        return go_sprintf(args[0], args[1:])
    raise _FuncError(f"function {name!r} not defined")  # pragma: no cover


# ----------------------------------------------------------------------------------------------
# printing like Go's fmt and encoding/json


def _digits(x: float) -> tuple[str, str, int]:
    """Shortest round-trip digits of a finite non-zero float: (sign, digits, decimal point position)."""
    r = repr(abs(x))
    mant, _, exp_s = r.partition("e")
    int_part, _, frac = mant.partition(".")
    allx = int_part + frac
    stripped = allx.lstrip("0")
    point = len(int_part) + (int(exp_s) if exp_s else 0) - (len(allx) - len(stripped))
    return ("-" if x < 0 else ""), (stripped.rstrip("0") or "0"), point


def _fixed(sign: str, digits: str, point: int) -> str:
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _exponent(sign: str, digits: str, point: int, min_exp_digits: int) -> str:
    exp = point - 1
    m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{m}e{'-' if exp < 0 else '+'}{abs(exp):0{min_exp_digits}d}"


def go_float(x: float) -> str:
    """Go's ``%v`` for a float64 (``strconv`` 'g', shortest): exponent form when the exponent is
    below -4 or at least 6, so 1e6 prints ``1e+06`` and 123456.0 prints ``123456``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    sign, digits, point = _digits(x)
    exp = point - 1
    if exp < -4 or exp >= 6:
        return _exponent(sign, digits, point, 2)
    return _fixed(sign, digits, point)


def go_format(v: Any) -> str:
    """How Go's fmt prints a value with ``%v`` (what an action like ``{{ .X }}`` outputs)."""
    if v is None:
        return "<nil>"
    if v is MISSING:
        return "<no value>"
    if isinstance(v, GoJSON):
        return go_json(v.value)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return "[" + " ".join(str(b) for b in v) + "]"
    if isinstance(v, GoStruct):
        return "{" + " ".join(go_format(x) for x in v.values()) + "}"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{go_format(k)}:{go_format(v[k])}" for k in sorted(v, key=_sort_key)) + "]"
    if isinstance(v, list | tuple):
        return "[" + " ".join(go_format(x) for x in v) + "]"
    return str(v)


def _json_float(x: float) -> str:
    """``encoding/json``: shortest digits, plain unless below 1e-6 or from 1e21 up (then ``1e-7``)."""
    if math.isnan(x) or math.isinf(x):
        raise _FuncError(f"json: unsupported value: {go_float(x)}")
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    sign, digits, point = _digits(x)
    if abs(x) < 1e-6 or abs(x) >= 1e21:
        return _exponent(sign, digits, point, 1)
    return _fixed(sign, digits, point)


_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _json_string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    for k, rep in _JSON_ESCAPES.items():
        out = out.replace(k, rep)
    return out


def go_json(v: Any) -> str:
    """Go's ``json.Marshal``: no spaces, map keys sorted, struct fields in order, ``<>&`` escaped."""
    if isinstance(v, GoJSON):
        return go_json(v.value)
    if v is None or v is MISSING:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _json_float(v)
    if isinstance(v, str):
        return _json_string(v)
    if isinstance(v, GoStruct):
        parts = []
        for k, x in v.items():
            name, _, opts = v.json_tags.get(k, k).partition(",")
            if name == "-" or ("omitempty" in opts.split(",") and not truth(x)):
                continue
            parts.append(f"{_json_string(name)}:{go_json(x)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: str(k))
        return "{" + ",".join(f"{_json_string(str(k))}:{go_json(v[k])}" for k in keys) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    raise _FuncError(f"json: unsupported type {type(v).__name__}")


_VERB_RE = re.compile(r"%([-+# 0]*)(\d+|\*)?(?:\.(\d+|\*)?)?([a-zA-Z%])")


def go_sprintf(fmt: str, args: Sequence[Any]) -> str:
    """Go's ``fmt.Sprintf`` for the verbs templates use: ``%s %v %d %q %t %f %g %e %x %X %c %%``."""
    out: list[str] = []
    pos, ai = 0, 0
    for m in _VERB_RE.finditer(fmt):
        out.append(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        if verb == "%":
            out.append("%")
            continue
        if ai >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        x = args[ai]
        ai += 1
        out.append(_pad(_format_verb(verb, x, prec), flags, width))
    out.append(fmt[pos:])
    if ai < len(args):
        extra = ", ".join(f"{_go_type(x)}={go_format(x)}" for x in args[ai:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def _format_verb(verb: str, x: Any, prec: str | None) -> str:
    p = int(prec) if prec and prec != "*" else None
    if verb == "v":
        return go_format(x)
    if verb == "s":
        s = go_format(x)
        return s[:p] if p is not None else s
    if verb == "q":
        return _json_string(x) if isinstance(x, str) else f"%!q({_go_type(x)}={go_format(x)})"
    if verb == "t":
        return go_format(x) if isinstance(x, bool) else f"%!t({_go_type(x)}={go_format(x)})"
    if verb == "c" and isinstance(x, int) and not isinstance(x, bool):
        return chr(x)
    if verb in "dxXob" and isinstance(x, int) and not isinstance(x, bool):
        return {"d": str(x), "x": f"{x:x}", "X": f"{x:X}", "o": f"{x:o}", "b": f"{x:b}"}[verb]
    if verb in "xX" and isinstance(x, str):
        h = x.encode().hex()
        return h if verb == "x" else h.upper()
    if verb in "feEgG" and isinstance(x, int | float) and not isinstance(x, bool):
        if verb == "g" and p is None:
            return go_float(float(x))
        return f"{float(x):{'.' + str(p if p is not None else 6)}{verb}}"
    return f"%!{verb}({_go_type(x)}={go_format(x)})"


def _pad(s: str, flags: str, width: str | None) -> str:
    if not width or width == "*":
        return s
    w = int(width)
    if len(s) >= w:
        return s
    if "-" in flags:
        return s + " " * (w - len(s))
    if "0" in flags and s.lstrip("-").replace(".", "").isdigit():
        sign = "-" if s.startswith("-") else ""
        return sign + "0" * (w - len(s)) + s.lstrip("-")
    return " " * (w - len(s)) + s


# ----------------------------------------------------------------------------------------------
# Ollama's template.Execute


def _tool_call(tc: Mapping[str, Any]) -> GoStruct:
    fn = tc.get("function", tc)
    function = GoStruct(
        Index=int(fn.get("index", 0)),
        Name=str(fn.get("name", "")),
        Arguments=GoJSON(dict(fn.get("arguments") or {})),
        json_tags={"Index": "index,omitempty", "Name": "name", "Arguments": "arguments"},
    )
    tags = {"ID": "id,omitempty", "Function": "function"}
    return GoStruct(ID=str(tc.get("id", "")), Function=function, json_tags=tags)


def _tool_property(p: Mapping[str, Any]) -> GoStruct:
    tags = {"Type": "type", "Items": "items,omitempty", "Description": "description", "Enum": "enum,omitempty"}
    return GoStruct(
        Type=p.get("type", ""),
        Items=p.get("items"),
        Description=p.get("description", ""),
        Enum=list(p.get("enum") or []),
        json_tags=tags,
    )


def go_tool(tool: Mapping[str, Any]) -> GoJSON:
    """An ``api.Tool`` from an OpenAI-style dict; it prints as its JSON, struct fields in order and
    the parameter properties as a map with sorted keys, as ``json.Marshal`` writes it."""
    fn = tool.get("function", {})
    params = fn.get("parameters") or {}
    parameters = GoStruct(
        Type=params.get("type", "object"),
        Required=list(params.get("required") or []),
        Properties={k: _tool_property(v) for k, v in (params.get("properties") or {}).items()},
        json_tags={"Type": "type", "Required": "required,omitempty", "Properties": "properties"},
    )
    function = GoStruct(
        Name=fn.get("name", ""),
        Description=fn.get("description", ""),
        Parameters=parameters,
        json_tags={"Name": "name", "Description": "description,omitempty", "Parameters": "parameters"},
    )
    tags = {"Type": "type", "Function": "function"}
    return GoJSON(GoStruct(Type=tool.get("type", "function"), Function=function, json_tags=tags))


def go_message(m: Mapping[str, Any]) -> GoStruct:
    """An ``api.Message`` as templates see it, from a ``{"role": ..., "content": ...}`` dict."""
    return GoStruct(
        Role=str(m.get("role", "")).lower(),
        Content=str(m.get("content") or ""),
        Thinking=str(m.get("thinking") or ""),
        Images=list(m.get("images") or []),
        ToolCalls=[_tool_call(tc) for tc in m.get("tool_calls") or []],
        ToolName=str(m.get("tool_name") or m.get("name") or ""),
        ToolCallID=str(m.get("tool_call_id") or ""),
    )


def collate(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[GoStruct]]:
    """Ollama's ``collate``: all system contents joined by a blank line, and consecutive messages
    of the same role (except ``tool``) merged with a blank line between them."""
    system: list[str] = []
    out: list[GoStruct] = []
    for raw in messages:
        m = go_message(raw)
        if m["Role"] == "system":
            system.append(m["Content"])
        if out and out[-1]["Role"] == m["Role"] and m["Role"] != "tool":
            out[-1]["Content"] = out[-1]["Content"] + "\n\n" + m["Content"]
        else:
            out.append(m)
    return "\n\n".join(system), out


def with_response(t: Template) -> Template:
    """Ollama appends ``{{ .Response }}`` to a template that names neither messages nor response."""
    if {"messages", "response"} & t.identifiers():
        return t
    return Template([*t.root, Action(Pipe([Command([Field(("Response",))])]))], t.defines, t.source)


def cut_after_response(nodes: list[Any]) -> list[Any]:
    """Ollama's ``deleteNode``: keep everything up to and including the first ``.Response`` field,
    drop what follows, so the last turn ends where the model's answer begins."""
    cut = False

    def hit(n: Any) -> bool:
        nonlocal cut
        if isinstance(n, Field) and "Response" in n.idents:
            cut = True
            return False
        return cut

    def walk(n: Any) -> Any:
        if hit(n):
            return None
        if isinstance(n, list):
            return [c for c in (walk(c) for c in n) if c is not None]
        if isinstance(n, If | With | Range):
            body = walk(n.body)
            else_ = None if n.else_ is None else walk(n.else_)
            return type(n)(n.pipe, body if body is not None else [], else_)
        if isinstance(n, Action):
            p = walk(n.pipe)
            return None if p is None else Action(p)
        if isinstance(n, Pipe):
            cmds = []
            for c in n.cmds:
                args = [a for a in (walk(a) for a in c.args) if a is not None]
                if not args:
                    return None
                cmds.append(Command(args))
            return Pipe(cmds, n.decl, n.assign, n.line) if cmds else None
        return n

    return walk(nodes) or []


def render_ollama(
    template: str | Template,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    think: bool = False,
    think_set: bool = False,
) -> str:
    """Render a chat the way Ollama's ``template.Execute`` does.

    ``messages`` are dicts with ``role`` and ``content`` (and optionally ``tool_calls``,
    ``thinking``, ``tool_name``), system messages included. A template that uses ``.Messages``
    runs once over the merged messages with ``.System`` set to all system contents; any other
    template runs once per turn with ``.System``, ``.Prompt`` and ``.Response``, and the last
    turn stops right after ``{{ .Response }}``.
    """
    t = parse(template) if isinstance(template, str) else template
    t = with_response(t)
    system, msgs = collate(messages)
    names = t.identifiers()
    if "messages" in names or "document" in names:
        data = {
            "System": system,
            "Messages": msgs,
            "Tools": GoJSON([go_tool(x) for x in tools]) if tools else [],
            "Response": "",
            "Think": think,
            "IsThinkSet": think_set,
            "Query": "",
            "Document": "",
            "Instruction": "",
        }
        return t.execute(data)

    out: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def run(tmpl: Template) -> None:
        out.append(tmpl.execute({**turn, "Think": think, "IsThinkSet": think_set}))
        turn.update(System="", Prompt="", Response="")

    for m in msgs:
        role = m["Role"]
        if role == "system":
            if turn["Prompt"] or turn["Response"]:
                run(t)
            turn["System"] = m["Content"]
        elif role == "user":
            if turn["Response"]:
                run(t)
            turn["Prompt"] = m["Content"]
        elif role == "assistant":
            turn["Response"] = m["Content"]
    run(Template(cut_after_response(t.root), t.defines, t.source))
    return "".join(out)

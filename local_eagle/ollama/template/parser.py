"""The parser: lexer items to a parse tree, checked as Go checks it (scopes, functions, definitions).

What Go refuses when parsing is refused here, with the line at fault, so that a Modelfile with a
bad TEMPLATE is refused when it is read, as Ollama refuses it on ``create``; what Go only finds
when executing (a ``template`` call to a name never defined, an assignment to an undeclared
variable) fails only when executed, so a template Ollama runs is never refused here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from local_eagle.ollama.template.executor import Template
from local_eagle.ollama.template.functions import OLLAMA_FUNCS
from local_eagle.ollama.template.lexer import ActionItem, TextItem, Tok, lex
from local_eagle.ollama.template.limits import DEPTH_MESSAGE, MAX_DEPTH, MAX_SOURCE
from local_eagle.ollama.template.nodes import (
    Action,
    Break,
    Chain,
    Command,
    Continue,
    Dot,
    Field,
    Identifier,
    If,
    Literal,
    Nil,
    Pipe,
    Range,
    TemplateCall,
    TextNode,
    Variable,
    With,
)
from local_eagle.ollama.template.numbers import constant
from local_eagle.ollama.template.sprintf import go_quote
from local_eagle.ollama.template.values import GoTemplateError

_FUNCS = {"and", "or", "not", "len", "index", "slice", "eq", "ne", "lt", "le", "gt", "ge", "print", "printf", "println"}
_FUNCS |= {"json"} | OLLAMA_FUNCS  # Ollama's template.Parse adds its FuncMap
_UNSUPPORTED_FUNCS = {"call", "html", "js", "urlquery"}


def parse(source: str) -> Template:
    """Parse Go template text; raises :class:`GoTemplateError` with the line at fault."""
    if len(source) > MAX_SOURCE:
        raise GoTemplateError(f"size limit exceeded: {len(source)} characters, more than {MAX_SOURCE}")
    p = _Parser(lex(source))
    try:
        root = p.parse()
    except RecursionError:  # a caller already deep in its stack; MAX_DEPTH keeps the parser's own use low
        raise GoTemplateError(f"{DEPTH_MESSAGE} (Python's recursion limit was reached)") from None
    return Template(root, p.defines, source)


def _is_empty(nodes: list[Any]) -> bool:
    """Go's ``parse.IsEmptyTree``: nothing but white space text, so a later definition may replace it."""
    return all(isinstance(n, TextNode) and not n.text.strip(" \t\r\n\v\f") for n in nodes)


class _Cursor:
    def __init__(self, toks: list[Tok], line: int, col: int = 0) -> None:
        self.toks = toks
        self.i = 0
        self.line = line
        self.start = (line, col)  # where the action's "{{" is, for errors about the whole action

    def peek(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self) -> Tok | None:
        t = self.peek()
        if t is not None:
            self.i += 1
            self.line = t.line
        return t

    def skip_space(self) -> None:
        while (t := self.peek()) is not None and t.kind == "space":
            self.i += 1

    def peek_nonspace(self) -> Tok | None:
        self.skip_space()
        return self.peek()

    def next_nonspace(self) -> Tok | None:
        self.skip_space()
        return self.next()

    def expect_end(self, context: str) -> None:
        t = self.next_nonspace()
        if t is not None:
            raise GoTemplateError(f"unexpected {go_quote(t.val)} in {context}", t.line)


class _Scope:
    """The variables in scope while parsing: a stack, since a block's declarations end with it, and
    counts, so that checking a use does not scan a stack that a template can make very long."""

    def __init__(self) -> None:
        self.stack = ["$"]
        self.count: Counter[str] = Counter(self.stack)

    def __contains__(self, name: str) -> bool:
        return self.count.get(name, 0) > 0

    def declare(self, name: str) -> None:
        self.stack.append(name)
        self.count[name] += 1

    def mark(self) -> int:
        return len(self.stack)

    def drop(self, mark: int) -> None:
        """End a block: forget what was declared since ``mark``."""
        self.count.subtract(self.stack[mark:])
        del self.stack[mark:]


class _Parser:
    def __init__(self, items: list[TextItem | ActionItem]) -> None:
        self.items = items
        self.i = 0
        self.vars = _Scope()
        self.range_depth = 0
        self.defines: dict[str, list[Any]] = {}
        self.empty: dict[str, bool] = {}  # whether each definition is empty, found once: redefinitions ask again
        self.depth = 0

    def nest(self, at: tuple[int, int]) -> None:
        """Enter a block or a parenthesis. Every later walk of the tree (checks, execution, Ollama's
        cut after ``.Response``) recurses once per level, so the nesting is bounded here, once."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            line, col = at
            raise GoTemplateError(DEPTH_MESSAGE, line, col or None)

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
            if isinstance(item, TextItem):
                nodes.append(TextNode(item.text))
                continue
            if item.comment:
                continue
            cur = _Cursor(item.toks, item.line, item.col)
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
                    self.vars, self.range_depth = _Scope(), 0
                    self.nest(cur.start)
                    body, term, _, line = self.parse_list()
                    self.depth -= 1
                    self.vars, self.range_depth = saved_vars, saved_depth
                    if term != "end":
                        raise GoTemplateError(f"unexpected EOF in {{{{{kw}}}}}", item.line)
                    empty = _is_empty(body)
                    if name in self.defines and not self.empty[name] and not empty:
                        raise GoTemplateError(f'template: multiple definition of template "{name}"', item.line)
                    if name not in self.defines or not empty:
                        self.defines[name], self.empty[name] = body, empty
                    if kw == "block":
                        nodes.append(TemplateCall(name, pipe, item.line, item.col))
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
            return TemplateCall(name, None, line, cur.start[1])
        return TemplateCall(name, self.parse_pipeline(cur, "template", line), line, cur.start[1])

    def parse_control(self, kind: str, cur: _Cursor, line: int) -> Any:
        self.nest(cur.start)
        mark = self.vars.mark()
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
        self.vars.drop(mark)
        self.depth -= 1
        cls = {"if": If, "with": With, "range": Range}[kind]
        return cls(pipe, body, else_)

    def parse_pipeline(self, cur: _Cursor, context: str, line: int) -> Pipe:
        pipe = Pipe([], line=line, col=cur.start[1])
        t = cur.peek_nonspace()
        if t is not None and t.kind == "var":
            save = cur.i
            cur.next_nonspace()
            after = cur.peek_nonspace()
            if after is not None and after.kind in ("declare", "assign"):
                cur.next_nonspace()
                pipe.decl.append(t.val)
                pipe.assign = after.kind == "assign"
                # Go adds an assigned name to the parse scope too; an undeclared one fails when executed
                self.vars.declare(t.val)
            elif after is not None and after.kind == "comma" and context == "range":
                # {{ range $k, $v := ... }} or, since Go 1.22, {{ range $k, $v = ... }}
                cur.next_nonspace()
                at_t2 = cur.i
                t2 = cur.next_nonspace()
                after2 = cur.next_nonspace()
                if t2 is not None and t2.kind != "var":
                    raise GoTemplateError("range can only initialize variables", line)
                if t2 is None or after2 is None or after2.kind not in ("declare", "assign"):
                    # Go: "$k," declares $k alone (not in scope) and what follows is the pipeline
                    pipe.decl.append(t.val)
                    cur.i = at_t2
                else:
                    pipe.decl += [t.val, t2.val]
                    pipe.assign = after2.kind == "assign"
                    self.vars.declare(t.val)
                    self.vars.declare(t2.val)
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
                raise GoTemplateError(f"unexpected {go_quote(t.val)} in operand", t.line)
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
                raise GoTemplateError(
                    f"function {go_quote(t.val)} is not supported by local-eagle's template engine", t.line
                )
            if t.val not in _FUNCS:
                raise GoTemplateError(f"function {go_quote(t.val)} not defined", t.line)
            return Identifier(t.val)
        if t.kind == "dot":
            return Dot()
        if t.kind == "nil":
            return Nil()
        if t.kind == "var":
            if t.val not in self.vars:
                raise GoTemplateError(f"undefined variable {go_quote(t.val)}", t.line)
            return Variable(t.val)
        if t.kind == "field":
            return Field((t.val,))
        if t.kind == "bool":
            return Literal(t.val == "true")
        if t.kind in ("number", "complex", "char"):
            return Literal(constant(t.val, t.kind, t.line))
        if t.kind == "string":
            return Literal(t.val)
        if t.kind == "lparen":
            self.nest(cur.start)
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
            self.depth -= 1
            return pipe
        raise GoTemplateError(f"unexpected {go_quote(t.val)} in command", t.line)

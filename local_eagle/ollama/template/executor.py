"""The executor: walks a parse tree over data and writes the output, following Go's ``exec.go``.

Variable scopes, ``range``/``break``/``continue``, ``and``/``or`` short-circuiting and how a
value prints all follow Go, since the rendered prompt must be Ollama's to the byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_eagle.ollama.template import nodes as tree
from local_eagle.ollama.template.functions import call_builtin, key_type
from local_eagle.ollama.template.limits import DEPTH_MESSAGE, MAX_DEPTH, Budget, LimitExceeded
from local_eagle.ollama.template.numbers import IntOverflow
from local_eagle.ollama.template.printing import go_format
from local_eagle.ollama.template.sprintf import go_quote
from local_eagle.ollama.template.values import (
    MISSING,
    FuncError,
    GoJSON,
    GoStruct,
    GoTemplateError,
    go_type,
    sort_key,
    truth,
)


@dataclass
class Template:
    """A parsed template. ``execute(data)`` renders it; ``identifiers()`` is Ollama's ``Vars()``."""

    root: list[Any]
    defines: dict[str, list[Any]] = field(default_factory=dict)
    source: str = ""

    def execute(self, data: Any, budget: Budget | None = None) -> str:
        """Render over ``data`` (``$`` and the first ``.``); raises :class:`GoTemplateError` with the line.

        ``budget`` is what the render may still spend (:mod:`.limits`); a fresh one by default.
        A limit is reported with the line and column of the action running when it was hit.
        """
        data = MISSING if data is None else data  # Go's Execute(w, nil): an invalid value, not a nil pointer
        state = _State(self, data, budget if budget is not None else Budget())
        try:
            state.walk_list(data, self.root)
        except LimitExceeded as e:
            raise state.error(str(e), col=True) from None
        except RecursionError:  # a caller already deep in its stack; the limits keep the engine's own use low
            raise state.error(f"{DEPTH_MESSAGE} (Python's recursion limit was reached)", col=True) from None
        return "".join(state.out)

    def identifiers(self) -> set[str]:
        """Lower-cased field and variable names, as Ollama's ``Template.Vars`` collects them."""
        names: set[str] = set()
        for nodes in [self.root, *self.defines.values()]:
            for n in nodes:
                tree.collect_identifiers(n, names)
        return {x.lower() for x in names}


class _Break(Exception):
    """``{{ break }}``: unwinds the body to the enclosing ``range``, which the parser guarantees exists."""


class _Continue(Exception):
    """``{{ continue }}``: unwinds the body to the enclosing ``range``'s next iteration."""


class _State:
    """One execution: the variable stack (Go's ``s.vars``, searched from the top), the output, the line."""

    def __init__(self, tmpl: Template, root: Any, budget: Budget) -> None:
        self.tmpl = tmpl
        self.vars: list[tuple[str, Any]] = [("$", root)]
        self.out: list[str] = []
        self.budget = budget
        self.depth = 0
        self.line = 0
        self.col = 0

    def error(self, msg: str, col: bool = False) -> GoTemplateError:
        return GoTemplateError(f"executing template: {msg}", self.line or None, (self.col or None) if col else None)

    def at(self, line: int, col: int) -> None:
        """Note the action about to run: errors and limits name it."""
        self.line, self.col = line, col

    def step(self, n: int = 1) -> None:
        """Spend ``n`` steps; every loop and every evaluation goes through here, so a render ends."""
        budget = self.budget  # Budget.spend_steps, inlined: this runs for every node and argument
        budget.steps -= n
        if budget.steps < 0:
            raise LimitExceeded(budget.steps_message())

    def enter(self) -> None:
        """One level deeper (a block body, a ``template`` call, a parenthesis): bounded like parsing."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LimitExceeded(DEPTH_MESSAGE)

    def write(self, text: str) -> None:
        budget = self.budget  # Budget.spend_output, inlined: this runs for every text and action
        budget.output -= len(text)
        if budget.output < 0:
            raise LimitExceeded(budget.output_message())
        self.out.append(text)

    def walk_list(self, dot: Any, nodes: list[Any]) -> None:
        for n in nodes:
            self.walk(dot, n)

    def walk(self, dot: Any, n: Any) -> None:
        self.step()
        if isinstance(n, tree.TextNode):
            self.write(n.text)
        elif isinstance(n, tree.Action):
            self.at(n.pipe.line, n.pipe.col)
            val = self.eval_pipeline(dot, n.pipe)
            if not n.pipe.decl:
                self.write(self.printable(val))
        elif isinstance(n, tree.If | tree.With):
            mark = len(self.vars)
            self.at(n.pipe.line, n.pipe.col)
            val = self.eval_pipeline(dot, n.pipe)
            self.enter()
            if truth(val):
                self.walk_list(val if isinstance(n, tree.With) else dot, n.body)
            elif n.else_ is not None:
                self.walk_list(dot, n.else_)
            self.depth -= 1
            del self.vars[mark:]
        elif isinstance(n, tree.Range):
            self.walk_range(dot, n)
        elif isinstance(n, tree.TemplateCall):
            self.at(n.line, n.col)
            body = self.tmpl.defines.get(n.name)
            if body is None:
                raise self.error(f"template {go_quote(n.name)} not defined")
            new_dot = self.eval_pipeline(dot, n.pipe) if n.pipe is not None else MISSING
            self.enter()
            saved = self.vars
            self.vars = [("$", new_dot)]
            self.walk_list(new_dot, body)
            self.vars = saved
            self.depth -= 1
        elif isinstance(n, tree.Break):
            raise _Break
        elif isinstance(n, tree.Continue):
            raise _Continue
        else:  # pragma: no cover - the parser makes no other nodes
            raise self.error(f"unknown node {n!r}")

    def walk_range(self, dot: Any, n: tree.Range) -> None:
        mark = len(self.vars)
        self.at(n.pipe.line, n.pipe.col)
        val = self.eval_pipe_value(dot, n.pipe)
        if isinstance(val, GoJSON):
            val = val.value
        pairs: Iterator[tuple[Any, Any]]
        if val is MISSING or val is None:
            pairs = iter(())
        elif isinstance(val, list | tuple):
            pairs = iter(enumerate(val))
        elif isinstance(val, dict):
            pairs = iter((k, val[k]) for k in sorted(val, key=sort_key))
        elif isinstance(val, int) and not isinstance(val, bool):
            if len(n.pipe.decl) > 1:
                raise self.error("can't use two variables when ranging over an int")
            pairs = iter((i, i) for i in range(val))
        else:
            raise self.error(f"range can't iterate over {self.printable(val)}")
        ran = False
        self.enter()
        depth = self.depth
        for key, elem in pairs:
            self.step()
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
                self.depth = depth  # the blocks it left did not get to count themselves out
            except _Break:
                self.depth = depth
                del self.vars[inner:]
                break
            del self.vars[inner:]
        if not ran and n.else_ is not None:
            self.walk_list(dot, n.else_)
        self.depth -= 1
        del self.vars[mark:]

    def find_var(self, name: str) -> int:
        """Index of the innermost ``name``; the search costs a step per variable passed, since a
        template that declares thousands of variables would otherwise make each use slow."""
        for i in range(len(self.vars) - 1, -1, -1):
            if self.vars[i][0] == name:
                self.step(len(self.vars) - i)
                return i
        raise self.error(f"undefined variable: {name}")

    def set_var(self, name: str, value: Any) -> None:
        self.vars[self.find_var(name)] = (name, value)

    def get_var(self, name: str) -> Any:
        return self.vars[self.find_var(name)][1]

    def eval_pipe_value(self, dot: Any, pipe: tree.Pipe) -> Any:
        value: Any = _NO_FINAL
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        return value

    def eval_pipeline(self, dot: Any, pipe: tree.Pipe) -> Any:
        value = self.eval_pipe_value(dot, pipe)
        for name in pipe.decl:
            if pipe.assign:
                self.set_var(name, value)
            else:
                self.vars.append((name, value))
        return value

    def eval_command(self, dot: Any, cmd: tree.Command, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, tree.Identifier):
            return self.call(dot, first.name, cmd.args[1:], final)
        if len(cmd.args) > 1 or final is not _NO_FINAL:
            raise self.error(f"can't give argument to non-function {_describe(first)}")
        if isinstance(first, tree.Nil):
            raise self.error("nil is not a command")
        return self.eval_arg(dot, first)

    def eval_arg(self, dot: Any, node: Any) -> Any:
        self.step()
        if isinstance(node, tree.Field):
            return self.eval_fields(dot, node.idents, ".")
        if isinstance(node, tree.Variable):
            return self.eval_fields(self.get_var(node.name), node.idents, node.name)
        if isinstance(node, tree.Chain):
            return self.eval_fields(self.eval_arg(dot, node.node), node.idents, "(...)")
        if isinstance(node, tree.Pipe):
            mark = len(self.vars)
            self.enter()
            v = self.eval_pipeline(dot, node)
            self.depth -= 1
            del self.vars[mark:]
            return v
        if isinstance(node, tree.Dot):
            return dot
        if isinstance(node, tree.Nil):
            return None
        if isinstance(node, tree.Literal):
            if isinstance(node.value, IntOverflow):
                raise self.error(f"{node.value.text} overflows int")
            return node.value
        if isinstance(node, tree.Identifier):
            return self.call(dot, node.name, [], _NO_FINAL)
        raise self.error(f"can't evaluate {node!r}")  # pragma: no cover

    def eval_fields(self, receiver: Any, idents: Sequence[str], start: str) -> Any:
        path = start
        for name in idents:
            path = f"{path.rstrip('.')}.{name}"
            if receiver is MISSING:  # Go's evalField: a field of an invalid value is the invalid value
                return MISSING
            if receiver is None:
                raise self.error(f"nil pointer evaluating {path}")
            if isinstance(receiver, GoJSON):
                receiver = receiver.value
            if isinstance(receiver, GoStruct):
                if name not in receiver:
                    raise self.error(f"can't evaluate field {name} in {path}")
                receiver = receiver[name]
            elif isinstance(receiver, Mapping):
                if isinstance(receiver, dict) and key_type(receiver) == "int":  # a name is no int key
                    raise self.error(f"can't evaluate field {name} in type map[int]interface {{}}")
                receiver = receiver.get(name, MISSING)
            else:
                raise self.error(f"can't evaluate field {name} in type {go_type(receiver)}")
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
            return call_builtin(name, vals, self.budget)
        except (FuncError, TypeError, ValueError, OverflowError) as e:  # Python's own: a value Go would refuse
            raise self.error(f"error calling {name}: {e}") from None

    def printable(self, v: Any) -> str:
        if v is MISSING:
            return "<no value>"
        try:
            return go_format(v)
        except FuncError as e:  # a GoJSON holding a value json.Marshal refuses, such as NaN
            raise self.error(str(e)) from None


class _NoFinal:
    """No piped-in value: distinct from ``None``, since ``nil`` may itself be piped into a function."""


_NO_FINAL = _NoFinal()


def _describe(node: Any) -> str:
    if isinstance(node, tree.Field):
        return "." + ".".join(node.idents)
    if isinstance(node, tree.Variable):
        return node.name + "".join("." + i for i in node.idents)
    if isinstance(node, tree.Literal):
        return repr(node.value)
    return type(node).__name__.lower()

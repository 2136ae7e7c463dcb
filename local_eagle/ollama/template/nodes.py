"""The parse tree: what the parser builds, the executor walks, and Ollama's layer rewrites.

Nodes are plain dataclasses so that Ollama's ``deleteNode`` (:func:`cut_after_response`) can
copy and prune a tree without knowing how it was parsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from local_eagle.ollama.template.numbers import IntOverflow


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
    value: bool | int | float | complex | str | IntOverflow


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
    col: int = 0  # of the action's "{{"; 0 inside parentheses and in pipes made by Ollama's layer


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
    col: int = 0


@dataclass
class Break:
    pass


@dataclass
class Continue:
    pass


def collect_identifiers(n: Any, out: set[str]) -> None:
    if isinstance(n, list):
        for c in n:
            collect_identifiers(c, out)
    elif isinstance(n, Action):
        collect_identifiers(n.pipe, out)
    elif isinstance(n, TemplateCall):
        if n.pipe is not None:
            collect_identifiers(n.pipe, out)
    elif isinstance(n, If | With | Range):
        collect_identifiers(n.pipe, out)
        collect_identifiers(n.body, out)
        if n.else_ is not None:
            collect_identifiers(n.else_, out)
    elif isinstance(n, Pipe):
        for c in n.cmds:
            for a in c.args:
                collect_identifiers(a, out)
    elif isinstance(n, Field):
        out.update(n.idents)
    elif isinstance(n, Variable):
        out.add(n.name)
        out.update(n.idents)

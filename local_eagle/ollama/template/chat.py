"""Ollama's ``template.Execute``: messages and tools as Go values, collation, and the two ways a TEMPLATE runs.

A template that names ``.Messages`` runs once over the whole chat; an older one that only knows
``.System``/``.Prompt``/``.Response`` runs once per turn and its last turn is cut right after
``{{ .Response }}``, which is where the model's answer begins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from local_eagle.ollama.template.executor import Template
from local_eagle.ollama.template.limits import Budget
from local_eagle.ollama.template.nodes import Action, Command, Field, If, Pipe, Range, With
from local_eagle.ollama.template.parser import parse
from local_eagle.ollama.template.values import GoJSON, GoStruct


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
            return Pipe(cmds, n.decl, n.assign, n.line, n.col) if cmds else None
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
    turn stops right after ``{{ .Response }}``. Both share one :class:`.Budget` (:mod:`.limits`).
    """
    budget = Budget()
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
        return t.execute(data, budget)

    out: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def run(tmpl: Template) -> None:
        out.append(tmpl.execute({**turn, "Think": think, "IsThinkSet": think_set}, budget))
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

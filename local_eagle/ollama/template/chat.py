"""Ollama's ``template.Execute``: messages and tools as Go values, collation, and the two ways a TEMPLATE runs.

A template that names ``.Messages`` runs once over the whole chat; an older one that only knows
``.System``/``.Prompt``/``.Response`` runs once per turn and its last turn is cut right after
``{{ .Response }}``, which is where the model's answer begins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from local_eagle.ollama.template.executor import Template
from local_eagle.ollama.template.limits import Budget
from local_eagle.ollama.template.nodes import Action, Command, Field, If, Pipe, Range, TemplateCall, With
from local_eagle.ollama.template.parser import parse
from local_eagle.ollama.template.values import (
    GoJSON,
    GoStringer,
    GoStruct,
    GoTemplateError,
    NilMap,
    NilSlice,
    OrderedMap,
)


def _arguments(args: Any) -> GoJSON:
    """``templateArgs``: a map that prints as its JSON; absent arguments print ``{}`` but marshal as ``null``."""
    if isinstance(args, str) and args.strip():
        args = json.loads(args)  # OpenAI clients send the arguments as a JSON string
    if not isinstance(args, Mapping):
        return GoStringer(NilMap(), "{}")
    return GoJSON(dict(args))


def _tool_call(tc: Mapping[str, Any]) -> GoStruct:
    """``templateToolCall``: Ollama's template view of a tool call, a struct without JSON tags."""
    fn = tc.get("function", tc)
    function = GoStruct(
        Index=int(fn.get("index", 0)), Name=str(fn.get("name", "")), Arguments=_arguments(fn.get("arguments"))
    )
    return GoStruct(ID=str(tc.get("id", "")), Function=function)


def _slice(values: Any) -> list[Any]:
    """A JSON list as a Go slice: absent or null is a nil slice (``null`` in JSON, ``[]`` when printed)."""
    return list(values) if values is not None else NilSlice()


def _property_type(t: Any) -> GoStringer:
    """``api.PropertyType``: a list of JSON Schema types that prints the one type alone (``String``) and
    marshals as a string when there is one, as a list otherwise."""
    types = [t] if isinstance(t, str) else [str(x) for x in t or []]
    text = "" if not types else types[0] if len(types) == 1 else "[" + " ".join(types) + "]"
    return GoStringer(types, text, types[0] if len(types) == 1 else types)


def _tool_property(p: Mapping[str, Any]) -> GoStruct:
    """``api.ToolProperty``, fields and JSON tags in Ollama's order; nested properties keep their order."""
    nested = p.get("properties")
    tags = {"AnyOf": "anyOf,omitempty", "Type": "type,omitempty", "Items": "items,omitempty"}
    tags |= {"Description": "description,omitempty", "Enum": "enum,omitempty", "Properties": "properties,omitempty"}
    return GoStruct(
        AnyOf=[_tool_property(x) for x in p["anyOf"]] if p.get("anyOf") is not None else NilSlice(),
        Type=_property_type(p.get("type")),
        Items=p.get("items"),
        Description=str(p.get("description") or ""),
        Enum=_slice(p.get("enum")),
        Properties=None if nested is None else OrderedMap((k, _tool_property(v)) for k, v in nested.items()),
        Required=_slice(p.get("required")),
        json_tags={**tags, "Required": "required,omitempty"},
        type_name="api.ToolProperty",
    )


def go_tool(tool: Mapping[str, Any]) -> GoJSON:
    """Ollama's ``templateTool`` (template/template.go) from an OpenAI-style dict: it prints as its JSON;
    ``.Function.Parameters.Properties`` is a map that prints as its JSON too (``templateProperties``),
    with sorted keys as ``json.Marshal`` writes a Go map, and ``{}`` when the tool gives none."""
    fn = tool.get("function") or {}
    params = fn.get("parameters") or {}
    props = params.get("properties")
    parameters = GoStruct(
        Type=str(params.get("type", "")),
        Defs=params.get("$defs"),
        Items=params.get("items"),
        Required=_slice(params.get("required")),
        Properties=(
            GoStringer(NilMap(), "{}") if props is None else GoJSON({k: _tool_property(v) for k, v in props.items()})
        ),
        json_tags={
            "Type": "type",
            "Defs": "$defs,omitempty",
            "Items": "items,omitempty",
            "Required": "required,omitempty",
            "Properties": "properties",
        },
    )
    function = GoStruct(
        Name=str(fn.get("name", "")),
        Description=str(fn.get("description") or ""),
        Parameters=parameters,
        json_tags={"Name": "name", "Description": "description", "Parameters": "parameters"},
    )
    tags = {"Type": "type", "Items": "items,omitempty", "Function": "function"}
    return GoJSON(
        GoStruct(Type=str(tool.get("type", "function")), Items=tool.get("items"), Function=function, json_tags=tags)
    )


def go_tools(tools: Sequence[Mapping[str, Any]] | None) -> GoJSON:
    """``templateTools``: prints as its JSON, so ``null`` when the request has no tools (a nil slice)."""
    return GoJSON(NilSlice() if tools is None else [go_tool(x) for x in tools])


def go_message(m: Mapping[str, Any]) -> GoStruct:
    """Ollama's ``templateMessage``, from a ``{"role": ..., "content": ...}`` dict."""
    return GoStruct(
        Role=str(m.get("role", "")).lower(),
        Content=str(m.get("content") or ""),
        Thinking=str(m.get("thinking") or ""),
        Images=_slice(m.get("images")),
        ToolCalls=[_tool_call(tc) for tc in m["tool_calls"]] if m.get("tool_calls") else NilSlice(),
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


def parse_ollama(source: str) -> Template:
    """Ollama's ``template.Parse``: Go's parse with Ollama's functions, then ``Vars()``, which refuses a
    ``{{ template "name" }}`` without an argument anywhere ("undefined template specified", so such a
    template, a recursive one included, is refused when created), then :func:`with_response`."""
    t = parse(source)

    def check(nodes: list[Any]) -> None:
        for n in nodes:
            if isinstance(n, TemplateCall) and n.pipe is None:
                raise GoTemplateError("undefined template specified", n.line, n.col or None)
            if isinstance(n, If | With | Range):
                check(n.body)
                check(n.else_ or [])

    for nodes in [t.root, *t.defines.values()]:
        check(nodes)
    return with_response(t)


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
    think_level: str = "",
) -> str:
    """Render a chat the way Ollama's ``template.Execute`` does.

    ``messages`` are dicts with ``role`` and ``content`` (and optionally ``tool_calls``,
    ``thinking``, ``tool_name``), system messages included. A template that uses ``.Messages``
    runs once over the merged messages with ``.System`` set to all system contents; any other
    template runs once per turn with ``.System``, ``.Prompt`` and ``.Response``, and the last
    turn stops right after ``{{ .Response }}``. Both see ``.Think``, ``.ThinkLevel`` (``""`` unless
    the request gave a level) and ``.IsThinkSet``, and share one :class:`.Budget` (:mod:`.limits`).
    """
    budget = Budget()
    t = parse_ollama(template) if isinstance(template, str) else with_response(template)
    system, msgs = collate(messages)
    think_values = {"Think": think, "ThinkLevel": think_level, "IsThinkSet": think_set}
    if "messages" in t.identifiers():
        data = {
            "System": system,
            "Messages": msgs if messages else NilSlice(),
            "Tools": go_tools(tools),
            "Response": "",
            **think_values,
        }
        return t.execute(data, budget)

    out: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def run(tmpl: Template) -> None:
        out.append(tmpl.execute({**turn, **think_values}, budget))
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

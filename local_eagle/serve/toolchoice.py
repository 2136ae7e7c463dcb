"""A tool call the output must be: OpenAI's ``tool_choice: "required"`` or a named function, as a grammar.

The call is written as the model's template writes one (``toolcalls``: its tag, then the JSON), so that the model
sees its own format and the server's parser reads it back: a Lark grammar (llguidance) of the tag's parts, then one
call, an object ``{"name": NAME, "arguments": {...}}`` whose name is the tool's and whose arguments follow the
tool's ``parameters`` schema as llama.cpp reads one (``runtime.schema_lark``), then the template's closing text.
The parts of the tag that are special tokens (Mistral's ``[TOOL_CALLS]``, Qwen's ``<tool_call>`` where the
vocabulary has it as one token) are named by id (``<[ID]>``), the rest as text. Which key holds the arguments
(``arguments``, or Llama 3.1's ``parameters``), whether the calls are a list (``[TOOL_CALLS][...]``) and the closing
tag (``</tool_call>``) are read from the template's source. One call is forced; a model that thinks is asked not to
(a forced call leaves no room for thinking).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.grammar import JSON_STYLE, GrammarSpec
from local_eagle.runtime.schema_lark import schema_rules
from local_eagle.serve.errors import ApiError


def forced_tools(tool_choice: Any, tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
    """The tools one of which the output must call: all of them for ``"required"``, the named one for
    ``{"type": "function", "function": {"name": ...}}``; None for ``"auto"``, ``"none"`` or no choice (the output
    is free). A choice that names no tool of the request is a 400."""
    if tool_choice is None or tool_choice in ("auto", "none"):
        return None
    if not tools:
        raise ApiError(400, "tool_choice needs tools")
    if tool_choice == "required":
        return list(tools)
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise ApiError(400, "tool_choice.function.name must be a string")
        chosen = [t for t in tools if (t.get("function") or {}).get("name") == name]
        if not chosen:
            raise ApiError(400, f"tool_choice names the function {name!r}, which is not among the tools")
        return chosen[:1]
    shown = json.dumps(tool_choice)[:80]
    raise ApiError(400, f'tool_choice must be "none", "auto", "required" or {{"type": "function", ...}}, got {shown}')


def call_format(tag: str, source: str) -> tuple[str, str, str]:
    """``(opening, key, closing)`` of a call as the template writes it: the text before the call's object (the tag,
    with the ``[`` of a list of calls), the arguments' key, and the text after it (``]``, ``</tool_call>``)."""
    key = "parameters" if '"parameters"' in source and '"arguments"' not in source else "arguments"
    if tag == "{":
        return "", key, ""
    opening, closing = tag, ""
    if opening.endswith("[") or opening + "[" in source:
        opening = opening if opening.endswith("[") else opening + "["
        closing = "]"
    elif opening.startswith("<") and opening.endswith(">") and "</" + opening[1:] in source:
        closing = "</" + opening[1:]
    return opening, key, closing


def _literal(text: str) -> str:
    return json.dumps(text)


def _call_rules(tool: Mapping[str, Any], key: str, where: str, i: int) -> list[str]:
    """The rules of one call to ``tool``, ``call_I``: ``{"name": NAME, KEY: ARGUMENTS}`` on one line, the arguments
    read from the tool's ``parameters`` as llama.cpp reads a schema (``runtime.schema_lark``: no key its
    ``properties`` do not name, numbers of llama.cpp's length), as for ``format`` and ``response_format``."""
    fn = tool.get("function") or {}
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object"}
    if not isinstance(params, dict):
        raise ApiError(400, f"{where}.function.parameters must be a JSON schema object")
    try:
        GrammarSpec.json_schema(params, f"{where}.function.parameters")
    except LocalEagleError as e:
        raise ApiError(400, f"tool_choice: a tool's parameters cannot constrain the call: {e}") from None
    args, rules = schema_rules(params, JSON_STYLE, prefix=f"t{i}_")
    item, colon = json.dumps(JSON_STYLE["item_separator"]), json.dumps(JSON_STYLE["key_separator"])
    name = _literal(json.dumps(fn.get("name"), ensure_ascii=False))
    body = f'"{{" {_literal(json.dumps("name"))} {colon} {name} {item} {_literal(json.dumps(key))} {colon} {args} "}}"'
    return [f"call_{i}: {body}", *rules]


def tool_call_grammar(
    tools: Sequence[Mapping[str, Any]],
    all_tools: Sequence[Mapping[str, Any]],
    tag: str,
    source: str,
    tag_tokens: Callable[[str], tuple[list[int], list[bool]]],
    pieces: Callable[[list[int]], list[bytes]],
) -> GrammarSpec:
    """The grammar of one call to one of ``tools`` in the template's format (module docstring). ``tag_tokens`` and
    ``pieces`` read the model's vocabulary (``JobSlot.tag_tokens``, ``JobSlot.pieces``)."""
    opening, key, closing = call_format(tag, source)
    parts: list[str] = []
    if opening:
        tokens, special = tag_tokens(opening)
        ids = [t for t, sp in zip(tokens, special, strict=True) if sp]
        rest = opening
        for t, piece in zip(ids, pieces(ids), strict=True):
            text = piece.decode("utf-8", "replace")
            i = rest.find(text)
            if i < 0:  # not how the text reads: leave it to the text around it
                continue
            if rest[:i]:
                parts.append(_literal(rest[:i]))
            parts.append(f"<[{t}]>")
            rest = rest[i + len(text) :]
        if rest:
            parts.append(_literal(rest))
        if opening.startswith("<"):
            parts.append('"\\n"?')  # Qwen writes <tool_call>, a newline, the call, a newline, </tool_call>
    rules = []
    for i, tool in enumerate(tools):
        where = f"tools[{list(all_tools).index(tool)}]" if tool in all_tools else f"tools[{i}]"
        rules += _call_rules(tool, key, where, i)
    tail = []
    if closing:
        if closing.startswith("<"):
            tail.append('"\\n"?')
        tail.append(_literal(closing))
    calls = " | ".join(f"call_{i}" for i in range(len(tools)))
    lark = "\n".join([f"start: {' '.join([*parts, 'call', *tail])}", f"call: {calls}", *rules]) + "\n"
    try:
        return GrammarSpec.lark(lark, "tools")
    except LocalEagleError as e:
        raise ApiError(400, f"tool_choice: a tool's parameters cannot constrain the call: {e}") from None


def tag_is_special(tag: str, tag_tokens: Callable[[str], tuple[list[int], list[bool]]]) -> bool:
    """Whether the call's tag holds a special token, which the engine writes only with ``special``."""
    if tag in ("{", "["):
        return False
    return any(tag_tokens(tag)[1])


def tool_settings(
    server: Any, output: Any, tools: Sequence[Mapping[str, Any]] | None, forced: Sequence[Mapping[str, Any]] | None,
    template: str | None = None,
) -> tuple[bool, GrammarSpec | None]:  # fmt: skip
    """``(special, grammar)`` for a request with tools: ``special`` where the call's tag is a special token (so that
    it reaches the parser), and the grammar of a forced call. Calls into the model's vocabulary: run it off the
    event loop."""
    parser = getattr(output, "tools", None)
    if not tools or parser is None:
        return False, None
    special = tag_is_special(parser.tag, server.tag_tokens)
    if forced is None:
        return special, None
    from local_eagle.serve.chatoutput import template_source

    src = template_source(server, template)
    grammar = tool_call_grammar(forced, tools, parser.tag, src[1] if src else "", server.tag_tokens, server.pieces)
    return special, grammar

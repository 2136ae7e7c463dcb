"""Go ``text/template``, the part Ollama's TEMPLATE instruction uses, and Ollama's way of running it.

A prompt that differs from Ollama's by one newline is a different token sequence for the target
(and a worse one for a drafter trained on Ollama-formatted chats), so this follows Go's rules
rather than approximating them: the lexer and its ``{{-``/``-}}`` trimming, variable scopes,
truth, ``eq``/``lt`` typing, ``and``/``or`` short-circuiting, and how values print (a missing
map key prints ``<no value>``, a float prints like ``%v``).

Supported: text, comments, actions, pipelines with ``|``, parenthesised pipelines, fields,
variables (``$``, ``$x := ...``, ``$x = ...``), ``if``/``else if``/``else``, ``range`` (one or
two variables, ``else``, ``break``, ``continue``), ``with``/``else with``, ``define``/``template``/
``block``, Go's functions ``and or not len index slice eq ne lt le gt ge print printf println``
and Ollama's ``json currentDate yesterdayDate toTypeScriptType``. Not supported: method calls,
``call``, ``html``, ``js``, ``urlquery``; they fail to parse with a clear message. Constants are Go's:
``0x``/``0o``/``0b`` and ``_`` in numbers, hexadecimal floats, ``1+2i`` complex numbers (printed
``(1+2i)``), ``'\\n'`` characters (:mod:`.numbers`).

Go's own tables (``exec_test.go``, ``parse/parse_test.go``) run in ``tests/ollama/test_template_go*.py``.

:func:`parse_ollama` is Ollama's ``template.Parse`` (Go's parse plus the ``Vars()`` check and the
appended ``{{ .Response }}``); :func:`render_ollama` adds what Ollama's ``template.Execute`` does
around Go: merging consecutive messages, collecting the system prompt, the ``.Messages`` path
with messages and tools as Ollama's template types, and the legacy ``.System``/``.Prompt``/
``.Response`` path that renders one turn at a time and cuts the last turn after ``{{ .Response }}``.

Modules, in the order data flows: ``lexer`` (text to tokens), ``parser`` and ``nodes`` (tokens
to a tree), ``executor`` (a tree over data to text), ``functions``, ``printing`` and ``sprintf``
(the built-ins and Go's ``fmt``/``json``), ``numbers`` (constants), ``chat`` (Ollama's ``template.Execute``); ``values``
holds the Go values and the error every stage raises.
"""

from local_eagle.ollama.template.chat import (
    collate,
    cut_after_response,
    go_message,
    go_tool,
    go_tools,
    parse_ollama,
    render_ollama,
    with_response,
)
from local_eagle.ollama.template.executor import Template
from local_eagle.ollama.template.parser import parse
from local_eagle.ollama.template.printing import go_float, go_format, go_json
from local_eagle.ollama.template.sprintf import go_quote, go_sprintf
from local_eagle.ollama.template.values import (
    MISSING,
    GoJSON,
    GoStringer,
    GoStruct,
    GoTemplateError,
    NilMap,
    NilSlice,
    OrderedMap,
    truth,
)

__all__ = [
    "MISSING",
    "GoJSON",
    "GoStringer",
    "GoStruct",
    "GoTemplateError",
    "NilMap",
    "NilSlice",
    "OrderedMap",
    "Template",
    "collate",
    "cut_after_response",
    "go_float",
    "go_format",
    "go_json",
    "go_message",
    "go_quote",
    "go_sprintf",
    "go_tool",
    "go_tools",
    "parse",
    "parse_ollama",
    "render_ollama",
    "truth",
    "with_response",
]

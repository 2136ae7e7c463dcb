"""Conversations as Ollama's ``/api/chat`` takes them, read from JSON, and the prompt they render to.

``modelfile render`` shows the exact text the runtime tokenizes for a conversation, through the
same :func:`local_eagle.ollama.prompt.render_prompt` that ``chat`` and ``serve`` call, so a
template can be debugged without running a model.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.files import read_input
from local_eagle.ollama.modelfile import Modelfile, template_error_of
from local_eagle.ollama.prompt import modelfile_prompt
from local_eagle.ollama.template import GoTemplateError

ROLES = ("system", "user", "assistant", "tool")


def parse_messages(raw: Any, where: str = "messages") -> list[dict[str, Any]]:
    """Check a list of ``{"role", "content"}`` objects; the error names the item and what was expected."""
    if not isinstance(raw, list):
        raise LocalEagleError(f'{where}: expected a JSON list of {{"role", "content"}} objects')
    out = []
    for i, m in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise LocalEagleError(f'{at}: expected an object with "role" and "content", got {type(m).__name__}')
        role = m.get("role")
        if role not in ROLES:
            raise LocalEagleError(f"{at}.role: expected one of {', '.join(ROLES)}, got {role!r}")
        content = m.get("content", "")
        if not isinstance(content, str):
            raise LocalEagleError(f"{at}.content: expected a string, got {type(content).__name__}")
        msg: dict[str, Any] = {"role": role, "content": content}
        for key in ("tool_calls", "thinking", "tool_name"):
            if key in m:
                msg[key] = m[key]
        out.append(msg)
    return out


def read_messages(source: str) -> list[dict[str, Any]]:
    """A conversation from a JSON file, or from standard input when ``source`` is ``-``."""
    name = "<stdin>" if source == "-" else source
    raw = sys.stdin.buffer.read() if source == "-" else read_input(source, "conversation JSON file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise LocalEagleError(f"{name}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise LocalEagleError(f"{name}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    if isinstance(data, dict) and "messages" in data:  # a whole /api/chat request body
        data = data["messages"]
    return parse_messages(data, name)


def render_conversation(
    modelfile: Modelfile, messages: list[dict[str, Any]], system: str | None = None, raw: bool = False
) -> str:
    """The prompt ``chat`` and ``serve`` would tokenize for ``messages`` under ``modelfile``.

    ``system`` replaces the Modelfile's SYSTEM, as ``/set system`` and a request's ``system`` do.
    ``raw`` is Ollama's raw mode: no template; the last message's content is the whole prompt.
    """
    if raw:
        return messages[-1]["content"] if messages else ""
    try:
        return modelfile_prompt(modelfile, messages, system=system)
    except GoTemplateError as e:
        raise template_error_of(modelfile, e) from None

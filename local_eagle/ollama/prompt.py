"""The prompt text the target sees for a conversation, chosen as Ollama chooses it.

1. The Modelfile's TEMPLATE: a Go template, rendered exactly as Ollama renders it.
2. Otherwise the GGUF's own ``tokenizer.chat_template``: Jinja, rendered as Hugging Face's
   ``apply_chat_template`` does (sandboxed, ``trim_blocks``/``lstrip_blocks``) and, as
   llama.cpp does, without a leading BOS / trailing EOS the tokenizer adds itself.
   (Ollama instead maps the GGUF's template to the nearest of its own Go templates; rendering
   the model's real template is at least as faithful.)
3. Otherwise Ollama's default template ``{{ .Prompt }}``: the user turns and answers as plain
   text, without the system prompt, which is what Ollama does for a model without a template.

The returned text carries no BOS: the caller tokenizes it with the GGUF's own BOS setting.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.ollama.template import render_ollama

DEFAULT_TEMPLATE = "{{ .Prompt }}"

MessageLike = Mapping[str, Any]


def _as_dict(m: Any) -> dict[str, Any]:
    if isinstance(m, Mapping):
        return dict(m)
    if hasattr(m, "role") and hasattr(m, "content"):
        return {"role": m.role, "content": m.content}
    raise LocalEagleError(f"a message must be a dict with 'role' and 'content', got {m!r}")


def chat_messages(
    messages: Sequence[Any], system: str | None = None, history: Sequence[Any] = ()
) -> list[dict[str, Any]]:
    """Ollama's chat handler: MESSAGE history, then the conversation; the Modelfile's SYSTEM goes
    first unless the conversation itself starts with a system message."""
    conv = [_as_dict(m) for m in messages]
    out = [_as_dict(m) for m in history] + conv
    if system and (not conv or conv[0].get("role") != "system"):
        out.insert(0, {"role": "system", "content": system})
    return out


@dataclass(frozen=True)
class ChatTemplate:
    """What a GGUF says about its chat format."""

    template: str | None
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False
    add_eos: bool = False


def _gguf_tokenizer_keys(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[str]]:
    """The few tokenizer keys prompts need and the token texts, from the fast header reader."""
    from gguf import Keys

    from local_eagle.gguf import read_header

    tk = Keys.Tokenizer
    wanted = {tk.CHAT_TEMPLATE, tk.MODEL, tk.BOS_ID, tk.EOS_ID, tk.ADD_BOS, tk.ADD_EOS}
    h = read_header(path, keep=lambda k: k == tk.LIST)
    raw = h.kv.get(tk.LIST) or []
    tokens = [t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in raw]
    return {k: v for k, v in h.kv.items() if k in wanted}, tokens


def read_chat_template(gguf_path: str | os.PathLike[str]) -> ChatTemplate:
    """``tokenizer.chat_template`` and the BOS/EOS texts and flags from a GGUF's header."""
    from gguf import Keys

    tk = Keys.Tokenizer
    kv, tokens = _gguf_tokenizer_keys(gguf_path)

    def token(key: str) -> str:
        tid = kv.get(key)
        return tokens[int(tid)] if tid is not None and 0 <= int(tid) < len(tokens) else ""

    # llama.cpp's defaults by tokenizer type, then the explicit keys
    model = kv.get(tk.MODEL)
    add_bos = kv.get(tk.ADD_BOS, model in ("llama", "bert"))
    add_eos = kv.get(tk.ADD_EOS, model == "t5")
    tmpl = kv.get(tk.CHAT_TEMPLATE)
    return ChatTemplate(
        template=tmpl if isinstance(tmpl, str) and tmpl else None,
        bos_token=token(tk.BOS_ID),
        eos_token=token(tk.EOS_ID),
        add_bos=bool(add_bos),
        add_eos=bool(add_eos),
    )


def render_jinja(
    ct: ChatTemplate,
    messages: Sequence[MessageLike],
    tools: Sequence[Mapping[str, Any]] | None = None,
    source: str = "chat template",
    think: bool | str | None = None,
) -> str:
    """Render a Hugging Face chat template with a generation prompt, as ``apply_chat_template``; a ``think``
    that is set becomes ``enable_thinking`` (Qwen 3's switch; templates without one ignore it)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    assert ct.template is not None

    def raise_exception(message: str) -> None:
        raise LocalEagleError(f"{source}: the chat template refused the conversation: {message}")

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        text = env.from_string(ct.template).render(
            messages=[dict(m) for m in messages],
            tools=list(tools) if tools else None,
            add_generation_prompt=True,
            bos_token=ct.bos_token,
            eos_token=ct.eos_token,
            **({} if think is None else {"enable_thinking": bool(think)}),
        )
    except jinja2.TemplateSyntaxError as e:
        raise LocalEagleError(f"{source}: tokenizer.chat_template line {e.lineno}: {e.message}") from None
    except jinja2.TemplateError as e:
        raise LocalEagleError(f"{source}: tokenizer.chat_template failed: {e}") from None
    if ct.add_bos and ct.bos_token and text.startswith(ct.bos_token):
        text = text[len(ct.bos_token) :]
    if ct.add_eos and ct.eos_token and text.endswith(ct.eos_token):
        text = text[: -len(ct.eos_token)]
    return text


def render_prompt(
    messages: Sequence[Any],
    system: str | None = None,
    template: str | None = None,
    gguf_path: str | os.PathLike[str] | None = None,
    *,
    history: Sequence[Any] = (),
    tools: Sequence[Mapping[str, Any]] | None = None,
    think: bool | str | None = None,
) -> str:
    """The prompt for ``messages`` (dicts with ``role`` and ``content``; the last is usually the
    user's), with ``system`` and ``history`` from the Modelfile: TEMPLATE if given, else the GGUF's
    chat template, else plain text. ``think`` (a request's: true, false, a level, or None when not
    given) is the TEMPLATE's ``.Think``, ``.ThinkLevel`` and ``.IsThinkSet``, a Jinja template's
    ``enable_thinking``."""
    msgs = chat_messages(messages, system, history)
    if template is not None:
        level = think if isinstance(think, str) else ""
        return render_ollama(template, msgs, tools, think=bool(think), think_set=think is not None, think_level=level)
    if gguf_path is not None:
        ct = read_chat_template(gguf_path)
        if ct.template is not None:
            return render_jinja(ct, msgs, tools, source=str(gguf_path), think=think)
    return render_ollama(DEFAULT_TEMPLATE, msgs)


def modelfile_prompt(
    modelfile: Any,
    messages: Sequence[Any],
    tools: Sequence[Mapping[str, Any]] | None = None,
    system: str | None = None,
) -> str:
    """:func:`render_prompt` with a parsed Modelfile's TEMPLATE, SYSTEM, MESSAGE history and FROM GGUF;
    ``system`` replaces the Modelfile's SYSTEM, as ``/set system`` and a request's ``system`` do."""
    from local_eagle.ollama.modelfile import Modelfile, resolve_model

    assert isinstance(modelfile, Modelfile)
    gguf: Path | None = None if modelfile.template is not None else resolve_model(modelfile)
    return render_prompt(
        messages,
        system=system if system is not None else modelfile.system,
        template=modelfile.template,
        gguf_path=gguf,
        history=[m.to_dict() for m in modelfile.messages],
        tools=tools,
    )

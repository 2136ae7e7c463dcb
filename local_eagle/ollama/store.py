"""Ollama's model store, read-only: model names, manifests and blobs laid out as Ollama lays them out.

The models an Ollama user has pulled are already on disk, so a Modelfile ``FROM llama3.1:8b``
resolves here to the GGUF blob and to the template, system prompt, parameters and messages Ollama
keeps beside it: nothing is copied and nothing is retyped. Nothing is ever written here; Ollama
owns the store (its own ``manifest.Path`` creates directories as it reads; this does not).

Layout and rules, from Ollama's source (github.com/ollama/ollama):

- ``envconfig/config.go`` ``Models``: ``$OLLAMA_MODELS`` (trimmed of spaces and quotes), else
  ``~/.ollama/models``. The Linux service runs as user ``ollama`` with its home in
  ``/usr/share/ollama``, so that store is read when the user's own does not exist.
- ``types/model/name.go``: ``[host/][namespace/]model[:tag]``, defaults ``registry.ollama.ai``,
  ``library``, ``latest``; each part's characters and length (``isValidPart``); the manifest of a
  name is ``manifests/<host>/<namespace>/<model>/<tag>``. Parts compare case-insensitively
  (``Name.EqualFold``; Ollama's ``getExistingName`` canonicalises the case on create), so a name
  is found whatever its case, as it is on the case-insensitive filesystems of macOS and Windows.
- ``internal/modelref``: a ``:local`` suffix is dropped; ``:cloud`` (or a ``-cloud`` tag) names a
  model that runs on ollama.com, with no weights to load.
- ``manifest/manifest.go`` and ``manifest/paths.go``: a manifest is JSON with a ``config`` layer
  and ``layers``, each with ``mediaType``, ``digest`` and ``size``; a blob is
  ``blobs/sha256-<64 hex>`` and any other digest is refused ("invalid digest format").
- ``server/images.go`` ``GetModel``: the layers read by media type (``application/vnd.ollama.image.``
  + ``model``, ``template`` or the older ``prompt``, ``system``, ``params``, ``messages``,
  ``license``, ``draft``, ``adapter``, ``projector``); a later ``template``/``system``/``messages``
  layer replaces an earlier one, ``params`` layers merge key by key, ``license`` layers add up; any
  other media type (the deprecated ``embed``, an unknown one) is skipped, as ``GetModel`` skips it.
  The config layer (``types/model/config.go`` ``ConfigV2``) gives ``renderer``, ``parser``,
  ``requires``, and tells a safetensors (MLX) or a cloud model apart from a GGUF one.

What local-eagle cannot run is refused with one line naming the model and the file: a LoRA adapter
layer or a vision projector layer, a model that is not a GGUF, a cloud model; so is a manifest that
is not valid JSON, and a blob that is missing or of the wrong size (an interrupted pull).

The store is a directory anyone with write access could plant files in, and the server reads it for
every ``/api/show``: a blob is used only when it is a regular file whose real path lies in the
store's ``blobs`` directory (so a link to ``/etc/passwd``, ``/dev/zero`` or a FIFO is refused, never
printed, read without end or waited on), and the small blobs are read with a cap per media type. JSON
(manifests, config, params, messages) is checked for nesting and for integers beyond 64 bits before
anything walks it, so a crafted file is a one-line error and never a ``RecursionError``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_eagle.errors import LocalEagleError

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
SERVICE_MODELS = Path("/usr/share/ollama/.ollama/models")
MISSING_PART = "!MISSING!"  # name.go: a part a separator promised but that is empty

MEDIA = "application/vnd.ollama.image."
MODEL, DRAFT, ADAPTER, PROJECTOR = MEDIA + "model", MEDIA + "draft", MEDIA + "adapter", MEDIA + "projector"
TEMPLATE, PROMPT, SYSTEM = MEDIA + "template", MEDIA + "prompt", MEDIA + "system"
PARAMS, MESSAGES, LICENSE = MEDIA + "params", MEDIA + "messages", MEDIA + "license"

_DIGEST_RE = re.compile(r"sha256[:-][0-9a-fA-F]{64}")

MiB = 1 << 20
# The most bytes read from a blob of each kind: Ollama's own are kilobytes; a planted /dev/zero or a
# huge file must not fill memory. Model, draft, adapter and projector blobs are never read here.
BLOB_CAPS = {TEMPLATE: 4 * MiB, PROMPT: 4 * MiB, SYSTEM: 4 * MiB, LICENSE: 4 * MiB, PARAMS: MiB, MESSAGES: 16 * MiB}
CONFIG_CAP = 4 * MiB
MANIFEST_CAP = 4 * MiB
JSON_DEPTH = 64  # Ollama's files nest 4 deep at most; deeper is crafted, and would make walking them recurse
INT_LIMIT = 1 << 63  # Go's JSON numbers: no integer Ollama writes is wider than 64 bits


class StoreError(LocalEagleError):
    """A name, manifest or blob of Ollama's store that cannot be used; the message is one line."""


class ModelNotFound(StoreError):
    """The name is valid but Ollama's store has no manifest for it."""


# ----------------------------------------------------------------------------------------------
# names: types/model/name.go


@dataclass(frozen=True)
class Name:
    """A model name with every part filled in, as Ollama's ``ParseName`` returns it."""

    host: str
    namespace: str
    model: str
    tag: str

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def short(self) -> str:
        """``DisplayShortest``: ``llama3.1:8b``, ``me/mine:latest``, or the whole name on another host."""
        if self.host.lower() != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    @property
    def parts(self) -> tuple[str, str, str, str]:
        return (self.host, self.namespace, self.model, self.tag)

    def same(self, other: Name) -> bool:
        """``Name.EqualFold``: the same model whatever the case of each part."""
        return all(a.lower() == b.lower() for a, b in zip(self.parts, other.parts, strict=True))


def _cut_promised(s: str, sep: str) -> tuple[str, str, bool]:
    i = s.rfind(sep)
    if i < 0:
        return s, "", False
    return s[:i] or MISSING_PART, s[i + len(sep) :] or MISSING_PART, True


def parse_name(s: str) -> Name:
    """Ollama's ``ParseName``: split ``[scheme://][host/][namespace/]model[:tag]`` and fill in the
    defaults. The result may be invalid; :func:`check_name` says why."""
    host = namespace = tag = ""
    if s.rfind(":") > s.rfind("/"):  # "/" cannot be in a tag, so a ":" after the last "/" starts one
        s, tag, _ = _cut_promised(s, ":")
    rest, model, promised = _cut_promised(s, "/")
    if not promised:
        model = s
    else:
        rest, namespace, promised = _cut_promised(rest, "/")
        if not promised:
            namespace = rest
        else:
            host = rest.split("://", 1)[1] if "://" in rest else rest
    return Name(host or DEFAULT_HOST, namespace or DEFAULT_NAMESPACE, model, tag or DEFAULT_TAG)


_PART_CHARS = {"host": "-_.:", "namespace": "-_", "model": "-_.", "tag": "-_."}
_PART_MAX = {"host": 350, "namespace": 80, "model": 80, "tag": 80}


def _part_problem(kind: str, s: str) -> str:
    """``isValidPart``: why a part is invalid, or ``""``."""
    if s in ("", MISSING_PART):
        return "is empty"
    if len(s) > _PART_MAX[kind]:
        return f"is longer than {_PART_MAX[kind]} characters"
    if not (s[0].isascii() and (s[0].isalnum() or s[0] == "_")):
        return "must start with a letter, a digit or _"
    allowed = _PART_CHARS[kind]
    bad = next((c for c in s[1:] if not (c.isascii() and (c.isalnum() or c in "_" + allowed))), None)
    if bad is not None:
        shown = ", ".join(allowed[:-1]) + " and " + allowed[-1]
        return f"has {bad!r}; it may hold letters, digits, _ and {shown}"
    return ""


MAX_NAME_CHARS = 600
"""The longest model name a request may give: Ollama's name parts, a host of 350 characters, then 80 each."""


def check_name(ref: str) -> Name:
    """The name ``ref`` stands for, validated as Ollama validates it; a ``:local`` suffix is dropped.

    Raises :class:`StoreError` for a cloud model and for an invalid name, saying which part is wrong.
    """
    raw = ref.strip()
    base, source = _source_suffix(raw)
    if source and _source_suffix(base)[1]:
        raise StoreError(f"{ref!r}: use either :local or :cloud, not both")
    if source == "cloud":
        raise StoreError(
            f"{ref} is an Ollama cloud model: it runs on ollama.com and has no weights local-eagle could load"
        )
    name = parse_name(base)
    for kind, part in zip(("host", "namespace", "model", "tag"), name.parts, strict=True):
        problem = _part_problem(kind, part)
        if problem:
            shown = "" if part == MISSING_PART else f" {part!r}"
            raise StoreError(f"{ref!r} is not a valid Ollama model name: the {kind}{shown} {problem}")
    return name


def _source_suffix(raw: str) -> tuple[str, str]:
    """``modelref.parseSourceSuffix``: ``name:cloud``, ``name:tag-cloud`` and ``name:local``."""
    i = raw.rfind(":")
    if i >= 0:
        suffix_raw = raw[i + 1 :].strip()
        suffix = suffix_raw.lower()
        if suffix in ("cloud", "local"):
            return raw[:i], suffix
        if "/" not in suffix_raw and suffix.endswith("-cloud"):
            return raw[: i + 1] + suffix_raw[: -len("-cloud")], "cloud"
    return raw, ""


# ----------------------------------------------------------------------------------------------
# the store: manifests and blobs


def models_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Ollama keeps its models: ``$OLLAMA_MODELS``, else ``~/.ollama/models``, else (when that
    does not exist) the Linux service's ``/usr/share/ollama/.ollama/models``."""
    env = os.environ if env is None else env
    configured = env.get("OLLAMA_MODELS", "").strip().strip("\"'")
    if configured:
        return Path(configured)
    home = Path(os.path.expanduser("~")) / ".ollama" / "models"
    if not home.exists() and SERVICE_MODELS.is_dir():
        return SERVICE_MODELS
    return home


@dataclass(frozen=True)
class Layer:
    """One manifest entry: what the blob is (``media_type``), which blob, and its size in bytes."""

    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class Manifest:
    path: Path
    config: Layer | None
    layers: tuple[Layer, ...]


@dataclass
class StoreModel:
    """A model of Ollama's store as ``GetModel`` reads it: the GGUF blob and what lies beside it.

    ``parameters`` and ``messages`` are the JSON as Ollama stored it (untyped); ``sources`` names
    the blob each of template, system, parameters and messages came from, for error messages.
    """

    name: Name
    manifest: Path
    model: Path
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    license: list[str] = field(default_factory=list)
    draft: Path | None = None
    renderer: str | None = None
    parser: str | None = None
    requires: str | None = None
    sources: dict[str, Path] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # media types GetModel would skip too


class OllamaStore:
    """Ollama's store at ``root`` (default :func:`models_dir`), read without writing anything."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else models_dir()

    def manifest_path(self, name: Name) -> Path | None:
        """The manifest of ``name``: its own path, else one whose parts differ only in case."""
        exact = self.root.joinpath("manifests", *name.parts)
        if exact.is_file():
            return exact
        for path in sorted(self.root.glob("manifests/*/*/*/*")):
            found = Name(*path.relative_to(self.root / "manifests").parts)
            if path.is_file() and found.same(name):
                return path
        return None

    def names(self) -> list[Name]:
        """Every model the store holds (``manifest.Manifests``): valid names with a manifest file."""
        out = []
        for path in sorted(self.root.glob("manifests/*/*/*/*")):
            name = Name(*path.relative_to(self.root / "manifests").parts)
            if path.is_file() and not any(_part_problem(k, p) for k, p in zip(_PART_MAX, name.parts, strict=True)):
                out.append(name)
        return out

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    def blob(self, layer: Layer, what: str) -> Path:
        """The file of ``layer`` (``BlobsPath``): a regular file in the blobs directory (through links
        too), with the manifest's size."""
        if not _DIGEST_RE.fullmatch(layer.digest):
            raise StoreError(f"{what}: invalid digest format {layer.digest!r} for {layer.media_type}")
        path = self.blobs / layer.digest.replace(":", "-")
        try:
            st = os.stat(_inside(path, self.blobs, f"{what}: blob", StoreError))
        except OSError:
            raise StoreError(
                f"{what}: blob {path} ({layer.media_type}) is missing; pull the model again with `ollama pull`"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{what}: blob {path} is {_kind(st.st_mode)}, not a regular file")
        if layer.size and st.st_size != layer.size:
            raise StoreError(
                f"{what}: blob {path} has {st.st_size} bytes where the manifest says {layer.size} "
                "(an interrupted pull?); pull the model again with `ollama pull`"
            )
        return path

    def read_blob(self, layer: Layer, what: str, cap: int) -> tuple[Path, bytes]:
        """The path and bytes of a small blob (a template, params, ...), at most ``cap`` bytes."""
        path = self.blob(layer, what)
        return path, read_regular(path, f"{what}: blob", cap, StoreError, within=self.blobs)

    def resolve(self, ref: str) -> StoreModel:
        """Read the model ``ref`` names as Ollama's ``GetModel`` does; raises :class:`StoreError`
        (:class:`ModelNotFound` when the store has no such model)."""
        name = check_name(ref)
        path = self.manifest_path(name)
        if path is None:
            raise ModelNotFound(f"{ref}: not in Ollama's store at {self.root} (no manifest {name})")
        name = Name(*path.relative_to(self.root / "manifests").parts)  # the case the store has
        manifest = read_manifest(path)
        what = f"{name.short} ({path})"
        config = self._config(manifest, what)
        for key in ("remote_host", "remote_model", "model_format"):
            _config_str(config, key, what)
        if config.get("remote_host") or config.get("remote_model"):
            raise StoreError(f"{what}: an Ollama cloud model, run on {config.get('remote_host') or 'ollama.com'}; "
                             "there are no local weights for local-eagle to load")  # fmt: skip
        if config.get("model_format") not in (None, "", "gguf"):
            raise StoreError(
                f"{what}: a {config['model_format']} model (Ollama's MLX engine); local-eagle runs GGUF models"
            )
        model = _read_layers(self, manifest, name, what)
        model.renderer = _config_str(config, "renderer", what)
        model.parser = _config_str(config, "parser", what)
        model.requires = _config_str(config, "requires", what)
        return model

    def _config(self, manifest: Manifest, what: str) -> dict[str, Any]:
        if manifest.config is None or not manifest.config.digest:
            return {}
        blob, data = self.read_blob(manifest.config, what, CONFIG_CAP)
        config = load_json(data, f"{what}: config {blob}", StoreError)
        if not isinstance(config, dict):
            raise StoreError(f"{what}: config {blob} is not a JSON object")
        return config


def _config_str(config: Mapping[str, Any], key: str, what: str) -> str | None:
    value = config.get(key)
    if value is not None and not isinstance(value, str):
        raise StoreError(f"{what}: config field {key!r} must be a string")
    return value or None


def read_manifest(path: Path) -> Manifest:
    """A manifest file, checked field by field; a malformed one is a one-line error naming it."""
    raw = load_json(read_regular(path, "manifest", MANIFEST_CAP, StoreError), f"{path}: malformed manifest", StoreError)
    if not isinstance(raw, dict):
        raise StoreError(f"{path}: malformed manifest (expected a JSON object)")
    layers = raw.get("layers")
    layers = [] if layers is None else layers
    if not isinstance(layers, list):
        raise StoreError(f"{path}: malformed manifest ('layers' is not a list)")
    config = raw.get("config")
    return Manifest(
        path=path,
        config=None if config is None else _layer(config, path, "config"),
        layers=tuple(_layer(x, path, f"layer {i}") for i, x in enumerate(layers)),
    )


def _layer(raw: Any, path: Path, which: str) -> Layer:
    if not isinstance(raw, dict):
        raise StoreError(f"{path}: malformed manifest ({which} is not an object)")
    media, digest, size = raw.get("mediaType", ""), raw.get("digest", ""), raw.get("size", 0)
    if not isinstance(media, str) or not isinstance(digest, str) or type(size) is not int or size < 0:
        raise StoreError(f"{path}: malformed manifest ({which} needs a string mediaType and digest and a size)")
    return Layer(media, digest, size)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    for test, kind in kinds:
        if test(mode):
            return kind
    return "not a regular file"


def _inside(path: Path, within: Path, what: str, error: type[LocalEagleError]) -> str:
    """The real path of ``path``, which must lie in ``within``: a link out of the store is refused."""
    real, base = os.path.realpath(path), os.path.realpath(within)
    try:
        inside = os.path.commonpath([real, base]) == base
    except ValueError:  # Windows: another drive
        inside = False
    if not inside:
        raise error(f"{what} {path} links to {real}, outside {within}; a store's files must be inside it")
    return real


def read_regular(path: Path, what: str, cap: int, error: type[LocalEagleError], within: Path | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file (in ``within``, through links, when given)
    of at most ``cap`` bytes; anything else is one line starting with ``what``.

    The file is opened without following a final link and without blocking, and checked on the open
    descriptor: a FIFO or a device put there after the check is still refused, and never waited on.
    """
    real = _inside(path, within, what, error) if within is not None else os.path.realpath(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} {path} is missing") from None
    except OSError as e:
        raise error(f"{what} {path} cannot be read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            raise error(f"{what} {path} has {st.st_size} bytes, more than the {_cap(cap)} such a file may have")
        chunks, left = [], cap + 1
        while left > 0 and (chunk := os.read(fd, min(left, MiB))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise error(f"{what} {path} cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise error(f"{what} {path} has more than the {_cap(cap)} such a file may have")
    return data


def _cap(cap: int) -> str:
    return f"{cap >> 20} MiB" if cap >= MiB else f"{cap} bytes"


def load_json(data: bytes, what: str, error: type[LocalEagleError]) -> Any:
    """JSON from a file of a store; errors are ``what (why)``. Nesting deeper than :data:`JSON_DEPTH` and
    integers wider than 64 bits are refused here, so nothing that walks the result can recurse without
    end or choke on a number (Python parses neither an array nested a thousand deep nor 4,300 digits)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{what} (not UTF-8 at byte {e.start}; expected JSON)") from None
    except json.JSONDecodeError as e:
        raise error(f"{what} (invalid JSON at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise error(f"{what} (JSON nested more than {JSON_DEPTH} deep)") from None
    except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits
        raise error(f"{what} (an integer with thousands of digits; expected one of at most 64 bits)") from None
    problem = json_problem(value)
    if problem:
        raise error(f"{what} ({problem})")
    return value


def json_problem(value: Any) -> str:
    """Why decoded JSON is not something a store file holds (too deep, an integer too wide), or ``""``;
    iterative, so it cannot recurse itself."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > JSON_DEPTH:
                return f"JSON nested more than {JSON_DEPTH} deep"
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
        elif type(v) is int and not -INT_LIMIT <= v < INT_LIMIT:
            return f"an integer of {len(str(v))} digits; expected one of at most 64 bits"
    return ""


def _text_blob(data: bytes, blob: Path, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StoreError(f"{what}: {blob} is not UTF-8 text (byte {e.start})") from None


def _read_layers(store: OllamaStore, manifest: Manifest, name: Name, what: str) -> StoreModel:
    """``GetModel``'s loop over the layers, refusing what local-eagle cannot run."""
    found: dict[str, Any] = {"parameters": {}, "messages": [], "license": [], "sources": {}, "skipped": []}
    for layer in manifest.layers:
        media = layer.media_type
        if media == ADAPTER:
            blob = store.blob(layer, what)
            raise StoreError(
                f"{what}: has a LoRA adapter layer ({blob}); local-eagle runs the GGUF as it is: merge the "
                "adapter into the model first (e.g. llama.cpp's llama-export-lora) and write FROM ./merged.gguf"
            )
        if media == PROJECTOR:
            model = next((x for x in manifest.layers if x.media_type == MODEL), None)
            text_only = f"; for text alone write FROM {store.blob(model, what)} and copy its TEMPLATE" if model else ""
            raise StoreError(
                f"{what}: has a vision projector layer ({media}); local-eagle runs text models and does not "
                f"load projectors{text_only}"
            )
        if media == MODEL:
            found["model"] = store.blob(layer, what)
        elif media == DRAFT:
            found["draft"] = store.blob(layer, what)
        elif media in (TEMPLATE, PROMPT, SYSTEM, LICENSE):
            blob, data = store.read_blob(layer, what, BLOB_CAPS[media])
            text = _text_blob(data, blob, what)
            if media == LICENSE:
                found["license"].append(text)
            else:
                key = "system" if media == SYSTEM else "template"
                found[key] = text
                found["sources"][key] = blob
        elif media == PARAMS:
            blob, data = store.read_blob(layer, what, BLOB_CAPS[PARAMS])
            params = _params(load_json(data, f"{what}: parameters {blob}", StoreError), blob, what)
            found["parameters"].update(params)  # decoding into the same map: later layers win per key
            found["sources"]["parameters"] = blob
        elif media == MESSAGES:
            blob, data = store.read_blob(layer, what, BLOB_CAPS[MESSAGES])
            found["messages"] = _messages(load_json(data, f"{what}: messages {blob}", StoreError), blob, what)
            found["sources"]["messages"] = blob
        else:
            found["skipped"].append(media)
    if "model" not in found:
        raise StoreError(f"{what}: the manifest has no GGUF model layer ({MODEL})")
    return StoreModel(name=name, manifest=manifest.path, **found)


def _messages(raw: Any, blob: Path, what: str) -> list[dict[str, Any]]:
    """A messages layer: ``[]api.Message`` (role lower-cased on decoding, as ``Message.UnmarshalJSON`` does)."""
    if not isinstance(raw, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role", ""), str) and isinstance(m.get("content", ""), str)
        for m in raw
    ):
        raise StoreError(f"{what}: messages {blob} are not a JSON list of {{role, content}} objects")
    return [{**m, "role": m.get("role", "").lower(), "content": m.get("content", "")} for m in raw]


def _params(raw: Any, blob: Path, what: str) -> dict[str, Any]:
    """A params layer: an object of options, each a JSON scalar or a list of them (``stop``), as
    ``ollama create`` writes it from PARAMETER lines."""
    if not isinstance(raw, dict):
        raise StoreError(f"{what}: parameters {blob} are not a JSON object")
    for key, value in raw.items():
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(x, str | int | float | bool) for x in items):
            raise StoreError(
                f"{what}: parameters {blob}: {key!r} is not a string, a number, true/false or a list of them"
            )
    return raw

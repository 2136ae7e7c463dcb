"""Hugging Face Hub names as Ollama writes them, and which files of a repository such a name means.

``hf.co/USER/REPO[:QUANT]`` (or ``huggingface.co/...``) is what ``ollama run`` takes; local-eagle
adds ``@REVISION`` (a branch, tag or commit) because a drafter is only as good as the checkpoint
it was measured with. The quantization is picked the way the Hub picks it for Ollama: the tag is
matched case-insensitively against the end of the GGUF file names (``:iq3_s-imat`` names
``model-IQ3_S-imat.gguf``; the whole file name works too), Q4_K_M when no tag is given. Nothing
here touches the network: :mod:`local_eagle.hub.fetch` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from local_eagle.errors import LocalEagleError


class HubError(LocalEagleError):
    """A Hub name that cannot be read, fetched or used; one line saying what to do."""


DEFAULT_TAG = "Q4_K_M"
DEFAULT_REVISION = "main"
# when a repository has no Q4_K_M: the quantizations people pick most, in that order
_FALLBACK_TAGS = ("Q4_K_S", "Q4_0", "Q5_K_M", "Q5_K_S", "Q6_K", "Q8_0", "BF16", "F16", "F32")

_PREFIX_RE = re.compile(r"(?i)^(?:https?:/{1,2})?(?:hf\.co|huggingface\.co)/")
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_NAME_RE = re.compile(
    rf"(?P<user>{_PART})/(?P<repo>{_PART})"
    r"(?:(?::(?P<tag1>[^:@/\s]+))?(?:@(?P<rev1>[^:@\s]+))?|(?:@(?P<rev2>[^:@\s]+))(?::(?P<tag2>[^:@/\s]+)))"
)
_SPLIT_RE = re.compile(r"(?i)-(\d{5})-of-(\d{5})\.gguf$")
_QUANT_RE = re.compile(r"(?i)(?:^|[-._])((?:(?:I?Q|TQ)\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?)(?:[-._].*)?)$")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
MAX_PART = 255  # bytes in one path component: the limit of ext4, APFS and NTFS
MAX_REPO_PART = 96  # characters in a Hub user or repository name, as the Hub allows


@dataclass(frozen=True)
class HubRef:
    """A parsed Hub name: the repository, the quantization tag (None: the default) and the revision."""

    repo_id: str
    tag: str | None = None
    revision: str = DEFAULT_REVISION

    @property
    def name(self) -> str:
        """The name as Ollama writes it (the revision appended when it is not ``main``)."""
        text = f"hf.co/{self.repo_id}" + (f":{self.tag}" if self.tag else "")
        return text + (f"@{self.revision}" if self.revision != DEFAULT_REVISION else "")


def is_hub_name(value: str) -> bool:
    """True when ``value`` starts like a Hub name (``hf.co/`` or ``huggingface.co/``), well formed or not."""
    return bool(_PREFIX_RE.match(value.strip()))


def parse_hub_name(value: str) -> HubRef:
    """``hf.co/USER/REPO[:QUANT][@REV]`` (or ``@REV:QUANT``) as a :class:`HubRef`, else a one-line error."""
    text = value.strip()
    m = _PREFIX_RE.match(text)
    rest = text[m.end() :] if m else ""
    got = _NAME_RE.fullmatch(rest) if m else None
    if got is None:
        raise HubError(
            f"{value!r} is not a Hugging Face name; expected hf.co/USER/REPO, hf.co/USER/REPO:QUANT "
            "or hf.co/USER/REPO@REVISION"
        )
    for part in ("user", "repo"):
        if len(got[part]) > MAX_REPO_PART:
            raise HubError(f"{_short(value)}: the {part} name is over {MAX_REPO_PART} characters, as the Hub allows")
    tag = got["tag1"] or got["tag2"]
    if tag is not None and tag.lower() == "latest":
        tag = None  # Ollama's default tag: the default quantization
    revision = got["rev1"] or got["rev2"] or DEFAULT_REVISION
    why = unsafe_path(revision)
    if why is not None:
        raise HubError(
            f"hf.co/{got['user']}/{got['repo']}: the revision {_short(revision)} {why}; "
            "expected a branch, tag or commit of the repository"
        )
    return HubRef(f"{got['user']}/{got['repo']}", tag, revision)


def unsafe_path(name: str) -> str | None:
    """Why ``name`` could leave the folder it is joined to (``..``, absolute, NUL, empty or overlong parts), or None.

    Revisions become ``refs/<REV>`` and listed file names paths under a snapshot, so this is checked
    on the text, before any path is built; ``/`` inside is fine (``refs/pr/1``, ``sub/model.gguf``).
    """
    if not name:
        return "is empty"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "holds a NUL or control character"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "is an absolute path"
    if "\\" in name:
        return "holds a backslash"
    parts = name.split("/")
    if any(p in ("..", ".") for p in parts):
        return "has a '..' part" if ".." in parts else "has a '.' part"
    if any(not p for p in parts):
        return "has an empty part"
    if any(len(p.encode()) > MAX_PART for p in parts):
        return f"has a part over {MAX_PART} bytes"
    return None


def _short(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters so one overlong name stays one line."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


# ----------------------------------------------------------------------------------------------
# what a repository holds


def is_checkpoint(files: list[str]) -> bool:
    """A drafter checkpoint repository: ``config.json`` and weights (safetensors or a PyTorch .bin) at its top."""
    top = [f for f in files if "/" not in f]
    return "config.json" in top and any(f.endswith(WEIGHT_SUFFIXES) for f in top)


def checkpoint_files(files: list[str]) -> list[str]:
    """The files of a checkpoint repository the converter reads (``converters.formats.weight_files``): config.json
    and model.safetensors, else an index and the shards beside it, else pytorch_model.bin; never a repository's
    other .bin files (training arguments, optimizer states)."""
    top = {f for f in files if "/" not in f}
    if "model.safetensors" in top:
        return ["config.json", "model.safetensors"]
    for index, suffix in (("model.safetensors.index.json", ".safetensors"), ("pytorch_model.bin.index.json", ".bin")):
        if index in top:
            prefix = index.split(".", 1)[0]
            return ["config.json", index, *sorted(f for f in top if f.startswith(prefix) and f.endswith(suffix))]
    if "pytorch_model.bin" in top:
        return ["config.json", "pytorch_model.bin"]
    return ["config.json", *sorted(f for f in top if f.endswith(".safetensors"))]


def _ggufs(files: list[str]) -> dict[str, list[str]]:
    """The repository's models: each GGUF, or each set of split GGUFs, under its name without ``.gguf``
    and the split suffix; projector files (``mmproj``) are not models."""
    groups: dict[str, list[str]] = {}
    for f in sorted(files):
        base = f.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf") or "mmproj" in base.lower():
            continue
        split = _SPLIT_RE.search(f)
        stem = f[: split.start()] if split else f[: -len(".gguf")]
        groups.setdefault(stem, []).append(f)
    return groups


def quant_of(stem: str) -> str:
    """The tag that picks a GGUF: its name from the quantization on (``Q4_K_M``, ``IQ3_S-imat``), else all of it."""
    base = stem.rsplit("/", 1)[-1]
    m = _QUANT_RE.search(base)
    return m.group(1) if m else base


def gguf_tags(files: list[str]) -> list[str]:
    """The tags a GGUF repository offers, one per model file (or split set)."""
    return sorted({quant_of(stem) for stem in _ggufs(files)})


def _matches(stem: str, tag: str) -> bool:
    base, t = stem.rsplit("/", 1)[-1].lower(), tag.lower()
    if t.endswith(".gguf"):
        return t in (base + ".gguf", stem.lower() + ".gguf")
    return base == t or (base.endswith(t) and base[-len(t) - 1] in "-._")


def pick_gguf(ref: HubRef, files: list[str]) -> list[str]:
    """The GGUF file(s) ``ref``'s tag names, split sets in order (load the first); else one line with the tags."""
    groups = _ggufs(files)
    if not groups:
        raise HubError(f"{ref.name}: the repository has no GGUF file and is no drafter checkpoint")
    if ref.tag is not None:
        tag = ref.tag
        if tag.lower().endswith(".gguf"):  # a file name, maybe one shard of a split set
            split = _SPLIT_RE.search(tag)
            tag = tag[: split.start()] + ".gguf" if split else tag
        hits = [stem for stem in groups if _matches(stem, tag)]
    else:
        hits = [stem for stem in groups if _matches(stem, DEFAULT_TAG)]
        if not hits and len(groups) == 1:
            hits = list(groups)
        for fallback in _FALLBACK_TAGS:
            if hits:
                break
            hits = [stem for stem in groups if _matches(stem, fallback)]
    tags = ", ".join(gguf_tags(files))
    if not hits:
        want = f"no GGUF matches the tag {ref.tag!r}" if ref.tag else f"no {DEFAULT_TAG} GGUF and no single default"
        raise HubError(f"{ref.name}: {want}; the repository has: {tags} (give one as hf.co/{ref.repo_id}:TAG)")
    if len(hits) > 1:
        names = ", ".join(groups[h][0] for h in hits)
        raise HubError(f"{ref.name}: the tag matches several GGUFs ({names}); give the file name as the tag")
    return groups[hits[0]]

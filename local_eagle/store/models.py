"""The entries of local-eagle's store: ``create``, ``list``, ``show``, ``cp`` and ``rm`` work on these.

A model is a name (validated and laid out as Ollama's, ``manifests/<host>/<namespace>/<model>/<tag>``
under ``$LOCAL_EAGLE_MODELS``, default ``~/.local-eagle/models``) and one JSON file: the Modelfile
with every path resolved (FROM the GGUF, DRAFT the drafter GGUF) and a reference to each GGUF with
its size, modification time and SHA-256. GGUFs are many gigabytes, so they are never copied: the
reference is checked when the model is used, by size and mtime first (free), by the full digest
only when the mtime moved (a ``touch`` or a copy back is not a change), and a file that has moved or
changed is a one-line error naming it. A DRAFT checkpoint directory is converted once, into the
store's ``drafters/`` (the Modelfile code's conversion cache), and referenced like any GGUF.

An entry is one file written atomically (:func:`local_eagle.files.atomic_output`), so a ``create``
that fails half-way leaves the old entry as it was. Changes to one store are serialised within the
process (the server runs ``create`` and ``delete`` in threads): an ``rm`` collecting converted
drafters must not delete the one a ``create`` is about to record.

An entry read back is checked field by field (a hand-edited or damaged file is one line naming the
file and the field); ``list`` shows the good entries beside one warning per bad one, and ``rm``
removes a bad one like any other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.files import atomic_output, sha256_file
from local_eagle.ollama.modelfile import Modelfile, format_modelfile, parse, parse_file, resolve_draft, resolve_model
from local_eagle.ollama.store import MiB, Name, StoreError, check_name, load_json, read_regular

SCHEMA = 1
ENTRY_CAP = 16 * MiB  # an entry is a Modelfile and two file records: kilobytes
_OLLAMA_BLOB_RE = re.compile(r"sha256-([0-9a-f]{64})")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock(root: Path) -> threading.RLock:
    """The lock of the store at ``root``, shared by every :class:`LocalStore` of this process on it."""
    key = os.path.realpath(root)
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(key, threading.RLock())


class StoreEntryError(LocalEagleError):
    """A model of local-eagle's store that cannot be used (or a name it does not have); one line."""


def default_root() -> Path:
    """``$LOCAL_EAGLE_MODELS``, else ``~/.local-eagle/models``."""
    configured = os.environ.get("LOCAL_EAGLE_MODELS", "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path(os.path.expanduser("~")) / ".local-eagle" / "models"


@dataclass
class FileRef:
    """A GGUF an entry uses, as it was when the entry was created."""

    role: str  # "model" or "draft"
    path: str
    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, role: str, path: Path, on_bytes: Callable[[int], None] | None = None) -> FileRef:
        """Record ``path`` now; an Ollama blob is named by its digest, so it is not read again."""
        st = path.stat()
        m = _OLLAMA_BLOB_RE.fullmatch(path.name)
        digest = m.group(1) if m and path.parent.name == "blobs" else sha256_file(path, on_bytes)
        return cls(role, str(path), st.st_size, st.st_mtime_ns, digest)

    def check(self, model: str) -> bool:
        """Raise if the file moved or changed; True when only its mtime moved (the record should follow)."""
        what = "drafter" if self.role == "draft" else "model GGUF"
        again = f"put it back, or run `local-eagle create {model} -f Modelfile` again"
        try:
            st = os.stat(self.path)
        except OSError:
            raise StoreEntryError(f"{model}: its {what} {self.path} has moved or been deleted; {again}") from None
        if not stat.S_ISREG(st.st_mode):
            raise StoreEntryError(f"{model}: its {what} {self.path} is no longer a regular file; {again}")
        if st.st_size != self.size:
            raise StoreEntryError(
                f"{model}: its {what} {self.path} has changed ({st.st_size} bytes, {self.size} when created); {again}"
            )
        if st.st_mtime_ns == self.mtime_ns:
            return False
        if sha256_file(Path(self.path)) != self.sha256:
            raise StoreEntryError(f"{model}: its {what} {self.path} has changed (another SHA-256); {again}")
        self.mtime_ns = st.st_mtime_ns
        return True


@dataclass
class Entry:
    """One model of the store: its name, its Modelfile (paths resolved) and the files it references."""

    name: Name
    modelfile: str
    files: list[FileRef]
    created_at: str
    from_name: str | None = None
    path: Path | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digest(self) -> str:
        """What ``ollama list`` shows as ID: a digest of the entry's content."""
        body = json.dumps({"modelfile": self.modelfile, "files": [f.sha256 for f in self.files]}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    def file(self, role: str) -> FileRef | None:
        return next((f for f in self.files if f.role == role), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "name": str(self.name), "created_at": self.created_at, "from": self.from_name,
            "modelfile": self.modelfile, "files": [asdict(f) for f in self.files],
        }  # fmt: skip


class LocalStore:
    """local-eagle's store at ``root`` (default :func:`default_root`)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    @property
    def drafters(self) -> Path:
        """Where DRAFT checkpoint directories are converted to, once."""
        return self.root / "drafters"

    # --- names ---------------------------------------------------------------------------------

    def _path(self, name: Name) -> Path:
        """The entry file of ``name``: an existing one whose parts differ only in case, else its own."""
        exact = self.root.joinpath("manifests", *name.parts)
        if _present(exact):
            return exact
        for path in sorted(self.root.glob("manifests/*/*/*/*")):
            if _present(path) and Name(*path.relative_to(self.root / "manifests").parts).same(name):
                return path
        return exact

    def find(self, ref: str) -> Entry | None:
        """The entry ``ref`` names, or None; an invalid name raises (Ollama's message), so does a bad entry."""
        path = self._path(checked_name(ref))
        return self._read(path) if _present(path) else None

    def get(self, ref: str) -> Entry:
        entry = self.find(ref)
        if entry is None:
            raise StoreEntryError(f"model {ref!r} not found in {self.root}; `local-eagle list` shows the models")
        return entry

    def entries(self) -> list[Entry]:
        """Every model, newest first (``ollama list``'s order); an unreadable entry is skipped."""
        return self.scan()[0]

    def scan(self) -> tuple[list[Entry], list[str]]:
        """Every readable model, newest first, and one line for each entry that cannot be read."""
        out, problems = [], []
        for path in sorted(self.root.glob("manifests/*/*/*/*")):
            if _present(path):
                try:
                    out.append(self._read(path))
                except StoreEntryError as e:
                    problems.append(str(e))
        return sorted(out, key=lambda e: e.created_at, reverse=True), problems

    def _read(self, path: Path) -> Entry:
        data = read_regular(path, "local-eagle model entry", ENTRY_CAP, StoreEntryError)
        raw = load_json(data, f"{path}: not a readable local-eagle model entry", StoreEntryError)
        name = Name(*path.relative_to(self.root / "manifests").parts)
        return _entry(raw, name, path)

    def _write(self, entry: Entry, path: Path) -> None:
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(entry.to_json(), indent=1) + "\n", encoding="utf-8")
        entry.path = path

    # --- commands ------------------------------------------------------------------------------

    def create(self, ref: str, modelfile: str | os.PathLike[str], progress: bool = False) -> Entry:
        """``ollama create NAME -f Modelfile``: read it (FROM a name inherits from Ollama's store),
        resolve FROM and DRAFT to GGUFs (a checkpoint is converted into the store), and record them."""
        from local_eagle.store.resolve import NamedStores  # resolve builds on this module

        name = checked_name(ref)
        m = parse_file(modelfile, store=NamedStores(self))
        return self.create_from(name, m, progress)

    def create_from(
        self, name: Name, m: Modelfile, progress: bool = False, on_status: Callable[[dict], None] | None = None
    ) -> Entry:
        """Store a parsed Modelfile under ``name``, replacing an entry only once everything is resolved.

        ``on_status`` hears each step as Ollama's create streams it (``api.ProgressResponse``: ``status``,
        and ``digest``, ``total`` and ``completed`` while a GGUF is hashed). The model GGUF is hashed
        before the store's lock is taken (that can take a minute); the drafter, which an ``rm`` may
        collect from ``drafters/``, is resolved and recorded under it."""
        tell = on_status or (lambda _: None)
        model = resolve_model(m).absolute()
        files = [_record("model", model, tell)]
        with _lock(self.root):
            draft = None
            if m.draft is not None:
                tell({"status": "resolving drafter"})
                draft = resolve_draft(m, cache_dir=self.drafters, progress=progress).absolute()
                files.append(_record("draft", draft, tell))
            resolved = Modelfile(**{**m.__dict__, "model": model, "draft": draft})
            created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            entry = Entry(name, format_modelfile(resolved), files, created, m.from_name)
            tell({"status": "writing manifest"})
            self._write(entry, self._path(name))
        tell({"status": "success"})
        return entry

    def copy(self, src: str, dst: str) -> Entry:
        """``ollama cp``: a second name for the same model (the GGUFs are referenced, not copied)."""
        with _lock(self.root):
            entry = self.get(src)
            name = checked_name(dst)
            new = Entry(name, entry.modelfile, entry.files, datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                        entry.from_name)  # fmt: skip
            self._write(new, self._path(name))
            return new

    def remove(self, ref: str) -> Removed:
        """``ollama rm``: the entry goes (readable or not), and drafters converted for it that no other
        entry uses."""
        with _lock(self.root):
            path = self._path(checked_name(ref))
            if not _present(path):
                raise StoreEntryError(f"model {ref!r} not found in {self.root}; `local-eagle list` shows the models")
            name = Name(*path.relative_to(self.root / "manifests").parts)
            try:
                path.unlink()
            except FileNotFoundError:
                raise StoreEntryError(f"model {ref!r} not found in {self.root} (removed meanwhile)") from None
            except OSError as e:
                raise StoreEntryError(f"{path}: cannot remove the model entry ({e.strerror or e})") from None
            parent = path.parent
            while parent != self.root / "manifests" and parent != parent.parent:
                try:
                    parent.rmdir()
                except OSError:
                    break
                parent = parent.parent
            self._collect_drafters()
            return Removed(name, path)

    def _follow_mtimes(self, entry: Entry, path: Path) -> None:
        """Record the new mtimes of ``entry``'s files, unless the entry was removed or replaced meanwhile."""
        with _lock(self.root), contextlib.suppress(LocalEagleError):  # a read-only store works, just slower
            now = self._read(path) if _present(path) else None
            if now is not None and now.modelfile == entry.modelfile and _same_files(now, entry):
                self._write(entry, path)

    def _collect_drafters(self) -> None:
        used = {os.path.realpath(f.path) for e in self.entries() for f in e.files}
        for p in self.drafters.glob("*.gguf") if self.drafters.is_dir() else ():
            if os.path.realpath(p) not in used:
                with contextlib.suppress(OSError):
                    p.unlink()

    # --- use -----------------------------------------------------------------------------------

    def load(self, entry: Entry) -> Modelfile:
        """The entry's Modelfile, after checking that its files are still the ones it was made from."""
        label = entry.name.short
        changed = [f.check(label) for f in entry.files]
        if any(changed) and entry.path is not None:
            self._follow_mtimes(entry, entry.path)
        m = parse(entry.modelfile, base_dir=self.root, source=f"{label} ({entry.path})")
        m.from_name = entry.from_name
        return m


@dataclass(frozen=True)
class Removed:
    """What ``remove`` removed: the entry's name as stored, and its file."""

    name: Name
    path: Path


def _present(path: Path) -> bool:
    """An entry file is there: anything but a directory, a dangling or planted link included (so ``rm``
    can remove what ``list`` warns about)."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _entry(raw: Any, name: Name, path: Path) -> Entry:
    """An entry's JSON checked field by field: a damaged or hand-edited file is one line naming the field."""

    def bad(field: str, want: str) -> StoreEntryError:
        return StoreEntryError(f"{path}: {field} must be {want}; not a readable local-eagle model entry")

    if not isinstance(raw, dict):
        raise bad("the entry", "a JSON object")
    if raw.get("schema", SCHEMA) != SCHEMA:
        raise bad("schema", f"{SCHEMA} (written by another version of local-eagle?)")
    modelfile, created, from_name, files = (raw.get(k) for k in ("modelfile", "created_at", "from", "files"))
    if not isinstance(modelfile, str):
        raise bad("modelfile", "a string")
    if not isinstance(created, str) or not _is_time(created):
        raise bad("created_at", "an ISO 8601 time such as 2025-01-31T12:00:00Z")
    if from_name is not None and not isinstance(from_name, str):
        raise bad("from", "a string or null")
    if not isinstance(files, list) or not files:
        raise bad("files", "a non-empty list")
    refs = []
    for i, f in enumerate(files):
        if not isinstance(f, dict):
            raise bad(f"files[{i}]", "an object")
        role, fpath, size, mtime, digest = (f.get(k) for k in ("role", "path", "size", "mtime_ns", "sha256"))
        if role not in ("model", "draft"):
            raise bad(f"files[{i}].role", '"model" or "draft"')
        if not isinstance(fpath, str) or not os.path.isabs(fpath):
            raise bad(f"files[{i}].path", "an absolute file path (a string)")
        if type(size) is not int or size < 0:
            raise bad(f"files[{i}].size", "a byte count (an integer of at least 0)")
        if type(mtime) is not int:
            raise bad(f"files[{i}].mtime_ns", "an integer")
        if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise bad(f"files[{i}].sha256", "64 lowercase hex digits")
        refs.append(FileRef(role, fpath, size, mtime, digest))
    if [r.role for r in refs].count("model") != 1 or len(refs) > 2 or len({r.role for r in refs}) != len(refs):
        raise bad("files", "one model file and at most one draft file")
    return Entry(name, modelfile, refs, created, from_name, path)


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _record(role: str, path: Path, tell: Callable[[dict], None]) -> FileRef:
    """``path`` recorded for an entry, its hashing told as Ollama's create tells it."""
    status = f"hashing {'drafter' if role == 'draft' else 'model'} {path.name}"
    what = "drafter" if role == "draft" else "model GGUF"
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise StoreEntryError(f"{path}: the {what} is not a regular file")
        total = st.st_size
        ref = FileRef.of(role, path, lambda n: tell({"status": status, "total": total, "completed": n}))
    except OSError as e:
        raise StoreEntryError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    tell({"status": f"using layer sha256:{ref.sha256}", "digest": f"sha256:{ref.sha256}"})
    return ref


def _same_files(a: Entry, b: Entry) -> bool:
    return [(f.role, f.path, f.sha256) for f in a.files] == [(f.role, f.path, f.sha256) for f in b.files]


def checked_name(ref: str) -> Name:
    try:
        return check_name(ref)
    except StoreError as e:
        raise StoreEntryError(str(e)) from None

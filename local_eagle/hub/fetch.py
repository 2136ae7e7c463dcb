"""Fetch what a Hub name stands for into the Hugging Face cache, with ``huggingface_hub``.

The cache, the resumable downloads, ``HF_TOKEN`` and ``hf auth login`` are huggingface_hub's own, so a
file another tool fetched is not fetched again and a gated model needs the usual login. Only the
files a name needs come down: the one GGUF (or split set) its tag picks, or a drafter checkpoint's
config and weights. The environment (``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``)
is read at each call rather than when huggingface_hub is imported, so a server or a test that sets
it late is honoured. Offline, or when the Hub cannot be reached, the name is answered from the cache.
Every failure is one line (:class:`~local_eagle.hub.names.HubError`) that says what to do.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from local_eagle.hub.names import (
    HubError,
    HubRef,
    checkpoint_files,
    is_checkpoint,
    parse_hub_name,
    pick_gguf,
    unsafe_path,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubSettings:
    """Where names are fetched from and kept, read from the environment as huggingface_hub reads it."""

    endpoint: str
    cache: Path
    offline: bool

    @classmethod
    def from_env(cls) -> HubSettings:
        """The environment now; offline also when huggingface_hub read HF_HUB_OFFLINE at its import (it then
        refuses every request)."""
        from huggingface_hub import constants

        env = os.environ
        home = Path(env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface")
        cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or str(home.expanduser() / "hub")
        offline = (env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").strip().upper()
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            cache=Path(os.path.expandvars(cache)).expanduser(),
            offline=offline in ("1", "ON", "YES", "TRUE") or bool(constants.HF_HUB_OFFLINE),
        )


@dataclass(frozen=True)
class Pulled:
    """A name fetched into the cache: the GGUF to load (a split set's first file) or the checkpoint directory."""

    ref: HubRef
    commit: str
    kind: str  # "gguf" or "checkpoint"
    path: Path
    files: tuple[Path, ...]
    from_cache: bool  # answered from the cache without asking the Hub


def pull(
    name: str,
    progress: bool = False,
    settings: HubSettings | None = None,
    on_status: Callable[[dict[str, Any]], None] | None = None,
) -> Pulled:
    """Fetch what ``name`` (``hf.co/USER/REPO[:QUANT][@REV]``) stands for; files already in the cache stay.

    A GGUF repository gives the GGUF its tag picks; a drafter checkpoint repository (config.json and
    safetensors or .bin weights) gives its directory, which a DRAFT converts against its target.
    ``on_status`` is told the progress as Ollama's pull streams it (:func:`status_bars`) instead of bars.
    """
    ref = parse_hub_name(name)
    s = settings or HubSettings.from_env()
    if on_status is not None:
        on_status({"status": "pulling manifest"})
    commit, listing, from_cache = _listing(ref, s)
    if is_checkpoint(listing) and (ref.tag is None or not any(f.lower().endswith(".gguf") for f in listing)):
        kind, wanted = "checkpoint", checkpoint_files(listing)
    else:
        try:
            kind, wanted = "gguf", pick_gguf(ref, listing)
        except HubError as e:
            if not from_cache:
                raise
            why = "HF_HUB_OFFLINE is set" if s.offline else f"{s.endpoint} cannot be reached"
            raise HubError(f"{e}; {why}, so only the files in the cache are known") from None
    for f in wanted:
        if (why := unsafe_path(f)) is not None:
            raise HubError(
                f"{ref.name}: the repository lists {f!r}, a path that leaves the repository ({why}); not fetched"
            )
    with progress_bars(progress) if on_status is None else status_bars(on_status) as bar:
        paths = tuple(_download(ref, f, commit, s, from_cache, bar) for f in wanted)
    _remember_ref(s, ref, commit)
    path = paths[0].parent if kind == "checkpoint" else paths[0]
    return Pulled(ref, commit, kind, path, paths, from_cache)


# ----------------------------------------------------------------------------------------------
# the repository's files at a revision


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The "could not reach the server" errors of the HTTP client huggingface_hub uses (httpx2 or httpx)."""
    found: list[type[BaseException]] = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _listing(ref: HubRef, s: HubSettings) -> tuple[str, list[str], bool]:
    """(commit, file names, from the cache): the Hub's answer, else the cache's when offline or unreachable."""
    if not s.offline:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        try:
            info = HfApi(endpoint=s.endpoint).model_info(ref.repo_id, revision=ref.revision)
        except HfHubHTTPError as e:
            raise hub_error(ref, e, s) from None
        except _transport_errors() as e:
            cached = _cached_listing(ref, s)
            if cached is None:
                raise HubError(
                    f"{ref.name}: cannot reach {s.endpoint} ({type(e).__name__}: {e}) and it is not in the cache "
                    f"({s.cache}); check the connection, or HF_ENDPOINT"
                ) from None
            return (*cached, True)
        if not info.sha:
            raise HubError(f"{ref.name}: {s.endpoint} gave no commit for revision {ref.revision!r}")
        return info.sha, [sib.rfilename for sib in info.siblings or []], False
    cached = _cached_listing(ref, s)
    if cached is None:
        raise HubError(
            f"{ref.name}: not in the cache ({s.cache}) and HF_HUB_OFFLINE is set; pull it once online "
            f"(`local-eagle pull {ref.name}`)"
        )
    return (*cached, True)


def _storage(s: HubSettings, ref: HubRef) -> Path:
    return s.cache / ("models--" + ref.repo_id.replace("/", "--"))


def _ref_path(s: HubSettings, ref: HubRef) -> Path:
    """``refs/<REVISION>`` in the repository's cache folder, checked to stay there (``..``, absolute, symlinks)."""
    refs = _storage(s, ref) / "refs"
    path = refs / ref.revision
    if unsafe_path(ref.revision) is not None or not path.resolve().is_relative_to(refs.resolve()):
        raise HubError(
            f"{ref.name}: the revision {ref.revision[:60]!r} leaves the cache ({refs}); "
            "expected a branch, tag or commit of the repository"
        )
    return path


def _cached_listing(ref: HubRef, s: HubSettings) -> tuple[str, list[str]] | None:
    """The commit a revision last resolved to and the files of it in the cache, or None.

    A ref file that does not hold a commit id (hand-edited, truncated) counts as not cached: its text
    becomes a folder name below, so it must not be a path.
    """
    folder = _storage(s, ref)
    commit: str | None = ref.revision if _COMMIT_RE.fullmatch(ref.revision) else None
    if commit is None:
        try:
            commit = _ref_path(s, ref).read_text().strip()
        except OSError:
            return None
        if not _COMMIT_RE.fullmatch(commit):
            return None
    snap = folder / "snapshots" / commit
    files = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file()) if snap.is_dir() else []
    return (commit, files) if files else None


def _remember_ref(s: HubSettings, ref: HubRef, commit: str) -> None:
    """Record the commit ``ref.revision`` resolved to, as huggingface_hub does (``refs/main``), for offline use:
    files are fetched by commit, which leaves the branch's ref unwritten."""
    if _COMMIT_RE.fullmatch(ref.revision):
        return
    path = _ref_path(s, ref)
    try:
        if path.is_file() and path.read_text().strip() == commit:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(commit)
        os.replace(tmp, path)
    except OSError:
        pass  # the cache may be read-only; the files are there, only the offline look-up is lost


# ----------------------------------------------------------------------------------------------
# downloads


def _download(ref: HubRef, filename: str, commit: str, s: HubSettings, cached: bool, bar: Any) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        got = hf_hub_download(
            ref.repo_id,
            filename,
            revision=commit,
            cache_dir=s.cache,
            endpoint=s.endpoint,
            local_files_only=s.offline or cached,
            tqdm_class=bar(filename),
        )
    except HfHubHTTPError as e:
        raise hub_error(ref, e, s, filename) from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if s.offline else f"{s.endpoint} cannot be reached"
        raise HubError(f"{ref.name}: {filename} is not in the cache ({s.cache}) and {why}") from None
    except _transport_errors() as e:
        raise HubError(f"{ref.name}: downloading {filename} failed ({type(e).__name__}: {e}); run it again") from None
    except OSError as e:  # huggingface_hub's size check, or the disk
        raise HubError(f"{ref.name}: downloading {filename} failed: {str(e).splitlines()[0]}") from None
    except ValueError as e:  # huggingface_hub's own file-name checks
        raise HubError(f"{ref.name}: {filename!r} cannot be fetched: {str(e).splitlines()[0]}") from None
    path = Path(got)
    if not path.parent.resolve().is_relative_to(s.cache.resolve()):
        raise HubError(f"{ref.name}: {filename!r} was placed outside the cache ({path}); not used")
    return path


def hub_error(ref: HubRef, e: Exception, s: HubSettings, filename: str | None = None) -> HubError:
    """One line for an HTTP error of the Hub: log in for 401/403 and gated models, no such repository for 404."""
    from huggingface_hub.errors import GatedRepoError, RemoteEntryNotFoundError, RevisionNotFoundError

    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(e, GatedRepoError) or status in (401, 403):
        return HubError(
            f"{ref.name}: access denied ({status}); log in with `hf auth login` (the former `huggingface-cli login`) "
            f"or set HF_TOKEN, and accept the model's terms at {s.endpoint}/{ref.repo_id}"
        )
    if isinstance(e, RevisionNotFoundError):
        return HubError(f"{ref.name}: no revision {ref.revision!r} in {ref.repo_id}")
    if isinstance(e, RemoteEntryNotFoundError):
        return HubError(f"{ref.name}: {filename or 'a file'} is gone from {ref.repo_id}; pull again")
    if status == 404:
        return HubError(f"{ref.name}: no such repository ({s.endpoint}/{ref.repo_id})")
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return HubError(f"{ref.name}: {s.endpoint} answered {status}: {first}")


class _TqdmLike:
    """What huggingface_hub calls on a tqdm bar besides making and updating it, as no-ops; the bars of
    :func:`status_bars` and :func:`progress_bars` add the making and the updating.

    With ``update_transfer`` a no-op, a Xet download draws one bar (bytes written) rather than two."""

    def update_transfer(self, n: float | None = 1) -> None:
        pass

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        pass

    set_transfer_postfix_str = set_postfix_str

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@contextmanager
def status_bars(on_status: Callable[[dict[str, Any]], None]) -> Iterator[Any]:
    """The tqdm-like class for huggingface_hub that reports each file as Ollama's pull reports a layer:
    ``{"status": "pulling NAME", "digest": NAME, "total": bytes, "completed": bytes}`` (the Hub's file name stands
    for the digest, which is not known before the download)."""

    def bar_for(label: str) -> type:
        class Bar(_TqdmLike):
            def __init__(self, *args: Any, total: float | None = None, initial: float = 0, **kw: Any) -> None:
                self.total, self.completed = int(total or 0), int(initial or 0)
                self._tell()

            def _tell(self) -> None:
                total = max(self.total, self.completed)
                on_status({"status": f"pulling {label}", "digest": label, "total": total, "completed": self.completed})

            def update(self, n: float | None = 1) -> None:
                self.completed += int(n or 0)
                self._tell()

        return Bar

    yield bar_for


@contextmanager
def progress_bars(enabled: bool) -> Iterator[Any]:
    """A rich progress display on stderr, and the tqdm-like class huggingface_hub draws each file's bar with."""
    if not enabled:
        from huggingface_hub.utils.tqdm import tqdm as hf_tqdm

        class Silent(hf_tqdm):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

        yield lambda label: Silent
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    progress = Progress(
        TextColumn("pulling {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )

    def bar_for(label: str) -> type:
        class Bar(_TqdmLike):
            """A rich task for each bar huggingface_hub makes (with total and initial) and updates."""

            def __init__(self, *args: Any, total: float | None = None, initial: float = 0, **kw: Any) -> None:
                self.task = progress.add_task(label, total=total, completed=initial)

            @property
            def total(self) -> float | None:
                return next(t.total for t in progress.tasks if t.id == self.task)

            @total.setter
            def total(self, value: float | None) -> None:
                progress.update(self.task, total=value)

            def update(self, n: float | None = 1) -> None:
                progress.advance(self.task, n or 0)

        return Bar

    with progress:
        yield bar_for

"""A synthetic Ollama store, written the way ``ollama pull``/``ollama create`` lay one out.

Tests point ``OLLAMA_MODELS`` at it to check that local-eagle finds a model by name and inherits
what Ollama keeps beside the GGUF, without an Ollama install or a download. Blobs are named by the
SHA-256 of their content and manifests are Ollama's JSON (``manifest/manifest.go``
``WriteManifest``), so the store is one Ollama itself could read. :func:`plant_blob` and
:func:`run_bounded` build and probe the stores someone with write access could tamper with.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from local_eagle.ollama.store import (
    DEFAULT_HOST,
    DEFAULT_NAMESPACE,
    DEFAULT_TAG,
    LICENSE,
    MESSAGES,
    MODEL,
    PARAMS,
    SYSTEM,
    TEMPLATE,
)

CONFIG = "application/vnd.docker.container.image.v1+json"


def add_blob(root: str | os.PathLike[str], data: bytes | Path, media_type: str) -> dict[str, Any]:
    """Store ``data`` (bytes, or a file, hard-linked where possible) as a blob; returns its layer entry."""
    blobs = Path(root) / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    if isinstance(data, Path):
        h = hashlib.sha256()
        with open(data, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest, size = h.hexdigest(), data.stat().st_size
        target = blobs / f"sha256-{digest}"
        if not target.exists():
            try:
                os.link(data, target)
            except OSError:
                shutil.copyfile(data, target)
    else:
        digest, size = hashlib.sha256(data).hexdigest(), len(data)
        (blobs / f"sha256-{digest}").write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": size}


def plant_blob(
    root: str | os.PathLike[str], target: str | os.PathLike[str], media_type: str, size: int = 0
) -> dict[str, Any]:
    """A blob that is a link to ``target`` (a FIFO, ``/dev/zero``, a file outside the store), as anyone
    who can write the store could plant one; returns its layer entry, claiming ``size`` bytes."""
    blobs = Path(root) / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(f"planted {os.fspath(target)} {media_type}".encode()).hexdigest()
    link = blobs / f"sha256-{digest}"
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": size}


def run_bounded(fn: Callable[[], Any], seconds: float = 60.0) -> Any:
    """``fn()``'s result or exception, failing (instead of hanging the test run) when it has not
    returned within ``seconds``: a FIFO read without O_NONBLOCK would wait for ever."""
    result: list[Any] = []

    def target() -> None:
        try:
            result.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller's thread
            result.append((False, e))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise AssertionError(f"still running after {seconds:g} s: it hangs")
    ok, value = result[0]
    if not ok:
        raise value
    return value


def write_model(
    root: str | os.PathLike[str],
    model: str,
    gguf: str | os.PathLike[str] | None,
    *,
    tag: str = DEFAULT_TAG,
    namespace: str = DEFAULT_NAMESPACE,
    host: str = DEFAULT_HOST,
    template: str | None = None,
    system: str | None = None,
    params: Mapping[str, Any] | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    license: str | None = None,
    layers: Sequence[dict[str, Any]] = (),
    config: Mapping[str, Any] | None = None,
    config_layer: dict[str, Any] | None = None,
) -> Path:
    """Write one model's manifest and blobs, in the layer order ``ollama create`` writes; ``layers``
    are extra entries (from :func:`add_blob`) appended after the others, ``config_layer`` replaces the
    config's entry. Returns the manifest path."""
    entries: list[dict[str, Any]] = []
    if gguf is not None:
        entries.append(add_blob(root, Path(gguf), MODEL))
    for media, value in ((TEMPLATE, template), (SYSTEM, system), (LICENSE, license)):
        if value is not None:
            entries.append(add_blob(root, value.encode(), media))
    if params is not None:
        entries.append(add_blob(root, json.dumps(dict(params)).encode(), PARAMS))
    if messages is not None:
        entries.append(add_blob(root, json.dumps([dict(m) for m in messages]).encode(), MESSAGES))
    entries += layers
    cfg = {"model_format": "gguf", "model_family": "llama", "architecture": "amd64", "os": "linux", **(config or {})}
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config_layer or add_blob(root, json.dumps(cfg).encode(), CONFIG),
        "layers": entries,
    }
    path = Path(root) / "manifests" / host / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path

"""A Hugging Face Hub on 127.0.0.1 that speaks the file protocol huggingface_hub uses, serving tiny generated repos.

Two servers, as on the real Hub: the Hub itself (``/api/models/...`` repository info, ``/{repo}/resolve/{rev}/{file}``)
and a "CDN" on another port (so another origin) that large (LFS) files redirect to, with ``X-Linked-Etag`` and
``X-Linked-Size`` on the redirect, and ranged GETs for resumed downloads. ``HF_ENDPOINT`` points at it and
``HF_HOME`` at a temporary folder, so the real code path runs with no network.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")
NO_TERMS_TOKEN = "hf_terms_not_accepted"  # a login that has not accepted a gated model's terms: 403


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    gated: bool = False
    snapshots: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> files, oldest first

    @property
    def commit(self) -> str:
        return list(self.snapshots)[-1]

    @property
    def files(self) -> dict[str, bytes]:
        return self.snapshots[self.commit]

    def at(self, rev: str) -> tuple[str, dict[str, bytes]] | None:
        commit = self.commit if rev == "main" else rev
        return (commit, self.snapshots[commit]) if commit in self.snapshots else None


@dataclass
class Request:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    auth: bool


class FakeHub:
    """The repositories, the requests seen, and the downloads to cut short (file name -> bytes sent first)."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.cut: dict[str, int] = {}
        self.lock = threading.Lock()
        self.endpoint = ""
        self.cdn = ""

    def add(self, repo_id: str, files: dict[str, bytes], gated: bool = False) -> str:
        """Create or change a repository; returns its new commit."""
        with self.lock:
            repo = self.repos.setdefault(repo_id, Repo(gated))
            digest = hashlib.sha1(repr((repo_id, len(repo.snapshots), sorted(files))).encode())
            for name in sorted(files):
                digest.update(hashlib.sha256(files[name]).digest())
            repo.snapshots[digest.hexdigest()] = dict(files)
            return repo.commit

    def blob(self, sha256: str) -> tuple[str, bytes] | None:
        for repo in self.repos.values():
            for files in repo.snapshots.values():
                for name, data in files.items():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return name, data
        return None

    def seen(self, server: str | None = None, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if (server in (None, r.server)) and (method in (None, r.method))]


_INFO_RE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_RESOLVE_RE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    role: str

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._handle(body=False)

    def do_GET(self) -> None:
        self._handle(body=True)

    # --- plumbing

    def _send(self, status: int, headers: dict[str, str], data: bytes = b"", body: bool = True) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", headers.get("Content-Length", str(len(data))))
        self.end_headers()
        if body and data:
            self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, body: bool, extra: dict[str, str] | None = None) -> None:
        data = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        self._send(status, headers | (extra or {}), data, body)

    def _handle(self, body: bool) -> None:
        path = urlsplit(self.path).path
        hub = self.hub
        auth = bool(self.headers.get("Authorization", "").startswith("Bearer "))
        with hub.lock:
            hub.requests.append(Request(self.role, self.command, path, self.headers.get("Range"), auth))
        if self.role == "cdn":
            return self._cdn(path, body)
        if m := _INFO_RE.match(path):
            repo = self._repo(m["repo"], auth, body)
            if repo is None:
                return None
            rev = unquote(m["rev"] or "main")
            if (snap := repo.at(rev)) is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", body)
            commit, files = snap
            info = {"id": m["repo"], "modelId": m["repo"], "sha": commit,
                    "private": False, "gated": "auto" if repo.gated else False,
                    "siblings": [{"rfilename": name} for name in sorted(files)]}  # fmt: skip
            return self._send(200, {"Content-Type": "application/json"}, json.dumps(info).encode(), body)
        if m := _RESOLVE_RE.match(path):
            repo = self._repo(m["repo"], auth, body)
            if repo is None:
                return None
            rev, name = unquote(m["rev"]), unquote(m["file"])
            if (snap := repo.at(rev)) is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", body)
            commit, files = snap
            if name not in files:
                return self._error(404, "EntryNotFound", f"{name} does not exist", body, {"X-Repo-Commit": commit})
            data = files[name]
            common = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha(data)}"', "Accept-Ranges": "bytes"}
            if name.endswith(LFS_SUFFIXES):
                sha = hashlib.sha256(data).hexdigest()
                linked = {"Location": f"{hub.cdn}/cdn/{sha}", "X-Linked-Etag": f'"{sha}"'}
                linked["X-Linked-Size"] = str(len(data))
                return self._send(302, common | linked, b"", body)
            return self._send(200, common | {"Content-Type": "application/octet-stream"}, data, body)
        return self._error(404, "NotFound", f"no route {path}", body)

    def _repo(self, repo_id: str, auth: bool, body: bool) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found", body)
            return None
        if repo.gated and self.headers.get("Authorization") == f"Bearer {NO_TERMS_TOKEN}":
            msg = f"Access to model {repo_id} is restricted and you are not in the authorized list."
            self._error(403, "GatedRepo", msg, body)
            return None
        if repo.gated and not auth:
            msg = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated."
            self._error(401, "GatedRepo", msg, body)
            return None
        return repo

    def _cdn(self, path: str, body: bool) -> None:
        found = self.hub.blob(path.removeprefix("/cdn/"))
        if found is None:
            return self._error(404, "NotFound", "no such blob", body)
        name, data = found
        size = len(data)
        rng = self.headers.get("Range")
        if rng:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng)[1])  # type: ignore[index]
            part = data[start:]
            headers = {"Content-Range": f"bytes {start}-{size - 1}/{size}", "Content-Type": "application/octet-stream"}
            return self._send(206, headers, part, body)
        cut = self.hub.cut.pop(name, None) if body else None
        if cut is not None:  # promise the whole file, send the first bytes, hang up
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(data[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        return self._send(200, {"Content-Type": "application/octet-stream"}, data, body)


def serve(hub: FakeHub, role: str) -> ThreadingHTTPServer:
    handler = type(f"{role.title()}Handler", (Handler,), {"hub": hub, "role": role})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- the tiny repositories -------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyRepos:
    target: bytes  # the cycle target, served as Q4_K_M
    other: bytes  # another tiny target, served as Q8_0
    config: bytes
    weights: bytes  # the cycle drafter's model.safetensors


TARGET_REPO = "tiny/cycle-GGUF"
DRAFTER_REPO = "tiny/cycle-eagle31"
GATED_REPO = "tiny/gated-GGUF"


def target_files(t: TinyRepos) -> dict[str, bytes]:
    half = len(t.other) // 2
    return {
        "README.md": b"# tiny cycle target\n",
        "cycle-Q4_K_M.gguf": t.target,
        "cycle-Q8_0.gguf": t.other,
        "cycle-Q2_K-00001-of-00002.gguf": t.other[:half],
        "cycle-Q2_K-00002-of-00002.gguf": t.other[half:],
    }

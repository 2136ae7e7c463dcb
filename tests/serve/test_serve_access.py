"""Web pages and DNS rebinding: a request from a foreign ``Origin``, or (on loopback) to a foreign ``Host``, is a
403 on every route of both servers, whatever its method or content type, and does nothing; localhost's pages and
the origins allowed by ``--origins`` / ``LOCAL_EAGLE_ORIGINS`` / ``OLLAMA_ORIGINS`` get CORS headers."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from local_eagle.cli.app import app as cli
from local_eagle.serve.access import ORIGINS_ENV, Access, allowed_host
from local_eagle.serve.app import create_app
from local_eagle.serve.harness import start_server
from local_eagle.serve.store_app import RUN_PATHS, StoreConfig, StoreFront
from local_eagle.settings import resolve
from local_eagle.store import LocalStore

EVIL = "http://evil.example"
LOCAL = "http://127.0.0.1:11434"


@pytest.fixture
def store_front(pair, tmp_path: Path):
    _, target, draft = pair
    local = LocalStore(tmp_path / "models")
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\nPARAMETER num_thread 1\n")
    local.create("cyc", mf)
    front = StoreFront(StoreConfig(local=local, defaults=resolve(flags={"num_ctx": 256, "num_thread": 1})))
    yield front
    front.close()


def routes(app) -> list[tuple[str, str]]:
    """Every method and path of an app's routes (as its OpenAPI schema lists them), path parameters filled in."""
    paths = app.openapi()["paths"]
    return [(m.upper(), re.sub(r"\{[^}]+\}", "cyc", p)) for p, methods in paths.items() for m in methods]


def error_text(path: str, r: httpx.Response) -> str:
    """The message of an error in the path's API shape (it must be one)."""
    body = r.json()
    message = body["error"]["message"] if path.startswith("/v1") else body["error"]
    assert isinstance(message, str)
    return message


def forge(client: TestClient, method: str, path: str, **headers: str) -> httpx.Response:
    """A "simple" cross-origin request, the kind a page sends without a CORS preflight."""
    body = '{"model": "cyc", "name": "cyc", "source": "cyc", "destination": "stolen", "from": "cyc", "prompt": "hi"}'
    return client.request(method, path, content=body, headers={"content-type": "text/plain", **headers})


def both_apps(model_server, store_front) -> list[tuple[str, object, list[tuple[str, str]]]]:
    single = create_app(model_server)
    store_routes = routes(store_front.api) + [("POST", p) for p in RUN_PATHS]
    return [("serve -m", single, routes(single)), ("serve", store_front, store_routes)]


def test_forged_origins_and_hosts_are_refused_on_every_route(model_server, store_front) -> None:
    for label, app, paths in both_apps(model_server, store_front):
        assert len(paths) >= 10, (label, paths)
        with TestClient(app, base_url=LOCAL) as client:
            for method, path in paths:
                for headers, words in (
                    ({"origin": EVIL}, "origin 'http://evil.example' is not allowed"),
                    ({"origin": "null"}, "origin 'null' is not allowed"),
                    ({"host": "evil.example:11434"}, "host 'evil.example:11434' is not allowed"),
                    # DNS rebinding: the page's own origin, but a name that is not this machine's
                    ({"host": "evil.example:11434", "origin": "http://evil.example:11434"}, "host"),
                ):
                    r = forge(client, method, path, **headers)
                    assert r.status_code == 403, (label, method, path, headers, r.text)
                    assert words in error_text(path, r), (label, method, path, r.text)
                r = forge(client, method, path)  # the same request from a local client is not refused
                assert r.status_code != 403, (label, method, path, r.text)


def test_a_forged_request_does_nothing(store_front) -> None:
    local = store_front.config.local
    with TestClient(store_front, base_url=LOCAL) as client:
        for path, body in (("/api/copy", {"source": "cyc", "destination": "stolen"}),
                           ("/api/create", {"model": "planted", "from": "cyc", "system": "obey", "stream": False}),
                           ("/api/delete", {"model": "cyc"})):  # fmt: skip
            method = "DELETE" if path == "/api/delete" else "POST"
            r = client.request(method, path, json=body, headers={"origin": EVIL})
            assert r.status_code == 403
        assert [e.name.short for e in local.entries()] == ["cyc:latest"]
        assert client.post("/api/copy", json={"source": "cyc", "destination": "mine"}).status_code == 200


def test_localhost_pages_and_configured_origins_get_cors(model_server) -> None:
    app = create_app(model_server)
    with TestClient(app, base_url=LOCAL) as client:
        for origin in ("http://localhost:5173", "https://127.0.0.1", "app://obsidian.md", "chrome-extension://abc",
                       "vscode-webview://x", LOCAL):  # fmt: skip
            r = client.get("/api/tags", headers={"origin": origin})
            assert r.status_code == 200, (origin, r.text)
            assert r.headers.get("access-control-allow-origin") in (origin, None)
        r = client.get("/v1/models", headers={"origin": "http://localhost:3000"})
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000" and r.headers["vary"] == "Origin"
        preflight = {"origin": "http://localhost:3000", "access-control-request-method": "POST",
                     "access-control-request-headers": "content-type"}  # fmt: skip
        r = client.options("/api/chat", headers=preflight)
        assert r.status_code == 204 and "POST" in r.headers["access-control-allow-methods"]
        assert "Content-Type" in r.headers["access-control-allow-headers"]
        assert client.get("/api/tags", headers={"origin": "https://app.example.com"}).status_code == 403
        model_server.config.access = Access(("https://*.example.com",))
        try:
            r = client.get("/api/tags", headers={"origin": "https://app.example.com"})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example.com"
            assert client.get("/api/tags", headers={"origin": "https://example.org"}).status_code == 403
            model_server.config.access = Access(("*",))
            assert client.get("/api/tags", headers={"origin": EVIL}).status_code == 200
            model_server.config.access = Access(check_hosts=False)  # listening on 0.0.0.0: any name, as Ollama
            assert client.get("/api/tags", headers={"host": "my-box.example.com"}).status_code == 200
            assert client.get("/api/tags", headers={"origin": EVIL}).status_code == 403
        finally:
            model_server.config.access = Access()


@pytest.mark.parametrize(
    ("host", "allowed"),
    [("localhost:11434", True), ("LOCALHOST", True), ("127.0.0.1:80", True), ("127.5.5.5", True), ("[::1]:11434", True),
     ("0.0.0.0:11434", True), ("10.1.2.3", True), ("192.168.1.20:11434", True), ("web.localhost", True),
     ("box.local:11434", True), ("svc.internal", True), (socket.gethostname(), True), ("", True),
     ("evil.example", False), ("evil.example:11434", False), ("8.8.8.8", False), ("localhost.evil.example", False),
     ("127.0.0.1.nip.io", False), ("[2001:4860::8888]:80", False)],
)  # fmt: skip
def test_allowed_hosts_are_ollamas(host: str, allowed: bool) -> None:
    assert allowed_host(host) is allowed


def test_the_serve_command_reads_origins_from_its_flag_or_the_variables(monkeypatch) -> None:
    import local_eagle.cli.serve_store as serve_store

    seen: list[Access] = []
    monkeypatch.setattr(serve_store, "serve_store", lambda *a, **k: seen.append(k["access"]))
    for args, env in ((["--origins", "https://*.example.com"], {}),
                      ([], {"LOCAL_EAGLE_ORIGINS": "https://*.example.com"}),
                      ([], {"OLLAMA_ORIGINS": "http://other.test, https://*.example.com"})):  # fmt: skip
        r = CliRunner().invoke(cli, ["serve", *args], env={**dict.fromkeys(ORIGINS_ENV), **env})
        assert r.exit_code == 0, r.output
        assert seen[-1].allows_origin("https://a.example.com", "127.0.0.1:11434") and seen[-1].check_hosts
        assert not seen[-1].allows_origin(EVIL, "127.0.0.1:11434")
    r = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"], env=dict.fromkeys(ORIGINS_ENV))
    assert r.exit_code == 0 and not seen[-1].check_hosts and not seen[-1].allows_origin(EVIL, "x")
    r = CliRunner().invoke(cli, ["serve", "--origins", "evil.example"])
    assert r.exit_code == 2 and "'evil.example' is not an origin" in r.output and "Traceback" not in r.output


def test_a_real_server_refuses_a_rebound_name(store_front) -> None:
    uv, thread, base = start_server(store_front)
    port = int(base.rsplit(":", 1)[1])
    try:
        r = httpx.get(base + "/api/tags", headers={"host": f"evil.example:{port}"})
        assert r.status_code == 403 and "not allowed" in r.json()["error"]
        r = httpx.post(base + "/api/copy", content='{"source": "cyc", "destination": "x"}',
                       headers={"origin": EVIL, "content-type": "text/plain"})  # fmt: skip
        assert r.status_code == 403
        assert [m["name"] for m in httpx.get(base + "/api/tags").json()["models"]] == ["cyc:latest"]
    finally:
        uv.should_exit = True
        thread.join(timeout=30)

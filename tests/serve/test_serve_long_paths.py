"""A path longer than the system allows, in a request (``/api/create``'s ``from`` or ``draft``), is a 400 with one
line naming it, through the official client as through raw HTTP, never a 500."""

from __future__ import annotations

import httpx
import ollama
import pytest
from test_store_serve import served  # noqa: F401 - the fixture

LONG = "/tmp/" + "a" * 5000


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_from_is_one_line_to_the_ollama_client(served, stream: bool) -> None:  # noqa: F811
    _, client = served
    with pytest.raises(ollama.ResponseError) as e:
        result = client.create(model="x", from_=LONG, stream=stream)
        if stream:
            list(result)
    msg = str(e.value.error)
    assert "the path is longer than this system allows" in msg and "\n" not in msg.strip(), msg
    assert "internal error" not in msg and len(msg) < 300, msg
    assert [m.model for m in client.list().models] == ["cyc:latest"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_draft_is_one_line(served, pair, stream: bool) -> None:  # noqa: F811
    _, client = served
    base = str(client._client.base_url).rstrip("/")
    r = httpx.post(base + "/api/create", json={"model": "x", "from": str(pair[1]), "draft": LONG, "stream": stream},
                   timeout=60)  # fmt: skip
    last = r.text.strip().splitlines()[-1]
    assert "the path is longer than this system allows" in last and "internal error" not in last, r.text
    assert r.status_code == 400, r.text  # refused before any streaming starts

"""Which threads compute on llama.cpp contexts: a CPU build runs on OpenMP, and a process should keep one
computing thread's team at a time (docs/architecture.md, CPU facts)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def decoding_threads(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """Every thread that decodes on a llama.cpp context from now on, in order (one entry a call)."""
    from local_eagle.llamacpp.model import Context

    seen: list[threading.Thread] = []
    decode = Context.decode

    def decode_seen(self, *a, **k):
        seen.append(threading.current_thread())
        return decode(self, *a, **k)

    monkeypatch.setattr(Context, "decode", decode_seen)
    return seen


def assert_one_team_at_a_time(seen: list[threading.Thread]) -> None:
    """The main thread decodes nothing until the batch's thread has decoded its last (its OpenMP team would live
    beside the batch's), and every other thread that decodes meanwhile has ended."""
    batch = [i for i, t in enumerate(seen) if t.name == "local-eagle-batch"]
    assert batch
    assert not any(t is threading.main_thread() for t in seen[: batch[-1]])
    assert all(not t.is_alive() for t in seen if t.name != "local-eagle-batch" and t is not threading.main_thread())

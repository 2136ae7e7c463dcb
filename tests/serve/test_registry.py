"""The store server's model registry with stand-in servers: who loads, who waits, who is unloaded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from local_eagle.serve.registry import ModelRegistry, ServerBusy


class Stub:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self._closed = name, closed

    def close(self) -> None:
        self._closed.append(self.name)


def registry(sizes: dict[str, int], budget: int, wait_timeout: float | None = 30.0) -> tuple[ModelRegistry, list]:
    closed: list[str] = []
    return ModelRegistry(lambda n: (n, sizes[n], lambda: Stub(n, closed)), budget, wait_timeout=wait_timeout), closed


def eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "it did not happen in time"
        time.sleep(0.01)


def test_a_model_that_does_not_fit_beside_a_busy_one_waits_for_it() -> None:
    """Ollama's scheduler waits for a runner to finish rather than load past the memory it has."""
    reg, closed = registry({"a": 6, "b": 6}, budget=10)

    async def run() -> list[str]:
        a = await reg.acquire("a", "a")
        events: list[str] = []

        async def want_b() -> None:
            b = await reg.acquire("b", "b")
            events.append("b loaded")
            reg.release(b, 60)

        task = asyncio.create_task(want_b())
        await asyncio.sleep(0.3)
        events.append("a done")
        reg.release(a, 60)
        await asyncio.wait_for(task, 10)
        return events

    assert asyncio.run(run()) == ["a done", "b loaded"]
    assert closed == ["a"] and [x.key for x in reg.snapshot()] == ["b"]


def test_a_loaded_model_is_served_while_another_waits_for_room() -> None:
    reg, _ = registry({"a": 6, "b": 6}, budget=10)

    async def run() -> None:
        a = await reg.acquire("a", "a")
        waiting = asyncio.create_task(reg.acquire("b", "b"))
        await asyncio.sleep(0.2)
        again = await asyncio.wait_for(reg.acquire("a", "a"), 2)  # not behind b's load
        assert again is a and a.users == 2 and not waiting.done()
        reg.release(again, 60)
        await asyncio.sleep(0.2)
        assert not waiting.done(), "a is still in use"
        reg.release(a, 60)
        reg.release(await asyncio.wait_for(waiting, 10), 60)

    asyncio.run(run())


def test_waiting_ends_with_server_busy_after_the_timeout() -> None:
    reg, closed = registry({"a": 6, "b": 6}, budget=10, wait_timeout=0.3)

    async def run() -> None:
        a = await reg.acquire("a", "a")
        with pytest.raises(ServerBusy, match="does not fit beside the models in use"):
            await reg.acquire("b", "b")
        reg.release(a, 60)

    asyncio.run(run())
    assert closed == [] and [x.key for x in reg.snapshot()] == ["a"]


def test_idle_models_go_least_recently_used_first_and_a_lone_model_loads_whatever_its_size() -> None:
    reg, closed = registry({"a": 4, "b": 4, "c": 4, "huge": 50}, budget=10)

    async def use(name: str) -> None:
        reg.release(await reg.acquire(name, name), 60)

    async def run() -> None:
        for name in ("a", "b", "a", "c"):
            await use(name)
        assert closed == ["b"]
        await use("huge")

    asyncio.run(run())
    assert closed == ["b", "a", "c"] and [x.key for x in reg.snapshot()] == ["huge"]


def test_keep_alive_zero_unloads_and_a_claim_racing_the_reaper_keeps_its_model() -> None:
    reg, closed = registry({"a": 4}, budget=10)
    got = asyncio.run(reg.acquire("a", "a"))
    reg.release(got, 0)
    assert reg.snapshot() == []
    eventually(lambda: closed == ["a"])  # freed in a thread: release runs on the event loop
    got = asyncio.run(reg.acquire("a", "a"))
    reg.release(got, 0.0001)
    again = reg._claim("a")
    time.sleep(0.01)
    assert again is got and reg.reap() == [] and closed == ["a"]
    reg.release(again, 0)
    eventually(lambda: closed == ["a", "a"])

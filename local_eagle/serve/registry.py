"""The models a store server has loaded: load on first use, keep for ``keep_alive``, unload the least
recently used when the next one would not fit.

Each loaded model is a whole single-model server (:class:`~local_eagle.serve.server.EagleServer`, its
own job slot and worker), so requests for one model wait only for that model's queue and get the
answer a lone server would give. What a load costs is the caller's to say (``load``: the CLI prices
weights, KV cache and compute buffers with the ``vram`` planner, tests use the file sizes), so this
module is bookkeeping only: who is loaded, who is in use, who expires when.

``keep_alive`` follows Ollama (``api.Duration``, ``server/sched.go``): absent means 5 minutes, a
number is seconds, a string is a Go duration (``"10m"``, ``"1h30m"``, ``"0"``), a negative value keeps
the model loaded for good and ``0`` unloads it as soon as its request is done.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.serve.server import EagleServer

DEFAULT_KEEP_ALIVE = 300.0
WAIT_SLICE = 0.5  # seconds a thread waits for a release before the request is looked at again
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")


def keep_alive_seconds(value: Any) -> float | None:
    """Seconds to keep a model after a request (None: for good), from a request's ``keep_alive``."""
    if value is None:
        return DEFAULT_KEEP_ALIVE
    if isinstance(value, bool):
        raise LocalEagleError('keep_alive must be a duration such as "5m" or a number of seconds')
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            seconds = float(body)  # Ollama takes a bare number as seconds
        except ValueError:
            parts = _DURATION_RE.findall(body)
            if not body or "".join(n + u for n, u in parts) != body:
                raise LocalEagleError(f'keep_alive {value!r} is not a duration such as "5m" or "1h30m"') from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
        seconds *= sign
    return None if seconds < 0 else seconds


@dataclass
class Loaded:
    """One loaded model: its server, what it costs, who uses it and when it goes."""

    key: str
    name: str
    server: EagleServer
    size: int
    last_used: float
    expires_at: float | None = None  # monotonic seconds; None: never
    users: int = 0


# name -> (key, bytes it will hold, the load itself): priced first, so that room is made before it loads
LoadFn = Callable[[str], tuple[str, int, Callable[[], EagleServer]]]


class ServerBusy(LocalEagleError):
    """A model could not load: the ones in use leave no room and none was done in time."""


class ModelRegistry:
    """The loaded models of a store server, under a memory ``budget`` in bytes (None: no limit)."""

    def __init__(self, load: LoadFn, budget: int | None = None, clock: Callable[[], float] = time.monotonic,
                 wait_timeout: float | None = 300.0) -> None:  # fmt: skip
        self._load = load
        self.budget = budget
        self.clock = clock
        self.wait_timeout = wait_timeout
        self.loaded: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._releases = 0
        self._loading = asyncio.Lock()

    async def acquire(self, name: str, key: str) -> Loaded:
        """The model ``key`` (as the store canonicalises ``name``), loaded if it is not; marked in use.

        A loaded model is taken at once, whatever else is loading. A model that would not fit beside the
        ones in use waits, as Ollama's scheduler does, until one of them is done and can go (up to
        ``wait_timeout`` seconds: :class:`ServerBusy`); with nothing left to unload it loads anyway.
        """
        got = self._claim(key)
        if got is not None:
            return got
        async with self._loading:  # one load at a time: two would both count the same free memory
            got = self._claim(key)
            if got is not None:
                return got
            key2, size, load = await asyncio.to_thread(self._load, name)
            await self._room_for(name, size)
            server = await asyncio.to_thread(load)
            got = Loaded(key2, name, server, size, self.clock(), users=1)
            with self._lock:
                self.loaded[key2] = got
            return got

    async def _room_for(self, name: str, size: int) -> None:
        """Make room for ``size`` bytes, waiting for models in use to be done; waits in slices, so that a
        request given up on frees its thread soon."""
        deadline = None if self.wait_timeout is None else time.monotonic() + self.wait_timeout
        while (releases := await asyncio.to_thread(self._make_room, size)) is not None:
            released = False
            while not released:
                left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
                if left <= 0:
                    raise ServerBusy(f"the server is busy: {name} does not fit beside the models in use, and "
                                     f"none was done within {self.wait_timeout:g}s")  # fmt: skip
                released = await asyncio.to_thread(self._wait_release, releases, left)

    def _claim(self, key: str) -> Loaded | None:
        with self._lock:
            got = self.loaded.get(key)
            if got is not None:
                got.users += 1
                got.last_used = self.clock()
                got.expires_at = None
            return got

    def release(self, got: Loaded, keep_alive: float | None) -> None:
        """A request is done with ``got``: it stays ``keep_alive`` seconds more (None: for good)."""
        with self._lock:
            got.users -= 1
            got.last_used = self.clock()
            if got.users == 0:
                got.expires_at = None if keep_alive is None else self.clock() + keep_alive
                self._releases += 1
                self._released.notify_all()
        self.reap()

    def _make_room(self, size: int) -> int | None:
        """Unload idle models, least recently used first, until ``size`` more bytes fit the budget.

        None when the model may load; else it must wait for a model in use, and this is the count of
        releases so far (:meth:`_wait_release`)."""
        if self.budget is None:
            return None
        while True:
            with self._lock:
                used = sum(x.size for x in self.loaded.values())
                idle = sorted((x for x in self.loaded.values() if x.users == 0), key=lambda x: x.last_used)
                if used + size <= self.budget or not self.loaded:
                    return None  # llama.cpp decides whether a model alone fits
                if not idle:
                    return self._releases
                victim = self.loaded.pop(idle[0].key)
            victim.server.close()

    def _wait_release(self, releases: int, timeout: float) -> bool:
        """Wait until a model in use is done (after ``releases`` releases); False on timeout."""
        with self._released:
            return self._released.wait_for(lambda: self._releases != releases, timeout)

    def reap(self) -> list[str]:
        """Unload the models whose keep_alive has run out; their keys."""
        now = self.clock()
        with self._lock:
            gone = [self.loaded.pop(x.key) for x in list(self.loaded.values()) if x.users == 0
                    and x.expires_at is not None and x.expires_at <= now]  # fmt: skip
        for x in gone:
            x.server.close()
        return [x.key for x in gone]

    def unload(self, key: str) -> bool:
        """Forget ``key`` and free its engine once no thread is inside llama.cpp (a job still finishing)."""
        with self._lock:
            got = self.loaded.pop(key, None)
        if got is None:
            return False
        got.server.close()
        return True

    def snapshot(self) -> list[Loaded]:
        with self._lock:
            return sorted(self.loaded.values(), key=lambda x: x.last_used, reverse=True)

    def close(self) -> None:
        for x in self.snapshot():
            self.unload(x.key)

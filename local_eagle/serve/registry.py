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
import contextlib
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from local_eagle.errors import LocalEagleError
from local_eagle.serve.jobs import in_thread
from local_eagle.serve.server import EagleServer

DEFAULT_KEEP_ALIVE = 300.0
# Go's longest time.Duration (about 292 years): a longer keep_alive is Ollama's "for good", as a negative one is
MAX_KEEP_ALIVE = (2**63 - 1) / 1e9
MAX_DURATION_CHARS = 100
WAIT_SLICE = 0.5  # seconds a load waiting for room goes before it looks again whether anyone still wants it
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")


def keep_alive_seconds(value: Any) -> float | None:
    """Seconds to keep a model after a request (None: for good), from a request's ``keep_alive``.

    Ollama reads a number as seconds and a negative one as for good; one past Go's longest duration wraps
    around in its conversion on x86 (a negative duration: unloaded at once). Here it is for good, as the
    negative ones are; a number Python reads as infinite (``1e400``) is refused, as Go's JSON decoder does."""
    if value is None:
        return DEFAULT_KEEP_ALIVE
    if isinstance(value, bool):
        raise LocalEagleError('keep_alive must be a duration such as "5m" or a number of seconds')
    if isinstance(value, int):
        return None if value < 0 or value > MAX_KEEP_ALIVE else float(value)
    if isinstance(value, float):
        seconds = value
    else:
        text = str(value).strip()
        if len(text) > MAX_DURATION_CHARS:  # Go's longest duration takes a few dozen; reading more takes long
            raise LocalEagleError(f"keep_alive {text[:20]!r}... is {len(text)} characters long, not a duration")
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
    if not math.isfinite(seconds):
        raise LocalEagleError("keep_alive is out of range (a negative value keeps the model loaded for good)")
    return None if seconds < 0 or seconds > MAX_KEEP_ALIVE else seconds


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
    """A model could not load in time: the ones in use leave no room, or its files are slow to read."""


class ModelRegistry:
    """The loaded models of a store server, under a memory ``budget`` in bytes (None: no limit).

    Each model loads in a task of its own, which every request for it waits on, each up to ``wait_timeout``
    seconds (then :class:`ServerBusy`), so that one model's slow load never holds up another's. Its bytes are
    reserved before it loads, so that two loads never count the same free memory. The file and llama.cpp work
    runs in daemon threads: a stuck one cannot be interrupted, but it holds up no one else and not shutdown.
    """

    def __init__(self, load: LoadFn, budget: int | None = None, clock: Callable[[], float] = time.monotonic,
                 wait_timeout: float | None = 300.0) -> None:  # fmt: skip
        self._load = load
        self.budget = budget
        self.clock = clock
        self.wait_timeout = wait_timeout
        self.loaded: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._reserved: dict[str, int] = {}  # bytes of the loads under way, by key
        self._closing: dict[int, int] = {}  # bytes of the models being freed, by id
        self._watchers: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()  # loads waiting for room
        self._loads: dict[str, asyncio.Task[Loaded]] = {}  # the loads under way; touched on the loop only
        self._wanted: dict[str, int] = {}  # requests waiting for each of them
        self._for_room: set[str] = set()  # the loads waiting for room

    async def acquire(self, name: str, key: str) -> Loaded:
        """The model ``key`` (as the store canonicalises ``name``), loaded if it is not; marked in use.

        A loaded model is taken at once, whatever else is loading. A model that would not fit beside the
        ones in use waits, as Ollama's scheduler does, until one of them is done and can go; with nothing
        left to unload it loads anyway. Waits longer than ``wait_timeout`` end in :class:`ServerBusy`."""
        got = self._claim(key)
        if got is not None:
            return got
        task = self._loads.get(key)
        if task is None or task.done():
            task = self._loads[key] = asyncio.ensure_future(self._load_model(name, key))
            task.add_done_callback(lambda t: self._loads.pop(key) if self._loads.get(key) is t else None)
        self._wanted[key] = self._wanted.get(key, 0) + 1
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.wait_timeout)
        except BaseException as e:
            if not task.done():  # given up before it loaded: not a user of it any more
                self._wanted[key] -= 1
            elif not task.cancelled() and task.exception() is None:
                self.release(task.result(), DEFAULT_KEEP_ALIVE)  # it loaded just as this request gave up
            if not isinstance(e, TimeoutError):
                raise
            why = ("it does not fit beside the models in use, and none was done" if key in self._for_room
                   else "its files were not read")  # fmt: skip
            raise ServerBusy(f"the server is busy: {name} did not load within {self.wait_timeout:g}s: "
                             f"{why} in that time") from None  # fmt: skip

    async def _load_model(self, name: str, key: str) -> Loaded:
        """Price, make room, load; the model goes in with a use for each request still waiting for it."""
        try:
            _, size, load = await in_thread(lambda: self._load(name))
            await self._room_for(name, key, size)
            try:
                server = await in_thread(load)
            finally:
                with self._lock:
                    self._reserved.pop(key, None)
                self._notify()
            users = self._wanted.get(key, 0)
            now = self.clock()
            got = Loaded(key, name, server, size, now, None if users else now + DEFAULT_KEEP_ALIVE, users)
            with self._lock:
                self.loaded[key] = got
            return got
        finally:
            self._wanted.pop(key, None)

    async def _room_for(self, name: str, key: str, size: int) -> None:
        """Reserve ``size`` bytes, unloading idle models and waiting for models in use to be done, as long as
        a request still waits for this one."""
        loop = asyncio.get_running_loop()
        self._for_room.add(key)
        try:
            await self._wait_for_room(loop, name, key, size)
        finally:
            self._for_room.discard(key)

    async def _wait_for_room(self, loop: asyncio.AbstractEventLoop, name: str, key: str, size: int) -> None:
        while True:
            changed = asyncio.Event()
            watch = (loop, changed)
            with self._lock:
                self._watchers.add(watch)  # before looking: a release in between must wake it
            try:
                if await in_thread(lambda: self._reserve(key, size)):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), WAIT_SLICE)
            finally:
                with self._lock:
                    self._watchers.discard(watch)
            if not self._wanted.get(key):  # every request for it gave up
                raise ServerBusy(f"the server is busy: {name} does not fit beside the models in use")

    def _reserve(self, key: str, size: int) -> bool:
        """Unload idle models, least recently used first, until ``size`` more bytes fit the budget, and reserve
        them; False when they only would once a model in use is done."""
        while True:
            with self._lock:
                used = sum(x.size for x in self.loaded.values()) + sum(self._reserved.values())
                used += sum(self._closing.values())
                fits = self.budget is None or used + size <= self.budget
                if fits or not (self.loaded or self._reserved or self._closing):  # llama.cpp decides if one fits
                    self._reserved[key] = size
                    return True
                idle = sorted((x for x in self.loaded.values() if x.users == 0), key=lambda x: x.last_used)
                if not idle:
                    return False
                victim = self.loaded.pop(idle[0].key)
            self._retire([victim], wait=True)

    def _notify(self) -> None:
        """Wake the loads waiting for room: a model was done, unloaded, or a reservation given back."""
        with self._lock:
            watchers = list(self._watchers)
        for loop, changed in watchers:
            with contextlib.suppress(RuntimeError):  # its loop is closed
                loop.call_soon_threadsafe(changed.set)

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
        self._retire(self._expired(), wait=False)  # on the event loop: freeing waits for llama.cpp's threads
        self._notify()

    def reap(self) -> list[str]:
        """Unload the models whose keep_alive has run out; their keys."""
        gone = self._expired()
        self._retire(gone, wait=True)
        return [x.key for x in gone]

    def _expired(self) -> list[Loaded]:
        now = self.clock()
        with self._lock:
            return [self.loaded.pop(x.key) for x in list(self.loaded.values()) if x.users == 0
                    and x.expires_at is not None and x.expires_at <= now]  # fmt: skip

    def _retire(self, gone: list[Loaded], wait: bool) -> None:
        """Free the engines of models already out of ``loaded``, counting their bytes as held until they are
        free; in a daemon thread unless ``wait``."""
        if not gone:
            return
        with self._lock:
            for x in gone:
                self._closing[id(x)] = x.size

        def close() -> None:
            for x in gone:
                try:
                    x.server.close()
                finally:
                    with self._lock:
                        self._closing.pop(id(x), None)
            self._notify()

        if wait:
            close()
        else:
            threading.Thread(target=close, name="local-eagle-unload", daemon=True).start()

    def expire(self, key: str) -> bool:
        """``keep_alive`` 0 without a use (Ollama's ``expireRunner``): an idle model goes now; one in use is left
        to its requests, whose own ``keep_alive`` decides. False if ``key`` is not loaded."""
        with self._lock:
            got = self.loaded.get(key)
            if got is None:
                return False
            if got.users == 0:
                got.expires_at = self.clock()
        self._retire(self._expired(), wait=False)
        self._notify()
        return True

    def unload(self, key: str) -> bool:
        """Forget ``key`` and free its engine once no thread is inside llama.cpp (a job still finishing)."""
        with self._lock:
            got = self.loaded.pop(key, None)
        if got is None:
            return False
        self._retire([got], wait=True)
        return True

    def snapshot(self) -> list[Loaded]:
        with self._lock:
            return sorted(self.loaded.values(), key=lambda x: x.last_used, reverse=True)

    def close(self) -> None:
        for x in self.snapshot():
            self.unload(x.key)

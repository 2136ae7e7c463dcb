"""The one model slot both APIs share: a queue of jobs, a worker thread each, and the pieces they hand back.

One llama.cpp context can run one generation at a time, so requests queue on a lock; each generation runs in
its own worker thread and hands text pieces to the async response through an ``asyncio.Queue``. A client that
goes away sets the job's cancel event; the worker then closes the engine's stream at the next piece, which stops
llama.cpp and frees the lock for the next request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import StreamingResponse

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import STOP_CONTEXT, STOP_LENGTH, Engine
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.serve.errors import ApiError

CANCELLED = "cancelled"
TIMEOUT = "timeout"
_POLL_SECONDS = 0.1


@dataclass
class Job:
    """One request's generation, as the worker thread and the response see it."""

    prompt: str
    max_tokens: int
    sampling: SamplingParams
    draft_max: int
    stop: list[str]
    cancel: threading.Event = field(default_factory=threading.Event)
    received: float = field(default_factory=time.perf_counter)


@dataclass
class JobRecord:
    """What happened to a finished job; the last few are kept so that the outcome of a request
    whose client left (and the tests) can still be seen."""

    started: float
    finished: float
    pieces: int
    stop_reason: str
    error: str | None = None


@dataclass
class Outcome:
    """The end of a job: the text, counts and timings the final message reports."""

    text: str
    stop_reason: str
    prompt_tokens: int
    generated_tokens: int
    queue_seconds: float
    prefill_seconds: float
    decode_seconds: float
    total_seconds: float
    stats: dict[str, Any]


def done_reason(reason: str) -> str:
    """Ollama and OpenAI know "stop" and "length"; a server timeout reads as a length limit."""
    return "length" if reason in (STOP_LENGTH, STOP_CONTEXT, TIMEOUT) else "stop"


class Timeouts(Protocol):
    """The settings the slot reads at each job, not once, so that a running server can change them."""

    queue_timeout: float | None
    generation_timeout: float | None


class JobSlot:
    """The engine and its lock: jobs wait here for their turn and leave a record when they end."""

    def __init__(self, engine: Engine, config: Timeouts) -> None:
        self.engine = engine
        self.config = config
        self.lock = threading.Lock()
        self.records: deque[JobRecord] = deque(maxlen=64)

    def _work(self, job: Job, put: Callable[[tuple], None]) -> None:
        """The worker thread: wait for the engine, generate, pass pieces on, stop when cancelled."""
        if not self.lock.acquire(timeout=-1 if self.config.queue_timeout is None else self.config.queue_timeout):
            put(("error", ApiError(503, f"the server is busy: waited {self.config.queue_timeout:g}s for the model")))
            return
        started = time.perf_counter()
        pieces: list[str] = []
        reason = ""
        error: str | None = None
        final: tuple | None = None  # sent once the engine is free again
        try:
            if job.cancel.is_set():
                reason = CANCELLED
                return
            try:
                stream = self.engine.stream(
                    job.prompt, max_tokens=job.max_tokens, sampling=job.sampling, draft_max=job.draft_max,
                    stop=job.stop,
                )  # fmt: skip
            except LocalEagleError as e:
                error = str(e)
                final = ("error", ApiError(400, str(e)))
                return
            put(("start", started - job.received))
            deadline = None if self.config.generation_timeout is None else started + self.config.generation_timeout
            first_piece = None
            it = iter(stream)
            for piece in it:
                first_piece = first_piece or time.perf_counter()
                pieces.append(piece)
                put(("piece", piece))
                if job.cancel.is_set():
                    reason = CANCELLED
                    break
                if deadline is not None and time.perf_counter() > deadline:
                    reason = TIMEOUT
                    break
            it.close()
            if reason == CANCELLED:
                return
            outcome = self._outcome(job, stream.result, reason, "".join(pieces), started, first_piece)
            reason = outcome.stop_reason
            final = ("end", outcome)
        except Exception as e:  # a failing generation must not take the server down
            error = f"{type(e).__name__}: {e}"
            final = ("error", ApiError(500, f"generation failed: {error}"))
        finally:
            self.lock.release()
            self.records.append(JobRecord(started, time.perf_counter(), len(pieces), reason or "error", error))
            if final is not None:
                put(final)

    def _outcome(
        self, job: Job, result: Any, reason: str, text: str, started: float, first_piece: float | None
    ) -> Outcome:
        """Counts and timings for the final message; runs in the worker, under the engine's lock."""
        now = time.perf_counter()
        queue_seconds, total = started - job.received, now - job.received
        if result is not None:
            st = result.stats
            return Outcome(
                text=result.text, stop_reason=reason or st.stop_reason, prompt_tokens=st.prompt_tokens,
                generated_tokens=st.generated_tokens, queue_seconds=queue_seconds, prefill_seconds=st.prefill_seconds,
                decode_seconds=st.decode_seconds, total_seconds=total, stats=st.to_dict(),
            )  # fmt: skip
        # stopped by the server's timeout: the engine's stats ended with its stream, so count the
        # text and take the first piece's arrival as the end of the prefill
        n_prompt = len(self.engine.tokenize(job.prompt))
        n_out = len(self.engine.model.tokenize(text, add_special=False, parse_special=False)) if text else 0
        first = first_piece or now
        return Outcome(
            text=text, stop_reason=reason, prompt_tokens=n_prompt, generated_tokens=n_out,
            queue_seconds=queue_seconds, prefill_seconds=first - started, decode_seconds=now - first,
            total_seconds=total, stats={"stop_reason": reason, "generated_tokens": n_out},
        )  # fmt: skip

    async def run(self, job: Job, request: Request) -> AsyncIterator[tuple]:
        """Events of one job: ``("start", queue_s)``, ``("piece", text)``..., ``("end", Outcome)``.

        Raises ApiError before ``start`` (queue timeout, bad prompt). Leaving the iteration early,
        or the client disconnecting, cancels the generation.
        """
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[tuple] = asyncio.Queue()

        def put(item: tuple) -> None:
            loop.call_soon_threadsafe(q.put_nowait, item)

        threading.Thread(target=self._work, args=(job, put), name="local-eagle-generate", daemon=True).start()
        checked = time.monotonic()
        getter: asyncio.Task | None = None  # kept across polls: cancelling a get can lose its item
        try:
            while True:
                getter = getter or asyncio.ensure_future(q.get())
                done, _ = await asyncio.wait({getter}, timeout=_POLL_SECONDS)
                item = getter.result() if done else None
                if done:
                    getter = None
                if time.monotonic() - checked >= _POLL_SECONDS:
                    checked = time.monotonic()
                    if await request.is_disconnected():
                        return
                if item is None:
                    continue
                if item[0] == "error":
                    raise item[1]
                yield item
                if item[0] == "end":
                    return
        finally:
            job.cancel.set()
            if getter is not None:
                getter.cancel()

    async def complete(self, job: Job, request: Request) -> Outcome:
        """Run a job to its end (non-streaming responses)."""
        async for ev in self.run(job, request):
            if ev[0] == "end":
                return ev[1]
        raise ApiError(499, "client closed the request")

    async def started(self, job: Job, request: Request) -> tuple[AsyncIterator[tuple], tuple]:
        """Start a streaming job and wait until it really runs, so that a queue timeout or a bad
        prompt still gets a proper 4xx/5xx status rather than an error inside a 200 stream."""
        events = self.run(job, request)
        try:
            first = await events.__anext__()
        except StopAsyncIteration:
            raise ApiError(499, "client closed the request") from None
        return events, first


class Encoder(Protocol):
    """How one API writes a running job on the wire; the job and its queue are the same for both."""

    media_type: str

    def event(self, event: tuple) -> Iterable[bytes]:
        """The bytes for a ``piece`` or ``end`` event."""
        ...

    def error(self, e: ApiError) -> bytes:
        """The last line of a stream whose job failed after the 200 status was sent."""
        ...


async def stream_response(slot: JobSlot, job: Job, request: Request, encoder: Encoder) -> StreamingResponse:
    """Wait until the job runs (errors before that keep their status), then stream its events."""
    events, _first = await slot.started(job, request)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for ev in events:
                for chunk in encoder.event(ev):
                    yield chunk
        except ApiError as e:
            yield encoder.error(e)
        finally:
            await events.aclose()

    return StreamingResponse(body(), media_type=encoder.media_type)

"""The one model slot both APIs share: a queue of jobs, a worker thread each, and the pieces they hand back.

An engine runs as many generations at once as it has sequences (``serve --parallel``, one by default; they share
its rounds, ``runtime.batch``), so further requests queue on a semaphore; each generation runs in
its own worker thread and hands text pieces to the async response through an ``asyncio.Queue``. A client that
goes away sets the job's cancel event; the worker then closes the engine's stream at the next piece, which stops
llama.cpp and frees the lock for the next request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar

import numpy as np
from fastapi import Request
from fastapi.responses import StreamingResponse

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import PREFIX_MARGIN, prefix_tokens
from local_eagle.runtime.engine import STOP_CANCELLED, STOP_CONTEXT, STOP_LENGTH, Engine
from local_eagle.runtime.grammar import GrammarError, GrammarSpec
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.stats import GenerationStats
from local_eagle.runtime.tree import TreeShape
from local_eagle.serve.errors import ApiError
from local_eagle.serve.logprobs import TokenEntry, resolve
from local_eagle.serve.runners import RemoteFailure, RunnerError
from local_eagle.serve.served import ServedEngine, served

CANCELLED = STOP_CANCELLED
TIMEOUT = "timeout"
_POLL_SECONDS = 0.1
T = TypeVar("T")


@dataclass
class Job:
    """One request's generation, as the worker thread and the response see it."""

    prompt: np.ndarray  # tokens
    max_tokens: int
    sampling: SamplingParams
    draft_max: int
    stop: list[str]
    grammar: GrammarSpec | None = None  # Ollama's format, OpenAI's response_format: the output's constraint
    grammar_field: str = "format"  # the request field it came from, which a grammar failing at run time names
    logprobs: int | None = None  # None: none; n: each token's logprob and the n likeliest alternatives
    special: bool = False  # control tokens written as text (a tool-call tag that is one: Mistral's [TOOL_CALLS])
    cancel: threading.Event = field(default_factory=threading.Event)
    received: float = field(default_factory=time.perf_counter)
    seen: Any = None  # the model's runner as the request found it (ServedEngine.live): its death is this job's


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
class _Run:
    """What a worker learnt about its job, filled in as it goes, so that the record and the final event are
    written once, after the engine is free again."""

    pieces: int = 0
    reason: str = ""
    error: str | None = None
    final: tuple | None = None


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
    logprobs: list[TokenEntry] | None = None  # asked for: the tokens' logprobs, with their texts


_STATS_FIELDS = {f.name for f in fields(GenerationStats)}
SERVED_STATS: tuple[str, ...] = tuple(f.name for f in fields(Outcome) if f.name in _STATS_FIELDS)
"""What the final message reports of a finished generation's stats: the fields ``Outcome`` and ``GenerationStats``
share by name."""


def done_reason(reason: str) -> str:
    """Ollama and OpenAI know "stop" and "length"; a server timeout reads as a length limit."""
    return "length" if reason in (STOP_LENGTH, STOP_CONTEXT, TIMEOUT) else "stop"


class Timeouts(Protocol):
    """The settings the slot reads at each job, not once, so that a running server can change them."""

    queue_timeout: float | None
    generation_timeout: float | None


class JobSlot:
    """The engine and its lock: jobs wait here for their turn and leave a record when they end.

    Every thread that calls into llama.cpp (a generation, a prompt's tokenization) holds a use of the engine,
    so that ``close`` can wait for the last one to leave before the model is freed: freeing it under a running
    decode or tokenization crashed the process on Ctrl-C.
    """

    def __init__(self, engine: Engine | ServedEngine, config: Timeouts) -> None:
        self.engine = served(engine)
        self.config = config
        self.tree: TreeShape | None = None  # serve --fixed --tree N: the tree every round drafts
        self.parallel = max(1, int(self.engine.options.parallel or 1))
        self.lock = threading.Semaphore(self.parallel)  # the engine's sequences: more jobs wait their turn
        self.records: deque[JobRecord] = deque(maxlen=64)
        self.closing = False
        self._users = 0
        self._idle = threading.Condition()
        self.max_prompt_bytes = self.engine.max_prompt_bytes
        self._tags: dict[str, tuple[list[int], list[bool]]] = {}

    @contextmanager
    def using_engine(self) -> Iterator[ServedEngine]:
        """The engine, kept alive until the block ends; refused once the server shuts down."""
        with self._idle:
            if self.closing:
                raise ApiError(503, "the server is shutting down")
            self._users += 1
        try:
            yield self.engine
        finally:
            with self._idle:
                self._users -= 1
                self._idle.notify_all()

    def busy(self) -> bool:
        """Whether a thread is inside llama.cpp now."""
        with self._idle:
            return self._users > 0

    def close(self, timeout: float | None = None) -> bool:
        """Stop the running job (at its next prefill chunk or piece), wait until no thread is inside llama.cpp,
        then free the engine. False, with the engine left alone, if that took longer than ``timeout``."""
        with self._idle:
            self.closing = True
            if not self._idle.wait_for(lambda: self._users == 0, timeout):
                return False
        self.engine.close()
        return True

    def tokens(self, text: str) -> np.ndarray:
        """The prompt's tokens, counted against the context before the job queues for the model: a prompt that
        cannot fit is refused at once (a 400), and tokenizing a long one does not hold the slot."""
        tokens, why = self.fitting_tokens(text)
        if why is not None:
            raise ApiError(400, why)
        if len(tokens) == 0:
            raise ApiError(400, "the prompt is empty")
        return tokens

    def fitting_tokens(self, text: str) -> tuple[np.ndarray, str | None]:
        """The prompt's tokens and None, or (whatever was counted, why) where it cannot fit the context: more bytes
        than the context could hold as tokens (not tokenized then), or too many tokens. A chat drops its oldest
        messages until its prompt fits (``models.fit_chat``)."""
        n_bytes = len(text.encode("utf-8", "surrogatepass"))
        if self.max_prompt_bytes is not None and n_bytes > self.max_prompt_bytes:
            return np.zeros(0, dtype=np.int32), (
                f"the prompt is {n_bytes} bytes long, more than {self.engine.n_ctx} tokens of this model can "
                "hold; the context is the server's (serve --ctx)"
            )
        with self.using_engine() as engine:
            try:  # a prompt far past the context is refused on a prefix's tokens, not tokenized whole
                tokens = prefix_tokens(engine.tokenize, text, engine.n_ctx)
            except RunnerError as e:  # its runner died: the request fails, the next one restarts it
                raise ApiError(500, str(e)) from None
        if len(tokens) >= engine.n_ctx:
            some = "at least " if len(tokens) > engine.n_ctx + PREFIX_MARGIN else ""  # maybe a prefix's count
            return tokens, (
                f"the prompt has {some}{len(tokens)} tokens, more than the context of {engine.n_ctx} allows; "
                "the context is the server's (serve --ctx)"
            )
        return tokens, None

    def _work(self, job: Job, put: Callable[[tuple], None]) -> None:
        """The worker thread: wait for the engine, generate, pass pieces on, stop when cancelled."""
        if not self.lock.acquire(timeout=-1 if self.config.queue_timeout is None else self.config.queue_timeout):
            put(("error", ApiError(503, f"the server is busy: waited {self.config.queue_timeout:g}s for the model")))
            return
        started = time.perf_counter()
        run = _Run()
        try:
            with self.using_engine():
                if job.cancel.is_set():
                    run.reason = CANCELLED
                else:
                    self._generate(job, put, started, run)
        except ApiError as e:  # the server shuts down
            run.reason, run.final = CANCELLED, ("error", e)
        except GrammarError as e:  # a constraint that validated and failed once it ran: the request's, not ours
            run.error = str(e)
            run.final = ("error", ApiError(400, f"{job.grammar_field} cannot be followed: {e}"))
        except RunnerError as e:  # the model's runner died or hung: this job fails, the server goes on
            run.error = str(e)
            run.final = ("error", ApiError(500, run.error))
        except Exception as e:  # a failing generation must not take the server down
            run.error = str(e) if isinstance(e, RemoteFailure) else f"{type(e).__name__}: {e}"
            run.final = ("error", ApiError(500, f"generation failed: {run.error}"))
        finally:
            self.lock.release()
            if run.reason == CANCELLED and run.final is None and not job.cancel.is_set():
                run.final = ("error", ApiError(503, "the server is shutting down"))
            self.records.append(JobRecord(started, time.perf_counter(), run.pieces, run.reason or "error", run.error))
            if run.final is not None:
                put(run.final)

    def _generate(self, job: Job, put: Callable[[tuple], None], started: float, run: _Run) -> None:
        """One generation under the lock and a use of the engine; what happened is left in ``run``."""
        # a runner that died after the job saw it alive fails it rather than restart under it
        extra: dict[str, Any] = {"seen": job.seen}
        if job.grammar is not None:  # only then: an engine without constraints keeps its signature
            extra["grammar"] = job.grammar
        if job.logprobs is not None:
            extra["logprobs"] = job.logprobs
        if job.special:
            extra["special"] = True
        try:
            stream = self.engine.stream(
                job.prompt, max_tokens=job.max_tokens, sampling=job.sampling, draft_max=job.draft_max,
                stop=job.stop, tree=self.tree, cancelled=lambda: job.cancel.is_set() or self.closing, **extra,
            )  # fmt: skip
        except RunnerError:
            raise
        except LocalEagleError as e:
            run.error = str(e)
            run.final = ("error", ApiError(400, str(e)))
            return
        put(("start", started - job.received))
        deadline = None if self.config.generation_timeout is None else started + self.config.generation_timeout
        first_piece = None
        pieces: list[str] = []
        it = iter(stream)
        for piece in it:
            first_piece = first_piece or time.perf_counter()
            pieces.append(piece)
            put(("piece", piece))
            run.pieces += 1
            if job.cancel.is_set() or self.closing:
                run.reason = CANCELLED
                break
            if deadline is not None and time.perf_counter() > deadline:
                run.reason = TIMEOUT
                break
        it.close()
        if stream.result is not None and stream.result.stats.stop_reason == CANCELLED:  # during the prefill
            run.reason = CANCELLED
        if run.reason == CANCELLED:
            return
        outcome = self._outcome(job, stream.result, run.reason, "".join(pieces), started, first_piece)
        run.reason = outcome.stop_reason
        run.final = ("end", outcome)

    def _outcome(
        self, job: Job, result: Any, reason: str, text: str, started: float, first_piece: float | None
    ) -> Outcome:
        """Counts and timings for the final message; runs in the worker, under the engine's lock."""
        now = time.perf_counter()
        queue_seconds, total = started - job.received, now - job.received
        if result is not None:
            st = result.stats
            served = {k: getattr(st, k) for k in SERVED_STATS}  # the stats' own fields of the same names
            served["stop_reason"] = reason or st.stop_reason
            return Outcome(
                text=result.text, queue_seconds=queue_seconds, total_seconds=total, stats=st.to_dict(),
                logprobs=self._logprobs(job, result), **served,
            )  # fmt: skip
        # stopped by the server's timeout: the engine's stats ended with its stream, so count the
        # text and take the first piece's arrival as the end of the prefill
        n_prompt = len(job.prompt)
        n_out = self._count(text) if text else 0
        first = first_piece or now
        return Outcome(
            text=text, stop_reason=reason, prompt_tokens=n_prompt, generated_tokens=n_out,
            queue_seconds=queue_seconds, prefill_seconds=first - started, decode_seconds=now - first,
            total_seconds=total, stats={"stop_reason": reason, "generated_tokens": n_out},
            logprobs=None if job.logprobs is None else [],  # the engine's result, and its logprobs, never came
        )  # fmt: skip

    def _logprobs(self, job: Job, result: Any) -> list[TokenEntry] | None:
        if job.logprobs is None:
            return None
        return resolve(getattr(result, "logprobs", None) or [], self.pieces, result.text)

    def pieces(self, tokens: list[int]) -> list[bytes]:
        """Tokens' texts as the model writes them (control tokens too), for logprobs."""
        return self.engine.pieces(tokens)

    def tag_tokens(self, text: str) -> tuple[list[int], list[bool]]:
        """A tool-call tag's tokens and which are special (``runnerproc.tag_tokens``); kept per tag."""
        cache = self._tags
        if text not in cache:
            with self.using_engine() as engine:
                try:
                    got = engine.tag_tokens(text)
                except RunnerError as e:
                    raise ApiError(500, str(e)) from None
            cache[text] = got
        return cache[text]

    def _count(self, text: str) -> int:
        """A generated text's tokens, without the BOS."""
        return self.engine.count_tokens(text)

    async def run(self, job: Job, request: Request) -> AsyncIterator[tuple]:
        """Events of one job: ``("start", queue_s)``, ``("piece", text)``..., ``("end", Outcome)``.

        Raises ApiError before ``start`` (queue timeout, bad prompt). Leaving the iteration early,
        or the client disconnecting, cancels the generation.
        """
        if await request.is_disconnected():  # gone while its prompt was prepared: never take the slot
            job.cancel.set()
            return
        job.seen = self.engine.live()
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


def in_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """``fn()`` in a daemon thread of its own, as a future of the running loop. Not the loop's executor: it has
    a few threads, which a few stuck calls (a slow disk, a template that runs long) would take up, and it is
    joined at exit, so that one call that never ends would hold up shutdown. Awaiting the future may be given
    up (a timeout, a client gone): the thread is then left to finish, and its result is dropped."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def work() -> None:
        try:
            result, error = fn(), None
        except BaseException as e:  # handed to the awaiting request, which turns it into its answer
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop closed meanwhile: nobody waits for this any more
            pass

    threading.Thread(target=work, name="local-eagle-work", daemon=True).start()
    return done


async def off_loop(request: Request, fn: Callable[[], T]) -> T:
    """``fn()`` off the event loop (:func:`in_thread`), so that the loop goes on answering other requests while
    a prompt is rendered (a template may run long) and tokenized, or a Modelfile parsed. Gives up (499) when
    the client leaves; the thread is left to finish."""
    done = in_thread(fn)
    while True:
        finished, _ = await asyncio.wait({done}, timeout=_POLL_SECONDS)
        if finished:
            return done.result()
        if await request.is_disconnected():
            done.cancel()
            raise ApiError(499, "client closed the request")


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

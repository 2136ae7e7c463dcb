"""Many generations on one engine at once: they join and leave between rounds, and one target call verifies
every sequence's drafts.

An engine opened with ``EngineOptions.parallel`` N > 1 holds N sequences in one unified cache (the target's and
the drafter's). Each :meth:`Engine.stream` call becomes a *seat*: a :class:`~local_eagle.runtime.rounds.Generation`
on its own cache sequence and drafter feed, run by one scheduler thread. Each turn of that thread decodes one
prompt chunk of every seat still in its prefill, then runs one round for every seat past it: each drafts (the
length the :class:`~local_eagle.runtime.policy.batch.BatchPolicy` chose for the batch, or its own fixed length),
one target call decodes ``[last token, *drafts]`` of every seat, each on its sequence, and each seat accepts,
commits and emits on its own, with its own sampling, stop strings and random stream, so that each output is the
target's own whatever else shares the batch. A seat that ends frees its sequence's cells for the next request.
The consumer of a stream reads pieces from its seat's queue in its own thread.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.clock import clock
from local_eagle.runtime.feed import DrafterFeed
from local_eagle.runtime.policy.batch import BatchPolicy
from local_eagle.runtime.policy.lengths import FixedLengths
from local_eagle.runtime.rounds import STOP_CANCELLED, Generation, GenerationResult, run_round

if TYPE_CHECKING:
    from local_eagle.runtime.sequence import EngineView


@dataclass
class Seat:
    """One generation in the batch, and the queue its consumer reads."""

    gen: Generation
    out: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)
    closed: bool = False  # the consumer has gone
    prefill: Iterator[None] | None = None
    last_token: int | None = None  # set once the prefill chose the first token
    started: float = 0.0


class Batcher:
    """The scheduler thread of a parallel engine and the seats it runs."""

    def __init__(self, engine: EngineView, parallel: int) -> None:
        self.engine = engine
        self.cond = threading.Condition()
        self.waiting: deque[Seat] = deque()
        self.active: list[Seat] = []
        self.free = list(range(parallel))
        self.policy = BatchPolicy()
        self.thread: threading.Thread | None = None
        self.closing = False

    # --- the consumer's side --------------------------------------------------------------------------

    def run(self, gen: Generation) -> Iterator[str]:
        """The generation's pieces as the scheduler produces them; returns its result."""
        seat = Seat(gen)
        with self.cond:
            if self.closing:
                raise LocalEagleError("the engine is closing")
            self.waiting.append(seat)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="local-eagle-batch", daemon=True)
                self.thread.start()
            self.cond.notify_all()
        try:
            while True:
                kind, value = seat.out.get()
                if kind == "piece":
                    yield value
                elif kind == "end":
                    return value
                else:
                    raise value
        finally:
            seat.closed = True
            with self.cond:
                self.cond.notify_all()

    def close(self) -> None:
        """Stop the scheduler (the seats still running end with an error) and wait for it."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
            thread = self.thread
        if thread is not None:
            thread.join(timeout=60)

    # --- the scheduler ----------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.closing and not self.waiting and not self.active:
                    self.cond.wait()
                if self.closing:
                    for seat in [*self.active, *self.waiting]:
                        seat.out.put(("error", LocalEagleError("the engine was closed")))
                    return
                while self.waiting and self.free:
                    seat = self.waiting.popleft()
                    if not seat.closed:
                        self._admit(seat)
            try:
                self._turn()
            except Exception as e:  # a failed call fails the seats it held, not the server
                for seat in list(self.active):
                    seat.out.put(("error", e))
                    self._release(seat)

    def _admit(self, seat: Seat) -> None:
        gen, engine = seat.gen, self.engine
        gen.seq = self.free.pop(0)
        gen.pausable = False  # the batch decides when to record features, for every seat at once
        if engine.drafter is not None and engine.capture is not None:
            gen.feed = DrafterFeed(engine.drafter, engine.capture.width, gen.window, seq=gen.seq)
        # the drafter decodes a prompt at once only where the batch drafts steadily; else its last rows wait (feed),
        # and where the batch has not drafted lately (and recording can pause) the prompt is not recorded at all:
        # a window of later rows is, before the next probe. A probe is not drafting: a prompt decoded for one cost
        # the drafter a row per token (184 ms for 150 on a CPU) while every sequence in flight waited
        drafting = not gen.adaptive or self.policy.steady
        gen.lengths = FixedLengths() if gen.speculative and drafting else None
        capture = engine.capture
        gen.prefill_features = drafting or capture is None or not capture.can_pause
        seat.started = clock()
        self.active.append(seat)
        gen.reset_caches()
        seat.prefill = gen.prefill_chunks()

    def _release(self, seat: Seat) -> None:
        gen = seat.gen
        if seat in self.active:
            self.active.remove(seat)
            gen.target.seq_remove(gen.seq)
            if gen.drafter is not None:
                gen.drafter.ctx.seq_remove(gen.seq)
            with self.cond:
                self.free.append(gen.seq)

    def _end(self, seat: Seat, result: GenerationResult | None = None) -> None:
        gen = seat.gen
        if result is None:
            gen.spec_stats.decode_seconds = clock() - seat.started
            if gen.adaptive:
                gen.spec_stats.policy = self.policy.state()
            tail, result = gen.finish()
            if tail:
                seat.out.put(("piece", tail))
        self._release(seat)  # before the end is told: a consumer that goes on finds the sequence free
        seat.out.put(("end", result))

    def _turn(self) -> None:
        """A prompt chunk for each seat in its prefill, then one round for the others."""
        capture = self.engine.capture
        for seat in list(self.active):
            gen = seat.gen
            cancelled = gen.request.cancelled
            if seat.closed or (seat.last_token is not None and cancelled is not None and cancelled()):
                gen.stop_reason = gen.stop_reason or STOP_CANCELLED
                self._end(seat)
                continue
            if seat.prefill is None:
                continue
            if gen.speculative and gen.prefill_features and capture is not None and capture.paused:
                capture.pause(False)
            elif capture is not None and capture.can_pause and not (gen.speculative and gen.prefill_features):
                capture.pause(True)
            try:
                next(seat.prefill)
            except StopIteration as done:
                seat.prefill = None
                if gen.speculative:
                    gen.lengths = FixedLengths()
                gen.spec_stats.prefill_seconds = clock() - seat.started
                seat.started = clock()
                if done.value is None:
                    self._end(seat, gen.cancelled_result())
                else:
                    self._emit(seat, [int(done.value)])
        ready = [seat for seat in self.active if seat.prefill is None and not seat.closed]
        if ready:
            tokens = run_round([s.gen for s in ready], [s.last_token for s in ready], self.policy)
            for seat, accepted in zip(ready, tokens, strict=True):
                self._emit(seat, accepted)

    def _emit(self, seat: Seat, tokens: list[int]) -> None:
        gen = seat.gen
        for piece in gen.emit(tokens):
            seat.out.put(("piece", piece))
        if gen.ended():
            self._end(seat)
        else:
            seat.last_token = tokens[-1]

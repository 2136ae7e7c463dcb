"""The server's side of a model's runner process (:mod:`~local_eagle.serve.runnerproc`): start, talk, watch.

:class:`RunnerEngine` speaks :class:`~local_eagle.serve.served.ServedEngine`, as an engine loaded in the server's
process does through ``served.LocalEngine``, so that the job slot and both servers run a model the same way in or
out of process. The engine
lives in a child process, in a process group of its own and with ``GGML_NO_BACKTRACE=1`` (ggml's fork of gdb on
an abort deadlocked, and its children kept the port bound). When the runner exits, is killed or stops answering,
the requests it was running or that were queued for it fail with one line (the model, the exit status or signal,
the runner's last line on stderr), its whole group is killed and reaped, and the next request starts it afresh;
the server and its other models go on.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from local_eagle.errors import CheckpointError, GGUFError, LlamaError, LocalEagleError
from local_eagle.runtime.engine import EngineOptions
from local_eagle.runtime.grammar import GrammarError
from local_eagle.runtime.rounds import TokenLogprob
from local_eagle.runtime.stats import GenerationStats
from local_eagle.serve.runnerproc import read_frame, write_frame

_log = logging.getLogger("uvicorn.error")
ANSWER_SECONDS = 300.0  # a runner silent this long in a call (no piece, no prefill tick) is taken for hung
CANCEL_GRACE_SECONDS = 10.0  # a cancelled generation must end this soon, or its runner is killed
CLOSE_SECONDS = 10.0  # what a closing runner gets to free its model before its group is killed
START_SECONDS = 900.0  # the longest a model's load may take
_LOAD_ERRORS: dict[str, type[LocalEagleError]] = {
    c.__name__: c for c in (LocalEagleError, LlamaError, GGUFError, CheckpointError)
}
_LIVE: weakref.WeakSet[_Process] = weakref.WeakSet()


class RunnerError(LocalEagleError):
    """A model's runner exited, was killed or stopped answering: what the requests it had get (a 500)."""


class RemoteFailure(Exception):
    """A generation or tokenization failed with an exception in the runner (its ``Type: message``)."""


@dataclass
class RemoteResult:
    """``Stream.result`` out of process: the text, the stats, and the tokens' logprobs when asked for."""

    text: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    logprobs: list[TokenLogprob] | None = None


def logprobs_from_wire(raw: list[list[Any]] | None) -> list[TokenLogprob] | None:
    """``runnerproc.logprobs_wire`` read back."""
    if raw is None:
        return None
    return [TokenLogprob(int(t), float(lp), [(int(a), float(b)) for a, b in top]) for t, lp, top in raw]


class _Process:
    """One runner process: its pipes, the calls waiting for answers, and how it ended."""

    def __init__(self, label: str, env: dict[str, str]) -> None:
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "local_eagle.serve.runnerproc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, env={**os.environ, **env},
        )  # fmt: skip
        _LIVE.add(self)
        self.pid = self.proc.pid
        self.stderr: deque[str] = deque(maxlen=20)
        self.failure: str | None = None  # why it is gone, once it is
        self.reaped = threading.Event()  # set once ``failure`` is
        self.killed_for: str | None = None
        self.closing = False
        self._ids = itertools.count(1)
        self._calls: dict[int, queue.Queue[dict[str, Any]]] = {0: queue.Queue()}  # 0: the load's answer
        self._lock = threading.Lock()
        self._write = threading.Lock()
        self._err = threading.Thread(target=self._drain, name=f"runner-stderr-{self.pid}", daemon=True)
        self._err.start()
        self._reader = threading.Thread(target=self._read, name=f"runner-{self.pid}", daemon=True)
        self._reader.start()

    # --- the wire -----------------------------------------------------------------------------

    def call(self, message: dict[str, Any]) -> tuple[int, queue.Queue[dict[str, Any]]]:
        """Send a request; its answers come on the queue (``{"died": why}`` if the runner goes first)."""
        rid = next(self._ids)
        answers: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            if self.failure is not None:
                raise RunnerError(self.failure)
            self._calls[rid] = answers
        self.send({**message, "id": rid})
        return rid, answers

    def send(self, message: dict[str, Any]) -> None:
        try:
            with self._write:
                write_frame(self.proc.stdin, message)  # type: ignore[arg-type]
        except (OSError, ValueError):  # the pipe is closed: the reader reports why
            pass

    def done(self, rid: int) -> None:
        with self._lock:
            self._calls.pop(rid, None)

    def wait(self, answers: queue.Queue[dict[str, Any]], timeout: float) -> dict[str, Any]:
        """The next answer; a runner silent for ``timeout`` seconds is killed as hung."""
        try:
            msg = answers.get(timeout=timeout)
        except queue.Empty:
            self.kill(f"did not answer within {timeout:g}s")
            try:
                msg = answers.get(timeout=CLOSE_SECONDS + 5)
            except queue.Empty:
                raise RunnerError(self.failure or f"the runner of model '{self.label}' ({self.pid}) did not "
                                  f"answer within {timeout:g}s and could not be killed") from None  # fmt: skip
        if "died" in msg:
            raise RunnerError(msg["died"])
        return msg

    def _read(self) -> None:
        try:
            while True:
                msg = read_frame(self.proc.stdout)  # type: ignore[arg-type]
                if msg is None:
                    break
                with self._lock:
                    answers = self._calls.get(msg.get("id", 0))
                if answers is not None:
                    answers.put(msg)
        except Exception as e:  # a broken frame: the runner cannot be trusted any more
            self.killed_for = self.killed_for or f"sent a broken message ({type(e).__name__}: {e})"
        self._ended()

    def _drain(self) -> None:
        for raw in iter(self.proc.stderr.readline, b""):  # type: ignore[union-attr]
            line = raw.decode("utf-8", "replace").strip()
            if line:
                self.stderr.append(line)

    # --- the end ------------------------------------------------------------------------------

    def kill(self, why: str) -> None:
        """Kill the runner's whole group; the reader then fails its calls with ``why``."""
        self.killed_for = self.killed_for or why
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def _ended(self) -> None:
        """Stdout is closed: reap the runner and its group, then fail every waiting call with one line."""
        try:
            status = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill(self.killed_for or "closed its pipe")
            status = self.proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # what it left in its group
        self._err.join(timeout=2)
        if self.killed_for is not None:
            how = f"{self.killed_for} and was killed"
        elif status < 0:
            how = f"was killed by {signal.Signals(-status).name}"
        else:
            how = f"exited with status {status}"
        last = f"; its last line: {self.stderr[-1]}" if self.stderr else ""
        why = f"the runner of model '{self.label}' (pid {self.pid}) {how}{last}"
        with self._lock:
            self.failure = why
            calls = list(self._calls.values())
        self.reaped.set()
        if not (self.closing and status == 0 and self.killed_for is None):
            _log.error("%s", why)
        for answers in calls:
            answers.put({"died": why})
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]

    def alive(self) -> bool:
        """Not known to be gone: the kernel's word (``poll``), not only the reader's, which learns of a death when
        stdout ends and sets ``failure`` only once the group is reaped (seconds later, with its stderr drained)."""
        return self.failure is None and self.proc.poll() is None

    def death(self) -> str:
        """Why it is gone (``failure``), waiting for the reader to reap it if it has not yet."""
        self.reaped.wait(CLOSE_SECONDS + 10)
        return self.failure or f"the runner of model '{self.label}' (pid {self.pid}) exited"

    def close(self) -> None:
        """Ask the runner to free its model and leave; kill its group if it does not in time."""
        self.closing = True
        self.send({"op": "close"})
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill(f"did not close within {CLOSE_SECONDS:g}s")
        self._reader.join(timeout=CLOSE_SECONDS)


@atexit.register
def kill_all() -> None:
    """At the server's exit (atexit, or SIGTERM): no runner outlives it. They also leave when their stdin ends,
    the server killed even, unless stuck inside llama.cpp; killing their groups covers that."""
    for p in list(_LIVE):
        if p.proc.poll() is None:
            p.kill("was left running at exit")


class RunnerEngine:
    """A model in a runner process, with the Engine surface the server uses (module docstring).

    A runner that died fails the requests that were already there (those that saw it alive, :meth:`live`); a
    request that came after its death, even the instant after, starts a new runner. ``env`` adds to the runner's
    environment (tests: the fault hook)."""

    answer_seconds = ANSWER_SECONDS
    cancel_grace = CANCEL_GRACE_SECONDS

    def __init__(self, name: str, model: str | os.PathLike[str] | None, draft: str | os.PathLike[str] | None = None,
                 options: EngineOptions | None = None, env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.name = name
        self.spec = {"model": None if model is None else os.fspath(model),
                     "draft": None if draft is None else os.fspath(draft),
                     "options": asdict(options or EngineOptions())}  # fmt: skip
        self.env = {"GGML_NO_BACKTRACE": "1", **(env or {})}
        self._start_lock = threading.Lock()
        self.closed = False
        self.restarts = -1
        self.process = self._start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def model_path(self) -> Path | None:
        return None if self.spec["model"] is None else Path(self.spec["model"])

    def _start(self) -> _Process:
        """A runner with the model loaded, its facts read; load errors come back as the types they had."""
        p = _Process(self.name, self.env)
        p.send(self.spec)
        try:
            msg = p.wait(p._calls[0], START_SECONDS)
        except RunnerError:
            p.close()
            raise
        if "failed" in msg:
            p.close()
            kind, text = msg.get("kind", ""), msg["failed"]
            if kind in _LOAD_ERRORS:
                raise _LOAD_ERRORS[kind](text)
            if msg.get("errno") is not None:
                raise OSError(msg["errno"], msg.get("strerror") or text, msg.get("filename"))
            raise RunnerError(f"the runner of model '{self.name}' could not load it: {kind}: {text}")
        facts = msg["ready"]
        self.n_ctx: int = facts["n_ctx"]
        self.options = EngineOptions(**facts["options"]) if facts["options"] else EngineOptions()
        self.max_prompt_bytes: int | None = facts["max_prompt_bytes"]
        self.tree_refusal: str | None = facts["tree_refusal"]
        self.gpu_share: float = float(facts.get("gpu_share", 0.0))  # the target's layers on a GPU (Model.gpu_share)
        self.restarts += 1
        return p

    def live(self) -> _Process | None:
        """The runner as a request finds it when it comes (``JobSlot.run``): the process if it is alive, None if it
        is gone (the request then starts a new one). Cheap, for the event loop: it starts nothing."""
        p = self.process
        return p if p.alive() else None

    def ensure(self, seen: _Process | None = None) -> _Process:
        """The live runner. A request that ``seen`` this runner alive (:meth:`live`) and finds it dead fails with
        its death's line (it was running or queued for it); any other call replaces it with a new one."""
        with self._start_lock:
            p = self.process
            if self.closed:
                raise RunnerError(f"the model '{self.name}' is closed")
            if p.alive():
                return p
            if seen is p:
                raise RunnerError(p.death())
            _log.info("restarting the runner of model '%s'", self.name)
            self.process = self._start()
            return self.process

    def _once_more(self, call: Callable[[_Process], dict[str, Any]],
                   cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:  # fmt: skip
        """``call`` on the live runner, for a call that changes nothing in it: if the runner dies under it, it is
        asked once more of a new one, so that a request that came the instant a runner died (it still looked
        alive) is answered; not where the runner was killed by its own watchdog or a cancel, or the model closed."""
        for attempt in (1, 2):
            p = self.ensure()
            try:
                msg = call(p)
                break
            except RunnerError:
                if attempt == 2 or self.closed or p.killed_for is not None or cancelled is not None and cancelled():
                    raise
        if "failed" in msg:
            raise RemoteFailure(msg["failed"])
        return msg

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """A tokenization, a vocabulary read: asked once more of a new runner if this one dies under it."""
        return self._once_more(lambda p: self._ask_once(p, message))

    def _ask_once(self, p: _Process, message: dict[str, Any]) -> dict[str, Any]:
        rid, answers = p.call(message)
        try:
            return p.wait(answers, self.answer_seconds)
        finally:
            p.done(rid)

    def tokenize(self, text: str) -> np.ndarray:
        return np.asarray(self._ask({"op": "tokenize", "text": text})["tokens"], dtype=np.int32)

    def count_tokens(self, text: str) -> int:
        """The tokens of a generated text, without the BOS (a timed-out generation's count)."""
        return int(self._ask({"op": "count", "text": text})["count"])

    def pieces(self, tokens: list[int]) -> list[bytes]:
        """Each token's text as the model writes it, control tokens included (``runnerproc.token_pieces``)."""
        got = self._ask({"op": "pieces", "tokens": [int(t) for t in tokens]})["pieces"]
        return [p.encode("latin-1") for p in got]

    def tag_tokens(self, text: str) -> tuple[list[int], list[bool]]:
        """A tool-call tag's tokens and which are special (``runnerproc.tag_tokens``)."""
        msg = self._ask({"op": "tag", "text": text})
        return [int(t) for t in msg["tokens"]], [bool(x) for x in msg["special"]]

    def embed(self, request: dict[str, Any], cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
        """``llamacpp.embed.answer`` in the runner: ``{"embeddings", "tokens", "pooling"}``, or ``{"error"}`` for
        input it cannot take (``serve.embed_api`` makes that a 400). The runner's ticks keep the watchdog off while
        it works; once ``cancelled()`` (the client left) it is told to stop, and this raises RemoteFailure. An
        embedding changes nothing in the runner: one that dies under it is asked once more of a new one, as
        :meth:`_ask` is (a runner killed the instant before looks alive until the kernel has ended it)."""

        def once(p: _Process) -> dict[str, Any]:
            rid, answers = p.call({"op": "embed", "request": request})
            try:
                return _Call(self, p, rid, answers, cancelled).next()
            finally:
                p.done(rid)

        msg = self._once_more(once, cancelled)
        return {k: v for k, v in msg.items() if k != "id"}

    def stream(self, prompt: np.ndarray, cancelled: Callable[[], bool] | None = None, seen: _Process | None = None,
               **kwargs: Any) -> RunnerStream:  # fmt: skip
        """Start a generation in the runner; raises what ``Engine.stream`` raises on a bad request."""
        kw = dict(kwargs)
        for key in ("sampling", "tree"):
            if kw.get(key) is not None:
                kw[key] = asdict(kw[key])
        if kw.get("grammar") is not None:
            kw["grammar"] = kw["grammar"].to_dict()
        tokens = [int(t) for t in np.asarray(prompt).reshape(-1)]
        return self._open({"op": "stream", "prompt": tokens, "kwargs": kw}, cancelled, seen)

    def bench(self, n: int, piece: str = "tok") -> RunnerStream:
        """``n`` pieces sent as fast as the wire goes (``runnerbench``: the cost a token)."""
        return self._open({"op": "bench", "n": n, "piece": piece}, None, None)

    def _open(self, message: dict[str, Any], cancelled: Callable[[], bool] | None, seen: _Process | None
              ) -> RunnerStream:  # fmt: skip
        p = self.ensure(seen)
        rid, answers = p.call(message)
        try:
            first = p.wait(answers, self.answer_seconds)
        except BaseException:
            p.done(rid)
            raise
        if "error" in first or "failed" in first:
            p.done(rid)
            if "error" in first:
                raise LocalEagleError(first["error"])
            raise RemoteFailure(first["failed"])
        return RunnerStream(self, p, rid, answers, cancelled)

    def close(self) -> None:
        with self._start_lock:
            self.closed = True
            self.process.close()


class _Call:
    """One call's answers as they come: ticks keep the watchdog off (a runner silent for ``answer_seconds`` is
    killed as hung), and once ``cancelled()`` the runner is told to stop, and killed if it has not within
    ``cancel_grace``."""

    def __init__(self, engine: RunnerEngine, p: _Process, rid: int, answers: queue.Queue[dict[str, Any]],
                 cancelled: Callable[[], bool] | None) -> None:  # fmt: skip
        self.engine, self.p, self.rid, self.answers = engine, p, rid, answers
        self.cancelled = cancelled
        self.ended = False  # the call's last answer (or the runner's death) has come
        self._cancel_sent: float | None = None

    def next(self) -> dict[str, Any]:
        """The next answer that is not a tick; raises RunnerError once the runner is gone."""
        heard = time.monotonic()
        while True:
            if self._cancel_sent is None and self.cancelled is not None and self.cancelled():
                self.cancel()
            if self._cancel_sent is not None and time.monotonic() - self._cancel_sent > self.engine.cancel_grace:
                self.p.kill(f"did not stop within {self.engine.cancel_grace:g}s of a cancel")
            try:
                msg = self.answers.get(timeout=0.1)
            except queue.Empty:
                if self.p.failure is not None:  # its death was read already (by an earlier call here)
                    raise RunnerError(self.p.failure) from None
                if time.monotonic() - heard >= self.engine.answer_seconds:  # hung: killed, its death comes next
                    self.p.kill(f"did not answer within {self.engine.answer_seconds:g}s")
                continue
            if "died" in msg:
                self.ended = True
                raise RunnerError(msg["died"])
            if "tick" in msg:
                heard = time.monotonic()
                continue
            return msg

    def cancel(self) -> None:
        if self._cancel_sent is None:
            self._cancel_sent = time.monotonic()
            self.p.send({"op": "cancel", "id": self.rid})


class RunnerStream(_Call):
    """``Engine.stream``'s stream from a runner: iterate for pieces; ``result`` once it ended by itself.

    While it waits it asks ``cancelled`` and passes a cancellation on; closing it early cancels the generation
    and waits for the runner to end it, so that the next job finds the engine free."""

    def __init__(self, engine: RunnerEngine, p: _Process, rid: int, answers: queue.Queue[dict[str, Any]],
                 cancelled: Callable[[], bool] | None) -> None:  # fmt: skip
        super().__init__(engine, p, rid, answers, cancelled)
        self.result: RemoteResult | None = None

    def __iter__(self) -> Iterator[str]:
        try:
            while True:
                msg = self.next()
                if "piece" in msg:
                    yield msg["piece"]
                    continue
                self.ended = True
                if "failed" in msg:
                    raise RemoteFailure(msg["failed"])
                if "refused" in msg:  # the grammar failed once it ran (runnerproc): the request's error
                    raise GrammarError(msg["refused"])
                end = msg.get("end")
                if end is not None:
                    stats = GenerationStats.from_dict(end["stats"])
                    self.result = RemoteResult(end["text"], stats, logprobs_from_wire(end.get("logprobs")))
                return
        finally:
            self.close()

    def close(self) -> None:
        """Stop the generation (if it runs) and wait until the runner is done with it."""
        try:
            if not self.ended:
                self.cancel()
                with contextlib.suppress(RunnerError):
                    while True:
                        msg = self.next()
                        if "piece" not in msg:
                            break
                self.ended = True
        finally:
            self.p.done(self.rid)

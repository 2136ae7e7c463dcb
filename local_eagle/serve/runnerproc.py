"""A model's runner: the child process that holds one Engine and answers the server over its pipes.

Ollama runs each model in a runner process of its own; so does ``local-eagle serve``
(:mod:`~local_eagle.serve.runners` starts and watches them). llama.cpp ends a process on a failed GGML_ASSERT,
and a model can hang it or run it out of memory: in the server's own process that took every model and the
listening port with it. Here it takes one runner, whose requests fail with one line, and the next request
starts it afresh.

The wire is frames of a 4-byte big-endian length and a JSON object (no pickle: the server never runs what a
runner sends). The server writes on the runner's stdin; the runner answers on a copy of its stdout, fd 1 itself
being pointed at stderr so that whatever llama.cpp prints cannot break a frame. Each request has an ``id`` its
answers carry, so that tokenizations run beside a generation. The server's side: ``{"model", "draft",
"options"}`` first, answered by ``{"ready": facts}`` or ``{"failed", "kind"}``; then ``tokenize``, ``count``,
``pieces`` (tokens' texts), ``tag`` (a tool-call tag's tokens), ``stream`` (answered ``started`` or ``error``,
then one ``piece`` each, ``tick`` during long prefills, and ``end``: the text, the stats and, when asked for, the
logprobs as ``[[token, logprob, [[token, logprob], ...]], ...]``; ``refused`` for a grammar that failed as it ran),
``cancel``, ``embed`` (``tick`` while it works, then ``embeddings`` or ``error``; a ``cancel`` stops it), ``bench``
and ``close``. The end of stdin (the server gone, killed even) ends the runner.

Test hook: where ``LOCAL_EAGLE_RUNNER_FAULT`` names a file, a generation that has sent its first piece while
that file exists deletes it and does what it says: ``abort`` (``os.abort()``, as a GGML_ASSERT does), ``kill``
(SIGKILL itself), ``exit`` or ``hang``; while it holds ``slow``, each step of an embedding (a text's tokens, a decode
batch) takes a quarter of a second more. The GGUF checks refuse the crafted files that made llama.cpp abort
before it reads them, so the tests stand in for one with this.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import threading
import time
from dataclasses import asdict
from typing import Any, BinaryIO

from local_eagle.serve.served import EmbedCancelled, LocalEngine

FAULT_ENV = "LOCAL_EAGLE_RUNNER_FAULT"
TICK_SECONDS = 1.0  # a long prefill says it is alive this often (between its chunks)
_HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30


def write_frame(out: BinaryIO, message: dict[str, Any]) -> None:
    """One message: the length, then the JSON (ASCII, so that lone surrogates in a text survive)."""
    data = json.dumps(message, separators=(",", ":")).encode("ascii")
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def read_frame(inp: BinaryIO) -> dict[str, Any] | None:
    """The next message, or None at the end of the stream (the other side gone)."""
    head = _read_exactly(inp, _HEADER.size)
    if head is None:
        return None
    (n,) = _HEADER.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"a frame of {n} bytes")
    data = _read_exactly(inp, n)
    return None if data is None else json.loads(data)


def _read_exactly(inp: BinaryIO, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = inp.read(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Runner:
    """The runner's state: the engine, the one way out, the generations' cancel flags."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.write_lock = threading.Lock()
        self.engine: Any = None
        self.cancels: dict[int, threading.Event] = {}
        self.generations: list[threading.Thread] = []  # a parallel engine runs several at once

    def send(self, message: dict[str, Any]) -> None:
        with self.write_lock:
            write_frame(self.out, message)

    def load(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Open the engine (none for ``model: null``, the benchmark's echo runner) and describe it."""
        if spec.get("model") is None:
            return {"n_ctx": 0, "options": {}, "max_prompt_bytes": None, "tree_refusal": None, "gpu_share": 0.0}
        from local_eagle.runtime.engine import Engine, EngineOptions

        self.engine = LocalEngine(Engine(spec["model"], spec.get("draft"), EngineOptions(**spec["options"])))
        engine = self.engine
        return {"n_ctx": engine.n_ctx, "options": asdict(engine.options), "max_prompt_bytes": engine.max_prompt_bytes,
                "tree_refusal": engine.tree_refusal, "gpu_share": engine.gpu_share}  # fmt: skip

    def serve(self, inp: BinaryIO) -> None:
        """Answer until stdin ends or the server says close."""
        while True:
            msg = read_frame(inp)
            if msg is None or msg.get("op") == "close":
                break
            op, rid = msg.get("op"), msg.get("id")
            if op == "cancel":
                event = self.cancels.get(rid)
                if event is not None:
                    event.set()
            elif op in ("tokenize", "count", "pieces", "tag"):
                threading.Thread(target=self._tokenize, args=(msg,), daemon=True).start()
            elif op == "embed":
                threading.Thread(target=self._embed, args=(msg,), daemon=True).start()
            elif op in ("stream", "bench"):
                self.cancels[rid] = threading.Event()
                target = self._stream if op == "stream" else self._bench
                self.generations = [t for t in self.generations if t.is_alive()]
                self.generations.append(threading.Thread(target=target, args=(msg,), daemon=True))
                self.generations[-1].start()
        for event in list(self.cancels.values()):
            event.set()
        deadline = time.monotonic() + 30
        for thread in self.generations:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.engine is not None and not any(t.is_alive() for t in self.generations):
            self.engine.close()

    def _tokenize(self, msg: dict[str, Any]) -> None:
        try:
            if msg["op"] == "pieces":  # tokens' texts (logprobs), bytes as latin-1 so that JSON carries them
                got = self.engine.pieces(msg["tokens"])
                self.send({"id": msg["id"], "pieces": [p.decode("latin-1") for p in got]})
                return
            if msg["op"] == "tag":  # a tool-call tag's tokens, and which of them are special
                tokens, special = self.engine.tag_tokens(msg["text"])
                self.send({"id": msg["id"], "tokens": tokens, "special": special})
                return
            if msg["op"] == "tokenize":
                self.send({"id": msg["id"], "tokens": [int(t) for t in self.engine.tokenize(msg["text"])]})
            else:  # a text's own count, as the server counts a timed-out generation's
                self.send({"id": msg["id"], "count": self.engine.count_tokens(msg["text"])})
        except Exception as e:
            self.send({"id": msg["id"], "failed": f"{type(e).__name__}: {e}"})

    def _embed(self, msg: dict[str, Any]) -> None:
        """A few texts' embeddings (``llamacpp.embed``), in a context of their own on the engine's model; the
        server sends them one group at a time, under the model's lock. Between texts and decode batches it says it
        is alive (a tick at most each second, as a prefill does: the server's watchdog must not take a long group
        for a hung runner) and stops if the server cancels it (its client left)."""
        rid = msg["id"]
        cancel = self.cancels[rid] = threading.Event()
        last_tick = time.monotonic()

        def cancelled() -> bool:
            nonlocal last_tick
            _slow_fault()
            if time.monotonic() - last_tick >= TICK_SECONDS:
                last_tick = time.monotonic()
                self.send({"id": rid, "tick": True})
            return cancel.is_set()

        try:
            self.send({"id": rid, **self.engine.embed(msg["request"], cancelled)})
        except EmbedCancelled:
            self.send({"id": rid, "failed": "cancelled"})
        except Exception as e:
            self.send({"id": rid, "failed": f"{type(e).__name__}: {e}"})
        finally:
            self.cancels.pop(rid, None)

    def _stream(self, msg: dict[str, Any]) -> None:
        """One generation: pieces as they come, a tick at most each second of a prefill, then the end."""
        from local_eagle.errors import LocalEagleError
        from local_eagle.runtime.grammar import GrammarError, GrammarSpec
        from local_eagle.runtime.sampling import SamplingParams
        from local_eagle.runtime.tree import TreeShape

        rid = msg["id"]
        cancel = self.cancels[rid]
        last_tick = [time.monotonic()]

        def cancelled() -> bool:
            if time.monotonic() - last_tick[0] >= TICK_SECONDS:
                last_tick[0] = time.monotonic()
                self.send({"id": rid, "tick": True})
            return cancel.is_set()

        kw = dict(msg["kwargs"])
        if "sampling" in kw:
            kw["sampling"] = SamplingParams(**kw["sampling"])
        if kw.get("tree") is not None:
            kw["tree"] = TreeShape(**kw["tree"])
        if kw.get("grammar") is not None:
            kw["grammar"] = GrammarSpec.from_dict(kw["grammar"])
        try:
            try:
                stream = self.engine.stream(msg["prompt"], cancelled=cancelled, **kw)
            except LocalEagleError as e:
                self.send({"id": rid, "error": str(e)})
                return
            self.send({"id": rid, "started": True})
            it, n = iter(stream), 0
            for piece in it:
                self.send({"id": rid, "piece": piece})
                n += 1
                if n == 1:
                    _fault()
                if cancel.is_set():
                    break
            it.close()
            result = stream.result
            end = None if result is None else {"text": result.text, "stats": result.stats.to_dict()}
            if end is not None and getattr(result, "logprobs", None) is not None:
                end["logprobs"] = logprobs_wire(result.logprobs)
            self.send({"id": rid, "end": end})
        except GrammarError as e:  # the request's constraint failed once it ran: a 400, not the runner's fault
            self.send({"id": rid, "refused": str(e)})
        except Exception as e:
            self.send({"id": rid, "failed": f"{type(e).__name__}: {e}"})
        finally:
            self.cancels.pop(rid, None)

    def _bench(self, msg: dict[str, Any]) -> None:
        """``n`` pieces as fast as the pipe takes them: the wire's own cost a token (runnerbench)."""
        rid = msg["id"]
        self.send({"id": rid, "started": True})
        for _ in range(int(msg["n"])):
            self.send({"id": rid, "piece": msg["piece"]})
        self.send({"id": rid, "end": None})
        self.cancels.pop(rid, None)


def logprobs_wire(logprobs: Any) -> list[list[Any]]:
    """``GenerationResult.logprobs`` on the wire: ``[[token, logprob, [[token, logprob], ...]], ...]``."""
    return [[int(lp.token), float(lp.logprob), [[int(t), float(v)] for t, v in lp.top]] for lp in logprobs]


def _slow_fault() -> None:
    """The test hook for a long embedding: while the fault file holds ``slow``, each step of one (a text's tokens,
    a decode batch) takes a quarter of a second more, as a big model's do; the file is left in place."""
    path = os.environ.get(FAULT_ENV)
    if path and os.path.exists(path):
        with open(path) as f:
            if f.read().strip() == "slow":
                time.sleep(0.25)


def _fault() -> None:
    """The test hook (module docstring): act on the fault file once, if there is one."""
    path = os.environ.get(FAULT_ENV)
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        what = f.read().strip()
    if what == "slow":  # the embeddings' hook (_slow_fault), not a generation's
        return
    os.unlink(path)
    print(f"local-eagle runner: test fault {what!r} ({FAULT_ENV})", file=sys.stderr, flush=True)
    if what == "abort":
        os.abort()
    elif what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif what == "exit":
        os._exit(7)
    elif what == "hang":
        while True:
            time.sleep(60)


def main() -> None:
    """Take the protocol's fd, point fd 1 at stderr, load, answer; leave at once when the server goes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    runner = Runner(out)
    spec = read_frame(inp)
    if spec is None:
        return
    try:
        facts = runner.load(spec)
    except BaseException as e:
        runner.send({"failed": str(e), "kind": type(e).__name__, "errno": getattr(e, "errno", None),
                     "strerror": getattr(e, "strerror", None), "filename": getattr(e, "filename", None)})  # fmt: skip
        return
    runner.send({"ready": facts, "pid": os.getpid()})
    runner.serve(inp)
    out.flush()
    os._exit(0)  # daemon threads inside llama.cpp must not hold the exit up


if __name__ == "__main__":
    main()

"""What a model's runner process costs a streamed token: ``python -m local_eagle.serve.runnerbench``.

Two numbers: the wire alone (an echo runner, with no model, sends pieces as fast as the server's side reads
them: a frame written, read, decoded and handed through a queue each), and a whole generation of the tiny cycle
pair in the server's process against the same in a runner (``--tokens`` greedy tokens, best of ``--repeat``),
whose difference per token is what serving from a runner adds. docs/serve.md quotes them against a round.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import GREEDY
from local_eagle.serve.runners import RunnerEngine


def wire_microseconds(n: int = 20000) -> float:
    """Microseconds a piece costs between an echo runner and the server's side."""
    echo = RunnerEngine("bench", None)
    try:
        list(echo.bench(200))  # warm up
        t = time.perf_counter()
        got = sum(1 for _ in echo.bench(n))
        assert got == n
        return (time.perf_counter() - t) / n * 1e6
    finally:
        echo.close()


def _per_token(engine: Engine | RunnerEngine, tokens: int, repeat: int) -> float:
    prompt = engine.tokenize("hi")
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        stream = engine.stream(prompt, max_tokens=tokens, sampling=GREEDY, draft_max=4, stop=[])
        n = sum(1 for _ in stream)
        best = min(best, (time.perf_counter() - t) / max(n, 1))
    return best * 1e6


def generation_microseconds(tokens: int = 200, repeat: int = 5) -> tuple[float, float]:
    """Microseconds a token of the tiny pair: in process, and through a runner."""
    from converters import convert
    from converters.formats import write_checkpoint
    from local_eagle.testing.tiny_pair import make_cycle_drafter, write_cycle_target

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        target = write_cycle_target(d / "target.gguf")
        m = make_cycle_drafter(True)
        draft = convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), target, d / "draft.gguf")
        options = EngineOptions(n_ctx=max(256, tokens + 64), n_threads=1)
        with Engine(target, draft.outfile, options) as engine:
            here = _per_token(engine, tokens, repeat)
        runner = RunnerEngine("bench", target, draft.outfile, options)
        try:
            there = _per_token(runner, tokens, repeat)
        finally:
            runner.close()
    return here, there


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pieces", type=int, default=20000)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"wire: {wire_microseconds(args.pieces):.1f} us a piece (echo runner, {args.pieces} pieces)")
    here, there = generation_microseconds(args.tokens, args.repeat)
    print(f"tiny pair, {args.tokens} greedy tokens: {here:.1f} us a token in process, {there:.1f} us through a "
          f"runner: {there - here:+.1f} us a token")  # fmt: skip


if __name__ == "__main__":
    main()

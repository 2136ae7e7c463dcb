"""A model's own MTP head drafted by local-eagle and by llama.cpp's stock ``draft-mtp``, against the target alone.

``python -m local_eagle.bench.mtp_stock --spec-simple BIN [--completion BIN]`` writes (or takes) a ``glm4moe`` whose
NextN head agrees with its target (``testing.tiny_mtp.write_cycle_glm4moe_mtp``), then, prompt by prompt, in one
process and on the same threads, runs

1. the target alone in local-eagle's loop (``draft_max=0``), the run's baseline;
2. local-eagle drafting ``k`` tokens a round with the model's head (``MtpDrafter``, fixed length, greedy);
3. the stock ``llama-speculative-simple --spec-type draft-mtp --spec-draft-n-max k`` built from the same vendored
   llama.cpp (greedy, ``p_min`` 0: it always drafts ``k``);
4. with ``--completion``, the stock ``llama-completion`` alone: what the stock target decodes without drafting.

The order of the sides turns from prompt to prompt so a noisy machine's drift hits each alike. Each side reports
tokens per target call (1 + accepted drafts per verify call; the stock's calls are its loop's rounds,
``n_predict - n_accept``) and decode tok/s: the tokens the timed calls produced over their time, prompt processing
left out (local-eagle's ``decode_seconds``, whose verify calls produce all but the prefill's first token; the stock's
``decoded ... in`` timer; ``llama-completion``'s total less its prompt eval), speed as a ratio to side 1.
The texts are compared with the target alone's: the stock generates up to ``k`` tokens past ``-n``, so the common
prefix is.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec

# "tiny": the tests' shape, a call costs little more than the loop's own overhead; "mid": a call's compute
# dominates (8 blocks of 1024, 4 experts of 704 with 2 used and a shared one), as on a real model
SIZES = {
    "tiny": TinyGlm4MoeSpec(),
    "mid": TinyGlm4MoeSpec(n_layer=8, n_embd=1024, n_head=8, n_head_kv=4, n_ff=2816, n_expert=4, n_expert_used=2,
                           n_ff_exp=704, n_ctx=2048),
}  # fmt: skip
# one prompt ending in each letter of the cycle: a head that misses after given letters costs each side the same over
# the set, though the stock's rounds start a token earlier (its first round verifies the prompt's last token)
STEMS = ["xyz", "hello world ", "The quick brown fox ", "once upon a time "]
T = TypeVar("T")
PROMPTS = [STEMS[i % len(STEMS)] + letter for i, letter in enumerate("ABCDEFGHIJKLMNOP")]


@dataclass
class SideTotals:
    """One side's totals over the prompts, in a comparison with llama.cpp's own binaries (here and
    ``bench.against_llamacpp``)."""

    name: str
    tokens: int = 0
    target_calls: int = 0
    accepted: int = 0
    drafted: int = 0
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)  # prompts whose output left the target alone's

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_call(self) -> float:
        return 1.0 + self.accepted / self.target_calls if self.target_calls else 0.0

    def totals(self, baseline_tps: float) -> dict:
        """The fields, and the rates derived from them (tok/s against ``baseline_tps``, the target alone's)."""
        return {
            **asdict(self),
            "tokens_per_second": self.tokens_per_second,
            "tokens_per_call": self.tokens_per_call,
            "accepted_share": self.accepted / self.drafted if self.drafted else 0.0,
            "speed_ratio": self.tokens_per_second / baseline_tps if baseline_tps else 0.0,
        }


@dataclass
class Side(SideTotals):
    """One side's totals over the prompts, with each prompt's speed ratio and the rounds up to the horizon."""

    ratios: list[float] = field(default_factory=list)  # tok/s over the target alone's, prompt by prompt
    horizon_tokens: int = 0  # the rounds up to the common horizon (``at_horizon``)
    horizon_calls: int = 0

    def to_dict(self, baseline_tps: float) -> dict:
        """Totals, and the median of the prompt-by-prompt ratios: a stall of the shared machine in one run moves the
        totals' ratio, hardly the median."""
        return {
            **self.totals(baseline_tps),
            "tokens_per_call_at_horizon": self.horizon_tokens / self.horizon_calls if self.horizon_calls else 0.0,
            "median_ratio": float(np.median(self.ratios)) if self.ratios else 0.0,
        }


@dataclass
class StockRun:
    """What one stock run printed: generated text, tokens, accepted and drafted, its decode timer."""

    text: str
    tokens: int
    accepted: int
    drafted: int
    seconds: float
    target_calls: int
    rounds: list[int] | None = None  # each round's accepted drafts, where known


def at_horizon(rounds: list[int], horizon: int) -> tuple[int, int] | None:
    """``(tokens, calls)`` of the first rounds whose tokens (accepted + 1 each) reach ``horizon``; None if they do
    not.

    The totals' tokens per call depend on how each side ends (the stock overshoots ``-n`` by a round, local-eagle
    shortens its last draft to ``max_tokens``); counted to a horizon both reach with full rounds, the same rounds
    give the same figure.
    """
    tokens = calls = 0
    for accepted in rounds:
        if tokens >= horizon:
            break
        tokens += accepted + 1
        calls += 1
    return (tokens, calls) if tokens >= horizon else None


def parse_rounds(stderr: str) -> list[int]:
    """Each round's accepted drafts from ``llama-speculative-simple -lv 5`` (``accepted A/D draft tokens``)."""
    return [int(a) for a in re.findall(r"accepted (\d+)/\d+ draft tokens", stderr)]


def _number(pattern: str, text: str, what: str) -> float:
    m = re.search(pattern, text)
    if m is None:
        raise LocalEagleError(f"the stock tool's output has no {what} ({pattern!r}):\n{text[-2000:]}")
    return float(m.group(1))


def _generated(stdout: str, prompt: str) -> str:
    """The text after the echoed prompt (both tools print the prompt, then each token's piece)."""
    i = stdout.find(prompt)
    return stdout[i + len(prompt) :].rstrip("\n") if i >= 0 else stdout.strip("\n")


def parse_speculative_simple(stdout: str, stderr: str, prompt: str) -> StockRun:
    """``llama-speculative-simple``'s summary: ``decoded N tokens in S seconds``, ``n_predict``, ``n_drafted``,
    ``n_accept``; a round per target call, each producing its accepted drafts and one token."""
    log = stderr + stdout
    tokens = int(_number(r"n_predict\s*=\s*(\d+)", log, "n_predict"))
    accepted = int(_number(r"n_accept\s*=\s*(\d+)", log, "n_accept"))
    return StockRun(
        text=_generated(stdout, prompt),
        tokens=tokens,
        accepted=accepted,
        drafted=int(_number(r"n_drafted\s*=\s*(\d+)", log, "n_drafted")),
        seconds=_number(r"decoded\s+\d+\s+tokens in\s+([0-9.]+) seconds", log, "decode time"),
        target_calls=tokens - accepted,
    )


def parse_completion(stdout: str, stderr: str, prompt: str) -> StockRun:
    """``llama-completion``'s perf lines: ``eval time = X ms / N runs`` counts the generated tokens' calls, one token
    each; their time is ``total time`` less ``prompt eval time`` (wall clock: sampling and host work included, as in
    the other sides' timers)."""
    log = stderr + stdout
    m = re.search(r"\beval time =\s*[0-9.]+ ms /\s*(\d+) runs", log)
    if m is None:
        raise LocalEagleError(f"llama-completion's output has no eval time:\n{log[-2000:]}")
    runs = int(m.group(1))
    total = _number(r"total time =\s*([0-9.]+) ms", log, "total time")
    prompt_ms = _number(r"prompt eval time =\s*([0-9.]+) ms", log, "prompt eval time")
    return StockRun(_generated(stdout, prompt), runs, 0, 0, (total - prompt_ms) / 1000, runs)


def _stock(cmd: list[str], parse: Callable[[str, str, str], T], prompt: str, timeout: float,
           tries: int = 5) -> tuple[T, int]:  # fmt: skip
    """Run a stock tool and parse what it printed; ``(run, retries)``.

    The stock tools log through a queue drained by a thread that nothing flushes at exit (``common/log.cpp``:
    "this design may cause logs to be lost if not flushed before the program exits", llama.cpp issue 22142), so a
    run that exits 0 may lose its last lines, summary included: such a run is repeated, and counted.
    """
    for attempt in range(tries):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise LocalEagleError(f"{Path(cmd[0]).name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        try:
            return parse(proc.stdout, proc.stderr, prompt), attempt
        except LocalEagleError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _rounds_to(horizon: int) -> Callable[[str, str, str], list[int]]:
    """A parser of the debug log's rounds that fails (so the run is repeated) when lost lines leave it short."""

    def parse(stdout: str, stderr: str, prompt: str) -> list[int]:
        rounds = parse_rounds(stderr)
        if at_horizon(rounds, horizon) is None:
            raise LocalEagleError(f"the debug log's rounds stop short of {horizon} tokens")
        return rounds

    return parse


def stock_command(binary: str | Path, model: Path, prompt: str, n: int, threads: int, n_ctx: int,
                  draft: int | None) -> list[str]:  # fmt: skip
    """The stock command line: greedy, the same threads and context; ``draft`` None runs ``llama-completion``."""
    cmd = [str(binary), "-m", str(model), "-p", prompt, "-n", str(n), "-t", str(threads), "-tb", str(threads),
           "-c", str(n_ctx), "-b", "512", "-ub", "512", "--temp", "0", "--top-k", "1", "--seed", "1"]  # fmt: skip
    if draft is None:
        return [*cmd, "-no-cnv"]  # the cycle never ends: EOS's logit is 0 against the next letter's 8 * margin
    return [*cmd, "--spec-type", "draft-mtp", "--spec-draft-n-max", str(draft), "--spec-draft-n-min", "0",
            "-td", str(threads), "-tbd", str(threads)]  # fmt: skip


def run_comparison(
    model: Path,
    spec_simple: Path,
    completion: Path | None,
    prompts: list[str],
    max_tokens: int,
    draft: int,
    threads: int,
    n_ctx: int,
    repeats: int = 1,
    horizon: int = 0,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Every side on every prompt, in turn; the totals and the ratios to the target alone in local-eagle.

    With ``horizon`` the drafting sides' rounds are also counted up to that many tokens (``at_horizon``): the stock's
    from a second, untimed run with its debug log on (a line per round; the log slows the run).
    """
    from local_eagle.runtime.engine import Engine, EngineOptions
    from local_eagle.runtime.mtp import MtpDrafter
    from local_eagle.runtime.sampling import GREEDY

    names = ["local-eagle target alone", f"local-eagle MTP k={draft}", f"llama.cpp draft-mtp k={draft}"]
    if completion is not None:
        names.append("llama.cpp target alone (llama-completion)")
    sides = {name: Side(name) for name in names}
    retries = 0  # stock runs repeated for a lost summary (see _stock)
    with Engine(model, None, EngineOptions(n_ctx=n_ctx, n_batch=512, n_threads=threads)) as eng:
        if not isinstance(eng.drafter, MtpDrafter):
            raise LocalEagleError(f"{model} does not draft with its own head: {eng.mtp_refusal}")
        eng.generate(prompts[0], max_tokens=8, sampling=GREEDY, draft_max=draft, adaptive=False)  # warm up
        for r in range(repeats):
            for i, prompt in enumerate(prompts):
                turn = (r * len(prompts) + i) % len(names)
                base_text = None
                results: dict[str, tuple[str, StockRun]] = {}
                for name in names[turn:] + names[:turn]:
                    if name.startswith("local-eagle"):
                        k = 0 if name == names[0] else draft
                        res = eng.generate(prompt, max_tokens=max_tokens, sampling=GREEDY, draft_max=k,
                                           adaptive=False)  # fmt: skip
                        st = res.stats  # the tokens its verify calls produced (the prefill's first is not timed)
                        run = StockRun(res.text, st.target_calls + st.accepted_tokens, st.accepted_tokens,
                                       st.drafted_tokens, st.decode_seconds, st.target_calls,
                                       res.spec_stats.trace_accepted if res.spec_stats else None)  # fmt: skip
                    elif name == names[2]:
                        cmd = stock_command(spec_simple, model, prompt, max_tokens, threads, n_ctx, draft)
                        run, again = _stock(cmd, parse_speculative_simple, prompt, 600)
                        retries += again
                        if horizon:
                            run.rounds, again = _stock([*cmd, "-lv", "5"], _rounds_to(horizon), prompt, 600)
                            retries += again
                    else:
                        assert completion is not None
                        cmd = stock_command(completion, model, prompt, max_tokens, threads, n_ctx, None)
                        run, again = _stock(cmd, parse_completion, prompt, 600)
                        retries += again
                    results[name] = (run.text, run)
                base_text, base_run = results[names[0]]
                for name, (text, run) in results.items():
                    side = sides[name]
                    side.tokens += run.tokens
                    side.target_calls += run.target_calls
                    side.accepted += run.accepted
                    side.drafted += run.drafted
                    side.seconds += run.seconds
                    if horizon and name != names[0] and run.rounds is not None:
                        reached = at_horizon(run.rounds, horizon)
                        if reached is None:
                            raise LocalEagleError(f"{name} did not reach the horizon of {horizon} tokens on {prompt!r}")
                        side.horizon_tokens += reached[0]
                        side.horizon_calls += reached[1]
                    if run.seconds and base_run.seconds:
                        side.ratios.append((run.tokens / run.seconds) / (base_run.tokens / base_run.seconds))
                    m = min(len(text), len(base_text))
                    if m == 0 or text[:m] != base_text[:m]:
                        side.mismatches.append(prompt)
                if log is not None:
                    log(f"prompt {i} repeat {r}: " + ", ".join(
                        f"{n}: {x.tokens} tok {x.seconds:.3f}s {x.target_calls} calls" for n, (_, x) in results.items()
                    ))  # fmt: skip
    base_tps = sides[names[0]].tokens_per_second
    return {
        "model": str(model),
        "draft": draft,
        "max_tokens": max_tokens,
        "threads": threads,
        "n_ctx": n_ctx,
        "prompts": prompts,
        "repeats": repeats,
        "horizon": horizon,
        "machine": f"{platform.machine()} {platform.processor() or ''} {platform.node()}".strip(),
        "sides": [sides[n].to_dict(base_tps) for n in names],
        "stock_retries": retries,
    }


def table(report: dict) -> str:
    """The sides as a Markdown table: tokens per target call, decode tok/s, the ratio to the target alone."""
    h = report.get("horizon") or 0
    lines = [f"| side | tokens | target calls | tokens per target call | same, first {h} tokens | drafts accepted "
             "| tok/s | x target alone (totals) | x target alone (median of prompts) | text |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for s in report["sides"]:
        text = "same" if not s["mismatches"] else f"differs on {len(s['mismatches'])}"
        accepted = f"{s['accepted_share']:.1%}" if s["drafted"] else "-"
        at_h = f"{s['tokens_per_call_at_horizon']:.3f}" if s.get("horizon_calls") else "-"
        lines.append(f"| {s['name']} | {s['tokens']} | {s['target_calls']} | {s['tokens_per_call']:.3f} | {at_h} "
                     f"| {accepted} | "
                     f"{s['tokens_per_second']:.1f} | {s['speed_ratio']:.3f} | {s['median_ratio']:.3f} "
                     f"| {text} |")  # fmt: skip
    return "\n".join(lines)


def emit(report: dict, text: str, json_path: Path | None) -> None:
    """A comparison's report as JSON and as its table on stdout, and the JSON to ``json_path`` when given."""
    print(json.dumps(report, indent=1))
    print(text)
    if json_path:
        json_path.write_text(json.dumps(report, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a thin wrapper
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec-simple", required=True, type=Path, help="the stock llama-speculative-simple")
    ap.add_argument("--completion", type=Path, help="the stock llama-completion (the stock target alone)")
    ap.add_argument("--model", type=Path, help="a GGUF with one NextN head; without it one is written (--size)")
    ap.add_argument("--size", choices=sorted(SIZES), default="mid")
    ap.add_argument("--head-misses", default="", help="letters after which the written head drafts wrong")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/mtp-stock"))
    ap.add_argument("--draft", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="1: a shared machine's stalls hit spinning threads less")
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--horizon", type=int, default=-1,
                    help="count rounds to this many tokens too (-1: max tokens - 2 (draft + 1); 0: off)")  # fmt: skip
    ap.add_argument("--json", type=Path, help="write the report here too")
    a = ap.parse_args(argv)
    model = a.model
    if model is None:
        from local_eagle.testing.tiny_mtp import write_cycle_glm4moe_mtp

        a.workdir.mkdir(parents=True, exist_ok=True)
        suffix = f"-miss{a.head_misses}" if a.head_misses else ""
        model = a.workdir / f"cycle-glm4moe-{a.size}{suffix}.gguf"
        if not model.exists():
            write_cycle_glm4moe_mtp(model, SIZES[a.size], head_misses=a.head_misses)
    t0 = time.perf_counter()
    horizon = a.max_tokens - 2 * (a.draft + 1) if a.horizon < 0 else a.horizon
    report = run_comparison(model, a.spec_simple, a.completion, PROMPTS, a.max_tokens, a.draft, a.threads, a.n_ctx,
                            a.repeats, horizon, log=lambda s: print(s, flush=True))  # fmt: skip
    report["size"] = a.size if a.model is None else None
    report["head_misses"] = a.head_misses
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    emit(report, table(report), a.json)


if __name__ == "__main__":  # pragma: no cover
    main()

"""``local-eagle bench --concurrency 1,4,16``: many requests at once, with drafting and without, on one engine.

One engine opened with ``parallel`` = the largest concurrency serves every row (``runtime.batch``: one target
call a round verifies every active sequence's drafts). At concurrency c, c threads run the prompts as a
server's clients would: each takes the next prompt when its last one finished, so c requests stay in flight
until the list runs out; every prompt runs once per setting. Wall clock runs from the first submit to the
last finish. Each row reports

- aggregate tok/s: every request's generated tokens over that wall clock;
- per-request tok/s: what one client sees, its tokens over its own time from submit to finish (prompt
  included), summed over the requests (token-weighted);
- the speedup over no drafting (``draft_max=0``) at the same concurrency, and the batching gain: aggregate
  tok/s over no drafting's at concurrency 1 (the target alone, one request at a time);
- the acceptance length, weighted over the requests (1 + accepted drafts per target call);
- the greedy identity of every output against the target alone's (a separate one-sequence engine of the
  same pair): a batch's composition changes float rounding, so an output may part at a near-tie
  (``runtime.identity.check_identity_batched``); anything else is a divergence, a bug.

The cost of a target call by rows, measured in the same run (``bench.costs``), says what batching can gain:
c rows in one call against c calls of one row.

The reference engine computes only on threads that end with its work (:func:`on_own_thread`): the parallel
engine's scheduler thread is the only one that lives while the passes run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from local_eagle.bench.run import DraftSetting
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.clock import clock
from local_eagle.runtime.engine import Engine, GenerationResult
from local_eagle.runtime.identity import DIVERGENT, IDENTICAL, NEAR_TIE, IdentityCheck, check_identity_batched
from local_eagle.runtime.sampling import GREEDY
from local_eagle.runtime.stats import GenerationTotals

_T = TypeVar("_T")

NO_DRAFTING = DraftSetting(0, False)
COST_MULTIPLES = (1, 2, 3, 4, 5)  # a call's rows at concurrency c: c sequences of 1 + k rows, k drafts


def parse_concurrency(text: str) -> list[int]:
    """``"1,4,16"`` -> [1, 4, 16] (sorted, without repeats); each between 1 and ``MAX_SEQ``."""
    from local_eagle.runtime.tree import MAX_SEQ

    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            n = int(part)
        except ValueError:
            raise LocalEagleError(f"--concurrency takes numbers separated by commas (1,4,16), got {text!r}") from None
        if not 1 <= n <= MAX_SEQ:
            raise LocalEagleError(f"--concurrency: each value must be between 1 and {MAX_SEQ}, got {n}")
        values.append(n)
    return sorted(set(values))


def cost_rows(concurrencies: list[int], n_batch: int = 512) -> tuple[int, ...]:
    """The call sizes the rows of a concurrency bench use: 1-5 rows (one sequence drafting up to 4), and c, 2c ...
    5c rows (c sequences with up to 4 drafts each), within one batch of the engine."""
    rows = set(COST_MULTIPLES)
    rows |= {c * m for c in concurrencies for m in COST_MULTIPLES}
    return tuple(sorted(r for r in rows if r <= n_batch))


def setting_label(setting: DraftSetting) -> str:
    return "none" if setting.draft_max == 0 else setting.label


@dataclass
class ConcurrencyRow:
    """One setting at one concurrency."""

    concurrency: int
    setting: str  # "none" (no drafting), "auto<=8" (the adaptive policy) or N (a fixed chain of N)
    draft_max: int
    adaptive: bool
    requests: int
    tokens: int
    wall_seconds: float
    aggregate_tps: float
    per_request_tps: float
    acceptance_length: float
    speedup: float = 0.0  # aggregate tok/s over no drafting's at the same concurrency
    batching_gain: float | None = None  # aggregate tok/s over no drafting's at concurrency 1 (None: 1 not run)
    identical: int = 0  # outputs equal to the target alone's
    near_ties: int = 0  # outputs that parted from it at a near-tie (float rounding)
    divergent: int = 0  # outputs that parted from it otherwise: a bug
    divergences: list[dict] = field(default_factory=list)  # the finding for each output that differed
    draft_lengths: list[float] = field(default_factory=list)  # share of a request's rounds by tokens drafted
    policy: dict | None = None  # the last adaptive request's policy state (the batch's, or a lone seat's)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ConcurrencyReport:
    prompts: int
    max_tokens: int
    concurrencies: list[int]
    rows: list[ConcurrencyRow]
    costs: dict | None = None  # bench.costs.CostCurve.to_dict(): a target call by rows, measured in this run
    repeat: int = 1  # passes over the prompts per setting and concurrency
    arranged: dict | None = None  # bench.arranged's summary where the drafts were arranged (--arranged)

    @property
    def divergent(self) -> int:
        return sum(r.divergent for r in self.rows)

    def to_dict(self) -> dict:
        return {
            "prompts": self.prompts,
            "max_tokens": self.max_tokens,
            "concurrency": self.concurrencies,
            "rows": [r.to_dict() for r in self.rows],
            "costs": self.costs,
            "repeat": self.repeat,
            "arranged": self.arranged,
        }


def on_own_thread(work: Callable[[], _T]) -> _T:
    """``work()`` on a thread that ends with it. A CPU build of llama.cpp computes on OpenMP, and every thread that
    computes keeps a team of workers until it ends; once the process holds more such threads than cores, libgomp
    stops spinning between parallel regions and every call pays for waking its workers. The reference engine's
    team in the main thread beside the batch's made the Gemma pair's 4-request round 48 ms instead of 33 on a
    2-core Intel CPU, and the batch policy priced calls at costs a server (one engine a process) never sees."""
    out: list[_T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as e:  # noqa: BLE001  raised again in the caller's thread
            failed.append(e)

    thread = threading.Thread(target=run, name="bench-reference", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


def run_at(engine: Engine, prompts: list[str], concurrency: int, setting: DraftSetting, max_tokens: int,
           done: Callable[[], None] | None = None) -> tuple[list[GenerationResult], list[float], float]:  # fmt: skip
    """Every prompt once, ``concurrency`` at a time from as many threads; the results in prompt order, each
    request's seconds from submit to finish, and the wall clock from the first submit to the last finish (the
    engine's clock: arranged rows' rewriting left out, ``runtime.clock``)."""
    seconds = [0.0] * len(prompts)

    def one(i: int) -> GenerationResult:
        t0 = clock()
        r = engine.generate(
            prompts[i], max_tokens=max_tokens, sampling=GREEDY, draft_max=setting.draft_max,
            adaptive=setting.adaptive and setting.draft_max > 0,
        )  # fmt: skip
        seconds[i] = clock() - t0
        if done is not None:
            done()
        return r

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench-client") as pool:
        t0 = clock()
        futures = [pool.submit(one, i) for i in range(len(prompts))]  # a worker takes the next as one finishes
        results = [f.result() for f in futures]
        wall = clock() - t0
    return results, seconds, wall


def summarize_at(concurrency: int, setting: DraftSetting, results: list[GenerationResult], seconds: list[float],
                 wall: float, checks: list[IdentityCheck]) -> ConcurrencyRow:  # fmt: skip
    totals = GenerationTotals()
    for r in results:
        totals.add(r.stats)
    tokens = totals.total.generated_tokens
    lengths = totals.total.draft_lengths
    rounds = sum(lengths)
    policy = next((r.stats.policy for r in reversed(results) if r.stats.policy), None)
    return ConcurrencyRow(
        concurrency=concurrency,
        setting=setting_label(setting),
        draft_max=setting.draft_max,
        adaptive=setting.adaptive and setting.draft_max > 0,
        requests=len(results),
        tokens=tokens,
        wall_seconds=wall,
        aggregate_tps=tokens / wall if wall else 0.0,
        per_request_tps=tokens / sum(seconds) if sum(seconds) else 0.0,
        acceptance_length=totals.acceptance_length,
        identical=sum(c.verdict == IDENTICAL for c in checks),
        near_ties=sum(c.verdict == NEAR_TIE for c in checks),
        divergent=sum(c.verdict == DIVERGENT for c in checks),
        divergences=[c.to_dict() for c in checks if c.verdict != IDENTICAL],
        draft_lengths=[n / rounds for n in lengths] if rounds else [],
        policy=policy,
    )


def run_concurrency(
    engine: Engine,
    single: Engine,
    prompts: list[str],
    concurrencies: list[int],
    settings: list[DraftSetting],
    max_tokens: int = 128,
    progress: bool = True,
    repeat: int = 1,
) -> ConcurrencyReport:
    """Each setting and no drafting at each concurrency on ``engine`` (opened with ``parallel`` at least the
    largest), every output checked against the target alone's on ``single`` (a one-sequence engine of the pair).

    Within a concurrency the settings run ``repeat`` times each, their order reversed from one pass to the next
    (and from one concurrency to the next), so slow drift on a noisy machine falls on both sides alike; a row's
    tok/s is all its passes' tokens over all their time. The adaptive policy keeps what it learnt from row to
    row, as a server's does.
    """
    from rich.progress import Progress

    if engine.drafter is None:
        raise LocalEagleError("bench needs a drafter (--draft)")
    if not prompts:
        raise LocalEagleError("bench needs at least one prompt")
    if not concurrencies:
        raise LocalEagleError("--concurrency needs at least one value")
    if max(concurrencies) > engine.parallel:
        raise LocalEagleError(f"concurrency {max(concurrencies)} needs an engine of as many sequences "
                              f"(this one has {engine.parallel})")  # fmt: skip
    if max(concurrencies) > len(prompts):
        raise LocalEagleError(
            f"concurrency {max(concurrencies)} needs at least as many prompts to keep that many requests in flight "
            f"(there are {len(prompts)})"
        )
    if single.parallel != 1:
        raise LocalEagleError("the identity reference must be a one-sequence engine (parallel 1)")
    if repeat < 1:
        raise LocalEagleError(f"--repeat must be at least 1, got {repeat}")
    settings = [NO_DRAFTING, *dict.fromkeys(s for s in settings if s.draft_max > 0)]
    rows: list[ConcurrencyRow] = []
    lock = threading.Lock()
    with Progress(transient=True, disable=not progress) as bar:
        total = len(prompts) * (1 + len(concurrencies) * len(settings) * repeat)
        task = bar.add_task("benchmarking", total=total)

        def done() -> None:
            with lock:
                bar.advance(task)

        def alone() -> list[GenerationResult]:  # the target alone, one request at a time: what every output must equal
            out = []
            for p in prompts:
                out.append(single.generate(p, max_tokens=max_tokens, sampling=GREEDY, draft_max=0))
                done()
            return out

        reference = on_own_thread(alone)
        warm = max(settings, key=lambda s: s.draft_max)  # the policy measures this machine's calls first
        run_at(engine, prompts[: max(concurrencies)], max(concurrencies), warm, 8)
        for j, c in enumerate(concurrencies):
            runs: dict[DraftSetting, tuple[list, list, float, list]] = {s: ([], [], 0.0, []) for s in settings}
            for rep in range(repeat):
                for s in settings if (j + rep) % 2 == 0 else settings[::-1]:
                    results, seconds, wall = run_at(engine, prompts, c, s, max_tokens, done)
                    checks = on_own_thread(lambda results=results: [
                        check_identity_batched(single, p, ref, r)
                        for p, ref, r in zip(prompts, reference, results, strict=True)
                    ])  # fmt: skip
                    before = runs[s]
                    runs[s] = (before[0] + results, before[1] + seconds, before[2] + wall, before[3] + checks)
            rows += [summarize_at(c, s, *runs[s]) for s in settings]
    base = {r.concurrency: r.aggregate_tps for r in rows if r.draft_max == 0}
    one = base.get(1)
    for r in rows:
        r.speedup = r.aggregate_tps / base[r.concurrency] if base[r.concurrency] else 0.0
        r.batching_gain = r.aggregate_tps / one if one else None
    return ConcurrencyReport(len(prompts), max_tokens, list(concurrencies), rows, repeat=repeat)

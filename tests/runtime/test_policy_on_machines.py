"""The default policy on other machines' costs, charged by a simulated clock to the real engine (issue 44).

No wall clock: every llama.cpp call advances a simulated clock by what a call of its rows costs on a measured machine
(the target's calls by the verify curve, the drafter's by the drafter curve, a catch-up of many rows included), and
every timing the engine takes reads that clock. So the real loop runs (its feed, capture pauses, probes, catch-ups,
replans) and learns the machine's costs as it would there, and its speed is scored on them, whatever this CPU is.
The drafter is the tiny cycle pair's (right nearly always, ``pair``) or a blurred one (``sampling_pair``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from local_eagle.bench.project import CostProfile, load_profile
from local_eagle.llamacpp import model as model_module
from local_eagle.llamacpp.lib import C
from local_eagle.runtime import batch as batch_module
from local_eagle.runtime import chain as chain_module
from local_eagle.runtime import rounds as rounds_module
from local_eagle.runtime import treeround as treeround_module
from local_eagle.runtime import verify as verify_module
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.policy.defaults import LONE_MARGIN

PROFILES = Path(__file__).parents[2] / "local_eagle" / "bench" / "profiles"
#: the 2-core AMD development VM with the Gemma 3 270M pair (runtime.treesim.CPU's figures): a 2-row call 2.1x one row
AMD = CostProfile(
    "amd-epyc-2core", {1: 10.62, 2: 22.43, 3: 28.83, 4: 33.58, 8: 42.43, 12: 53.43, 16: 56.78, 32: 102.69, 64: 182.21},
    {1: 0.87, 2: 1.49, 4: 3.66, 8: 6.72, 16: 12.32, 32: 25.87, 64: 49.34}, 0.15,
)  # fmt: skip
PROMPTS = ["ABCD", "FGHIJ", "KLM", "NOPAB", "CDEFG", "HIJK"]
TOKENS = 48


class Machine:
    """The simulated clock and what each context's calls cost on ``profile``."""

    def __init__(self, profile: CostProfile) -> None:
        self.profile = profile
        self.now = 0.0
        self.charge = 0.0
        self.costs: dict[int, Callable[[int], float]] = {}

    def attach(self, engine: Engine) -> None:
        self.costs = {id(engine.ctx): lambda rows: self.profile.verify(rows) / 1e3}
        if engine.drafter is not None:
            self.costs[id(engine.drafter.ctx)] = lambda rows: self.profile.drafter(rows) / 1e3


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Callable[[CostProfile], Machine]:
    made: list[Machine] = []
    decode, process = model_module.Context.decode, C.llama_process

    def costed_decode(self, tokens, *args, **kwargs):
        m = made[-1]
        cost = m.costs.get(id(self))
        m.charge = 0.0 if cost is None else cost(len(tokens))
        return decode(self, tokens, *args, **kwargs)

    def timed_process(*args):
        m = made[-1]
        m.now += m.charge
        m.charge = 0.0
        return process(*args)

    def make(profile: CostProfile) -> Machine:
        made.append(Machine(profile))
        return made[-1]

    monkeypatch.setattr(model_module.Context, "decode", costed_decode)
    monkeypatch.setattr(C, "llama_process", timed_process)
    monkeypatch.setattr(model_module, "_clock", lambda: made[-1].now)
    for module in (rounds_module, chain_module, treeround_module, verify_module, batch_module):
        monkeypatch.setattr(module, "clock", lambda: made[-1].now)
    return make


def rate(engine: Engine, m: Machine, **options) -> tuple[float, list]:
    """Tokens per simulated second over the prompts (decode only: prefill is the same for every setting), and each
    answer's result."""
    tokens = seconds = 0.0
    results = []
    for prompt in PROMPTS:
        res = engine.generate(prompt, max_tokens=TOKENS, **options)
        tokens += len(res.tokens)
        seconds += res.spec_stats.decode_seconds
        results.append(res)
    return tokens / seconds, results


def compare(target: Path, draft: Path, profile: CostProfile, m: Machine, trees: bool = True) -> dict:
    """The target alone, fixed chains of 1-4 and the default (adaptive, trees allowed), in one engine."""
    opts = EngineOptions(n_ctx=512, n_batch=128, n_threads=1, adaptive=True, tree_nodes=15 if trees else 0)
    with Engine(target, draft, opts) as engine:
        m.attach(engine)
        alone, base = rate(engine, m, draft_max=0)
        fixed = {k: rate(engine, m, draft_max=k, adaptive=False)[0] / alone for k in range(1, 5)}
        rate(engine, m, draft_max=8)  # the default's first answers: the policy is built and learns this machine
        default, results = rate(engine, m, draft_max=8)
        state = engine.policy.state()
    for got, want in zip(results, base, strict=True):
        assert got.tokens == want.tokens  # lossless, whatever was drafted
    drafted = sum(r.spec_stats.drafted_tokens for r in results)
    rounds = sum(r.spec_stats.rounds for r in results)
    return {"fixed": fixed, "default": default / alone, "drafted": drafted / rounds, "state": state}


def test_on_an_intel_amx_cpu_the_default_drafts_and_matches_the_best_chain(pair, machine) -> None:
    """The Intel AMX CPU of issue 44: 2 rows cost 1.01x one row, the drafter's catch-up of the 12-14 rows an idle
    stretch leaves 19 ms against 2.6 ms for a step. Priced by those catch-ups the default stayed idle (0.99x where
    a fixed chain ran 1.37x); priced by the rows it decodes, it drafts and keeps up with the best chain."""
    profile = load_profile(PROFILES / "intel-amx-2core-gemma3-270m.json")
    _, target, draft = pair
    out = compare(target, draft, profile, machine(profile))
    best = max(out["fixed"].values())
    assert best > 1.3
    assert out["default"] >= 0.95 * best, out
    assert out["drafted"] > 1.0 and out["state"].extend[0] < 1.0  # drafts every round, not a probe now and then


def test_on_an_intel_amx_cpu_a_blurred_drafter_is_drafted_as_far_as_it_pays(sampling_pair, machine) -> None:
    profile = load_profile(PROFILES / "intel-amx-2core-gemma3-270m.json")
    target, draft = sampling_pair
    out = compare(target, draft, profile, machine(profile), trees=False)
    best = max(out["fixed"].values())
    assert out["default"] >= 0.95 * max(best, 1.0), out


@pytest.mark.parametrize("name", ["h100-8b-q4", "rtx4090-8b-q4"])
def test_on_gpus_the_default_matches_the_best_chain(pair, machine, name: str) -> None:
    profile = load_profile(name)
    _, target, draft = pair
    out = compare(target, draft, profile, machine(profile))
    assert out["default"] >= 0.95 * max(out["fixed"].values()), out


@pytest.mark.parametrize("name", ["amd", "intel-amx-2core-gemma3-270m", "h100-8b-q4", "rtx4090-8b-q4"])
def test_where_no_draft_pays_the_default_drafts_nothing(sampling_pair, machine, name: str) -> None:
    """The AMD development VM: a 2-row call costs 2.1x one row, so a drafter right part of the time loses; on the
    other machines' costs this drafter loses too (chains of 1 make 0.79-0.92x), and the default's probes cost its
    llama.cpp calls under 2% (issue 45's bar: >= 0.98x of the target alone with nothing accepted; trees allowed)."""
    profile = AMD if name == "amd" else load_profile(name)
    out = compare(*sampling_pair, profile, machine(profile), trees=name != "amd")
    assert max(out["fixed"].values()) < 1.0
    assert out["default"] >= 0.98, out
    assert out["drafted"] < 0.05




def _linear(name: str, two_rows: float) -> CostProfile:
    """A CPU whose target calls cost in proportion to their rows past the first, a drafter step a tenth of one row."""
    verify = {r: 10.0 + (two_rows - 10.0) * (r - 1) for r in (1, 2, 3, 4, 8, 16, 32, 64)}
    return CostProfile(name, verify, {1: 1.0, 2: 1.9, 4: 3.7, 8: 7.3, 16: 14.5, 32: 28.9, 64: 57.7}, 0.15)


def test_where_drafting_promises_less_than_the_margin_the_default_does_not_draft(pair, machine) -> None:
    """The AMD VM's trap: the plan's rate left out what drafting rounds cost (the default drafted on 0.2-4.6% and ran
    0.93x of the target alone), so it drafts only where its rate beats the target's by ``LONE_MARGIN``. Here (2 rows
    cost 1.8x one) the plan promises ~3.5% and no fixed chain of 1-4 gains 2%: the default stays with the target."""
    profile = _linear("thin-gain", 18.0)
    _, target, draft = pair
    out = compare(target, draft, profile, machine(profile), trees=False)
    assert max(out["fixed"].values()) < 1.02
    assert 1.0 < out["state"].rate / out["state"].target_rate < 1.0 + LONE_MARGIN
    assert out["default"] >= 0.98 and out["drafted"] < 0.05, out


def test_where_drafting_clears_the_margin_the_default_drafts_as_without_it(pair, machine) -> None:
    """The margin costs nothing where drafting pays more than it: 2 rows at 1.75x one, deep drafts of a drafter that is
    nearly always right gain ~10%, and the default drafts them."""
    profile = _linear("fair-gain", 17.5)
    _, target, draft = pair
    out = compare(target, draft, profile, machine(profile), trees=False)
    assert out["default"] >= 1.07 and out["drafted"] > 4.0, out


def batch_rate(engine: Engine, m: Machine, prompts: list[str], **options) -> tuple[float, list]:
    """Tokens per simulated second of ``prompts`` submitted in order to a parallel engine, every one queued before its
    first round (they wait for its sequences: the batch's rounds, its prefills, admissions and probes all charged),
    and each answer's result. Held so, the rounds and the admissions are the same whatever the threads' timing."""
    out: list = [None] * len(prompts)

    def go(i: int) -> None:
        try:
            out[i] = engine.generate(prompts[i], max_tokens=TOKENS, **options)
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread
            out[i] = e

    def arrived() -> int:
        batcher = engine.batcher
        return 0 if batcher is None else len(batcher.active) + len(batcher.waiting)

    turn, held = batch_module.Batcher._turn, [True]

    def hold(self: batch_module.Batcher) -> None:
        if held[0]:
            time.sleep(1e-3)
            return None
        return turn(self)

    batch_module.Batcher._turn = hold
    start = m.now
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    try:
        for i, t in enumerate(threads):
            t.start()
            deadline = time.monotonic() + 30
            while arrived() <= i and time.monotonic() < deadline:
                time.sleep(1e-4)
    finally:
        held[0] = False
        batch_module.Batcher._turn = turn
    for t in threads:
        t.join(timeout=300)
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return sum(len(r.tokens) for r in out) / (m.now - start), out


def compare_batch(target: Path, draft: Path, profile: CostProfile, m: Machine, n: int = 4) -> dict:
    """No drafting, fixed chains of 1-3 and the default on a parallel engine of ``n`` sequences, 3n requests a pass:
    the batch policy (``runtime.policy.batch``) decides, on the costs it measures on the simulated machine."""
    opts = EngineOptions(n_ctx=256, n_batch=max(128, 4 * n), n_threads=1, adaptive=True, parallel=n)
    prompts = (PROMPTS * n)[: 3 * n]
    with Engine(target, draft, opts) as engine:
        m.attach(engine)
        plain, base = batch_rate(engine, m, prompts, draft_max=0)
        fixed = {k: batch_rate(engine, m, prompts, draft_max=k, adaptive=False)[0] / plain for k in (1, 2, 3)}
        batch_rate(engine, m, prompts, draft_max=8)  # the batch policy learns this machine
        default, results = batch_rate(engine, m, prompts, draft_max=8)
    for got, want in zip(results, base, strict=True):
        assert got.tokens == want.tokens  # the batch's drafts change no output (the tiny pairs have wide margins)
    return {"fixed": fixed, "default": default / plain}


@pytest.mark.parametrize("n", [4, 16])
@pytest.mark.parametrize("name", ["amd", "intel-amx-2core-gemma3-270m", "h100-8b-q4"])
def test_where_no_draft_pays_the_batch_keeps_up_with_no_drafting(sampling_pair, machine, name: str, n: int) -> None:
    """Issue 44's bar at 4 and 16 requests (the AMX CPU ran the default at 0.92x of no drafting at 4): a drafter that
    does not pay costs the batch only its probes."""
    profile = AMD if name == "amd" else load_profile(name)
    out = compare_batch(*sampling_pair, profile, machine(profile), n)
    assert max(out["fixed"].values()) < 1.0
    assert out["default"] >= 0.95, out


@pytest.mark.parametrize("n", [4, 16])
def test_on_a_gpu_the_batch_drafts_as_deep_as_it_pays(pair, machine, n: int) -> None:
    """On the H100's costs a call of 8 to 16 rows costs about what 8 do (9.1 and 9.8 ms), so a batch whose drafts are
    nearly always kept should draft deep. Its line through the small calls it measured priced deeper calls higher
    than they are, and a depth never drafted is never measured: the default stayed at one draft a sequence until the
    batch's tail happened to measure larger calls (1.45x of no drafting where a chain of 3 makes 1.57x). The next
    depth's extra cost is now discounted until it is measured (``BatchPolicy.optimism``): 1.79x. At 16 requests a
    call's rows fill sooner (chains of 1-3 make 1.03-1.09x); the default makes 1.12x."""
    profile = load_profile("h100-8b-q4")
    _, target, draft = pair
    out = compare_batch(target, draft, profile, machine(profile), n)
    assert max(out["fixed"].values()) > 1.05
    assert out["default"] >= 0.98 * max(out["fixed"].values()), out

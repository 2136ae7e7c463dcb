"""Decoding's Python time: its wall time less the time inside llama.cpp's calls, drafting's Python included.

No wall clock here: a simulated clock advances only where the test says (inside ``llama_process``, or in one
Python step of the loop), so what the stats count is checked by structure, whatever this machine's speed.
"""

from __future__ import annotations

import pytest

from local_eagle.bench.run import summarize
from local_eagle.llamacpp import model as model_module
from local_eagle.llamacpp.lib import C
from local_eagle.runtime import rounds as rounds_module
from local_eagle.runtime import treeround as treeround_module
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.stats import GenerationTotals
from local_eagle.runtime.tree import TreeShape

CALL = 1.0  # simulated seconds in each llama_process call
STEP = 0.001  # simulated seconds of Python in each accept phase


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> dict:
    """One simulated clock for the contexts and the loop; ``calls`` counts the llama_process calls."""
    state = {"now": 0.0, "calls": 0}
    process = C.llama_process

    def slow_process(*args):
        state["now"] += CALL
        state["calls"] += 1
        return process(*args)

    monkeypatch.setattr(C, "llama_process", slow_process)
    for module in (model_module, rounds_module, treeround_module):
        monkeypatch.setattr(module, "_clock" if module is model_module else "clock", lambda: state["now"])
    return state


def test_llama_calls_are_not_python(pair, clock) -> None:
    _, target, draft = pair
    with Engine(target, draft, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, tree_nodes=8)) as eng:
        results = [eng.generate("hi", max_tokens=12, draft_max=0), eng.generate("hi", max_tokens=12, draft_max=3),
                   eng.generate("hi", max_tokens=12, draft_max=6, tree=TreeShape(6, 3, 2))]  # fmt: skip
    for res in results:
        s = res.stats
        assert s.python_seconds == 0.0  # every simulated second passed inside a llama.cpp call
        assert s.decode_seconds >= CALL * s.target_calls  # the calls are in the decode's wall time
    assert results[1].stats.drafted_tokens > 0 and results[2].stats.drafted_tokens > 0


def test_python_steps_are_counted_per_round(pair, clock, monkeypatch: pytest.MonkeyPatch) -> None:
    _, target, draft = pair
    accept = rounds_module.Generation.accept

    def slow_accept(self, *args, **kwargs):
        clock["now"] += STEP
        return accept(self, *args, **kwargs)

    monkeypatch.setattr(rounds_module.Generation, "accept", slow_accept)
    with Engine(target, draft, EngineOptions(n_ctx=256, n_batch=32, n_threads=1)) as eng:
        base = eng.generate("hi", max_tokens=12, draft_max=0)
        spec = eng.generate("hi", max_tokens=12, draft_max=3)
    for res in (base, spec):
        assert res.stats.python_seconds == pytest.approx(STEP * res.stats.target_calls)
    b, p = GenerationTotals(), GenerationTotals()
    b.add(base.stats)
    p.add(spec.stats)
    row = summarize(3, b, p, 1, 0)
    assert row.python_ms_per_round == pytest.approx(1000 * STEP)
    assert row.baseline_python_ms == pytest.approx(1000 * STEP)


def test_totals_keep_unmeasured_apart() -> None:
    from local_eagle.runtime.stats import GenerationStats

    t = GenerationTotals()
    t.add(GenerationStats(python_seconds=None))
    assert t.total.python_seconds is None  # shared calls (runtime.batch): nothing to attribute
    t.add(GenerationStats(python_seconds=0.25))
    t.add(GenerationStats(python_seconds=0.5))
    assert t.total.python_seconds == 0.75


def test_totals_sum_every_field_of_an_answer() -> None:
    """A field of GenerationStats is totalled without a line of its own (forced_tokens and grammar_seconds were
    dropped when the fields were copied by hand); flags and the policy are the latest answer's."""
    from dataclasses import fields

    from local_eagle.runtime.stats import GenerationStats

    one = GenerationStats()
    for i, f in enumerate(fields(GenerationStats)):
        kind = type(getattr(one, f.name))
        if kind in (int, float):
            setattr(one, f.name, kind(i + 1))
    one.drafted_per_position, one.policy, one.adaptive, one.stop_reason = [3, 2], {"k": 1}, True, "length"
    t = GenerationTotals()
    t.add(one)
    t.add(GenerationStats(drafted_per_position=[1, 1, 1], python_seconds=0.5))
    total = t.total
    for f in fields(GenerationStats):
        if type(getattr(one, f.name)) in (int, float) and f.name != "python_seconds":
            assert getattr(total, f.name) == getattr(one, f.name), f.name
    assert total.forced_tokens == one.forced_tokens and total.grammar_seconds == one.grammar_seconds
    assert total.drafted_per_position == [4, 3, 1] and total.python_seconds == 0.5
    assert total.policy == {"k": 1} and total.adaptive is False and total.stop_reason == "length"


def test_generation_stats_come_from_the_record_and_back_from_the_wire() -> None:
    """Every shared count reaches ``GenerationStats`` from ``SpecStats`` (one definition, ``DecodeCounts``), and a
    runner's ``to_dict`` reads back to the same stats (``serve.runners``)."""
    from dataclasses import fields

    from local_eagle.runtime.stats import DecodeCounts, GenerationStats, RoundStats, SpecStats

    spec = SpecStats.for_draft_max(3)
    for i, f in enumerate(fields(DecodeCounts)):
        if type(getattr(spec, f.name)) in (int, float):
            setattr(spec, f.name, type(getattr(spec, f.name))(i + 1))
    spec.policy, spec.python_seconds = {"k": 2}, 0.125
    spec.observe(RoundStats(drafted=2, accepted=1, verify_seconds=0.5, draft_seconds=0.25))
    got = spec.generation_stats(7, 9, "eos")
    for f in fields(DecodeCounts):
        assert getattr(got, f.name) == getattr(spec, f.name), f.name
    assert (got.target_calls, got.draft_lengths, got.prompt_tokens, got.stop_reason) == (1, [0, 0, 1, 0], 7, "eos")
    assert got.target_seconds == spec.target_seconds and got.drafter_seconds == spec.drafter_seconds
    assert GenerationStats.from_dict(got.to_dict()) == got

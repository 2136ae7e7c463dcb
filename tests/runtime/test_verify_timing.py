"""A verify's time is the complete target call: on a GPU llama.cpp's decode returns before the device is done.

No wall clock here: the device's wait is simulated by ``Context.synchronize`` advancing the clock the verify
phase reads, so what the stats count is checked by structure, whatever this machine's speed.
"""

from __future__ import annotations

import pytest

from local_eagle.bench.run import summarize
from local_eagle.llamacpp.model import Context
from local_eagle.runtime import verify as verify_module
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.stats import GenerationTotals

WAIT = 1.0  # seconds a simulated device takes after each decode returned


@pytest.fixture
def simulated_device(monkeypatch: pytest.MonkeyPatch) -> list[Context]:
    """Every synchronize waits ``WAIT`` on the verify phase's clock; the contexts that waited, in order."""
    now = [0.0]
    waited: list[Context] = []
    synchronize = Context.synchronize

    def wait(self: Context) -> None:
        synchronize(self)
        now[0] += WAIT
        waited.append(self)

    monkeypatch.setattr(Context, "synchronize", wait)
    monkeypatch.setattr(verify_module, "clock", lambda: now[0])
    return waited


def test_each_verify_counts_the_wait_for_its_outputs(pair, simulated_device) -> None:
    _, target, draft = pair
    with Engine(target, draft, EngineOptions(n_ctx=256, n_batch=32, n_threads=1)) as eng:
        base = eng.generate("hi", max_tokens=12, draft_max=0)
        spec = eng.generate("hi", max_tokens=12, draft_max=3)
        assert simulated_device and all(ctx is eng.ctx for ctx in simulated_device)  # the target's calls only
    for res in (base, spec):
        s = res.spec_stats
        assert s is not None and s.rounds > 0
        # one wait per target call, inside its timed span: the call as a verify uses it, before any logits read
        assert s.verify_seconds_by_rows == [WAIT * n for n in s.verify_calls_by_rows]
    assert spec.stats.drafted_tokens > 0
    assert len(simulated_device) == base.spec_stats.rounds + spec.spec_stats.rounds
    # the bench's "target call ms" (the target alone's calls) and "verify ms" both hold the wait
    b, p = GenerationTotals(), GenerationTotals()
    b.add(base.stats)
    p.add(spec.stats)
    row = summarize(3, b, p, 1, 0)
    assert row.target_call_ms >= 1000 * WAIT and row.verify_call_ms >= 1000 * WAIT

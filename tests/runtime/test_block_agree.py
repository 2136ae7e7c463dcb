"""The agreeing tiny pair (``testing.tiny_agree``) accepts block drafts in local-eagle's engine, as built: every draft
after any prompt with ``cycle="x"``, the first draft of every round after ``y`` with ``cycle="xy"``; the output stays
the target alone's."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.testing.tiny_agree import write_agree_pair

OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=0)


@pytest.mark.parametrize("cycle", ["x", "xy"])
def test_agreeing_pair_accepts_block_drafts(tmp_path: Path, cycle: str) -> None:
    target, drafter = write_agree_pair(tmp_path, cycle)
    with Engine(target, None, OPTS) as alone, Engine(target, drafter, OPTS) as block:
        for prompt in ("hello ", "1, 2, 3,", "x"):
            base = alone.generate(prompt, max_tokens=21, draft_max=0)
            j = (cycle.index(prompt[-1]) + 1) % len(cycle) if prompt[-1] in cycle else 0  # what follows the prompt
            assert base.text == ((cycle[j:] + cycle[:j]) * 21)[:21], prompt
            res = block.generate(prompt, max_tokens=21, draft_max=4, adaptive=False)
            assert res.tokens == base.tokens
            st = res.spec_stats
            if cycle == "x":  # every draft kept: 1 + 4 tokens a call, the last round shortened to fit 21
                assert st.trace_accepted == st.trace_drafted == [4, 4, 4, 4, 4][: len(st.trace_drafted)]
                assert st.rounds == 4 and st.accepted_tokens == 16
            else:  # after y: x kept, the second draft (x) rejected for y; after x: none kept
                assert st.accepted_tokens > 0 and st.accepted_tokens < st.drafted_tokens
                assert set(st.trace_accepted) <= {0, 1}

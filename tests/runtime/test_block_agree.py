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


@pytest.mark.parametrize("cycle", ["x", "xy"])
def test_agreeing_dflash2_pair_accepts_the_selector_walk(tmp_path: Path, cycle: str) -> None:
    """The DFlash2 pair (zero selector gate, random convolutions and codebooks): the walk drafts ``cycle[0]`` on every
    row, so agree-x keeps every draft and agree-xy keeps exactly the first draft after ``y`` and none after ``x``."""
    from local_eagle.bench.against_llamacpp import record_blocks, stop_recording
    from local_eagle.testing.tiny_dflash import TinyDFlash2Spec

    target, drafter = write_agree_pair(tmp_path, cycle, TinyDFlash2Spec(block_size=5))
    x, y = 3 + ord("x"), 3 + ord("y")
    with Engine(target, None, OPTS) as alone, Engine(target, drafter, OPTS) as block:
        assert block.drafter.spec.dflash2 and block.drafter.spec.n_draft_max == 4
        for prompt in ("hello ", "1, 2, 3,", "x"):
            base = alone.generate(prompt, max_tokens=21, draft_max=0)
            blocks = record_blocks(block)
            try:
                res = block.generate(prompt, max_tokens=21, draft_max=4, adaptive=False)
            finally:
                stop_recording(block)
            assert res.tokens == base.tokens, prompt  # greedy identity with the target alone
            assert blocks and all(rows == [x] * 4 for _, _, rows in blocks)  # the walk: each row's top logit
            st = res.spec_stats
            if cycle == "x":
                assert st.trace_accepted == st.trace_drafted == [4, 4, 4, 4, 4][: len(st.trace_drafted)]
                assert st.rounds == 4 and st.accepted_tokens == 16
                continue
            anchors, i = [], 0  # each round's anchor: the token the previous round ended with
            for kept in st.trace_accepted:
                anchors.append(res.tokens[i])
                i += kept + 1
            full = [(anchor, kept) for anchor, n, kept in zip(anchors, st.trace_drafted, st.trace_accepted,
                                                               strict=True) if n == 4]  # fmt: skip
            assert len(full) >= 6 and all(kept == (1 if anchor == y else 0) for anchor, kept in full), full
            first = [0] if base.tokens[0] == x else []  # after x: none kept; then every anchor is y: x kept
            assert [kept for _, kept in full] == first + [1] * (len(full) - len(first))

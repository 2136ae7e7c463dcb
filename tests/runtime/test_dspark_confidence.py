"""DSpark's confidence head and the ``draft_p_min`` cut of block drafters, as llama.cpp's draft-dspark / draft-dflash
make it (``runtime.dflash``).

The torch reference (``testing.dflash_reference``, ``dspark_block``) is the oracle for what ``BlockDrafter`` reads
off llama.cpp: the Markov-biased logits and each drafted row's confidence, in both block layouts. The engine then
cuts a fixed draft at the first row whose confidence (DSpark) or top-10 probability (DFlash) is below ``p_min``,
and stays the target alone's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.tiny_dflash import (
    TinyDFlashSpec,
    TinyDSparkSpec,
    block_gguf_and_reference,
    open_block_pair,
    write_block_gguf,
)

SPEC = TinyDSparkSpec(block_size=5, target_layers=(1, 3, 4))
OPTS = EngineOptions(n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=0)
PROMPTS = ["The quick brown fox", "def add(a, b):", "1, 2, 3, 4,"]


@pytest.mark.parametrize("anchor_first", [True, False])
def test_the_confidences_read_off_llama_cpp_are_the_reference_s(
    tmp_path: Path, target_gguf: Path, anchor_first: bool
) -> None:
    spec = SPEC if anchor_first else replace(SPEC, extra_config={"sample_from_anchor": False})
    gguf, ref = block_gguf_and_reference(tmp_path, target_gguf, spec, seed=7)
    _, target, cap, drafter = open_block_pair(target_gguf, gguf)
    assert drafter.spec.dspark and drafter.spec.confidence_head and drafter.spec.anchor_first == anchor_first
    prompt = np.random.default_rng(5).integers(3, 259, 12)
    n_past = len(prompt) - 1
    target.decode(prompt[:-1], np.arange(n_past))
    feats = cap.features(n_past)
    drafter.push(np.arange(n_past), feats)
    ref.add_context(feats, np.arange(n_past))
    first = 0 if anchor_first else 1
    seen = []
    for n in (drafter.spec.n_draft_max, 2):  # a shorter block is a block of its own (non-causal attention)
        block = drafter.propose(int(prompt[-1]), n_past, n_draft=n)
        tokens = np.array([int(prompt[-1])] + [SPEC.mask_token_id] * (n - 1 + first))
        logits, conf = ref.dspark_block(tokens, np.arange(n_past, n_past + len(tokens)), anchor_first)
        want_logits, want_conf = logits[first:], conf[first:]
        assert block.logits.shape == want_logits.shape == (n, drafter.n_vocab)
        assert np.abs(block.logits - want_logits).max() < 1e-4 * np.abs(want_logits).max()
        assert block.confidence is not None and block.confidence.shape == (n,)
        assert np.abs(block.confidence - want_conf).max() < 1e-4
        np.testing.assert_array_equal(block.cut_confidence(), block.confidence)  # the head, not the rows' top-p
        seen.extend(block.confidence.tolist())
        # draft-dspark's cut: the greedy rows up to the first whose confidence is below p_min
        p_min = float(np.median(block.confidence))
        low = np.flatnonzero(block.confidence < p_min)
        assert len(block.drafts(p_min=p_min)) == (int(low[0]) if len(low) else n)
    assert 0.0 < min(seen) < max(seen) < 1.0  # a sigmoid, and not a constant
    drafter.close()


def test_a_dspark_drafter_without_a_head_has_no_confidences(tmp_path: Path, target_gguf: Path) -> None:
    gguf = write_block_gguf(tmp_path, target_gguf, replace(SPEC, confidence_head=False))
    _, target, cap, drafter = open_block_pair(target_gguf, gguf)
    assert drafter.spec.dspark and not drafter.spec.confidence_head
    target.decode(np.arange(10, 19), np.arange(9))
    drafter.push(np.arange(9), cap.features(9))
    block = drafter.propose(19, 9)
    assert block.confidence is None
    np.testing.assert_array_equal(block.cut_confidence(), block.top_p())
    drafter.close()
    with Engine(target_gguf, gguf, OPTS) as engine, pytest.raises(LocalEagleError, match="no confidence head") as e:
        engine.generate(PROMPTS[0], max_tokens=4, draft_max=5, draft_p_min=0.5)
    assert "\n" not in str(e.value)


def _recorded(engine: Engine) -> list:
    """Every block the engine's drafter proposes, in order."""
    blocks: list = []
    propose = type(engine.drafter).propose

    def recorded(last_token: int, n_past: int, seq: int = 0, n_draft: int | None = None):
        block = propose(engine.drafter, last_token, n_past, seq, n_draft)
        blocks.append(replace(block, logits=block.logits.copy()))  # its logits are llama.cpp's until the next decode
        return block

    engine.drafter.propose = recorded
    return blocks


@pytest.mark.parametrize("family", ["dspark", "dflash"])
def test_a_fixed_draft_ends_at_the_first_row_below_p_min(tmp_path: Path, target_gguf: Path, family: str) -> None:
    """Each round drafts the block's rows up to the first one below ``p_min`` by the drafter's own measure (the
    head's confidence; DFlash's top-1 probability over the row's top 10), as llama.cpp cuts them."""
    spec = SPEC if family == "dspark" else TinyDFlashSpec(block_size=5, target_layers=(1, 3, 4))
    gguf = write_block_gguf(tmp_path, target_gguf, spec)
    k, max_tokens = 4, 24
    with Engine(target_gguf, None, OPTS) as alone, Engine(target_gguf, gguf, OPTS) as engine:
        blocks = _recorded(engine)
        cuts = []
        for prompt in PROMPTS:
            base = alone.generate(prompt, max_tokens=24, draft_max=0)
            blocks.clear()
            probe = engine.generate(prompt, max_tokens=max_tokens, draft_max=k, adaptive=False)
            p_min = float(np.median(np.concatenate([b.cut_confidence() for b in blocks])))
            blocks.clear()
            out = engine.generate(prompt, max_tokens=max_tokens, draft_max=k, adaptive=False, draft_p_min=p_min)
            assert_greedy_identical(engine, prompt, base, out, (family, prompt))
            assert_greedy_identical(engine, prompt, base, probe, (family, prompt))
            drafted, accepted = out.spec_stats.trace_drafted, out.spec_stats.trace_accepted
            assert len(drafted) >= len(blocks) > 0
            emitted = 1  # the prefill's token; a round emits its kept drafts and the target's own token
            for r, block in enumerate(blocks):
                low = np.flatnonzero(block.cut_confidence()[:k] < p_min)
                want = int(low[0]) if len(low) else k
                room = max_tokens - emitted - 1  # near the end a round drafts what the answer has room for
                assert drafted[r] == min(want, room), (family, prompt, r, drafted[r], want, room)
                cuts.append(want)
                emitted += accepted[r] + 1
        assert 0 in cuts and max(cuts) > 0  # some rounds cut at once, some drafted

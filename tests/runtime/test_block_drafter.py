"""The DFlash block drafter (``runtime.dflash``) drafts what draft-dflash's procedure gives on the torch reference.

The target runs with a LayerCapture of the drafter's layers; the committed rows' features go to the drafter
(``push``) and to the reference (``add_context``) alike; one ``propose`` is one block ``[last, <mask> ...]`` and its
greedy drafts must be the reference's argmax at the mask rows. A second round pushes only the rows a verify kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.testing.dflash_reference import DFlashReference
from local_eagle.testing.tiny_dflash import (
    TinyDFlashSpec,
    block_gguf_and_reference,
    open_block_pair,
)

SPEC = TinyDFlashSpec(block_size=5, target_layers=(1, 3, 4))


@pytest.fixture(scope="module")
def dflash(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> tuple[Path, DFlashReference]:
    d = tmp_path_factory.mktemp("block-drafter")
    return block_gguf_and_reference(d, target_gguf, SPEC, seed=7)


def _pair(target_gguf: Path, drafter_gguf: Path, n_ubatch: int = 64, n_seq: int = 1):
    model, target, cap, drafter = open_block_pair(target_gguf, drafter_gguf, n_ubatch, n_seq)
    assert drafter.target_layers == list(cap.layers)
    return model, target, cap, drafter


def _reference_block(ref: DFlashReference, last: int, n_past: int, n_draft: int) -> np.ndarray:
    tokens = np.array([last] + [SPEC.mask_token_id] * n_draft)
    return ref.block_logits(tokens, np.arange(n_past, n_past + len(tokens)))[1:]


# 23 rows with a ubatch of 4: the drafter raises it to the block (5), and push splits the rows in chunks of 5
@pytest.mark.parametrize(("n_prompt", "n_ubatch"), [(6, 64), (23, 4)])
def test_propose_drafts_what_the_reference_drafts_and_only_committed_rows_count(
    dflash: tuple[Path, DFlashReference], target_gguf: Path, n_prompt: int, n_ubatch: int
) -> None:
    gguf, ref = dflash
    _, target, cap, drafter = _pair(target_gguf, gguf, n_ubatch)
    assert drafter.target_layers == [k + 1 for k in SPEC.target_layers]  # dflash.target_layers: the ids plus one
    assert drafter.block_size == SPEC.block_size and drafter.spec.mask_token == SPEC.mask_token_id
    assert not drafter.spec.causal
    assert drafter.ctx.n_ubatch == max(n_ubatch, SPEC.block_size)  # a block split over ubatches would not see itself
    prompt = np.random.default_rng(n_prompt).integers(3, 259, n_prompt)

    # prefill: every prompt row but the last, as speculative-simple does; the last is the block's anchor
    n_past = n_prompt - 1
    target.decode(prompt[:-1], np.arange(n_past))
    feats = cap_prefix = cap.features(n_past)
    drafter.push(np.arange(n_past), feats)
    ref.reset()
    ref.add_context(feats, np.arange(n_past))

    block = drafter.propose(int(prompt[-1]), n_past)
    want = _reference_block(ref, int(prompt[-1]), n_past, SPEC.block_size - 1)
    assert block.logits.shape == want.shape == (SPEC.block_size - 1, drafter.n_vocab)
    assert np.abs(block.logits - want).max() < 1e-4 * np.abs(want).max()
    assert (block.drafts() == want.argmax(-1)).all()
    assert drafter.ctx.pos_max() == n_past - 1  # the block's own cells are gone again

    # verify [last, d1, ...] on the target; say it keeps the anchor and the first draft, and corrects the second
    rows = np.concatenate([[prompt[-1]], block.drafts()])
    target.decode(rows, np.arange(n_past, n_past + len(rows)), True)
    kept = 2
    verified = cap.features(len(rows))
    feats = verified[:kept]
    target.remove_from(n_past + kept)
    drafter.push(np.arange(n_past, n_past + kept), feats)  # the rejected rows never reach the drafter
    ref.add_context(feats, np.arange(n_past, n_past + kept))
    bonus = int(target.logits(kept - 1, drafter.n_vocab).argmax())
    n_past += kept

    block = drafter.propose(bonus, n_past)
    want = _reference_block(ref, bonus, n_past, SPEC.block_size - 1)
    assert np.abs(block.logits - want).max() < 1e-4 * np.abs(want).max()
    assert (block.drafts() == want.argmax(-1)).all()

    # the comparison sees the rejected rows: left in the cache (as injected by the verify), they change the block
    ref.add_context(verified[kept:], np.arange(n_past, n_past + len(rows) - kept))
    stale = _reference_block(ref, bonus, n_past, SPEC.block_size - 1)  # stale cells under the block
    assert np.abs(block.logits - stale).max() > 0.05 * np.abs(want).max()
    ref.reset()
    ref.add_context(np.concatenate([cap_prefix, feats]), np.arange(n_past))

    # a shorter block (draft-dflash's n_max below block_size - 1) is a block of its own: fewer masks attended
    short = drafter.propose(bonus, n_past, n_draft=2)
    want = _reference_block(ref, bonus, n_past, 2)
    assert np.abs(short.logits - want).max() < 1e-4 * np.abs(want).max()
    assert (short.drafts() == want.argmax(-1)).all()
    assert drafter.propose(bonus, n_past, n_draft=99).logits.shape[0] == SPEC.block_size - 1  # clamped

    # a row pushed twice, or a block over cells still held, is refused
    with pytest.raises(LocalEagleError, match="positions must rise"):
        drafter.push(np.arange(n_past - 1, n_past), feats[:1])
    with pytest.raises(LocalEagleError, match="holds rows up to"):
        drafter.propose(bonus, n_past - 1)
    drafter.close()


def test_block_distributions_for_sampling(dflash: tuple[Path, DFlashReference], target_gguf: Path) -> None:
    gguf, _ = dflash
    _, target, cap, drafter = _pair(target_gguf, gguf)
    prompt = np.arange(10, 20)
    target.decode(prompt[:-1], np.arange(9))
    drafter.push(np.arange(9), cap.features(9))
    block = drafter.propose(int(prompt[-1]), 9)

    q = block.probs(0.8)
    assert q.shape == (SPEC.block_size - 1, drafter.n_vocab)
    assert np.allclose(q.sum(-1), 1.0) and (q >= 0).all()
    assert (q.argmax(-1) == block.tokens).all()
    one_hot = block.probs(0.0)  # greedy drafts: q is the draft's one-hot
    assert (one_hot.sum(-1) == 1).all() and (one_hot[np.arange(len(one_hot)), block.tokens] == 1).all()

    tokens, q1 = block.sample(np.random.default_rng(0), 1.0)
    assert tokens.shape == (SPEC.block_size - 1,) and np.allclose(q1.sum(-1), 1.0)
    assert (q1[np.arange(len(tokens)), tokens] > 0).all()
    # many draws follow each row's distribution (the rows are independent: one pass made them all)
    rng = np.random.default_rng(1)
    draws = np.stack([block.sample(rng, 1.0)[0] for _ in range(400)])
    top = block.tokens
    assert np.abs((draws == top).mean(0) - q1[np.arange(len(top)), top]).max() < 0.1

    # draft-dflash's cut: top-1 probability over the top 10, the draft ending at the first row below p_min
    p = block.top_p()
    assert ((p > 0) & (p <= 1)).all()
    cut = float(np.sort(p)[len(p) // 2])
    first_low = int(np.flatnonzero(p < cut)[0]) if (p < cut).any() else len(p)
    assert len(block.drafts(p_min=cut)) == first_low
    assert len(block.drafts(n_min=len(p) + 1)) == 0
    assert len(block.drafts(n_max=2)) == 2
    drafter.close()


def test_refuses_what_is_not_a_dflash_drafter(target_gguf: Path) -> None:
    from local_eagle.llamacpp.model import Context, ContextOptions, Model
    from local_eagle.runtime.dflash import BlockDrafter

    target = Context(Model(target_gguf, n_gpu_layers=0, what="target"), ContextOptions(n_ctx=64))
    with pytest.raises(LocalEagleError, match="not a DFlash drafter"):
        BlockDrafter(target_gguf, target, n_gpu_layers=0)


def test_sequences_keep_their_own_context(dflash: tuple[Path, DFlashReference], target_gguf: Path) -> None:
    """Rows pushed on sequence 1 are that sequence's context alone: its block is the reference's on them."""
    gguf, ref = dflash
    _, target, cap, drafter = _pair(target_gguf, gguf, n_seq=2)
    rng = np.random.default_rng(3)
    ctx0, ctx1 = rng.standard_normal((2, 7, drafter.spec.width)).astype(np.float32)
    drafter.push(np.arange(7), ctx0, seq=0)
    drafter.push(np.arange(5), ctx1[:5], seq=1)
    ref.reset()
    ref.add_context(ctx1[:5], np.arange(5))
    block = drafter.propose(42, 5, seq=1)
    want = _reference_block(ref, 42, 5, SPEC.block_size - 1)
    assert np.abs(block.logits - want).max() < 1e-4 * np.abs(want).max()
    assert drafter.ctx.pos_max(0) == 6 and drafter.ctx.pos_max(1) == 4
    drafter.remove_from(3, seq=1)
    assert drafter.ctx.pos_max(1) == 2 and drafter.ctx.pos_max(0) == 6
    drafter.close()

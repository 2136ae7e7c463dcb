"""The converted DFlash GGUF on the pinned llama.cpp computes what the torch reference computes.

llama.cpp runs the drafter as ``draft-dflash`` does (common/speculative.cpp): an embedding batch of
the target layers' concatenated hidden states (width ``len(target_layers) * n_embd``) is fused and
injected into the drafter's K/V cache, then the block ``[last, <mask> ...]`` is decoded with
non-causal attention, the target's context lending its embeddings and head (``ctx_other``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.testing.dflash_reference import DFlashReference
from local_eagle.testing.tiny_dflash import TinyDFlashSpec, block_gguf_and_reference

SPEC = TinyDFlashSpec(block_size=4, target_layers=(1, 3, 4))
GGML_TYPE_F32 = 0


def llama_block_logits(target: Path, drafter: Path, features: np.ndarray, tokens: list[int], start: int) -> np.ndarray:
    """Inject ``features`` at positions 0.. and decode ``tokens`` from ``start`` on; the block's logits."""
    from local_eagle.llamacpp.lib import C
    from local_eagle.llamacpp.model import Context, ContextOptions, Model

    opts = ContextOptions(
        n_ctx=256, n_batch=64, n_ubatch=64, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False
    )
    tgt = Context(Model(target, n_gpu_layers=0, what="target"), opts)
    dft_model = Model(drafter, n_gpu_layers=0, what="DFlash drafter")
    dft = Context(dft_model, opts, ctx_other=tgt)
    C.llama_set_causal_attn(dft.ptr, False)
    dft.decode_rows(features, np.arange(len(features)))
    dft.decode(np.array(tokens), np.arange(start, start + len(tokens)), outputs=True)
    n_vocab = dft_model.n_vocab
    return np.stack(
        [np.ctypeslib.as_array(C.llama_get_logits_ith(dft.ptr, i), shape=(n_vocab,)) for i in range(len(tokens))]
    )


@pytest.fixture(scope="module")
def drafter(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> tuple[Path, DFlashReference]:
    d = tmp_path_factory.mktemp("dflash-ref")
    return block_gguf_and_reference(d, target_gguf, SPEC, seed=5)


@pytest.mark.parametrize(("n_ctx", "anchor"), [(5, 7), (29, 120)])
def test_block_logits_match_the_reference(
    drafter: tuple[Path, DFlashReference], target_gguf: Path, n_ctx: int, anchor: int
) -> None:
    gguf, ref = drafter
    features = np.random.default_rng(n_ctx).standard_normal((n_ctx, 3 * SPEC.n_embd)).astype(np.float32)
    tokens = [anchor] + [SPEC.mask_token_id] * (SPEC.block_size - 1)
    got = llama_block_logits(target_gguf, gguf, features, tokens, n_ctx)

    ref.reset()
    ref.add_context(features, np.arange(n_ctx))
    want = ref.block_logits(np.array(tokens), np.arange(n_ctx, n_ctx + len(tokens)))
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    assert (got.argmax(-1) == want.argmax(-1)).all()

    # the comparison sees the context: without it the reference is far off
    ref.reset()
    alone = ref.block_logits(np.array(tokens), np.arange(n_ctx, n_ctx + len(tokens)))
    assert np.abs(got - alone).max() > 0.05 * np.abs(want).max()

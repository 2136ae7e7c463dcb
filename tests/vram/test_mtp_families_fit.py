"""The planner prices the MTP head of each attention family beside glm4moe (``testing.tiny_mtp_families``) as
llama.cpp's dry run loads it: weights and caches to the byte, the NextN graph's compute estimated from glm4moe's.

``cohere2moe`` and ``hy_v3`` load some NextN-block tensors without the block's skip flag (the optional head, and
``hy_v3``'s FFN and router; ``deepseek32``'s and ``glm-dsa``'s selection bias), so those are the target's weights
with or without ``load_mtp`` (``vram.shapes.NEXTN_ALWAYS_LOADED``); ``deepseek2``'s MLA cache holds the compressed K
only. The DSA targets (``deepseek32``, ``glm-dsa``) keep an indexer key cache and graph the planner does not price
yet: only their head is held to llama.cpp's buffers here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle import vram
from local_eagle.testing.tiny_mtp_families import DSA, FAMILIES, write_tiny_family_mtp
from local_eagle.vram import MemoryConfig
from local_eagle.vram.measure import measure
from local_eagle.vram.report import measure_rows, predict_for_backend

EXACT = ("target weights", "target KV cache", "MTP head weights", "MTP KV cache")
# (ctx, ubatch, flash attention, parallel requests)
MATRIX = [(512, 512, True, 1), (300, 512, False, 1), (4096, 32, True, 1), (1024, 128, True, 3)]


@pytest.fixture(scope="module", params=FAMILIES)
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_family_mtp(tmp_path_factory.mktemp(f"fit-{request.param}") / "m.gguf", request.param, seed=3)


def test_mtp_components_match_llama_cpp(model: Path) -> None:
    shape = vram.read_shape(model)
    assert shape.n_nextn == 1 and shape.n_trunk == shape.n_layer - 1
    for ctx, ub, fa, par in MATRIX:
        s = MemoryConfig(n_ctx=ctx, n_ubatch=ub, flash_attn=fa, n_gpu_layers=0, mtp=True).with_parallel(par)
        m = measure(model, s)
        assert m.mtp is not None
        rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
        case = (shape.arch, ctx, ub, fa, par)
        for label in EXACT if shape.arch not in DSA else EXACT[2:]:
            assert rows[label].measured > 0 and rows[label].predicted == rows[label].measured, (case, label)
        # mimo2's dense sliding-window NextN block and deepseek2's MLA one, estimated from glm4moe's graph: within 15 %
        assert abs(rows["MTP compute"].error) <= 0.15, (case, rows["MTP compute"])
        if shape.arch not in DSA:
            assert abs(rows["target compute"].error) <= 0.10, (case, rows["target compute"])


def test_the_trunk_alone_without_the_head(model: Path) -> None:
    """Without ``load_mtp`` the target's weights are what llama.cpp loads: the trunk, and the NextN tensors its
    loader does not skip."""
    shape = vram.read_shape(model)
    s = MemoryConfig(n_ctx=1024, n_gpu_layers=0)
    m = measure(model, s)
    assert m.mtp is None
    pred = predict_for_backend(shape, None, s, gpu_build=False)
    assert "MTP head weights" not in pred
    assert pred["target weights"] == m.target.total("model")
    if shape.arch not in DSA:
        assert pred["target KV cache"] == m.target.total("context")

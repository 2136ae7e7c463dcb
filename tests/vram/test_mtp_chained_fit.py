"""The planner prices a ``step35`` target's chained MTP heads (``runtime.mtp_chain``) as llama.cpp loads them.

Held against llama.cpp's dry-run load of the tiny generated ``step35`` with 2 and 3 NextN blocks
(``testing.tiny_mtp_step35``): every NextN block's weights (less the tensors ``step35.cpp``'s ``load_block_mtp`` creates
without the block's skip flag, which llama.cpp loads as the model's either way: ``vram.shapes.NEXTN_ALWAYS_LOADED``),
the MTP context's KV cache (one layer per head) and compute buffer, and the trunk's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle import vram
from local_eagle.runtime import mtp
from local_eagle.testing.tiny_mtp_step35 import TinyStep35Spec, write_tiny_step35_mtp
from local_eagle.vram import MemoryConfig
from local_eagle.vram.measure import measure
from local_eagle.vram.report import measure_rows, predict_for_backend

ROWS = ("target weights", "target KV cache", "target compute", "MTP head weights", "MTP KV cache", "MTP compute")
# (ctx, ubatch, flash attention, parallel requests)
MATRIX = [(512, 512, True, 1), (4096, 64, False, 1), (1024, 128, True, 3)]


@pytest.fixture(scope="module", params=[2, 3])
def step35(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp(f"step35-fit-{request.param}")
    return write_tiny_step35_mtp(d / "step35.gguf", TinyStep35Spec(n_nextn=request.param), seed=3)


def test_chained_heads_are_priced_as_llama_cpp_loads_them(step35: Path) -> None:
    shape = vram.read_shape(step35)
    assert shape.arch == "step35" and shape.n_nextn in (2, 3)
    assert vram.shapes.mtp_refusal(shape) is None
    assert vram.shapes.CHAINED_HEAD_ARCHS == mtp.CHAINED_HEAD_ARCHS  # the planner's copy of the runtime's
    for ctx, ub, fa, par in MATRIX:
        s = MemoryConfig(n_ctx=ctx, n_ubatch=ub, flash_attn=fa, n_gpu_layers=0, mtp=True).with_parallel(par)
        m = measure(step35, s)
        assert m.mtp is not None
        rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
        case = (shape.n_nextn, ctx, ub, fa, par)
        for label in ROWS:
            assert rows[label].measured > 0, (case, label)
            if "compute" in label:
                assert abs(rows[label].error) <= 0.01, (case, label, rows[label])
            else:
                assert rows[label].predicted == rows[label].measured, (case, label, rows[label])

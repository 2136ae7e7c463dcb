"""The planner on the other hybrid MTP families (``nemotron_h_moe``, ``bailingmoe3``) drafting with their own head.

Held against llama.cpp's dry-run load of the tiny generated models (``testing.tiny_mtp_hybrid``): the Mamba 2 state
only on Nemotron-H's Mamba blocks (its FFN-only blocks have no KV heads either), the Kimi-delta-attention state
(three short convolutions, a square state per head), each times 1 + ``n_rs_seq`` where the head drafts, and
bailingmoe3's target cache holding its NextN block's KV (no attention filter on its hybrid cache).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from local_eagle import vram
from local_eagle.testing.tiny_mtp_hybrid import HYBRID_FAMILIES, TinyHybridSpec, write_tiny_hybrid_mtp
from local_eagle.units import MiB
from local_eagle.vram import MemoryConfig
from local_eagle.vram.measure import measure
from local_eagle.vram.report import measure_rows, predict_for_backend
from local_eagle.vram.shapes import mtp_refusal

EXACT = ("target weights", "target KV cache", "target recurrent state", "MTP head weights", "MTP KV cache")
MATRIX = [(512, 512, True, 8, True), (4096, 32, True, 3, True), (2048, 64, False, 1, True), (1024, 512, True, 8, False)]


@pytest.fixture(scope="module", params=HYBRID_FAMILIES)
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    arch = request.param
    return write_tiny_hybrid_mtp(tmp_path_factory.mktemp("fit") / f"{arch}.gguf", TinyHybridSpec(arch))


def test_layers_as_llama_cpp(model: Path) -> None:
    shape = vram.read_shape(model)
    spec = TinyHybridSpec(shape.arch)
    assert shape.recurrent == [k == "M" for k in spec.layers] + [False]
    assert mtp_refusal(shape) is None


@pytest.mark.parametrize("case", MATRIX)
def test_components_match_llama_cpp(model: Path, case: tuple[int, int, bool, int, bool]) -> None:
    ctx, ub, fa, bound, head = case
    shape = vram.read_shape(model)
    s = MemoryConfig(n_ctx=ctx, n_ubatch=ub, flash_attn=fa, n_gpu_layers=0, mtp=head, draft_max=bound)
    m = measure(model, s)
    assert m.n_rs_seq == vram.rs_snapshots(shape, s) == (bound if head else 0)
    rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
    for label in EXACT:
        if label in rows or head:
            assert rows[label].predicted == rows[label].measured > 0, (label, rows[label])
    assert abs(rows["target compute"].error) <= 0.10 or rows["target compute"].measured < 16 * MiB
    one = vram.recurrent_state(shape, replace(s, mtp=False), 0).total
    assert rows["target recurrent state"].measured == one * (1 + m.n_rs_seq)

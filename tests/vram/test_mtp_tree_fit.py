"""The planner prices what the engine opens for an MTP head drafting trees: the target's cache with a sequence per
tree node and the MTP context with a drafter's branch sequences (``treeround.drafter_sequences``), one unified cache
each. Held against llama.cpp's dry-run buffers (as tests/vram/test_mtp_fit.py does for chains) and against the
engine's own MTP context.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle import vram
from local_eagle.cli.app import app
from local_eagle.runtime.treeround import drafter_sequences
from local_eagle.testing.tiny_mtp import write_tiny_glm4moe_mtp, write_tiny_qwen35_mtp
from local_eagle.vram import MemoryConfig
from local_eagle.vram.measure import measure, memory_breakdown
from local_eagle.vram.report import measure_rows, predict_for_backend

runner = CliRunner()
MTP_ROWS = ("MTP head weights", "MTP KV cache", "MTP compute")
# (ctx, ubatch, flash attention, tree nodes, tree width)
MATRIX = [(512, 512, True, 8, 4), (1024, 64, False, 15, 4), (4096, 128, True, 32, 8), (300, 32, True, 4, 2)]


@pytest.fixture(scope="module")
def glm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_glm4moe_mtp(tmp_path_factory.mktemp("mtp-tree-fit") / "glm.gguf")


def tree_settings(ctx: int, ubatch: int, fa: bool, nodes: int, width: int) -> MemoryConfig:
    return MemoryConfig(
        n_ctx=ctx, n_batch=ubatch, n_ubatch=ubatch, flash_attn=fa, n_gpu_layers=0, mtp=True, n_seq=nodes,
        kv_unified=True, draft_n_seq=drafter_sequences(width),
    )  # fmt: skip


def test_mtp_tree_caches_match_llama_cpp(glm: Path) -> None:
    """Every MTP component and the target's multi-sequence cache against llama.cpp's dry run of the same contexts.
    The MTP context's compute buffer depends on its own sequence count: priced with the target's, some cases miss."""
    shape = vram.read_shape(glm)
    missed = 0
    for ctx, ub, fa, nodes, width in MATRIX:
        s = tree_settings(ctx, ub, fa, nodes, width)
        m = measure(glm, s)
        assert m.mtp is not None
        rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
        case = (ctx, ub, fa, nodes, width)
        for label in ("target weights", "target KV cache", "MTP head weights", "MTP KV cache"):
            assert rows[label].predicted == rows[label].measured, (case, label, rows[label])
        for label in ("MTP compute", "target compute"):
            assert abs(rows[label].error) <= 0.01, (case, rows[label])
        as_target = predict_for_backend(shape, None, replace(s, draft_n_seq=None), gpu_build=False)
        missed += as_target["MTP compute"] != rows["MTP compute"].measured
    assert missed > 0


def test_the_engine_opens_what_is_priced(glm: Path) -> None:
    """The engine's MTP context for trees: the branch sequences in one unified cache, its KV cache the planner's
    to the byte (and the chains-only engine's has one sequence)."""
    from local_eagle.runtime.engine import Engine, EngineOptions

    shape = vram.read_shape(glm)
    for nodes, width in ((8, 4), (0, 4)):
        opts = EngineOptions(n_ctx=512, n_batch=64, n_threads=1, tree_nodes=nodes, tree_width=width)
        with Engine(glm, None, opts) as eng:
            trees = nodes > 1
            assert eng.trees is trees
            assert eng.drafter.ctx.n_seq_max == (drafter_sequences(width) if trees else 1)
            assert eng.ctx.n_seq_max == (nodes if trees else 1)
            kv = memory_breakdown(eng.drafter.ctx.ptr).total("context")
        s = tree_settings(512, 64, True, nodes, width) if trees else MemoryConfig(n_ctx=512, n_gpu_layers=0, mtp=True)
        assert predict_for_backend(shape, None, s, gpu_build=False)["MTP KV cache"] == kv, (nodes, width)


def test_fit_and_the_loaders_price_mtp_trees(glm: Path, tmp_path: Path) -> None:
    """``fit --tree N`` prices the MTP context's branch sequences, as for a drafter; the loaders' memory check
    (``cli.loading.buffer_bytes``) prices the head's context, more with trees. A hybrid target keeps chains: no
    tree caches priced."""
    from local_eagle.cli.loading import LoadOptions, buffer_bytes

    r = runner.invoke(app, ["fit", "-m", str(glm), "--ctx", "2048", "--vram-gb", "8", "--tree", "16", "--json"])
    assert r.exit_code == 0, r.output
    settings = json.loads(r.stdout)["plan"]["settings"]
    assert settings["mtp"] is True and settings["n_seq"] == 16 and settings["kv_unified"] is True
    assert settings["draft_n_seq"] == drafter_sequences(8)  # fit prices the adaptive policy's width
    chains = buffer_bytes(glm, None, 2048, LoadOptions(tree_nodes=0), gpu=False)
    trees = buffer_bytes(glm, None, 2048, LoadOptions(tree_nodes=16, tree_width=4), gpu=False)
    alone = buffer_bytes(glm, None, 2048, LoadOptions(tree_nodes=0, mtp=False), gpu=False)
    assert trees > chains > alone
    shape = vram.read_shape(glm)
    s = MemoryConfig(n_ctx=2048, n_batch=512, n_ubatch=512, n_gpu_layers=0, draft_batch=512, draft_ubatch=512,
                 draft_max=8, mtp=True)  # fmt: skip
    head = vram.attention_kv(shape, vram.ctx_dims(2048, 1, 512, 512, False), s, 0, mtp=True).total
    assert chains - alone == head + vram.mtp_compute(shape, s, vram.CPU)
    hybrid = write_tiny_qwen35_mtp(tmp_path / "qwen35.gguf")
    r = runner.invoke(app, ["fit", "-m", str(hybrid), "--ctx", "2048", "--vram-gb", "8", "--tree", "16", "--json"])
    assert r.exit_code == 0, r.output
    settings = json.loads(r.stdout)["plan"]["settings"]
    assert settings["mtp"] is True and settings["n_seq"] == 1 and settings["draft_n_seq"] is None
    assert buffer_bytes(hybrid, None, 2048, LoadOptions(tree_nodes=16), gpu=False) == buffer_bytes(
        hybrid, None, 2048, LoadOptions(tree_nodes=0), gpu=False
    )

"""``fit`` prices a block drafter (DFlash): the formulas of ``vram.block`` by hand, then a tiny converted GGUF.

The formulas are checked without a model against sizes worked out here; the CLI test converts a tiny generated DFlash
checkpoint against the tiny target and reads the plan back as JSON.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from converters.dflash_gguf import convert_dflash
from local_eagle import vram
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.testing.tiny_dflash import TinyDFlashSpec, write_dflash_checkpoint
from local_eagle.vram import CPU, MemoryConfig, block
from local_eagle.vram.plan import block_dims, drafter_dims

runner = CliRunner()
SPEC = TinyDFlashSpec()

# a Qwen3-8B-sized DFlash drafter (z-lab/Qwen3-8B-DFlash-b16's shape: 5 layers of Qwen3-8B's width, block of 16)
QWEN3_8B = block.BlockDims(
    n_layer=5, n_embd=4096, n_head=32, n_head_kv=8, head_k=128, head_v=128, n_ff=12288, n_vocab=151936,
    block_size=16, n_target_layers=5,
)  # fmt: skip


def test_cells_are_the_context_plus_a_block() -> None:
    assert block.block_cells(4096, 16) == 4112
    assert block.block_cells(1, 1) == 2


def test_kv_is_every_layer_over_every_cell() -> None:
    # f16: 8 KV heads x 128 = 1024 values = 2 KiB per K row and per V row, 5 layers
    assert block.block_kv_bytes(QWEN3_8B, 4112) == 5 * 4112 * 2 * 2048
    # q8_0: 34 bytes per 32 values
    assert block.block_kv_bytes(QWEN3_8B, 100, "q8_0", "q8_0") == 5 * 100 * 2 * (1024 // 32 * 34)
    # twice the context, twice the cache; a bigger block adds its rows only
    assert block.block_kv_bytes(QWEN3_8B, 8192) == 2 * block.block_kv_bytes(QWEN3_8B, 4096)


def test_compute_rows_are_one_block_per_call() -> None:
    b = QWEN3_8B
    rows = b.block_size
    attn = rows * (32 * 128 + 8 * 256 + 32 * 128)
    ffn = 2 * rows * 12288
    assert ffn > attn
    assert block.block_decode_bytes(b, 4352) == 4 * (3 * rows * 4096 + ffn + rows * 151936)
    # without flash attention the block's scores over the whole cache count, and grow with it
    no_fa = block.block_decode_bytes(b, 4352, flash_attn=False)
    assert no_fa == 4 * (3 * rows * 4096 + attn + 32 * rows * 4352 + rows * 151936)
    assert block.block_decode_bytes(b, 8704, flash_attn=False) > no_fa
    # a block of 8 costs half the rows of a block of 16
    half = replace(b, block_size=8)
    assert block.block_decode_bytes(half, 4352) * 2 == block.block_decode_bytes(b, 4352)


def test_injection_and_the_buffer_is_the_larger_graph() -> None:
    b = QWEN3_8B
    assert block.injection_bytes(b, 512) == 4 * 512 * (5 * 4096 + 2 * 4096 + 8 * 256)
    big, small = block.injection_bytes(b, 512), block.block_decode_bytes(b, 4352)
    assert block.block_compute_bytes(b, 4352, 512) == max(big, small)
    assert block.block_compute_bytes(b, 4352, 1) == small


def test_captured_layers_are_each_target_layer_per_staged_row() -> None:
    assert block.captured_bytes(5, 4096, 2048) == 5 * 4096 * 2048 * 4
    assert block.captured_bytes(3, 4096, 2048) * 5 == block.captured_bytes(5, 4096, 2048) * 3  # EAGLE 3 reads 3


@pytest.fixture(scope="module")
def dflash_gguf(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> Path:
    d = tmp_path_factory.mktemp("dflash-fit")
    ckpt = write_dflash_checkpoint(d / "ckpt", SPEC)
    return convert_dflash(ckpt, target_gguf, d / "tiny-dflash.gguf", outtype="f16").outfile


def test_shape_reads_the_dflash_keys(dflash_gguf: Path) -> None:
    shape = vram.read_shape(dflash_gguf, "drafter GGUF")
    assert shape.is_block_drafter and not shape.is_drafter
    assert shape.block_size == SPEC.block_size and shape.block_family == "dflash"
    assert shape.target_layers == [x + 1 for x in SPEC.target_layers]
    assert shape.target_hidden == SPEC.n_embd
    b = block_dims(shape)
    assert (b.n_layer, b.n_head_kv, b.head_k, b.n_target_layers) == (SPEC.n_layer, SPEC.n_head_kv, SPEC.head_dim, 3)


def test_plan_prices_the_block_drafter(dflash_gguf: Path, target_gguf: Path) -> None:
    target, draft = vram.read_shape(target_gguf), vram.read_shape(dflash_gguf, "drafter GGUF")
    vram.check_pair(target, draft)
    s = MemoryConfig(n_ctx=1024)
    budget = vram.GPUBudget("test", 8 * vram.GiB, 8 * vram.GiB, "manual", 0)
    p = vram.make_plan(target, draft, s, budget, CPU)
    b = block_dims(draft)
    dd = drafter_dims(draft, s)
    assert dd.n_ctx == 1280  # 1024 + a block of 4, padded to 256
    kv = p.component("draft_kv")
    assert kv.gpu + kv.host == block.block_kv_bytes(b, 1280)
    comp = p.component("draft_compute")
    assert comp.gpu == CPU.tensor_bytes(block.block_compute_bytes(b, 1280, min(1024, s.draft_ubatch)), 0, 0)
    # the target stages its three captured layers per batch row, beside its logits
    n_out = max(s.n_seq, min(s.draft_max + 1, 1024))
    out = p.component("outputs").host
    assert out == target.n_vocab * n_out * 4 + block.captured_bytes(3, target.n_embd, 1024) + 265 * 4 * 4
    assert any("block drafter (dflash, block of 4, 3 target layers)" in n for n in p.notes)


def test_pair_check_refuses_another_targets_drafter(dflash_gguf: Path, tmp_path: Path) -> None:
    from local_eagle.testing.tiny import TinyTargetSpec, write_tiny_target

    other = vram.read_shape(write_tiny_target(tmp_path / "small.gguf", replace(TinyTargetSpec(), n_layer=3)))
    with pytest.raises(LocalEagleError, match="target layer 4 .*out of range for target small.gguf with 3 layers"):
        vram.check_pair(other, vram.read_shape(dflash_gguf, "drafter GGUF"))


def test_fit_cli_prices_a_dflash_gguf(dflash_gguf: Path, target_gguf: Path) -> None:
    res = runner.invoke(app, ["fit", "-m", str(target_gguf), "-d", str(dflash_gguf), "--vram-gb", "4", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)["plan"]
    assert plan["draft"]["arch"] == "dflash" and plan["fits"]
    assert {"draft_weights", "draft_kv", "draft_compute"} <= set(plan["components"])
    assert plan["components"]["draft_kv"]["gpu"] > 0
    res = runner.invoke(app, ["fit", "-m", str(target_gguf), "-d", str(dflash_gguf), "--vram-gb", "4"])
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "its compute is estimated" in text and "does not draft" not in text


def test_fit_cli_refuses_what_it_cannot_do(dflash_gguf: Path, target_gguf: Path) -> None:
    res = runner.invoke(app, ["fit", "-m", str(dflash_gguf), "--vram-gb", "4"])
    assert res.exit_code == 2 and "is a dflash drafter; pass it with --draft" in " ".join(res.output.split())
    res = runner.invoke(app, ["fit", "-m", str(target_gguf), "-d", str(dflash_gguf), "--vram-gb", "4", "--measure"])
    assert res.exit_code == 2
    assert "does not run block drafters (DFlash) yet" in " ".join(res.output.split())
    assert "Traceback" not in res.output

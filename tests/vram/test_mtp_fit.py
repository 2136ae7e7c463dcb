"""The planner prices a model's own MTP (NextN) head: its weights, the MTP context's KV cache and compute buffer.

Held against llama.cpp's dry-run load of the tiny generated ``glm4moe`` targets (``testing.tiny_mtp``): the model
loaded with ``load_mtp`` and an ``LLAMA_CONTEXT_TYPE_MTP`` context on it, opened as ``runtime.mtp.MtpDrafter``
opens it. A head that will not draft (``--no-mtp``, a named drafter, a hybrid whose rollback is unchecked) is priced
as absent; a hybrid qwen35's head and recurrent state: tests/vram/test_mtp_hybrid_fit.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle import vram
from local_eagle.cli.app import app
from local_eagle.gguf import pad
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_cycle_glm4moe_mtp, write_tiny_glm4moe_mtp
from local_eagle.units import MiB
from local_eagle.vram import CPU, GiB, MemoryConfig
from local_eagle.vram.measure import measure
from local_eagle.vram.report import measure_rows, predict_for_backend

runner = CliRunner()

MTP_ROWS = ("MTP head weights", "MTP KV cache", "MTP compute")
# a wider MoE than the default tiny spec (head size 32, so a q8_0 target cache is allowed), sharing the trunk's head
WIDE = TinyGlm4MoeSpec(
    n_embd=256, n_head=8, n_head_kv=4, n_ff=512, n_expert=8, n_expert_used=4, n_ff_exp=256, own_head=False
)
# (ctx, ubatch, flash attention, target KV type, parallel requests)
MATRIX = [
    (512, 512, True, "f16", 1),
    (300, 512, False, "f16", 1),
    (4096, 32, True, "f16", 1),
    (1024, 128, True, "f16", 3),
    (2048, 64, True, "q8_0", 1),
    (4096, 512, False, "q8_0", 1),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mtp-fit")
    return {
        "tiny": write_tiny_glm4moe_mtp(d / "tiny.gguf"),
        "cycle": write_cycle_glm4moe_mtp(d / "cycle.gguf"),
        "wide": write_tiny_glm4moe_mtp(d / "wide.gguf", WIDE),
        "no-head": write_tiny_glm4moe_mtp(d / "no-head.gguf", mtp=False),
    }


def within_bars(component: str, pred: int, real: int) -> bool:
    """tests/vram/test_vram.py's bars: compute within 10 % (or 16 MiB), the rest within 1 %."""
    if "compute" in component:
        return abs(pred - real) <= max(0.10 * real, 16 * MiB)
    return abs(pred - real) <= 0.01 * real


@pytest.mark.parametrize("name", ["tiny", "cycle", "wide"])
def test_mtp_components_match_llama_cpp(models: dict[str, Path], name: str) -> None:
    """Every MTP component, and the trunk's weights and KV without the NextN block, against llama.cpp's buffers."""
    shape = vram.read_shape(models[name])
    assert shape.n_nextn == 1 and shape.n_trunk == shape.n_layer - 1
    for ctx, ub, fa, kv, par in MATRIX:
        if kv != "f16" and shape.head_k[0] % 32:
            continue  # llama.cpp refuses a q8_0 cache over heads of 16
        s = MemoryConfig(
            n_ctx=ctx, n_ubatch=ub, flash_attn=fa, type_k=kv, type_v=kv if fa else "f16", n_gpu_layers=0, mtp=True
        ).with_parallel(par)
        m = measure(models[name], s)
        assert m.mtp is not None
        rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
        case = (name, ctx, ub, fa, kv, par)
        for label in MTP_ROWS:
            r = rows[label]
            assert r.measured > 0, (case, label)
            assert within_bars(label, r.predicted, r.measured), (case, label, r.predicted, r.measured)
        # weights and caches to the byte; the NextN graph and the MoE trunk's within 1 % (exact on these today)
        for label in ("target weights", "target KV cache", "MTP head weights", "MTP KV cache"):
            assert rows[label].predicted == rows[label].measured, (case, label)
        assert abs(rows["MTP compute"].error) <= 0.01, (case, rows["MTP compute"])
        assert abs(rows["target compute"].error) <= 0.01, (case, rows["target compute"])


def test_trunk_alone_without_the_head(models: dict[str, Path]) -> None:
    """Without ``load_mtp`` llama.cpp skips the NextN block and keeps only the trunk's layers in the target's cache:
    the planner no longer counts the block's weights or KV as the target's."""
    shape = vram.read_shape(models["tiny"])
    s = MemoryConfig(n_ctx=4096, n_gpu_layers=0)
    m = measure(models["tiny"], s)
    assert m.mtp is None
    pred = predict_for_backend(shape, None, s, gpu_build=False)
    assert not set(MTP_ROWS) & set(pred)
    assert pred["target weights"] == m.target.total("model")
    assert pred["target KV cache"] == m.target.total("context")
    nextn = sum(pad(t.nbytes, CPU.alignment) for t in shape.tensors if shape.is_nextn(t))
    assert nextn > 0 and vram.weights(shape, 0, CPU, CPU, nextn=True).total == nextn


def test_plan_has_the_mtp_context(models: dict[str, Path]) -> None:
    shape = vram.read_shape(models["tiny"])
    budget = vram.GPUBudget("test", 8 * GiB, 8 * GiB, "manual", 0)
    on = vram.make_plan(shape, None, MemoryConfig(n_ctx=4096, n_gpu_layers=-1, mtp=True), budget)
    off = vram.make_plan(shape, None, MemoryConfig(n_ctx=4096, n_gpu_layers=-1), budget)
    keys = {c.key for c in on.components}
    assert {"mtp_weights", "mtp_kv", "mtp_compute"} <= keys
    assert not {"mtp_weights", "mtp_kv", "mtp_compute"} & {c.key for c in off.components}
    assert on.to_dict()["mtp"] is True and off.to_dict()["mtp"] is False
    assert on.component("mtp_weights").gpu > 0 and on.component("mtp_kv").gpu > 0
    # the trunk is the same either way; the head adds its block, cache, graph and outputs
    assert on.component("target_weights") == off.component("target_weights")
    assert on.component("target_kv") == off.component("target_kv")
    assert on.total_gpu > off.total_gpu
    # its weights are fixed, its cache grows with the requests
    from local_eagle.vram.parallel import parallel_bytes

    one = parallel_bytes(shape, None, MemoryConfig(n_ctx=4096, n_gpu_layers=-1, mtp=True), budget)
    four = parallel_bytes(shape, None, MemoryConfig(n_ctx=4096, n_gpu_layers=-1, mtp=True).with_parallel(4), budget)
    assert one[1] == four[1] == budget.free - on.component("target_weights").gpu - on.component("mtp_weights").gpu
    assert four[0] > one[0]


def test_mtp_is_ignored_where_there_is_no_head_or_a_drafter(models: dict[str, Path]) -> None:
    shape = vram.read_shape(models["no-head"])
    assert shape.n_nextn == 0
    budget = vram.GPUBudget("test", 8 * GiB, 8 * GiB, "manual", 0)
    s = MemoryConfig(n_ctx=2048, n_gpu_layers=-1)
    assert (
        vram.make_plan(shape, None, replace(s, mtp=True), budget).components
        == vram.make_plan(shape, None, s, budget).components
    )
    from local_eagle.vram.plan import prices_mtp

    head = vram.read_shape(models["tiny"])
    assert prices_mtp(head, None, replace(s, mtp=True))
    assert not prices_mtp(head, shape, replace(s, mtp=True))  # any drafter named drafts instead


def test_mtp_refusal_mirrors_the_runtime() -> None:
    from local_eagle.runtime.mtp import MTP_ARCHS
    from local_eagle.vram.shapes import MTP_ARCHS as PLANNED

    assert PLANNED == MTP_ARCHS


def fit(*args: str):
    return runner.invoke(app, ["fit", *args])


def test_fit_prices_and_measures_the_head(models: dict[str, Path]) -> None:
    r = fit("-m", str(models["cycle"]), "--ctx", "4096", "--vram-gb", "8", "--measure", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["plan"]["mtp"] is True and data["plan"]["settings"]["mtp"] is True
    comps = data["plan"]["components"]
    for key in ("mtp_weights", "mtp_kv", "mtp_compute"):
        assert comps[key]["gpu"] > 0, key
    rows = {x["component"]: x for x in data["measure"]["rows"]}
    assert set(MTP_ROWS) <= set(rows)
    for label in MTP_ROWS:
        assert within_bars(label, rows[label]["predicted"], rows[label]["measured"]), rows[label]
    txt = fit("-m", str(models["cycle"]), "--ctx", "4096", "--vram-gb", "8")
    assert txt.exit_code == 0, txt.output
    assert "MTP head weights" in txt.output and "MTP KV cache" in txt.output and "own MTP head" in txt.output


def test_fit_no_mtp_and_refused_heads_price_none(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_eagle.testing.tiny_mtp import write_tiny_qwen35_mtp

    r = fit("-m", str(models["tiny"]), "--vram-gb", "8", "--no-mtp", "--measure", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["plan"]["mtp"] is False
    assert not any(k.startswith("mtp_") for k in data["plan"]["components"])
    assert not any(x["component"].startswith("MTP") for x in data["measure"]["rows"])
    assert any("--no-mtp" in n for n in data["plan"]["notes"])
    # a hybrid family whose snapshot rollback is not checked: its head will not draft (a qwen35 relabelled; every
    # such family with an MTP graph is checked now, so one is taken off the list)
    from local_eagle.vram import shapes

    monkeypatch.setattr(shapes, "CHECKED_ROLLBACK_ARCHS", shapes.CHECKED_ROLLBACK_ARCHS - {"deepseek4"})
    hybrid = write_tiny_qwen35_mtp(tmp_path / "qwen35.gguf")
    shape = replace(vram.read_shape(hybrid), arch="deepseek4")
    from local_eagle.cli.fit import _mtp_settings

    s, note = _mtp_settings(shape, None, MemoryConfig(n_ctx=2048), True)
    assert not s.mtp and note is not None and "will not draft" in note and "not checked" in note
    r = fit("-m", str(hybrid), "--vram-gb", "8", "--json")  # qwen35 itself drafts (tests/vram/test_mtp_hybrid_fit.py)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["plan"]["mtp"] is True
    r = fit("-m", str(models["no-head"]), "--vram-gb", "8", "--json")
    data = json.loads(r.output)
    assert data["plan"]["mtp"] is False and not any("MTP" in n for n in data["plan"]["notes"])

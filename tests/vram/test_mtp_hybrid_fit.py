"""The planner on a hybrid (qwen35) target drafting with its own MTP head: attention KV, recurrent state and the head.

Held against llama.cpp's dry-run load of the tiny generated ``qwen35`` targets (``testing.tiny_mtp``): attention KV
on the attention layers only, the gated-delta-net layers' r and s state per sequence times 1 + ``n_rs_seq`` (the
snapshots the engine opens the target with when the head drafts), and the head's weights, f16 KV and gated-attention
NextN graph, each equal to llama.cpp's buffers (the graph within 1 %).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from local_eagle import vram
from local_eagle.cli.app import app
from local_eagle.testing.tiny_mtp import TinyQwen35Spec, write_cycle_qwen35_mtp, write_tiny_qwen35_mtp
from local_eagle.units import MiB
from local_eagle.vram import GiB, MemoryConfig
from local_eagle.vram.measure import measure
from local_eagle.vram.report import measure_rows, predict_for_backend
from local_eagle.vram.shapes import _recurrent_layers, mtp_refusal

runner = CliRunner()

# head size 32, so that a q8_0 target cache is allowed
WIDE = TinyQwen35Spec(n_embd=128, n_head=4, n_head_kv=2, n_ff=256)
EXACT = ("target weights", "target KV cache", "target recurrent state", "MTP head weights", "MTP KV cache")
# (ctx, ubatch, flash attention, target KV type, draft bound, head drafts)
MATRIX = [
    (512, 512, True, "f16", 8, True),
    (300, 512, False, "f16", 1, True),
    (4096, 32, True, "f16", 3, True),
    (2048, 64, True, "q8_0", 16, True),
    (4096, 512, False, "f16", 8, False),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mtp-hybrid-fit")
    return {
        "tiny": write_tiny_qwen35_mtp(d / "tiny.gguf"),
        "cycle": write_cycle_qwen35_mtp(d / "cycle.gguf"),
        "wide": write_tiny_qwen35_mtp(d / "wide.gguf", WIDE),
    }


def test_hybrid_layer_pattern_as_llama_cpp(models: dict[str, Path]) -> None:
    """qwen35's is_recr: every trunk layer but each full_attention_interval-th; the NextN block is attention."""
    shape = vram.read_shape(models["tiny"])
    assert shape.recurrent == [True, False, True, False, False]
    kv = vram.ctx_dims(512, 1, 512, 512, False)
    assert [kl.il for kl in vram.kv_layers(shape, kv, "f16", "f16", True, True)] == [1, 3]
    assert [kl.il for kl in vram.kv_layers(shape, kv, "f16", "f16", True, True, mtp=True)] == [4]

    def key(values: dict[str, Any]) -> Any:
        return lambda k, default=None: values.get(k, default)

    p = shape.path
    assert _recurrent_layers("qwen35", key({}), [2] * 9, 9, 1, p) == [True] * 3 + [False] + [True] * 3 + [False] * 2
    assert _recurrent_layers("minimax-01", key({}), [2] * 9, 9, 0, p) == [True] * 7 + [False, True]
    listed = key({"attention.recurrent_layers": [1, 0, 0, 1]})
    assert _recurrent_layers("qwen35", listed, [2] * 4, 4, 0, p) == [True, False, False, True]
    assert _recurrent_layers("nemotron_h", key({}), [0, 2, 0], 3, 0, p) == [True, False, True]


@pytest.mark.parametrize("name", ["tiny", "cycle", "wide"])
def test_hybrid_components_match_llama_cpp(models: dict[str, Path], name: str) -> None:
    """Attention KV, recurrent state (with the snapshots where the head drafts), and the head, against llama.cpp."""
    shape = vram.read_shape(models[name])
    assert mtp_refusal(shape) is None
    for ctx, ub, fa, kv, bound, head in MATRIX:
        if kv != "f16" and shape.head_k[1] % 32:
            continue  # llama.cpp refuses a q8_0 cache over heads of 16
        s = MemoryConfig(
            n_ctx=ctx, n_ubatch=ub, flash_attn=fa, type_k=kv, type_v=kv if fa else "f16", n_gpu_layers=0, mtp=head,
            draft_max=bound,
        )  # fmt: skip
        m = measure(models[name], s)
        case = (name, ctx, ub, fa, kv, bound, head)
        assert m.n_rs_seq == vram.rs_snapshots(shape, s) == (bound if head else 0), case
        assert (m.mtp is not None) == head, case
        rows = {r.label: r for r in measure_rows(predict_for_backend(shape, None, s, gpu_build=False), m)}
        for label in EXACT:
            if label in rows or head:
                assert rows[label].predicted == rows[label].measured > 0, (case, label, rows[label])
        assert abs(rows["target compute"].error) <= 0.10 or rows["target compute"].measured < 16 * MiB, case
        if head:
            assert abs(rows["MTP compute"].error) <= 0.01, (case, rows["MTP compute"])
        # the snapshots are whole copies of the state: 1 + n_rs_seq of what one sequence holds
        one = vram.recurrent_state(shape, replace(s, mtp=False), 0).total
        assert rows["target recurrent state"].measured == one * (1 + m.n_rs_seq), case


def test_plan_prices_state_and_snapshots(models: dict[str, Path]) -> None:
    shape = vram.read_shape(models["tiny"])
    budget = vram.GPUBudget("test", 8 * GiB, 8 * GiB, "manual", 0)
    on = vram.make_plan(shape, None, MemoryConfig(n_ctx=4096, n_gpu_layers=-1, mtp=True, draft_max=5), budget)
    off = vram.make_plan(shape, None, MemoryConfig(n_ctx=4096, n_gpu_layers=-1, draft_max=5), budget)
    assert {"target_state", "mtp_weights", "mtp_kv", "mtp_compute"} <= {c.key for c in on.components}
    assert "target_state" in {c.key for c in off.components}
    assert on.component("target_state").gpu == 6 * off.component("target_state").gpu > 0
    assert on.component("target_kv") == off.component("target_kv")
    assert any("n_rs_seq=5" in n for n in on.notes) and not any("n_rs_seq" in n for n in off.notes)
    assert not any("estimated from glm4moe" in n for n in on.notes)  # its gated NextN graph is modelled


@dataclass
class _Params:
    load_mtp: bool = True


@dataclass
class _Model:
    """What ``runtime.mtp.mtp_refusal`` / ``rollback_refusal`` read of a loaded model."""

    path: Path
    family: str
    n_layer_nextn: int
    hybrid: bool
    _params: _Params = field(default_factory=_Params)

    def arch(self) -> str:
        return self.family

    def branching_refusal(self) -> str | None:
        return "hybrid" if self.hybrid else None


ARCHS = ["glm4moe", "qwen35", "qwen35moe", "qwen3next", "nemotron_h_moe", "bailingmoe3", "deepseek4", "step35", "llama"]


def test_mtp_refusal_mirrors_the_runtime(models: dict[str, Path]) -> None:
    """The planner refuses exactly the heads the engine refuses, with the same reason, and prices the rest."""
    from local_eagle.runtime import mtp as runtime
    from local_eagle.vram import shapes

    assert shapes.MTP_ARCHS == runtime.MTP_ARCHS
    assert shapes.RS_ROLLBACK_ARCHS == runtime.RS_ROLLBACK_ARCHS
    assert shapes.CHECKED_ROLLBACK_ARCHS == runtime.CHECKED_ROLLBACK_ARCHS
    hybrid = vram.read_shape(models["tiny"])
    plain = replace(hybrid, recurrent=[False] * hybrid.n_layer, ssm_r=0, ssm_s=0)
    for arch in ARCHS:
        for base, is_hybrid in ((hybrid, True), (plain, False)):
            for n_nextn in (0, 1, 2):
                for rollback in (0, 1, 8):
                    shape = replace(base, arch=arch, n_nextn=n_nextn)
                    model = _Model(shape.path, arch, n_nextn, is_hybrid)
                    want = runtime.mtp_refusal(model) or runtime.rollback_refusal(model, rollback)  # type: ignore[arg-type]
                    assert shapes.mtp_refusal(shape, rollback) == want, (arch, is_hybrid, n_nextn, rollback)
    assert shapes.mtp_refusal(hybrid, 8) is None


def fit(*args: str):
    return runner.invoke(app, ["fit", *args])


def test_fit_prices_and_measures_a_hybrid_head(models: dict[str, Path]) -> None:
    r = fit("-m", str(models["cycle"]), "--ctx", "4096", "--vram-gb", "8", "--draft-max", "4", "--measure", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["plan"]["mtp"] is True
    comps = data["plan"]["components"]
    for key in ("target_kv", "target_state", "mtp_weights", "mtp_kv", "mtp_compute"):
        assert comps[key]["gpu"] > 0, key
    rows = {x["component"]: x for x in data["measure"]["rows"]}
    assert {"target recurrent state", "MTP head weights", "MTP KV cache", "MTP compute"} <= set(rows)
    for label in EXACT:
        assert rows[label]["predicted"] == rows[label]["measured"], rows[label]
    txt = fit("-m", str(models["cycle"]), "--ctx", "4096", "--vram-gb", "8", "--draft-max", "4", "--measure")
    assert txt.exit_code == 0, txt.output
    assert "target recurrent state" in txt.output and "4 recurrent-state snapshots" in txt.output
    off = json.loads(fit("-m", str(models["cycle"]), "--vram-gb", "8", "--no-mtp", "--measure", "--json").output)
    assert off["plan"]["mtp"] is False and "target_state" in off["plan"]["components"]
    rows = {x["component"]: x for x in off["measure"]["rows"]}
    assert rows["target recurrent state"]["predicted"] == rows["target recurrent state"]["measured"] > 0

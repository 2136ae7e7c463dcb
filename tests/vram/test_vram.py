"""The VRAM planner against llama.cpp's own memory breakdown, and the ``fit`` command.

llama.cpp is asked through a dry-run load (metadata only, allocations simulated, exactly what
its ``--fit`` does) of header-only GGUFs with the real layout of each architecture, so the
matrix covers large contexts and vocabularies in milliseconds. One test repeats a case with a
real allocation to show the dry run reports what a real load allocates.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from local_eagle import vram
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.gguf import pad, read_header
from local_eagle.testing.vram_fixtures import (
    LLAMA31_8B,
    LLAMA31_8B_EAGLE3,
    DrafterShape,
    Q,
    ShapeSpec,
    write_drafter_gguf,
    write_shape_gguf,
)
from local_eagle.vram import CPU, CUDA, GiB, MemoryConfig, MiB, gpus
from local_eagle.vram.measure import measure
from local_eagle.vram.report import measure_rows

runner = CliRunner()

ARCHS = {
    "llama-gqa": ShapeSpec(arch="llama", n_layer=4, n_embd=512, n_head=8, n_head_kv=2, n_ff=1024, n_vocab=4096),
    "qwen3-qknorm": ShapeSpec(
        arch="qwen3", n_layer=4, n_embd=512, n_head=8, n_head_kv=2, head_dim=128, n_ff=1024, n_vocab=4096
    ),
    "qwen2-bias-q8": ShapeSpec(
        arch="qwen2", n_layer=3, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=3000, wtype=Q.Q8_0
    ),
    "gemma3-swa": ShapeSpec(
        arch="gemma3",
        n_layer=7,
        n_embd=512,
        n_head=4,
        n_head_kv=2,
        head_dim=128,
        n_ff=1024,
        n_vocab=4096,
        tied=True,
        n_swa=512,
    ),
    "gemma3-global": ShapeSpec(
        arch="gemma3", n_layer=3, n_embd=512, n_head=4, n_head_kv=2, head_dim=128, n_ff=1024, n_vocab=2048, tied=True
    ),
}
DRAFTERS = {
    # borrows the target's token embeddings, own head over a reduced vocabulary scattered by d2t
    "d2t": DrafterShape(
        target_hidden=512, n_vocab=4096, n_embd=512, n_head=8, n_head_kv=2, n_ff=1024, draft_vocab=1024
    ),
    # own embeddings and full-vocabulary head, a hidden size different from the target's
    "own": DrafterShape(
        target_hidden=512, n_vocab=4096, n_embd=256, n_head=4, n_head_kv=2, n_ff=768, own_embeddings=True
    ),
}

# (ctx, ubatch, flash attention, KV type, parallel sequences, full-size SWA cache)
MATRIX = [
    (512, 512, True, "f16", 1, True),
    (512, 32, False, "f16", 1, True),
    (2048, 128, True, "q8_0", 1, False),
    (4096, 512, False, "q8_0", 1, True),
    (4096, 64, True, "q4_0", 2, False),
    (8192, 512, True, "f16", 1, False),
    (16384, 256, False, "f16", 1, False),
    (32768, 512, True, "q8_0", 1, False),
    (32768, 32, False, "f16", 1, True),
    (5000, 100, True, "f16", 3, True),
    (300, 512, False, "q8_0", 1, False),
]


@pytest.fixture(scope="session")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("vram")
    out = {k: write_shape_gguf(d / f"{k}.gguf", s) for k, s in ARCHS.items()}
    out.update({f"drafter-{k}": write_drafter_gguf(d / f"drafter-{k}.gguf", s) for k, s in DRAFTERS.items()})
    return out


@pytest.fixture(scope="session")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("llama8b")
    return write_shape_gguf(d / "t.gguf", LLAMA31_8B), write_drafter_gguf(d / "d.gguf", LLAMA31_8B_EAGLE3)


def settings_for(ctx: int, ub: int, fa: bool, kv: str, n_seq: int, swa_full: bool) -> MemoryConfig:
    return MemoryConfig(
        n_ctx=ctx,
        n_ubatch=ub,
        flash_attn=fa,
        type_k=kv,
        type_v=kv if fa else "f16",
        n_seq=n_seq,
        swa_full=swa_full,
        n_gpu_layers=0,
        draft_ubatch=ub,
        draft_type_k=kv,
        draft_type_v=kv if fa else "f16",
    )


def predicted_cpu(target: vram.ModelShape, draft: vram.ModelShape | None, s: MemoryConfig) -> dict[str, int]:
    """The planner's numbers for llama.cpp's CPU backend (everything in host buffers)."""
    from local_eagle.vram.report import predict_for_backend

    return predict_for_backend(target, draft, s, gpu_build=False)


def within_bars(component: str, pred: int, real: int) -> bool:
    if "compute" in component:
        return abs(pred - real) <= max(0.10 * real, 16 * MiB)
    return abs(pred - real) <= 0.01 * real


def _pairs() -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [(a, None) for a in ARCHS]
    out += [("llama-gqa", "drafter-d2t"), ("llama-gqa", "drafter-own"), ("gemma3-swa", "drafter-own")]
    return out


@pytest.mark.parametrize(("arch", "drafter"), _pairs())
def test_matches_llama_cpp_over_matrix(shapes: dict[str, Path], arch: str, drafter: str | None) -> None:
    """Weights, KV and compute per component against llama.cpp's memory breakdown."""
    target = vram.read_shape(shapes[arch])
    draft = vram.read_shape(shapes[drafter], "drafter GGUF") if drafter else None
    if draft is not None:
        vram.check_pair(target, draft)
    worst: dict[str, float] = {}
    for case in MATRIX:
        s = settings_for(*case)
        m = measure(shapes[arch], s, shapes[drafter] if drafter else None)
        pred = predicted_cpu(target, draft, s)
        real = {
            "target weights": m.target.total("model"),
            "target KV cache": m.target.total("context"),
            "target compute": m.target.total("compute"),
        }
        if m.draft is not None:
            real["draft weights"] = m.draft.total("model")
            real["draft KV cache"] = m.draft.total("context")
            real["draft compute"] = m.draft.total("compute")
        for comp, r in real.items():
            assert r > 0, (case, comp)
            assert within_bars(comp, pred[comp], r), (
                f"{arch}+{drafter} {case} {comp}: predicted {pred[comp]}, llama.cpp {r}"
            )
            worst[comp] = max(worst.get(comp, 0.0), abs(pred[comp] - r) / r)
    # beyond the bars: replaying llama.cpp's allocator is meant to be byte-exact on CPU
    assert all(e == 0.0 for e in worst.values()), worst


def test_dry_run_equals_real_allocation(shapes: dict[str, Path]) -> None:
    """The dry run (no_alloc) reports what a real load allocates, drafter included."""
    s = settings_for(1024, 128, True, "q8_0", 1, True)
    dry = measure(shapes["llama-gqa"], s, shapes["drafter-d2t"], dry_run=True)
    real = measure(shapes["llama-gqa"], s, shapes["drafter-d2t"], dry_run=False)
    assert dry.target == real.target
    assert dry.draft == real.draft


def test_drafter_encoder_grows_compute_buffer(tmp_path: Path) -> None:
    """The drafter's first encode grows its compute buffer to the encoder graph's size, as predicted."""
    from local_eagle.llamacpp.bindings import Context, ContextOptions, Model
    from local_eagle.vram.measure import memory_breakdown

    tp = write_shape_gguf(tmp_path / "t.gguf", ShapeSpec(n_layer=1, n_embd=1024, n_head=8, n_head_kv=2, n_ff=256))
    dp = write_drafter_gguf(
        tmp_path / "d.gguf",
        DrafterShape(target_hidden=1024, n_embd=128, n_head=2, n_head_kv=1, n_ff=256, own_embeddings=True),
    )
    draft = vram.read_shape(dp, "drafter GGUF")
    s = MemoryConfig(n_ctx=512, n_ubatch=256, draft_ubatch=256, draft_batch=256)
    tm = Model(tp)
    tc = Context(tm, ContextOptions(n_ctx=512, n_batch=256, n_ubatch=256, flash_attn=True, n_threads=2))
    dm = Model(dp, what="drafter")
    dc = Context(dm, ContextOptions(n_ctx=512, n_batch=256, n_ubatch=256, flash_attn=True, n_threads=2), ctx_other=tc)
    try:
        before = memory_breakdown(dc.ptr).total("compute")
        assert before == vram.draft_compute(draft, s, CPU, encoder=False)
        dc.set_embeddings_nextn(True, True)
        dc.encode_rows(np.zeros((256, 3 * 1024), np.float32), np.arange(256))
        after = memory_breakdown(dc.ptr).total("compute")
        assert after > before
        assert after == vram.draft_compute(draft, s, CPU, encoder=True)
    finally:
        dc.close()
        dm.close()
        tc.close()
        tm.close()


# --- formulas that llama.cpp on this machine cannot show directly ---------------------------------


def test_context_padding_and_streams() -> None:
    d = vram.ctx_dims(1000, 1, 2048, 512, False)
    assert (d.n_ctx, d.n_ctx_seq, d.n_stream) == (1024, 1024, 1)
    d = vram.ctx_dims(4096, 3, 2048, 512, False)
    assert (d.n_ctx_seq, d.n_ctx, d.n_stream) == (1536, 4608, 3)
    d = vram.ctx_dims(4096, 3, 2048, 512, True)
    assert (d.n_ctx_seq, d.n_stream) == (4096, 1)
    d = vram.ctx_dims(300, 1, 2048, 512, False)
    assert (d.n_ctx, d.n_batch, d.n_ubatch) == (512, 300, 300)


def test_placement_from_the_back(shapes: dict[str, Path]) -> None:
    """token_embd stays on the host; -ngl counts the output layer; layers offload from the back."""
    t = vram.read_shape(shapes["llama-gqa"])
    n = vram.n_offloadable(t)
    assert n == t.n_layer + 1
    embd = t.tensor("token_embd.weight")
    assert embd is not None
    full = vram.weights(t, n, CUDA, CPU)
    assert full.host == CPU.tensor_bytes(embd.nbytes, embd.ne[0], embd.type)
    none = vram.weights(t, 0, CUDA, CPU)
    assert none.gpu == 0
    out_only = vram.weights(t, 1, CUDA, CPU)
    out_names = [x for x in t.tensors if x.layer is None and x.name != "token_embd.weight"]
    assert out_only.gpu == sum(CUDA.tensor_bytes(x.nbytes, x.ne[0], x.type) for x in out_names)
    assert vram.layer_on_gpu(t, t.n_layer - 1, 2) and not vram.layer_on_gpu(t, t.n_layer - 2, 2)
    s = MemoryConfig(n_ctx=4096)
    d = vram.ctx_dims(4096, 1, 2048, 512, False)
    per_layer = vram.kv_cache(t, d, s, n, gpu=CPU).gpu // t.n_layer
    assert vram.kv_cache(t, d, s, 3, gpu=CPU).gpu == 2 * per_layer  # output + 2 layers


def test_tied_output_copied_only_to_a_different_device(shapes: dict[str, Path]) -> None:
    g = vram.read_shape(shapes["gemma3-swa"])
    assert g.tied_output
    embd = g.tensor("token_embd.weight")
    assert embd is not None
    copy = CUDA.tensor_bytes(embd.nbytes, embd.ne[0], embd.type)
    gpu_layers = sum(CUDA.tensor_bytes(t.nbytes, t.ne[0], t.type) for t in g.tensors if t.name != "token_embd.weight")
    assert vram.weights(g, vram.n_offloadable(g), CUDA, CPU).gpu == gpu_layers + copy
    assert vram.weights(g, 0, CUDA, CPU).gpu == 0


def test_cuda_rounding() -> None:
    # a Q8_0 matrix with 4000-wide rows: CUDA pads the last row to 4096 (MATRIX_ROW_PADDING), then aligns to 128
    nbytes = vram.row_bytes(Q.Q8_0, 4000) * 10
    assert CUDA.tensor_bytes(nbytes, 4000, Q.Q8_0) == pad(nbytes + vram.row_bytes(Q.Q8_0, 96), 128)
    assert CPU.tensor_bytes(nbytes, 4000, Q.Q8_0) == pad(nbytes, 32)
    assert CUDA.tensor_bytes(1100, 550, Q.F16) == 1152 and CPU.tensor_bytes(1100, 550, Q.F16) == 1120


def _synthetic(**kw: object) -> vram.ModelShape:
    base: dict[str, object] = dict(
        path=Path("x.gguf"), arch="x", name="x", n_layer=4, n_embd=256, n_vocab=1000, n_ctx_train=4096,
        n_head=[4] * 4, n_head_kv=[2] * 4, n_ff=[512] * 4, head_k=[64] * 4, head_v=[64] * 4, is_swa=[False] * 4,
        n_swa=0, mla=False, recurrent=[False] * 4, ssm_r=0, ssm_s=0, tensors=[], known=False,
    )  # fmt: skip
    base.update(kw)
    return vram.ModelShape(**base)  # type: ignore[arg-type]


def test_mla_stores_only_compressed_k() -> None:
    d = vram.ctx_dims(4096, 1, 2048, 512, False)
    mla = _synthetic(mla=True, n_head_kv=[1] * 4, head_k=[576] * 4, head_v=[512] * 4)
    layers = vram.kv_layers(mla, d, "f16", "f16", True, True)
    assert all(kl.v_bytes == 0 and kl.k_bytes == 576 * 2 * 4096 for kl in layers)


def test_swa_layers_use_a_window_sized_cache() -> None:
    s = _synthetic(is_swa=[True, True, True, False], n_swa=1024)
    d = vram.ctx_dims(32768, 1, 2048, 512, False)
    cells = [kl.cells for kl in vram.kv_layers(s, d, "f16", "f16", True, swa_full=False)]
    assert cells == [1536, 1536, 1536, 32768]  # pad(1024 + 512, 256)
    cells = [kl.cells for kl in vram.kv_layers(s, d, "f16", "f16", True, swa_full=True)]
    assert cells == [32768] * 4


def test_quantised_kv_in_whole_blocks() -> None:
    d = vram.ctx_dims(1024, 1, 2048, 512, False)
    s = _synthetic()
    kl = vram.kv_layers(s, d, "q8_0", "q4_0", True, True)[0]
    assert kl.k_bytes == 128 // 32 * 34 * 1024 and kl.v_bytes == 128 // 32 * 18 * 1024
    odd = _synthetic(head_k=[40] * 4, head_v=[40] * 4, n_head_kv=[1] * 4)
    with pytest.raises(vram.PlanError, match="not a multiple of the q8_0 block"):
        vram.kv_layers(odd, d, "q8_0", "f16", True, True)


def test_recurrent_state_counts_per_sequence() -> None:
    mamba = _synthetic(recurrent=[True] * 4, n_head_kv=[0] * 4, ssm_r=3 * 1024, ssm_s=16 * 512)
    s = MemoryConfig(n_ctx=4096, n_seq=2)
    d = vram.ctx_dims(4096, 2, 2048, 512, False)
    kv = vram.kv_cache(mamba, d, s, 5, gpu=CPU)
    assert kv.gpu == 4 * 2 * 4 * (3 * 1024 + 16 * 512)


def test_recurrent_state_against_llama_cpp(tmp_path: Path) -> None:
    """Mamba: weights and the per-sequence recurrent state exactly; its compute graph is only estimated."""
    from local_eagle.testing.vram_fixtures import write_mamba_gguf

    p = write_mamba_gguf(tmp_path / "mamba.gguf", n_layer=3, n_embd=512)
    shape = vram.read_shape(p)
    assert all(shape.recurrent) and any("Mamba-like" in n for n in shape.notes)
    for n_seq in (1, 3):
        s = MemoryConfig(n_ctx=4096, n_seq=n_seq, n_gpu_layers=0)
        m = measure(p, s)
        pred = predicted_cpu(shape, None, s)
        assert pred["target weights"] == m.target.total("model")
        # no attention KV: the context's memory is the state, which --measure tells apart
        assert pred["target KV cache"] == 0 and pred["target recurrent state"] == m.target.total("context") > 0
        # told apart with one more sequence in a unified cache; several streams of a non-unified one are not
        assert m.target_state == (m.target.total("context") if n_seq == 1 else None)
        rows = {r.label for r in measure_rows(pred, m)}
        assert ("target recurrent state" in rows) == (n_seq == 1)
        assert ("target KV cache + recurrent state" in rows) == (n_seq > 1)
        assert within_bars("compute", pred["target compute"], m.target.total("compute"))


def test_mla_cache_against_llama_cpp(tmp_path: Path) -> None:
    """DeepSeek-V2-style MLA: the cache holds the compressed latent + RoPE part only, as llama.cpp allocates."""
    from local_eagle.testing.vram_fixtures import write_mla_gguf

    p = write_mla_gguf(tmp_path / "mla.gguf")
    shape = vram.read_shape(p)
    assert shape.mla and not shape.known
    for fa, kv in ((True, "f16"), (False, "f16"), (True, "q8_0")):
        s = MemoryConfig(n_ctx=4096, n_gpu_layers=0, flash_attn=fa, type_k=kv, type_v=kv if fa else "f16")
        m = measure(p, s)
        pred = predicted_cpu(shape, None, s)
        assert pred["target weights"] == m.target.total("model")
        assert pred["target KV cache"] == m.target.total("context")
        assert within_bars("compute", pred["target compute"], m.target.total("compute"))


def test_quantised_v_needs_flash_attention() -> None:
    with pytest.raises(vram.PlanError, match="flash attention"):
        MemoryConfig(type_v="q8_0", flash_attn=False).validate()


# --- plans on published shapes ---------------------------------------------------------------------


def test_the_drafters_vram_tax(llama8b: tuple[Path, Path]) -> None:
    """Llama-3.1-8B Q4_K_M at 80K on a 16 GB card: fits alone, not with its EAGLE-3 drafter."""
    t, d = vram.read_shape(llama8b[0]), vram.read_shape(llama8b[1], "drafter GGUF")
    b = gpus.budget("rtx4080")
    s = MemoryConfig(n_ctx=81920, n_gpu_layers=-1)
    alone = vram.make_plan(t, None, s, b)
    pair = vram.make_plan(t, d, s, b)
    assert alone.fits and not pair.fits
    tax = sum(pair.component(k).gpu for k in ("draft_weights", "draft_kv", "draft_compute"))
    assert pair.total_gpu - alone.total_gpu == tax > 700 * MiB
    # the drafter's full-vocabulary logits make its compute buffer larger than the target's
    assert pair.component("draft_compute").gpu > pair.component("target_compute").gpu
    auto = vram.make_plan(t, d, replace(s, n_gpu_layers=None), b)
    assert auto.fits and 0 < auto.n_gpu_layers < vram.n_offloadable(t)
    over = vram.make_plan(t, d, replace(s, n_gpu_layers=auto.n_gpu_layers + 1), b)
    assert not over.fits


def test_suggest_prefers_context_then_offload_then_kv_then_drafter(llama8b: tuple[Path, Path]) -> None:
    t, d = vram.read_shape(llama8b[0]), vram.read_shape(llama8b[1], "drafter GGUF")
    req = MemoryConfig(n_ctx=131072)
    as_asked = vram.suggest(t, d, req, gpus.budget("rtx4090"))
    assert as_asked.plan is not None and as_asked.traded == []
    q8 = vram.suggest(t, d, req, gpus.budget("rtx4080"))
    assert q8.plan is not None and q8.plan.fits and q8.plan.full_offload
    assert (q8.plan.settings.n_ctx, q8.plan.settings.type_k) == (131072, "q8_0")
    assert q8.traded == ["KV cache f16/f16 -> q8_0/q8_0"]
    # a budget where f16 KV fits only with a smaller drafter ubatch: KV precision is kept, the drafter gives
    small_draft = vram.make_plan(
        t, d, replace(req, n_ctx=32768, draft_ubatch=64, n_gpu_layers=-1), gpus.budget("rtx4090")
    )
    b = gpus.budget(vram_gb=(small_draft.total_gpu + MiB) / GiB)
    kept = vram.suggest(t, d, replace(req, n_ctx=32768), b)
    assert kept.plan is not None and kept.plan.full_offload
    assert kept.plan.settings.type_k == "f16" and kept.plan.settings.draft_ubatch <= 64
    assert any(x.startswith("drafter ubatch 512 ->") for x in kept.traded)
    tight = vram.suggest(t, d, req, gpus.budget(vram_gb=6))
    assert tight.plan is not None and tight.plan.fits and not tight.plan.full_offload
    assert tight.plan.settings.n_ctx == 131072
    assert any(x.startswith("GPU layers") for x in tight.traded)
    assert vram.suggest(t, d, req, gpus.budget(vram_gb=0.5)).plan is None


# --- GPUs --------------------------------------------------------------------------------------------


def test_gpu_presets_and_manual_sizes() -> None:
    b = gpus.budget("rtx4090")
    assert b.total == 24564 * MiB and b.source == "preset"
    assert gpus.budget(vram_gb=16).free == 16 * GiB
    with pytest.raises(LocalEagleError, match="unknown GPU preset"):
        gpus.budget("gtx480")
    with pytest.raises(LocalEagleError, match="not both"):
        gpus.budget("rtx4090", 24)


def test_gpu_detection_parses_nvidia_smi_and_absence_is_clear() -> None:
    found = gpus._parse_smi("NVIDIA GeForce RTX 4090, 24564, 23000\nNVIDIA GeForce RTX 3090, 24576, 24000\n")
    assert found == gpus.DetectedGPU("NVIDIA GeForce RTX 4090", 24564 * MiB, 23000 * MiB, 2)
    assert gpus._parse_smi("") is None
    b = gpus.budget(detector=lambda: found)
    assert b.free == 23000 * MiB and b.source == "detected"
    with pytest.raises(LocalEagleError, match="no NVIDIA GPU found"):
        gpus.budget(detector=lambda: None)


# --- the command -------------------------------------------------------------------------------------


def fit(*args: str):
    return runner.invoke(app, ["fit", *args])


def test_fit_exit_status_and_json(llama8b: tuple[Path, Path]) -> None:
    t, d = (str(x) for x in llama8b)
    ok = fit("--model", t, "--draft", d, "--ctx", "8192", "--gpu", "rtx4090", "--json")
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    comps = data["plan"]["components"]
    for key in ("target_weights", "target_kv", "target_compute", "draft_weights", "draft_kv", "draft_compute"):
        assert comps[key]["gpu"] > 0
    assert data["plan"]["fits"] is True
    assert data["plan"]["free"] == data["plan"]["gpu"]["free"] - data["plan"]["total_gpu"]
    no = fit("--model", t, "--draft", d, "--ctx", "81920", "--gpu", "rtx4080", "--gpu-layers", "-1")
    assert no.exit_code == 1, no.output
    assert "does not fit" in no.output and "draft compute" in no.output
    sg = fit("--model", t, "--draft", d, "--ctx", "131072", "--gpu", "rtx4080", "--suggest", "--json")
    assert sg.exit_code == 0, sg.output
    s = json.loads(sg.output)["suggestion"]
    assert s["found"] and s["traded"]


def test_fit_measure_prints_side_by_side(shapes: dict[str, Path]) -> None:
    r = fit(
        "-m", str(shapes["gemma3-swa"]), "--ctx", "4096", "--vram-gb", "8", "--measure", "--json"
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["measure"]["rows"]
    assert {x["component"] for x in rows} == {"target weights", "target KV cache", "target compute"}
    assert all(x["predicted"] == x["measured"] for x in rows)
    txt = fit("-m", str(shapes["llama-gqa"]), "-d", str(shapes["drafter-d2t"]), "--vram-gb", "8", "--measure")
    assert txt.exit_code == 0, txt.output
    assert "prediction vs llama.cpp" in txt.output and "draft compute" in txt.output


def assert_bad(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "error:" in text and "Traceback" not in result.output
    for n in needles:
        assert n in text, text


def test_bad_inputs(tmp_path: Path, shapes: dict[str, Path]) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    assert_bad(fit("-m", str(junk), "--gpu", "rtx4090"), "junk.gguf", "not a GGUF file")

    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(shapes["llama-gqa"].read_bytes()[:5000])
    assert_bad(fit("-m", str(trunc), "--gpu", "rtx4090"), "trunc.gguf", "truncated")
    data_cut = tmp_path / "cut.gguf"
    with open(shapes["llama-gqa"], "rb") as f:
        data_cut.write_bytes(f.read(shapes["llama-gqa"].stat().st_size - 1000))
    assert_bad(fit("-m", str(data_cut), "--gpu", "rtx4090"), "cut.gguf", "truncated", "tensor data ends")

    assert_bad(fit("-m", str(tmp_path / "missing.gguf"), "--gpu", "rtx4090"), "missing.gguf", "not found")
    t = str(shapes["llama-gqa"])
    assert_bad(fit("-m", t, "--gpu", "gtx480"), "unknown GPU preset")
    assert_bad(fit("-m", t, "--gpu", "rtx4090", "--kv-type", "q3_k"), "--kv-type", "q3_k")
    assert_bad(fit("-m", t, "--gpu", "rtx4090", "--kv-type", "q8_0", "--no-flash-attn"), "flash attention")
    assert_bad(fit("-m", t, "--gpu", "rtx4090", "--gpu-layers", "many"), "--gpu-layers")
    assert_bad(fit("-m", str(shapes["drafter-d2t"]), "--gpu", "rtx4090"), "drafter")


def test_drafter_for_another_target(tmp_path: Path, shapes: dict[str, Path]) -> None:
    t = str(shapes["llama-gqa"])
    wrong_h = write_drafter_gguf(tmp_path / "h.gguf", replace(DRAFTERS["own"], target_hidden=1024))
    assert_bad(fit("-m", t, "-d", str(wrong_h), "--gpu", "rtx4090"), "target hidden size 1024", "has 512")
    wrong_v = write_drafter_gguf(tmp_path / "v.gguf", replace(DRAFTERS["own"], n_vocab=5000))
    assert_bad(fit("-m", t, "-d", str(wrong_v), "--gpu", "rtx4090"), "vocabulary has 5000 tokens", "has 4096")
    borrow = write_drafter_gguf(tmp_path / "b.gguf", replace(DRAFTERS["d2t"], n_embd=256, n_head=4))
    assert_bad(fit("-m", t, "-d", str(borrow), "--gpu", "rtx4090"), "borrows the target's", "256")
    assert_bad(fit("-m", t, "-d", t, "--gpu", "rtx4090"), "expected an eagle3 drafter")


def test_unknown_architecture_is_estimated_and_said(tmp_path: Path) -> None:
    p = write_shape_gguf(tmp_path / "u.gguf", ShapeSpec(arch="novel", n_layer=2, n_embd=256, n_ff=512))
    r = fit("-m", str(p), "--gpu", "rtx4090", "--json")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.output)["plan"]["notes"]
    assert any("'novel' is not modelled exactly" in n for n in notes)
    txt = fit("-m", str(p), "--gpu", "rtx4090")
    assert "not modelled exactly" in " ".join(txt.output.split())
    assert_bad(fit("-m", str(p), "--gpu", "rtx4090", "--measure"), "unknown model architecture: 'novel'")


def test_no_gpu_and_no_preset_is_bad_input(monkeypatch: pytest.MonkeyPatch, shapes: dict[str, Path]) -> None:
    monkeypatch.setattr(gpus, "detect", lambda: None)
    assert_bad(fit("-m", str(shapes["llama-gqa"])), "no NVIDIA GPU found", "--gpu")


def test_header_reader_skips_big_vocabularies(llama8b: tuple[Path, Path]) -> None:
    h = read_header(llama8b[0])
    assert len(h.kv["tokenizer.ggml.tokens"]) == 128256
    assert h.kv["general.architecture"] == "llama"
    assert len(h.tensors) == 3 + 9 * 32
    raw = llama8b[0].read_bytes()[:24]
    assert struct.unpack_from("<I", raw, 4)[0] == h.version


def test_fit_table_is_current(tmp_path: Path) -> None:
    """The RTX 4090 table in docs/fit.md is what the planner computes today."""
    from local_eagle.testing.vram_fixtures import fit_table

    readme = (Path(__file__).parents[2] / "docs" / "fit.md").read_text()
    start, end = "<!-- vram-table:begin -->\n", "<!-- vram-table:end -->"
    assert start in readme and end in readme
    documented = readme.split(start, 1)[1].split(end, 1)[0]
    assert documented == fit_table(tmp_path)


def test_split_gguf_reads_every_file(tmp_path: Path) -> None:
    """A model split over several files (gguf-split naming) is planned from all of them."""
    from gguf import GGUFWriter

    from local_eagle.testing.tiny import TinyTargetSpec, write_tiny_target

    whole = write_tiny_target(tmp_path / "whole.gguf", TinyTargetSpec(n_layer=2))
    src = read_header(whole)
    from local_eagle.gguf import copy_fields, open_gguf, tensor_f32

    reader = open_gguf(whole, keep=lambda k: True)
    w = GGUFWriter(tmp_path / "split.gguf", "llama", split_max_tensors=8)
    for key, val, vtype, sub in copy_fields(reader, ""):
        if not key.startswith("general.architecture") and not key.startswith("GGUF."):
            w.add_key_value(key, val, vtype, sub)
    for t in reader.tensors:
        w.add_tensor(t.name, tensor_f32(reader, t.name))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    parts = sorted(tmp_path.glob("split-*-of-*.gguf"))
    assert len(parts) == 3
    shape = vram.read_shape(parts[0])
    assert {t.name for t in shape.tensors} == {t.name for t in src.tensors}
    assert_bad(fit("-m", str(parts[1]), "--gpu", "rtx4090"), "split 2 of 3", "pass the first file")
    parts[2].unlink()
    assert_bad(fit("-m", str(parts[0]), "--gpu", "rtx4090"), "split 3 of 3", "not found")


def test_suggest_windows_the_swa_cache_before_quantising(shapes: dict[str, Path]) -> None:
    g = vram.read_shape(shapes["gemma3-swa"])
    req = MemoryConfig(n_ctx=32768, n_gpu_layers=-1)
    windowed = vram.make_plan(g, None, replace(req, swa_full=False), gpus.budget("rtx4090"))
    b = gpus.budget(vram_gb=(windowed.total_gpu + MiB) / GiB)
    assert not vram.make_plan(g, None, req, b).fits
    sg = vram.suggest(g, None, replace(req, n_gpu_layers=None), b)
    assert sg.plan is not None and sg.plan.full_offload
    assert (sg.plan.settings.swa_full, sg.plan.settings.type_k) == (False, "f16")
    assert any("--no-swa-full" in x for x in sg.traded)

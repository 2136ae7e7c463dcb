"""``--parallel N``: the planner prices N requests as the engine opens them, and refuses what does not fit.

The convention (the engine's): both contexts at N x ``--ctx`` cells, N sequences in one unified cache,
the logits buffer grown to a verify of ``draft_max`` + 1 rows per request. Checked against llama.cpp's
own dry run on small header-only GGUFs, then on Llama-3.1-8B shapes for the numbers and the refusal.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle import vram
from local_eagle.cli.app import app
from local_eagle.gguf import pad
from local_eagle.testing.vram_fixtures import (
    LLAMA31_8B,
    LLAMA31_8B_EAGLE3,
    DrafterShape,
    ShapeSpec,
    write_drafter_gguf,
    write_shape_gguf,
)
from local_eagle.vram import CPU, GiB, MemoryConfig, MiB, gpus
from local_eagle.vram.measure import measure
from local_eagle.vram.report import predict_for_backend

runner = CliRunner()

SMALL = ShapeSpec(arch="llama", n_layer=4, n_embd=512, n_head=8, n_head_kv=2, n_ff=1024, n_vocab=4096)
SMALL_SWA = ShapeSpec(
    arch="gemma3", n_layer=7, n_embd=512, n_head=4, n_head_kv=2, head_dim=128, n_ff=1024, n_vocab=4096, tied=True,
    n_swa=512,
)  # fmt: skip
SMALL_DRAFTER = DrafterShape(
    target_hidden=512, n_vocab=4096, n_embd=256, n_head=4, n_head_kv=2, n_ff=768, own_embeddings=True
)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("parallel")
    return {
        "llama": write_shape_gguf(d / "t.gguf", SMALL),
        "gemma3": write_shape_gguf(d / "g.gguf", SMALL_SWA),
        "drafter": write_drafter_gguf(d / "d.gguf", SMALL_DRAFTER),
    }


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> tuple[vram.ModelShape, vram.ModelShape, Path, Path]:
    d = tmp_path_factory.mktemp("parallel8b")
    t, dr = write_shape_gguf(d / "t.gguf", LLAMA31_8B), write_drafter_gguf(d / "d.gguf", LLAMA31_8B_EAGLE3)
    return vram.read_shape(t), vram.read_shape(dr, "drafter GGUF"), t, dr


def test_settings_open_n_sequences_at_n_times_the_context() -> None:
    s = MemoryConfig(n_ctx=4096).with_parallel(4)
    assert (s.n_ctx, s.parallel, s.cells, s.n_seq, s.drafter_seqs, s.kv_unified) == (4096, 4, 16384, 4, 4, True)
    s.validate()
    one = s.with_parallel(1)
    assert (one.cells, one.n_seq, one.kv_unified) == (4096, 1, False) and one == MemoryConfig(n_ctx=4096)
    # tree sequences give way: trees are off with parallel requests
    trees = MemoryConfig(n_seq=63, kv_unified=True, draft_n_seq=17).with_parallel(2)
    assert (trees.n_seq, trees.drafter_seqs) == (2, 2)
    with pytest.raises(vram.PlanError, match="--parallel must be at least 1"):
        MemoryConfig().with_parallel(0).validate()
    with pytest.raises(vram.PlanError, match="at most 256 sequences"):
        MemoryConfig().with_parallel(257).validate()
    with pytest.raises(vram.PlanError, match="with_parallel"):
        MemoryConfig(parallel=4).validate()  # four requests in one sequence is not what the engine opens


@pytest.mark.parametrize("target", ["llama", "gemma3"])
def test_parallel_matches_llama_cpp(small: dict[str, Path], target: str) -> None:
    """Both contexts at N x ctx, N sequences, one unified cache: every component equals llama.cpp's dry run."""
    t = vram.read_shape(small[target])
    d = vram.read_shape(small["drafter"], "drafter GGUF")
    for n, ctx, ub, fa, kv, swa_full in ((3, 1000, 128, True, "f16", True), (4, 2048, 512, False, "f16", False),
                                         (16, 512, 64, True, "q8_0", False)):  # fmt: skip
        s = MemoryConfig(
            n_ctx=ctx, n_ubatch=ub, draft_ubatch=ub, flash_attn=fa, type_k=kv, type_v=kv if fa else "f16",
            swa_full=swa_full, n_gpu_layers=0,
        ).with_parallel(n)  # fmt: skip
        m = measure(small[target], s, small["drafter"])
        assert m.n_ctx == pad(n * ctx, 256)
        pred = predict_for_backend(t, d, s, gpu_build=False)
        assert m.draft is not None
        real = {
            "target weights": m.target.total("model"),
            "target KV cache": m.target.total("context"),
            "target compute": m.target.total("compute"),
            "draft weights": m.draft.total("model"),
            "draft KV cache": m.draft.total("context"),
            "draft compute": m.draft.total("compute"),
        }
        assert pred == real, (n, ctx)


def test_caches_and_buffers_scale_with_the_requests(llama8b) -> None:  # noqa: ANN001 - fixture tuple
    t, d, _, _ = llama8b
    b = gpus.budget("h100")
    s = MemoryConfig(n_ctx=8192, n_gpu_layers=-1, draft_max=8)
    plans = {n: vram.make_plan(t, d, s.with_parallel(n), b) for n in (1, 4, 16)}
    for n, p in plans.items():
        # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 bytes x (K + V) = 128 KiB a token; the drafter's 4 KiB
        assert p.component("target_kv").gpu == n * 8192 * 128 * 1024 == n * GiB
        assert p.component("draft_kv").gpu == n * 8192 * 4 * 1024 == n * 32 * MiB
        assert p.component("target_weights").gpu == plans[1].component("target_weights").gpu
        assert p.to_dict()["context"] == {"per_request": 8192, "parallel": n, "n_ctx": n * 8192}
    # logits for a verify of draft_max + 1 rows per request (9, 36, 144), f32 over 128256 tokens
    out = {n: p.component("outputs").host for n, p in plans.items()}
    assert out[4] - out[1] == (36 - 9) * 128256 * 4
    assert out[16] - out[4] == (144 - 36) * 128256 * 4
    # the drafter's attention spans the whole unified cache: its compute buffer grows with the cells
    assert plans[1].component("draft_compute").gpu < plans[16].component("draft_compute").gpu


def _alternatives(line: str) -> tuple[int, int]:
    m = re.search(r": --parallel (\d+) fits at --ctx (\d+) \(or --ctx (\d+) at (\d+)\)$", line)
    assert m, line
    return int(m[1]), int(m[3])


def test_refusal_names_what_fits_and_that_fits(llama8b) -> None:  # noqa: ANN001
    t, d, _, _ = llama8b
    b = gpus.budget("rtx4090")
    s = MemoryConfig(n_ctx=16384, n_gpu_layers=-1)
    assert vram.parallel_refusal(t, d, s, b, parallel=4) is None
    line = vram.parallel_refusal(t, d, s, b, parallel=16)
    assert line is not None and "\n" not in line
    need, room = vram.parallel_bytes(t, d, s.with_parallel(16), b)
    assert line.startswith(
        f"--parallel 16 (16 sequences x 16384 tokens) needs {need / GiB:.2f} GiB of KV cache and buffers, "
        f"{room / GiB:.2f} GiB of VRAM are free after the weights: "
    )
    # 16 x 16K: 16 GiB of target KV alone; 23.99 GiB less 4.30 + 0.79 of weights and the 0.75 allowance
    assert need > 16 * GiB and 18 * GiB < room < 18.5 * GiB
    n, ctx = _alternatives(line)
    assert (n, ctx) == (8, 8448)
    # what the line names fits, and one more request or 256 more tokens does not
    assert vram.parallel_refusal(t, d, s, b, parallel=n) is None
    assert vram.parallel_refusal(t, d, s, b, parallel=n + 1) is not None
    assert vram.parallel_refusal(t, d, replace(s, n_ctx=ctx), b, parallel=16) is None
    assert vram.parallel_refusal(t, d, replace(s, n_ctx=ctx + 256), b, parallel=16) is not None
    # and the plans agree: the layers fixed, the refusal is the plan's verdict
    assert vram.make_plan(t, d, s.with_parallel(n), b).fits
    assert not vram.make_plan(t, d, s.with_parallel(n + 1), b).fits


def test_refusal_against_memory_bytes(llama8b) -> None:  # noqa: ANN001
    """A CPU-only machine: the KV caches, compute and output buffers against the bytes the caller has."""
    t, d, _, _ = llama8b
    s = MemoryConfig(n_ctx=8192)
    need4, have = vram.parallel_bytes(t, d, s.with_parallel(4), 32 * GiB, CPU)
    assert have == 32 * GiB
    s4 = s.with_parallel(4)
    dims = vram.ctx_dims(s4.cells, 4, s4.n_batch, s4.n_ubatch, True)
    ddims = vram.ctx_dims(s4.cells, 4, s4.draft_batch, s4.draft_ubatch, True)
    outputs = vram.make_plan(t, d, s4, gpus.budget("h100")).component("outputs").host
    assert need4 == (
        vram.kv_cache(t, dims, s4, 0, False, CPU).total + vram.target_compute(t, s4, CPU)
        + vram.kv_cache(d, ddims, s4, 0, True, CPU).total + vram.draft_compute(d, s4, CPU) + outputs
    )  # fmt: skip
    assert vram.kv_cache(t, dims, s4, 0).total == 4 * GiB
    assert vram.parallel_refusal(t, d, s, 32 * GiB, parallel=16) is None  # 16 GiB of KV and ~1.5 of buffers
    line = vram.parallel_refusal(t, d, s, 8 * GiB, parallel=16)
    assert line is not None and "GiB of memory are free:" in line
    n, ctx = _alternatives(line)
    assert vram.parallel_refusal(t, d, s, 8 * GiB, parallel=n) is None
    assert vram.parallel_refusal(t, d, s, 8 * GiB, parallel=n + 1) is not None
    assert vram.parallel_refusal(t, d, replace(s, n_ctx=ctx), 8 * GiB, parallel=16) is None
    nothing = vram.parallel_refusal(t, d, s, 10 * MiB, parallel=2)
    assert nothing is not None and nothing.endswith(
        "neither --parallel 1 at --ctx 8192 nor --parallel 2 at --ctx 256 fits"
    )


def test_suggest_keeps_the_requests_then_offers_fewer(llama8b) -> None:  # noqa: ANN001
    t, d, _, _ = llama8b
    req = MemoryConfig(n_ctx=4096, n_gpu_layers=-1).with_parallel(64)
    four = vram.make_plan(t, d, replace(req, n_ctx=512).with_parallel(4), gpus.budget("h100"))
    b = gpus.budget(vram_gb=(four.total_gpu + 64 * MiB) / GiB)
    sg = vram.suggest(t, d, req, b)
    assert sg.plan is not None and sg.plan.fits and not sg.dropped_drafter
    got = sg.plan.settings
    assert 4 <= got.parallel < 64 and got.n_seq == got.parallel and got.kv_unified
    assert sg.traded[0] == f"parallel 64 -> {got.parallel} (fewer requests at once)"
    # one request more is not found with its own count either: it falls back to the same
    again = vram.suggest(t, d, req.with_parallel(got.parallel + 1), b)
    assert again.plan is not None and again.plan.settings.parallel == got.parallel
    assert again.traded[0] == f"parallel {got.parallel + 1} -> {got.parallel} (fewer requests at once)"
    # where the requests fit at a shorter context, they are kept and the context gives
    roomy = vram.suggest(t, d, MemoryConfig(n_ctx=65536, n_gpu_layers=-1).with_parallel(16), gpus.budget("rtx4090"))
    assert roomy.plan is not None and roomy.plan.fits and roomy.plan.settings.parallel == 16
    assert roomy.traded[0] == f"context 65536 -> {roomy.plan.settings.n_ctx}" and roomy.plan.settings.n_ctx < 65536


def fit(*args: str):
    return runner.invoke(app, ["fit", *args])


def test_fit_prices_and_says_parallel(llama8b) -> None:  # noqa: ANN001
    _, _, t, d = (str(x) for x in llama8b)
    one = json.loads(fit("-m", t, "-d", d, "--ctx", "8192", "--gpu", "h100", "--json").output)
    r = fit("-m", t, "-d", d, "--ctx", "8192", "--gpu", "h100", "--parallel", "4", "--json")
    assert r.exit_code == 0, r.output
    four = json.loads(r.output)
    assert four["plan"]["context"] == {"per_request": 8192, "parallel": 4, "n_ctx": 32768}
    st = four["plan"]["settings"]
    assert (st["n_ctx"], st["parallel"], st["n_seq"], st["kv_unified"], st["draft_n_seq"]) == (8192, 4, 4, True, None)
    for k in ("target_kv", "draft_kv"):
        assert four["plan"]["components"][k]["gpu"] == 4 * one["plan"]["components"][k]["gpu"]
    assert four["parallel_refusal"] is None and "parallel_refusal" not in one
    txt = fit("-m", t, "-d", d, "--ctx", "8192", "--gpu", "h100", "--parallel", "4")
    assert "4 sequences x 8192 tokens" in " ".join(txt.output.split())

    no = fit("-m", t, "-d", d, "--ctx", "16384", "--gpu", "rtx4090", "--parallel", "16", "--gpu-layers", "-1")
    assert no.exit_code == 1, no.output
    flat = " ".join(no.output.split())
    assert "does not fit" in flat
    assert "--parallel 16 (16 sequences x 16384 tokens) needs" in flat
    assert "--parallel 8 fits at --ctx 16384 (or --ctx 8448 at 16)" in flat
    # with --gpu-layers auto the plan fits partially offloaded; the line says what fits with every layer on the GPU
    auto = fit("-m", t, "-d", d, "--ctx", "16384", "--gpu", "rtx4090", "--parallel", "16", "--json")
    assert auto.exit_code == 0, auto.output
    data = json.loads(auto.output)
    assert not data["plan"]["full_offload"]
    assert data["parallel_refusal"].startswith("with every layer on the GPU, --parallel 16 ")
    sg = fit("-m", t, "-d", d, "--ctx", "16384", "--gpu", "rtx4090", "--parallel", "8", "--suggest")
    assert "--parallel 8" in " ".join(sg.output.split())

    bad = fit("-m", t, "--gpu", "h100", "--parallel", "300")
    assert bad.exit_code == 2 and "at most 256 sequences" in " ".join(bad.output.split())
    both = fit("-m", t, "-d", d, "--gpu", "h100", "--parallel", "2", "--tree", "8")
    assert both.exit_code == 2 and "not both" in both.output

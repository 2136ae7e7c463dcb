"""Embeddings from a loaded model (``llamacpp.embed``): a generation model pooled on its last token, a model whose
GGUF names mean pooling pooled over all its tokens, unit vectors, truncation, and the inputs refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.llamacpp import embed as emb
from local_eagle.llamacpp.model import PREFIX_MARGIN, Context, ContextOptions, Model
from local_eagle.testing.gguf_edit import with_keys
from local_eagle.testing.tiny import write_tiny_target


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_target(tmp_path_factory.mktemp("embed") / "tiny.gguf")


@pytest.fixture(scope="module")
def model(tiny: Path):
    m = Model(tiny, n_gpu_layers=0)
    yield m
    m.close()


def raw_last(model: Model, tokens: np.ndarray) -> np.ndarray:
    """The unnormalised last-token vector of ``tokens`` (the hidden state after the output norm)."""
    ctx = emb._EmbedContext(model, emb.POOLING_LAST, 256, 256, 1)
    try:
        return ctx.run(tokens)
    finally:
        ctx.close()


def test_a_generation_model_embeds_its_last_tokens_hidden_state(model: Model) -> None:
    """Ollama serves embeddings from any model: without a pooling of its own, the last token's hidden state, which
    is what the model's own output layer turns into that token's logits."""
    assert emb.model_pooling(model) == emb.POOLING_NONE
    out = emb.embed(model, ["hello world", "the cat", "hello world"], n_ctx=256, n_threads=1)
    v = np.array(out.vectors)
    assert out.pooling == "last" and v.shape == (3, model.n_embd)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6) and np.allclose(v[0], v[2])
    assert not np.allclose(v[0], v[1])
    assert out.tokens == sum(len(model.tokenize(t, add_special=True, parse_special=True)) for t in
                             ("hello world", "the cat", "hello world"))  # fmt: skip
    tokens = model.tokenize("hello world", add_special=True, parse_special=True)
    ctx = Context(model, ContextOptions(n_ctx=256, n_threads=1))
    try:
        ctx.decode(tokens, np.arange(len(tokens)), outputs=np.arange(len(tokens)) == len(tokens) - 1)
        logits = ctx.logits(len(tokens) - 1, model.n_vocab)
    finally:
        ctx.close()
    from gguf import GGUFReader

    w = next(t for t in GGUFReader(model.path).tensors if t.name == "output.weight").data  # (n_vocab, n_embd)
    ours = w @ raw_last(model, tokens)
    assert np.allclose(ours, logits, rtol=1e-3, atol=1e-3)


def test_chunks_give_the_same_vector(model: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation model is fed in chunks (its logits rows bounded): the last chunk's last token is the same."""
    text = "the cat and the hat and a bee " * 12
    whole = emb.embed(model, [text], n_ctx=1024, n_threads=1).vectors[0]
    monkeypatch.setattr(emb, "LOGITS_FLOATS", 1)  # chunks of 32 tokens
    chunked = emb.embed(model, [text], n_ctx=1024, n_threads=1)
    assert chunked.tokens > 100 and np.allclose(whole, chunked.vectors[0], atol=2e-3)  # f16 cache


def test_mean_pooling_as_the_gguf_names_it(tiny: Path, model: Model, tmp_path: Path) -> None:
    """``llama.pooling_type`` = mean: the average of every token's hidden state. In a causal model token i's
    state is the last-token vector of the first i+1 tokens, so the mean is known from the plain model."""
    mean_gguf = with_keys(tiny, tmp_path / "mean.gguf", {"llama.pooling_type": emb.POOLING_MEAN})
    m = Model(mean_gguf, n_gpu_layers=0)
    try:
        assert emb.model_pooling(m) == emb.POOLING_MEAN
        got = emb.embed(m, ["hello world"], n_ctx=256, n_threads=1, normalize=False)
    finally:
        m.close()
    assert got.pooling == "mean"
    tokens = model.tokenize("hello world", add_special=True, parse_special=True)
    want = np.mean([raw_last(model, tokens[: i + 1]) for i in range(len(tokens))], axis=0)
    assert np.allclose(got.vectors[0], want, atol=1e-4)


def test_truncation_dimensions_and_refusals(model: Model, tiny: Path, tmp_path: Path) -> None:
    long = "x" * 3000
    cut = emb.embed(model, [long], n_ctx=256, n_threads=1)
    assert cut.tokens == 256
    with pytest.raises(emb.EmbedInputError, match="more than the context of 256"):
        emb.embed(model, [long], n_ctx=256, truncate=False)
    short = emb.embed(model, ["hello"], n_ctx=256, dimensions=16)
    assert len(short.vectors[0]) == 16 and abs(np.linalg.norm(short.vectors[0]) - 1) < 1e-6
    assert emb.embed(model, [], n_ctx=256).vectors == []
    assert emb.answer(model, {"texts": [long], "truncate": False}, 256)["error"].startswith("input 0 has")
    rank = Model(with_keys(tiny, tmp_path / "rank.gguf", {"llama.pooling_type": emb.POOLING_RANK}), n_gpu_layers=0)
    try:
        assert "reranking model" in emb.answer(rank, {"texts": ["a"]}, 256)["error"]
    finally:
        rank.close()


@pytest.mark.parametrize("text", ["x" * 50_000, "the cat and the hat " * 5000, "é 😀 w1 " * 8000, "a" * 700])
def test_a_long_text_is_tokenized_from_a_prefix_with_the_same_first_tokens(model: Model, text: str) -> None:
    """Truncation tokenizes a prefix sized from the context (doubled while too short), not the whole text: the tokens
    kept are the whole text's first ones, and a text that fits is tokenized whole."""
    whole = model.tokenize(text, add_special=True, parse_special=True)
    got = emb.text_tokens(model, text, 256)
    assert np.array_equal(got[:256], whole[:256])
    assert len(got) < len(whole) or np.array_equal(got, whole)
    calls: list[int] = []
    real = model.tokenize

    def counted(t: str, **kw: object) -> np.ndarray:
        calls.append(len(t))
        return real(t, **kw)

    model.tokenize = counted  # type: ignore[method-assign]
    try:
        emb.tokens_of(model, [text], 256, truncate=True)
    finally:
        del model.tokenize
    assert max(calls) <= max(8 * (256 + PREFIX_MARGIN) * 4, len(text) if len(text) <= 4096 else 0), calls


def test_progress_is_called_through_an_embedding_and_can_stop_it(model: Model) -> None:
    steps: list[int] = []
    emb.embed(model, ["hello world", "the cat"], n_ctx=256, n_threads=1, progress=lambda: steps.append(1))
    assert len(steps) >= 4  # each text's tokens and each text's vector

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        emb.embed(model, ["hello world"], n_ctx=256, n_threads=1, progress=stop)

"""llama.cpp's backend greedy sampler on a context (``Context.set_greedy_sampler``): each output row's token comes
back as the argmax of the logits the same call would give, and clearing it brings the logits back."""

from __future__ import annotations

import numpy as np

from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.testing.tiny import write_tiny_target


def test_a_greedy_backend_sampler_gives_each_rows_argmax_and_clears(tmp_path) -> None:
    model = Model(write_tiny_target(tmp_path / "tiny.gguf"), n_gpu_layers=0)
    opts = ContextOptions(n_ctx=64, n_threads=1, outputs_per_seq=8)
    plain, sampled = Context(model, opts), Context(model, opts)
    try:
        n_vocab = model.n_vocab
        assert sampled.set_greedy_sampler(0)
        tokens, positions = np.arange(3, 10), np.arange(7)
        plain.decode(tokens, positions, True)
        sampled.decode(tokens, positions, True)
        want = [int(np.argmax(plain.logits_view(i, n_vocab))) for i in range(7)]
        assert [sampled.sampled_token(i) for i in range(7)] == want
        sampled.clear_sampler(0)
        sampled.remove_from(0)
        sampled.decode(tokens, positions, True)
        assert np.array_equal(sampled.logits_view(6, n_vocab), plain.logits_view(6, n_vocab))
    finally:
        plain.close()
        sampled.close()
        model.close()

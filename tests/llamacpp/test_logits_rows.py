"""A decode's output rows read as one view (``Context.logits_rows``): the same floats as row by row, no copy."""

from __future__ import annotations

import numpy as np

from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.testing.tiny import write_tiny_target


def test_rows_as_one_view_equal_each_row_and_share_llama_cpps_buffer(tmp_path) -> None:
    model = Model(write_tiny_target(tmp_path / "tiny.gguf"), n_gpu_layers=0)
    try:
        ctx = Context(model, ContextOptions(n_ctx=64, n_threads=1))
        try:
            n_vocab = model.n_vocab
            ctx.decode(np.arange(3, 10), np.arange(7), True)
            rows = ctx.logits_rows(2, 4, n_vocab)
            assert rows.shape == (4, n_vocab) and not rows.flags.owndata
            for i in range(4):
                assert np.array_equal(rows[i], ctx.logits_view(2 + i, n_vocab))
            rows[1, 0] = 123.0  # the view is the buffer itself
            assert ctx.logits_view(3, n_vocab)[0] == 123.0
        finally:
            ctx.close()
    finally:
        model.close()

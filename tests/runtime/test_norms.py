"""The host-side EAGLE 3.1 norms equal the torch reference's."""

from __future__ import annotations

import numpy as np
import torch

from local_eagle.reference import rms_norm as torch_rms_norm
from local_eagle.runtime.norms import fc_norm, rms_norm


def test_rms_norm_matches_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 48)).astype(np.float32) * 7
    w = rng.standard_normal(48).astype(np.float32)
    ours = rms_norm(x, w, 1e-6)
    ref = torch_rms_norm(torch.from_numpy(x), torch.from_numpy(w), 1e-6).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_fc_norm_is_per_chunk():
    rng = np.random.default_rng(1)
    h = 16
    chunks = [rng.standard_normal((3, h)) * s for s in (1.0, 10.0, 100.0)]
    w = rng.standard_normal(3 * h).astype(np.float32)
    out = fc_norm(np.concatenate(chunks, axis=-1), w, 1e-6)
    for i, c in enumerate(chunks):
        np.testing.assert_allclose(out[:, i * h : (i + 1) * h], rms_norm(c, w[i * h : (i + 1) * h], 1e-6), rtol=1e-5)
    # one norm over the whole concatenation (norm_before_fc) is a different function
    assert not np.allclose(out, rms_norm(np.concatenate(chunks, axis=-1), w, 1e-6))

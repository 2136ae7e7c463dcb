"""Host-side EAGLE 3.1 norms, as pure numpy functions (computed in fp32)."""

from __future__ import annotations

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float) -> np.ndarray:
    """RMSNorm over the last axis; fp32 whatever the input, like the reference."""
    x32 = np.asarray(x, dtype=np.float32)
    y = x32 / np.sqrt(np.mean(np.square(x32), axis=-1, keepdims=True) + np.float32(eps))
    if weight is not None:
        y = y * np.asarray(weight, dtype=np.float32)
    return y.astype(np.float32, copy=False)


def fc_norm(features: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """EAGLE 3.1 "FC norm": one RMSNorm per captured layer (chunk), each with its own weight.

    features is [..., 3 * H_target]; weight is the three chunk weights concatenated.
    """
    f = np.asarray(features, dtype=np.float32)
    h = f.shape[-1] // 3
    chunks = f.reshape(*f.shape[:-1], 3, h)
    normed = rms_norm(chunks, None, eps) * np.asarray(weight, dtype=np.float32).reshape(3, h)
    return normed.reshape(f.shape)

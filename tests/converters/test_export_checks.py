"""What llama.cpp's eagle3 graph cannot run is refused with the reason: a Qwen3-style layer, biases, a second layer,
speculators' final-state layer id."""

from __future__ import annotations

import numpy as np
import pytest

from converters import convert
from converters.formats import read_checkpoint
from local_eagle.errors import CheckpointError


def add_tensor(name: str, shape: tuple[int, ...]):
    def mutate(sd, cfg):
        sd[name] = np.ones(shape, dtype=np.float32)

    return mutate


@pytest.mark.parametrize(
    ("fmt", "name", "shape", "why"),
    [
        ("speculators", "layers.0.self_attn.q_norm.weight", (16,), "q_norm / k_norm, a Qwen3-style layer"),
        ("eagle3", "midlayer.self_attn.k_norm.weight", (16,), "llama.cpp's eagle3 graph has no such norms"),
        ("vllm", "midlayer.self_attn.q_proj.bias", (64,), "llama.cpp's eagle3 graph has no biases"),
        ("speculators", "layers.1.mlp.up_proj.weight", (128, 64), "has a single decoder layer"),
        ("eagle3", "something_else.weight", (4,), "expected fc.weight, norm.weight"),
    ],
)
def test_unexpected_tensor_says_why(checkpoint_factory, fmt, name, shape, why):
    _, d = checkpoint_factory(fmt=fmt, mutate=add_tensor(name, shape))
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(d)
    text = str(e.value)
    assert "unexpected tensor" in text and why in text and "\n" not in text


def test_final_state_layer_id_is_refused_with_its_reason(checkpoint_factory, target_gguf, tmp_path):
    """speculators reads a layer id equal to the target's layer count as the final hidden state; the capture here
    reads layer inputs only, so the drafter is refused before anything is written."""
    _, d = checkpoint_factory(target_layers=[1, 3, 6])
    out = tmp_path / "o.gguf"
    with pytest.raises(CheckpointError, match="equals the layer count .* final hidden state"):
        convert(d, target_gguf, out)
    assert not out.exists()

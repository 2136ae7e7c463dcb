"""The sizes every other planner module rounds with: ggml KV cache types and backend alignment.

Kept at the bottom of ``local_eagle.vram`` so that shapes, memory, graphs and the plan all round
a tensor the same way llama.cpp's buffers do.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from local_eagle.errors import LocalEagleError
from local_eagle.gguf import pad


class PlanError(LocalEagleError):
    """Settings that llama.cpp would refuse (e.g. a quantised V cache without flash attention)."""


# --- ggml types ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVType:
    """A KV cache type as ggml stores it: values per block and bytes per block."""

    name: str
    ggml: int
    block: int
    size: int

    @property
    def quantized(self) -> bool:
        return self.block > 1


def _kv(name: str) -> KVType:
    t = GGMLQuantizationType[name.upper()]
    block, size = GGML_QUANT_SIZES[t]
    return KVType(name, int(t), block, size)


# the cache types llama.cpp accepts for --cache-type-k / --cache-type-v
KV_TYPES: dict[str, KVType] = {
    n: _kv(n) for n in ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")
}


def row_bytes(t: GGMLQuantizationType | int, n: int) -> int:
    """Bytes of ``n`` values of type ``t`` (whole blocks; ``n`` is a multiple of the block)."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
    return n // block * size


# --- backends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """How a device's buffers round tensor sizes (``get_alignment`` / ``get_alloc_size``)."""

    name: str
    alignment: int
    quant_row_pad: int = 0  # CUDA: last row of quantised matrices padded to MATRIX_ROW_PADDING

    def tensor_bytes(self, nbytes: int, ne0: int, t: int) -> int:
        """What a tensor of ``nbytes`` (rows of ``ne0`` values of type ``t``) takes in this backend's buffer."""
        size = nbytes
        if self.quant_row_pad and GGML_QUANT_SIZES[GGMLQuantizationType(t)][0] > 1 and ne0 % self.quant_row_pad:
            size += row_bytes(t, self.quant_row_pad - ne0 % self.quant_row_pad)
        return pad(size, self.alignment)


CUDA = Backend("CUDA", 128, 512)
CPU = Backend("CPU", 32)

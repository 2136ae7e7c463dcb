"""What a block drafter (DFlash, ``dflash`` GGUF) costs beside its target: pure formulas over its sizes.

A block drafter drafts ``block_size`` tokens in one forward pass (``[last, <mask> x (block_size - 1)]``, non-causal)
over a K/V cache of its own layers that the target's hidden states fill: every context position's captured layer
inputs, concatenated (``len(target_layers) x n_embd``), fused by ``fc`` + ``enc.output_norm`` and projected to K/V
in each drafter layer (llama.cpp's ``dflash.cpp`` injection). What that costs, item by item:

* weights: its tensors (priced as any GGUF's by ``memory.weights``; it borrows the target's embeddings and head);
* K/V cache: each of its layers over the context's injected rows plus the block's own rows (:func:`block_cells`,
  :func:`block_kv_bytes`);
* compute: the larger of one drafter call's block graph (``block_size`` rows, logits over the target's vocabulary)
  and the injection graph over a ubatch of feature rows (:func:`block_compute_bytes`);
* the target's extra captured layers: ``len(target_layers) x n_embd`` f32 values for every row a target batch stages
  (:func:`captured_bytes`), where an EAGLE 3 drafter reads three.

The cells and the rows staged are those local-eagle's block drafter uses (``runtime.dflash``), checked against the
pinned llama.cpp (``tests/converters/test_dflash_reference.py``): the context's rows injected
by an embedding batch, then the block decoded in the same context. The compute buffer is this module's estimate, not a
replay of llama.cpp's graph (``graph`` models the eagle3 graphs only); ``plan`` says so in a note.
"""

from __future__ import annotations

from dataclasses import dataclass

from local_eagle.vram.types import KV_TYPES, row_bytes

F32 = 4


@dataclass(frozen=True)
class BlockDims:
    """The sizes of a block drafter that its memory depends on (``ModelShape`` of a ``dflash`` GGUF, or given)."""

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    n_ff: int
    n_vocab: int  # the target's: the drafter's logits come out of the target's head
    block_size: int
    n_target_layers: int


def block_cells(n_ctx: int, block_size: int) -> int:
    """Cells of the drafter's K/V cache for a context of ``n_ctx`` tokens: one injected row per context position (the
    target's fused features) plus the ``block_size`` rows of the block being drafted (before llama.cpp's padding)."""
    return n_ctx + block_size


def block_kv_bytes(b: BlockDims, cells: int, type_k: str = "f16", type_v: str = "f16") -> int:
    """K and V of every drafter layer over ``cells`` cells (``llama_kv_cache``: a K and a V row per cell and layer)."""
    tk, tv = KV_TYPES[type_k], KV_TYPES[type_v]
    per_cell = row_bytes(tk.ggml, b.n_head_kv * b.head_k) + row_bytes(tv.ggml, b.n_head_kv * b.head_v)
    return b.n_layer * cells * per_cell


def block_decode_bytes(b: BlockDims, n_kv: int, flash_attn: bool = True) -> int:
    """One drafter call's activations (f32): ``block_size`` rows through a layer at its widest, and their logits.

    The residual stream, its norm and the layer's output (3 rows of ``n_embd``); then the larger of the attention
    (Q, K, V of the block, its output, and without flash attention the ``n_head x block x n_kv`` scores) and the FFN
    (gate and up, ``2 x n_ff``); plus the logits, ``block_size x n_vocab``, which stay to the end.
    """
    rows = b.block_size
    attn = rows * (b.n_head * b.head_k + b.n_head_kv * (b.head_k + b.head_v) + b.n_head * b.head_v)
    if not flash_attn:
        attn += b.n_head * rows * n_kv
    ffn = 2 * rows * b.n_ff
    return F32 * (3 * rows * b.n_embd + max(attn, ffn) + rows * b.n_vocab)


def injection_bytes(b: BlockDims, rows: int) -> int:
    """The injection graph over ``rows`` context positions (f32): their captured features
    (``n_target_layers x n_embd`` each), ``fc``'s output and its norm, and one layer's K and V projections."""
    per_row = b.n_target_layers * b.n_embd + 2 * b.n_embd + b.n_head_kv * (b.head_k + b.head_v)
    return F32 * rows * per_row


def block_compute_bytes(b: BlockDims, n_kv: int, rows: int, flash_attn: bool = True) -> int:
    """The drafter context's compute buffer: the larger of its block graph and its injection graph (one buffer,
    grown to the bigger of the graphs it runs)."""
    return max(block_decode_bytes(b, n_kv, flash_attn), injection_bytes(b, rows))


def captured_bytes(n_target_layers: int, n_embd: int, rows: int) -> int:
    """The target's captured layer inputs staged for the drafter: ``n_target_layers x n_embd`` f32 values per row
    of a target batch (``rows``), in host memory."""
    return F32 * n_target_layers * n_embd * rows


def block_inputs_bytes(b: BlockDims, n_kv: int, rows: int, flash_attn: bool = True) -> int:
    """Host-side inputs of the drafter context: a ubatch of feature rows and the block's attention mask
    (``n_kv x block_size``, f16 with flash attention)."""
    mask = n_kv * b.block_size * (2 if flash_attn else 4)
    return F32 * rows * b.n_target_layers * b.n_embd + mask

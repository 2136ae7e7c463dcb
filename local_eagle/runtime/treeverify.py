"""A draft tree verified in one target decode, and the accepted path kept as the cache's main sequence.

llama.cpp (0.3.36, ``src/llama-kv-cache.cpp`` ``set_input_kq_mask``) lets a batch row see the cache cells that
hold the row's *first* sequence id at positions not after its own; a row may carry several ids and its cell
then belongs to all of them; sequences coupled in one batch must hold the same cached range and need a unified
cache (``src/llama-batch.cpp``). So: one sequence per leaf, the cached prefix (sequence 0) copied to every
leaf's sequence, every row tagged with the leaves below it (:meth:`VerifyTree.seq_ids`); afterwards only the
accepted path stays, as sequence 0. A chain (one leaf) is plain sequence-0 decoding, with no copies.
"""

from __future__ import annotations

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context
from local_eagle.runtime.tree import VerifyTree


class TreeBatch:
    """One verify: the tree, its rows' sequence ids and where it starts."""

    def __init__(self, tree: VerifyTree, n_past: int) -> None:
        self.tree = tree
        self.n_past = n_past
        self.seqs = tree.seq_ids()
        self.n_leaves = len(tree.leaves())

    @property
    def positions(self) -> np.ndarray:
        return self.n_past + self.tree.depths

    def decode(self, ctx: Context) -> None:
        """Decode every row with logits, the prefix first shared with every leaf's sequence."""
        if self.n_leaves > ctx.n_seq_max:
            raise LocalEagleError(
                f"a draft tree with {self.n_leaves} leaves needs a context of that many sequences (it has "
                f"{ctx.n_seq_max})"
            )
        branched = self.n_leaves > 1
        for seq in range(1, self.n_leaves):
            ctx.seq_copy(0, seq)
        ctx.decode(self.tree.tokens, self.positions, True, seqs=self.seqs if branched else None)

    def keep(self, ctx: Context, last_row: int) -> None:
        """Keep the prefix and the rows from the root down to ``last_row`` as sequence 0; drop the rest."""
        end = self.n_past + 1 + int(self.tree.depths[last_row])
        if self.n_leaves == 1:
            ctx.remove_from(end)
            return
        seq = self.seqs[last_row][0]
        ctx.seq_keep(seq)
        ctx.seq_remove(seq, end)
        if seq != 0:
            ctx.seq_copy(seq, 0)
            ctx.seq_remove(seq)

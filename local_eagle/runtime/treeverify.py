"""A draft tree verified in one target decode, and the accepted path kept as the cache's main sequence.

llama.cpp (0.3.36, ``src/llama-kv-cache.cpp`` ``set_input_kq_mask``) lets a batch row see the cache cells that
hold the row's *first* sequence id at positions not after its own; a row may carry several ids and its cell
then belongs to all of them; sequences coupled in one batch must hold the same cached range and need a unified
cache (``src/llama-batch.cpp``). So: one sequence per leaf, the cached prefix (sequence 0) shared with every
leaf's sequence, every row tagged with the leaves below it (:meth:`VerifyTree.seq_ids`); afterwards only the
accepted path stays, as sequence 0. A chain (one leaf) is plain decoding on its sequence, with no copies, and the
chains of a parallel engine's sequences share one call (:func:`decode_together`).

The prefix stays shared between rounds (:class:`PrefixTags`): a leaf sequence keeps its id on the prefix cells,
and a round adds it only to the rows committed since. Copying the whole prefix to every leaf and dropping it
again (``seq_keep``) costs one position-map entry per cell and leaf: 17 ms a round of 62 nodes at 2,700
tokens of context on the CPU, growing with the context, host time a GPU waits on as much.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context
from local_eagle.runtime.tree import VerifyTree


class PrefixTags:
    """Which leaf sequences of a context share its cached prefix, and how far: sequence s (s >= 1) holds exactly
    the cells of sequence 0 at positions [0, ``upto[s]``), nothing else, between tree verifies.

    One per context whose sequence 0 it tracks; :meth:`reset` whenever that context's cache is cleared. Only a tree
    verify and its keep change it, and sequence 0 must not lose cells below ``upto`` meanwhile (a chain's rollback
    never goes below the positions a round started from).
    """

    def __init__(self) -> None:
        self.upto: dict[int, int] = {}

    def reset(self) -> None:
        self.upto.clear()

    def share(self, ctx: Context, leaves: int, n_past: int) -> None:
        """Sequences 1..leaves-1 hold the prefix [0, n_past) of sequence 0, as a tree verify from there needs."""
        self.share_with(ctx, range(1, leaves), n_past)

    def shared(self, seqs: Iterable[int], n_past: int) -> None:
        """These sequences hold the prefix [0, n_past) already: its rows were decoded into them too."""
        for seq in seqs:
            self.upto[seq] = n_past

    def share_with(self, ctx: Context, seqs: Iterable[int], n_past: int) -> None:
        """These sequences (none of them 0) hold the prefix [0, n_past) of sequence 0: each edit scans the whole
        cache (llama.cpp's cells, 12 us at 8K, 24-42 us at 32K), so only the sequences a step uses are shared."""
        for seq in seqs:
            have = self.upto.get(seq, 0)
            if have < n_past:
                ctx.seq_copy(0, seq, have, n_past)
            elif have > n_past:
                ctx.seq_remove(seq, n_past)
            self.upto[seq] = n_past


class TreeBatch:
    """One sequence's verify: the tree, its rows' sequence ids and where it starts.

    A chain (one leaf) decodes on the sequence ``seq``; a tree with several leaves uses sequences 0..leaves-1,
    sequence 0 holding the cached prefix, so it has the context to itself (an engine of one generation), and
    ``tags`` (the context's :class:`PrefixTags`) say which of them share it already.
    """

    def __init__(self, tree: VerifyTree, n_past: int, seq: int = 0, tags: PrefixTags | None = None) -> None:
        self.tree = tree
        self.n_past = n_past
        self.n_leaves = len(tree.leaves())
        self.seq = seq
        if self.n_leaves > 1 and seq != 0:
            raise LocalEagleError("a draft tree verifies on sequence 0 of a context of its own")
        if self.n_leaves > 1 and tags is None:
            raise LocalEagleError("a draft tree verifies with its context's PrefixTags")
        self.tags = tags
        self.seqs = tree.seq_ids() if self.n_leaves > 1 else [[seq]] * len(tree)

    @property
    def positions(self) -> np.ndarray:
        return self.n_past + self.tree.depths

    def decode(self, ctx: Context) -> None:
        """Decode every row with logits, the prefix first shared with every leaf's sequence."""
        decode_together(ctx, [self])

    def keep(self, ctx: Context, last_row: int) -> None:
        """Keep the prefix and the rows from the root down to ``last_row`` as the sequence; drop the rest."""
        end = self.n_past + 1 + int(self.tree.depths[last_row])
        if self.n_leaves == 1:
            ctx.remove_from(end, self.seq)
            return
        # only the tree's rows (positions from n_past) change: the prefix keeps every leaf's id (PrefixTags)
        seq = self.seqs[last_row][0]
        for other in range(self.n_leaves):
            if other != seq:
                ctx.seq_remove(other, self.n_past)  # a row no kept leaf holds is freed
        ctx.seq_remove(seq, end)  # the rows below the last accepted one
        if seq != 0:
            ctx.seq_copy(seq, 0, self.n_past, end)  # the accepted rows join sequence 0 ...
            ctx.seq_remove(seq, self.n_past, end)  # ... and leave the leaf's, which holds the prefix alone again


def decode_together(ctx: Context, batches: list[TreeBatch]) -> None:
    """One target call for every batch's rows, each batch's after the one before (the verify phase of a round,
    for one sequence or for every sequence of a parallel engine); row i of batch b is output
    ``sum(len(earlier batches)) + i``."""
    branched = [b for b in batches if b.n_leaves > 1]
    if branched and len(batches) > 1:
        raise LocalEagleError("a draft tree is verified alone")
    if branched:
        b = branched[0]
        if b.n_leaves > ctx.n_seq_max:
            raise LocalEagleError(
                f"a draft tree with {b.n_leaves} leaves needs a context of that many sequences (it has {ctx.n_seq_max})"
            )
        assert b.tags is not None
        b.tags.share(ctx, b.n_leaves, b.n_past)
        ctx.decode(b.tree.tokens, b.positions, True, seqs=b.seqs)
        return
    if len(batches) == 1:
        b = batches[0]
        ctx.decode(b.tree.tokens, b.positions, True, seq=b.seq)
        return
    tokens = np.concatenate([b.tree.tokens for b in batches])
    positions = np.concatenate([b.positions for b in batches])
    ctx.decode(tokens, positions, True, seqs=[s for b in batches for s in b.seqs])

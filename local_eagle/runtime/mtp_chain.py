"""Chained MTP heads (``step35``, Step 3.5) as a drafter, the way llama.cpp's ``draft-mtp`` drives them.

A model with several trained NextN blocks predicts draft ``k`` with block ``k`` (``llama_set_nextn_layer_offset``),
all on one MTP context whose KV cache holds every NextN layer in the same cells (a cell's position and sequence are
shared by its layers, each head writes only its own layer). ``common_speculative_impl_draft_mtp`` with
``chain_heads`` (``common/speculative.cpp``, docs/mtp.md) therefore:

- catches up every head: for each head, ``llama_memory_seq_rm`` from the batch's first position, the offset set,
  the same rows (token, target state) decoded, so each head's layer holds the target rows below the draft;
- drafts step ``i`` on head ``i``: ``seq_rm`` from ``pos0``, then the whole prefix ``[id_last, d_1 .. d_i]`` with
  the states collected so far (the target's state for ``id_last``, head ``k``'s own output state for ``d_{k+1}``),
  so head ``i`` builds its own KV over the draft region instead of reading cells another head wrote;
- so a chain is at most as long as there are heads.

:class:`ChainedMtpDrafter` does the same behind the loop's drafter interface. The loop feeds a draft step with
``feedback`` (the head's own state) and a catch-up with ``encode`` (the target's), so ``feedback`` marks its rows
(:class:`HeadState`) and that is how a call is told apart. The row a draft starts from (``id_last``) is kept,
and the next catch-up decodes it again on every head with the accepted rows, as ``process()`` re-decodes the
verified batch from that position: the rows a rejected draft left are then gone from every head's layer too.
Chains only: a tree's branches would need a head per depth on every branch sequence (not what ``draft-mtp`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions
from local_eagle.runtime.mtp import MtpDrafter, head_offset

NO_ROWS = np.array([], dtype=np.int64)  # a call whose outputs nobody reads


class HeadState(np.ndarray):
    """A head's own output state handed to the next draft step (``feedback``): rows of a draft step, not a catch-up."""


@dataclass
class _Draft:
    """One sequence's rows from the draft's start (MTP position ``pos0``): ``id_last`` with the target's state, then
    each draft with the state of the head that drafted it."""

    pos0: int
    tokens: list[int] = field(default_factory=list)
    states: list[np.ndarray] = field(default_factory=list)


class ChainedMtpDrafter(MtpDrafter):
    """The MTP context of a target with several chained NextN heads, in :class:`MtpDrafter`'s interface (chains)."""

    def __init__(self, target: Context, opts: ContextOptions | None = None) -> None:
        super().__init__(target, opts)
        self.n_heads = self.model.n_layer_nextn
        self._drafts: dict[int, _Draft] = {}

    def feedback(self, prenorm: np.ndarray) -> np.ndarray:
        """The head's state as is, marked as a draft step's input."""
        return np.ascontiguousarray(prenorm, dtype=np.float32).view(HeadState)

    def encode(self, features: np.ndarray) -> np.ndarray:
        return np.array(features, dtype=np.float32, order="C", subok=False)

    def prime(self, token: int, seq: int = 0) -> None:
        """The prompt's first token at MTP position 0 with a zero state, on every head."""
        g = np.zeros((1, self.n_embd), np.float32)
        self._catch_up(np.array([token]), g, np.array([-1]), [seq], NO_ROWS)

    def decode_rows(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(g, HeadState):
            return self._step(tokens, np.asarray(g), positions, seqs, np.asarray(wanted))
        return self._catch_up(tokens, g, positions, seqs, np.asarray(wanted))

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        self._catch_up(tokens, g, positions, [seq] * len(tokens), NO_ROWS)

    def decode_branches(self, *args, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        raise LocalEagleError("chained MTP heads draft chains only: each depth is another head")

    def remove_from(self, pos: int, seq: int = 0) -> None:
        super().remove_from(pos, seq)
        draft = self._drafts.get(seq)
        if draft is not None:
            keep = pos + 1 - draft.pos0
            if keep <= 0:
                del self._drafts[seq]
            else:
                del draft.tokens[keep:], draft.states[keep:]

    def _catch_up(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows with the target's states on every head (draft-mtp's ``process()``); head 0's outputs of ``wanted``.

        Where a sequence's rows follow the row its last draft started from, that row is decoded again first, as
        ``process()`` decodes the verified batch from there: every head then rewrites it after the draft steps'
        removals, whichever cells those took.
        """
        tokens = np.asarray(tokens)
        g = np.asarray(g, dtype=np.float32)
        positions = np.asarray(positions)
        starts: dict[int, int] = {}
        rows: list[tuple[int, np.ndarray, int, int]] = []  # token, state, loop position, seq
        index: list[int] = []  # each given row's index in ``rows``
        for j, seq in enumerate(seqs):
            if seq not in starts:
                draft = self._drafts.get(seq)
                first = int(positions[j]) + 1
                if draft is not None and draft.pos0 == first - 1 and self.ctx.pos_max(seq) >= draft.pos0:
                    rows.append((draft.tokens[0], draft.states[0], draft.pos0 - 1, seq))
                    first = draft.pos0
                starts[seq] = first
            index.append(len(rows))
            rows.append((int(tokens[j]), g[j], int(positions[j]), seq))
        all_tokens = np.array([r[0] for r in rows], dtype=np.int32)
        all_g = np.stack([r[1] for r in rows]).astype(np.float32, copy=False)
        all_positions = np.array([r[2] for r in rows])
        all_seqs = [r[3] for r in rows]
        try:
            for head in [*range(1, self.n_heads), 0]:
                for seq, first in starts.items():
                    self.ctx.remove_from(first, seq)
                head_offset(self.ctx, head)
                if head:  # its cache rows only: no outputs read
                    self._decode_outputs(all_tokens, all_g, all_positions, [[q] for q in all_seqs], NO_ROWS)
                else:
                    out = super().decode_rows(all_tokens, all_g, all_positions, all_seqs, np.asarray(index)[wanted])
        finally:
            head_offset(self.ctx, 0)
        last: dict[int, int] = {}
        for i, seq in enumerate(all_seqs):
            last[seq] = i
        for seq, i in last.items():
            self._drafts[seq] = _Draft(int(all_positions[i]) + 1, [int(all_tokens[i])], [all_g[i].copy()])
        return out

    def _step(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draft step ``i`` of every sequence given (one row each) on head ``i``: each sequence's draft region
        dropped and decoded again, ``[id_last, d_1 .. d_i]`` with the states collected so far."""
        steps = set()
        for j, seq in enumerate(seqs):
            draft = self._drafts.get(seq)
            if draft is None or int(positions[j]) + 1 != draft.pos0 + len(draft.tokens):
                raise LocalEagleError(f"a draft step on sequence {seq} that does not follow its draft's rows")
            steps.add(len(draft.tokens))
        if len(steps) != 1:
            raise LocalEagleError("chained MTP heads draft every sequence's step on one head: steps out of step")
        i = steps.pop()
        if i >= self.n_heads:
            name = self.model.path.name
            raise LocalEagleError(f"{name} has {self.n_heads} chained MTP heads: at most that many drafts")
        rows: list[tuple[int, np.ndarray, int, int]] = []
        last: list[int] = []
        for j, seq in enumerate(seqs):
            draft = self._drafts[seq]
            draft.tokens.append(int(tokens[j]))
            draft.states.append(np.array(g[j], dtype=np.float32))
            for k, (token, state) in enumerate(zip(draft.tokens, draft.states, strict=True)):
                rows.append((token, state, draft.pos0 + k, seq))
            last.append(len(rows) - 1)
        if len(rows) > self.ctx.n_batch:
            raise LocalEagleError(f"a draft step of {len(rows)} rows exceeds the MTP context's batch")
        n_wanted = len(wanted)
        logits = np.empty((n_wanted, self.n_vocab), dtype=np.float32)
        state = np.empty((n_wanted, self.n_embd), dtype=np.float32)
        try:
            for seq in seqs:
                self.ctx.remove_from(self._drafts[seq].pos0, seq)
            head_offset(self.ctx, i)
            # every row an output: a family whose graph_mtp stages its state before selecting the output rows would
            # hand back the first rows' states otherwise (docs/mtp.md); step35 selects first, so this costs little
            self.ctx.decode(
                np.array([r[0] for r in rows], dtype=np.int32), np.array([r[2] for r in rows]), True,
                np.stack([r[1] for r in rows]), [[r[3]] for r in rows],
            )  # fmt: skip
            for n, j in enumerate(wanted):
                logits[n] = self.ctx.logits_view(last[int(j)], self.n_vocab)
                state[n] = self.ctx.embeddings_nextn_ith(last[int(j)], self.n_embd)
        finally:
            head_offset(self.ctx, 0)
        return logits, state

"""The verify phase every round shares, whatever was drafted and for however many sequences.

A round's draft phase leaves one :class:`Drafted` per sequence: a tree to verify (a chain is the tree with one
branch, ``VerifyTree.chain``) with the draft distributions and the round's statistics. :func:`verify` decodes
all of them in one target call (``treeverify.decode_together``: a tree has the context to itself, the chains of
a parallel engine's sequences share it) and reads the captured features; each sequence then accepts against
:class:`TargetChoices`, its rows' logits read in place from that call's outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context
from local_eagle.runtime.clock import clock
from local_eagle.runtime.sampling import apply_repeat_penalty
from local_eagle.runtime.stats import RoundStats
from local_eagle.runtime.tree import VerifyTree
from local_eagle.runtime.treeverify import TreeBatch, decode_together

if TYPE_CHECKING:
    from local_eagle.runtime.grammar import Constraint
    from local_eagle.runtime.seams import FeatureCapture
    from local_eagle.runtime.sequence import Sequence


@dataclass
class Drafted:
    """One sequence's draft for a round, as the verify and accept phases take it."""

    last_token: int
    tree: VerifyTree
    observed: RoundStats
    dists: Callable[[int], np.ndarray]  # sampling: the draft distribution at a row (its children were drawn from)
    refused: tuple[int, float] | None = None  # a chain's draft computed but not verified, with its confidence
    tree_round: bool = False  # drafted by the tree rounds, which learn from it their own way
    started: float = 0.0


class TargetChoices:
    """The target's token after each row (greedy), computed only for the rows the walk reaches, and each row's
    processed logits (sampling): the rows of one sequence from ``offset`` in the round's call.

    Under a grammar (``Sequence.constraint``) each row is masked as the target alone would mask it there: with
    the grammar's state after the tokens on the row's path, followed only along the rows the walk reaches (their
    tokens were accepted, so the grammar allowed them)."""

    def __init__(self, gen: Sequence, tree: VerifyTree, last_token: int, offset: int = 0) -> None:
        self.gen, self.tree, self.last_token, self.offset = gen, tree, last_token, offset
        self.states = None if gen.constraint is None else {0: gen.constraint}

    def __getitem__(self, row: int) -> int:
        logits = self._processed(row)
        best = int(np.argmax(logits))
        if self.states is None:
            return best
        started = clock()
        state = self.state(row)
        if not (state.ended or state.allows(best)):  # the mask only lowers others: an allowed argmax stays
            best = int(np.argmax(state.apply(np.array(logits, dtype=np.float32))))
        self.gen.add_grammar_seconds(clock() - started)
        return best

    def row_logits(self, row: int) -> np.ndarray:
        logits = self._processed(row)
        if self.states is None:
            return logits
        started = clock()
        state = self.state(row)
        if not state.ended:  # past an end token nothing is emitted from here
            logits = state.apply(np.array(logits, dtype=np.float32))
        self.gen.add_grammar_seconds(clock() - started)
        return logits

    def state(self, row: int) -> Constraint:
        """The grammar after the tokens on ``row``'s path."""
        assert self.states is not None
        if row not in self.states:
            state = self.state(int(self.tree.parents[row])).copy()
            state.consume(int(self.tree.tokens[row]))
            self.states[row] = state
        return self.states[row]

    def _processed(self, row: int) -> np.ndarray:
        gen = self.gen
        logits = gen.target.logits_view(self.offset + row, gen.engine.n_vocab)
        if not gen.penalized:
            return logits
        history = gen.recent_history(self.last_token, self.tree.path_tokens(row))
        return apply_repeat_penalty(logits, history, gen.sampling.repeat_penalty, gen.sampling.repeat_last_n)


class VerifiedFeatures:
    """The captured features of a verify call's rows, read only where a sequence asks (``features[rows]``).

    A sequence keeps the features of its accepted path alone, a few rows of a call that may hold 64: on an 8B target
    reading them all copied 64 x 3 x 4096 floats (3 MB) a round for a handful of rows. The reads must come before the
    target's next decode (every sequence settles before it; a read after one is an error, not stale rows).
    """

    def __init__(self, capture: FeatureCapture, n_rows: int, target: Context) -> None:
        self.capture, self.n_rows, self.target = capture, n_rows, target
        self.call = target.n_calls

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        if self.target.n_calls != self.call:
            raise LocalEagleError("the target decoded again before the round read its verify's features")
        return self.capture.features(self.n_rows, np.asarray(rows))


def verify(
    drafts: list[tuple[Sequence, Drafted]], capture: bool, replay: TreeBatch | None = None
) -> tuple[list[TreeBatch], VerifiedFeatures | None]:
    """Decode every sequence's tree in one target call; the batches (for keeping the accepted paths) and, when
    ``capture``, the features of every row of the call (a sequence's from its offset), read when indexed.

    ``verify_seconds`` is the complete call: on a GPU llama.cpp returns from the decode before the device is done,
    so the call waits for it (``Context.synchronize``) before the clock stops. The accept phase reads the logits
    right after, which waits the same way, so this moves the wait into the verify's time and adds none; without
    it a call without features timed ~0.3 ms on an H100 where it takes 4 ms, the rest landing in host time.

    ``replay``: rows a checkpoint rollback dropped (``rounds.Generation.replay``), decoded first in the same call; the
    features of the sequences' rows then start after them.
    """
    started = clock()
    gen = drafts[0][0]
    batches = [TreeBatch(d.tree, g.n_past, g.seq, g.prefix_tags) for g, d in drafts]
    leading = [replay] if replay is not None else []
    decode_together(gen.target, leading + batches)
    gen.target.synchronize()
    rows = sum(len(b.tree) for b in leading + batches)
    features = VerifiedFeatures(gen.capture, rows, gen.target) if capture else None
    seconds = clock() - started
    for _, d in drafts:
        d.observed.verify_seconds = seconds
        d.observed.captured = capture
    return batches, features

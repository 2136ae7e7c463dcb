"""A chain's draft phase one drafter step at a time, so that a round of many sequences drafts them all together.

A chain is drafted step by step: the first step catches the drafter up on the rows queued for it
(``runtime.feed``) and its last row gives the first draft; each later step decodes the previous draft with the
drafter's own post-norm state. :class:`ChainDraft` holds one sequence's chain between steps and decides, from the
drafter's output only, whether it goes on (the draft lengths, ``draft_p_min``), so the verified output stays the
target's own. :func:`draft_chains` runs the steps of every chain of a round, one drafter call a step for all of
them, each row on its own sequence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from local_eagle.runtime.clock import clock
from local_eagle.runtime.feed import PROBE_CONTEXT
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.sampling import choose
from local_eagle.runtime.stats import RoundStats
from local_eagle.runtime.tree import VerifyTree
from local_eagle.runtime.verify import Drafted

if TYPE_CHECKING:
    from local_eagle.runtime.sequence import Sequence


class ChainDraft:
    """One sequence's chain in the making: its drafts, their distributions (sampling), the drafter's last state."""

    def __init__(self, gen: Sequence, last_token: int, observed: RoundStats, limit: int | None = None) -> None:
        self.gen, self.last_token, self.observed = gen, last_token, observed
        self.drafts: list[int] = []
        self.distributions: list[np.ndarray] = []
        self.refused: tuple[int, float] | None = None
        self.prenorm: np.ndarray | None = None
        self.started = clock()
        self.bound = max(0, gen.draft_length(limit)) if gen.speculative else 0
        # the grammar along the drafts (unless the drafts are left unconstrained, as llama-server drafts)
        self.state = None if gen.constraint is None or not gen.request.draft_grammar else gen.constraint.copy()
        lengths = gen.lengths
        self.active = False
        if lengths is not None:
            if isinstance(lengths, DraftLengthPolicy):  # where probes cannot pay, they mostly re-check the costs
                gen.feed.window = PROBE_CONTEXT if lengths.hopeless else gen.window
                if lengths.hopeless:  # rows queued under a wider window (a prompt's) are trimmed to this one too
                    gen.feed.trim()
            lengths.begin_round(self.bound, ready=gen.feed.ready(gen.n_past))
            self.active = lengths.extend()
        if not self.active:
            self._force()

    @property
    def position(self) -> int:
        """The position the next later step decodes its row at (the previous draft's)."""
        return self.gen.n_past + len(self.drafts) - 1

    def take(
        self, row: np.ndarray, prenorm: np.ndarray, columns: np.ndarray | None = None, confidence: float | None = None
    ) -> None:
        """A step's output (its logits row and post-step state): draft from it, or end the chain. ``columns``: the
        row holds only those target ids' logits (``Sequence.draft_columns``, a greedy chain's), else every id's.
        ``confidence``: the drafter's own measure of this step (a block row's, ``Block.row_cut``), which
        ``draft_p_min`` and the policy then weigh instead of the row's top probability."""
        gen, observed = self.gen, self.observed
        first = not self.drafts
        observed.steps += 1
        if first:
            observed.catch_up_seconds = clock() - self.started
        else:
            observed.draft_rows += 1
        self.prenorm = prenorm
        if self.state is not None:
            started = clock()
            allowed = np.isfinite(self.state.apply(row)).any()
            gen.add_grammar_seconds(clock() - started)
            if not allowed:
                self.active = False  # the drafter has no token the grammar allows here
                return
        weighs = confidence is None and (gen.draft_p_min > 0 or gen.lengths.weighs)  # else no softmax to compute
        if columns is not None:  # greedy and unpenalised: the target's own choice rule is the argmax
            token, distribution = int(columns[int(np.argmax(row))]), None
            computed = gen.column_confidence(row) if weighs else 1.0
        else:
            token, distribution = choose(row, gen.recent_history(self.last_token, self.drafts), gen.sampling, gen.rng)
            computed = gen.confidence(row, distribution) if weighs else 1.0
        confidence = computed if confidence is None else confidence
        if confidence < gen.draft_p_min or not gen.lengths.take(confidence):
            self.refused = (token, confidence)
            self.active = False
            return
        self._add(token, distribution)
        self.active = gen.lengths.extend() and not gen.engine.model.is_eog(token)
        if self.state is not None and self.active:
            started = clock()
            forced = self.state.forced()
            gen.add_grammar_seconds(clock() - started)
            if forced:
                self.active = False  # the grammar's forced tokens end the chain: the drafter has no state past them
                self._force()

    def _add(self, token: int, distribution: np.ndarray | None) -> None:
        self.drafts.append(token)
        if distribution is not None:
            self.distributions.append(distribution)
        if self.state is not None:
            started = clock()
            self.state.consume(token)
            self.gen.add_grammar_seconds(clock() - started)

    def _force(self) -> None:
        """Append the tokens the grammar forces next (a schema's keys and punctuation), up to the round's bound:
        no drafter call, and the target keeps them (a one-hot draft distribution where sampling)."""
        if self.state is None or self.state.stopped():
            return
        n_vocab = self.gen.engine.n_vocab
        started = clock()
        forced = self.state.forced()[: self.bound - len(self.drafts)]
        self.gen.add_grammar_seconds(clock() - started)
        self.observed.forced += len(forced)
        for token in forced:
            one_hot = None
            if not self.gen.sampling.greedy:
                one_hot = np.zeros(n_vocab)
                one_hot[token] = 1.0
            self._add(token, one_hot)

    def drafted(self) -> Drafted:
        """The chain once its steps have run, as the verify phase takes it: the tree with one branch."""
        observed = self.observed
        observed.drafted = len(self.drafts)
        lengths = self.gen.lengths
        observed.probe = lengths is not None and lengths.probing and observed.drafted > 0
        observed.draft_seconds = clock() - self.started
        tree = VerifyTree.chain(self.last_token, self.drafts)
        return Drafted(self.last_token, tree, observed, self.distributions.__getitem__, self.refused,
                       started=self.started)  # fmt: skip


def draft_chains(chains: list[ChainDraft]) -> list[tuple[int, float]]:
    """Run a round's chains, one drafter call a step for all that go on: every catch-up in one call, then one row
    per chain a step, each on its own sequence. Returns each call's rows and seconds (the first the catch-up).

    A lone chain reads only its draft columns (``Sequence.draft_columns``: a greedy chain's draft vocabulary, 8K
    of Gemma's 262K logits) and catches up through its feed, whose decode also gives the rows to the tree
    branches' sequences; several read whole rows.
    """
    calls: list[tuple[int, float]] = []
    active = [c for c in chains if c.active]
    if not active:
        return calls
    gen = active[0].gen
    drafter = gen.drafter
    if drafter.drafts_blocks:
        return [draft_block(c) for c in active]
    one = len(chains) == 1
    columns = gen.draft_columns if one else None
    started = clock()
    if one:
        chain = active[0]
        logits, prenorm, chain.observed.catch_up_rows = gen.feed.catch_up(columns)
        chain.take(logits[0], prenorm, columns)
        calls.append((chain.observed.catch_up_rows, clock() - started))
    else:
        queued = [c.gen.feed.take_rows() for c in active]
        tokens = np.concatenate([q[0] for q in queued])
        g = drafter.encode(np.concatenate([q[1] for q in queued]))
        positions = np.concatenate([q[2] for q in queued])
        seqs = [c.gen.seq for c, q in zip(active, queued, strict=True) for _ in range(len(q[0]))]
        last = np.cumsum([len(q[0]) for q in queued]) - 1
        logits, prenorm = drafter.decode_rows(tokens, g, positions, seqs, last)
        for i, (c, q) in enumerate(zip(active, queued, strict=True)):
            c.observed.catch_up_rows = len(q[0])
            c.take(logits[i], prenorm[i : i + 1])
        calls.append((len(tokens), clock() - started))
    while True:
        active = [c for c in chains if c.active]
        if not active:
            return calls
        started = clock()
        if one:
            chain = active[0]
            g = drafter.feedback(chain.prenorm)
            logits, prenorm = drafter.decode(np.array([chain.drafts[-1]]), g, np.array([chain.position]), gen.seq,
                                             columns=columns)  # fmt: skip
        else:
            g = drafter.feedback(np.concatenate([c.prenorm for c in active]))
            logits, prenorm = drafter.decode_rows(
                np.array([c.drafts[-1] for c in active], dtype=np.int32), g, np.array([c.position for c in active]),
                [c.gen.seq for c in active], np.arange(len(active)),
            )  # fmt: skip
        for i, c in enumerate(active):
            c.take(logits[i], prenorm[i : i + 1], columns)
        calls.append((len(active), clock() - started))


def draft_block(chain: ChainDraft) -> tuple[int, float]:
    """A block drafter's chain (``runtime.dflash``): the queued rows' features injected, then one pass proposes the
    whole block, whose rows the chain takes in order as it would take a step's (the policy, ``draft_p_min``, the
    grammar and sampling cut it where they would cut a chain). One drafter call: the catch-up's. Returns its rows
    and seconds.

    A fixed draft's block has the request's ``draft_max`` masks whatever this round's bound, as draft-dflash
    decodes ``n_max`` of them and cuts the draft: its rows attend both ways, so a shorter block drafts other tokens
    (the end of a generation differed from llama.cpp's). Only the context's room shortens it. The cost policy's
    rounds (which llama.cpp has not) decode the length it chose, which it priced."""
    gen, observed = chain.gen, chain.observed
    drafter = gen.drafter
    started = clock()
    _, features, positions = gen.feed.take_rows()
    drafter.push(positions, features, gen.seq)
    n_draft = chain.bound if gen.adaptive else max(chain.bound, min(gen.draft_max, gen.engine.n_ctx - gen.n_past - 1))
    block = drafter.propose(chain.last_token, gen.n_past, gen.seq, n_draft=n_draft)
    observed.catch_up_rows = len(positions)
    # llama.cpp drafts greedily and cuts at p_min by each row's own measure (Block.row_cut); a sampled draft is
    # weighed by the distribution it was drawn from, unless the drafter's confidence head speaks for the row
    weighs = gen.draft_p_min > 0 or gen.lengths.weighs
    own = weighs and (gen.sampling.greedy or block.confidence is not None)
    for i, row in enumerate(block.logits):
        chain.take(row, None, confidence=block.row_cut(i) if own else None)
        if not chain.active:
            break
    observed.steps, observed.draft_rows = 1, 0  # one call, whatever the block's rows
    return len(positions) + len(block.logits) + 1, clock() - started

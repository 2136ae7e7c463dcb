"""The draft-verify loop's driver: one round for one to many sequences, and the phases it runs.

Each round runs the phases llama.cpp's ``common/speculative`` names (docs/architecture.md): *draft* a chain
(``runtime.chain``) or a tree (``runtime.treeround``) per sequence, as long as the draft lengths say
(``runtime.policy``), *verify* every sequence's drafts in one target decode (``runtime.verify``), *accept* a prefix
(greedy match or rejection sampling), *commit* it (the target's cache rolled back to it, its rows queued for the
drafter, ``runtime.feed``), and *learn* (the policy hears what it cost). The *prefill* before the first round
decodes the prompt. A lone request is a round of one sequence (:meth:`Generation.run`); a parallel engine's
scheduler (``runtime.batch``) runs the same :func:`run_round` over every seat that is past its prefill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.random  # noqa: F401  numpy 2 imports it on first use: 11 ms into the first generation, not at load

from local_eagle.llamacpp.model import Context
from local_eagle.runtime.blocktree import BlockTreeRounds
from local_eagle.runtime.chain import ChainDraft, draft_chains
from local_eagle.runtime.clock import clock
from local_eagle.runtime.feed import IDLE_CONTEXT, PROBE_CONTEXT
from local_eagle.runtime.policy.batch import BatchPolicy
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.lengths import FixedLengths
from local_eagle.runtime.policy.rounds import capture_wanted
from local_eagle.runtime.sampling import apply_repeat_penalty, choose, probabilities
from local_eagle.runtime.sequence import (
    STOP_CANCELLED,
    STOP_CONTEXT,
    STOP_EOS,
    STOP_LENGTH,
    STOP_STRING,
    EngineView,
    GenerationResult,
    Request,
    Sequence,
    TokenLogprob,
    token_logprob,
)
from local_eagle.runtime.stats import RoundStats
from local_eagle.runtime.tree import VerifyTree, walk_greedy, walk_sampling
from local_eagle.runtime.treeround import TreeRounds
from local_eagle.runtime.treeverify import TreeBatch
from local_eagle.runtime.verify import Drafted, TargetChoices, VerifiedFeatures, verify

if TYPE_CHECKING:
    from local_eagle.runtime.grammar import Constraint

__all__ = [
    "STOP_CANCELLED",
    "STOP_CONTEXT",
    "STOP_EOS",
    "STOP_LENGTH",
    "STOP_STRING",
    "Generation",
    "GenerationResult",
    "TokenLogprob",
    "decode_prompt",
    "prompt_logits",
    "run_round",
    "token_logprob",
]


def decode_prompt(
    ctx: Context, prompt: np.ndarray, cancelled: Callable[[], bool] | None = None, seq: int = 0
) -> Iterator[int]:
    """Decode ``prompt`` into an empty ``ctx`` in ubatch-sized chunks, only the last row with logits.

    Yields each chunk's row count (for reading its features). Speculative and plain decoding split a
    prompt this one way, so both start from the same cache and the same first token; the identity
    check's replays (``runtime.identity``) use it too. ``cancelled`` is asked before each chunk; when it
    says so the decoding stops there (fewer rows yielded than the prompt has).
    """
    ubatch, n = ctx.n_ubatch, len(prompt)
    for start in range(0, n, ubatch):
        if cancelled is not None and cancelled():
            return
        chunk = prompt[start : start + ubatch]
        outputs = np.zeros(len(chunk), dtype=bool)
        outputs[-1] = start + len(chunk) == n
        ctx.decode(chunk, np.arange(start, start + len(chunk)), outputs, seq=seq)
        yield len(chunk)


def prompt_logits(ctx: Context, n_prompt: int, n_vocab: int) -> np.ndarray:
    """The logits of the prompt's last row after :func:`decode_prompt` (the first token's)."""
    return ctx.logits(n_prompt - 1 - (n_prompt - 1) // ctx.n_ubatch * ctx.n_ubatch, n_vocab)


def run_round(gens: list[Generation], last_tokens: list[int], batch: BatchPolicy | None = None) -> list[list[int]]:
    """One draft-verify round for every sequence in ``gens`` (each after its last token); the tokens each adds.

    The policy decides how much each drafts: a lone adaptive sequence by the engine's draft-length policy, step by
    step (it judges a lone sequence's steady state: idle capture paused, probes, the drafter's catch-up); several
    by ``batch``, one length for the whole round. Every sequence then drafts (a tree where its tree rounds want
    one), one target call verifies all the drafts, and each accepts, commits and learns on its own.
    """
    started = clock()
    lone = batch is None or len(gens) == 1 and gens[0].adaptive
    k, window = 0, IDLE_CONTEXT
    if lone:
        for gen in gens:
            if gen.adaptive and not isinstance(gen.lengths, DraftLengthPolicy):
                gen.lengths = gen.engine.lengths.for_bound(gen.draft_max)
                gen.pausable = gen.capture is not None and gen.capture.can_pause
    else:
        assert batch is not None
        adaptive = [g for g in gens if g.adaptive]
        if adaptive:
            bound = min(max(g.draft_length() for g in adaptive), gens[0].target.n_batch // len(gens) - 1)
            k = batch.choose(len(gens), max(0, bound))
        # features for the window before a probe only (recording costs a share of every call), which the probe then
        # drafts from (a whole window there would leave its feeds not ready: a probe of no drafts); a whole window
        # while the batch drafts
        window = IDLE_CONTEXT if batch.last_k > 0 and not batch.probing else PROBE_CONTEXT
        for gen in adaptive:
            gen.lengths, gen.pausable = FixedLengths(), False  # the batch's length, not a lone policy's
            gen.feed.window = max(window, k + 1)
    drafted: list[Drafted | None] = []
    chains: list[ChainDraft] = []
    for gen, last in zip(gens, last_tokens, strict=True):
        if gen.trees is not None and gen.trees.wanted():
            drafted.append(gen.trees.draft_round(last))
        else:
            chains.append(ChainDraft(gen, last, RoundStats(), None if lone or not gen.adaptive else k))
            drafted.append(None)
    calls = draft_chains(chains)
    chained = iter(chains)
    rounds = [(gen, d if d is not None else next(chained).drafted()) for gen, d in zip(gens, drafted, strict=True)]
    any_drafted = any(d.tree.drafted for _, d in rounds)
    capture = gens[0].capture
    if lone:
        gen = gens[0]
        lengths = gen.lengths
        policy = lengths if isinstance(lengths, DraftLengthPolicy) else None
        until = 0 if policy is None or any_drafted else policy.rounds_until_draft()
        wanted = gen.speculative and capture_wanted(any_drafted, policy is None, until, gen.feed.window)
        pause = gen.pausable
    else:
        assert batch is not None
        drafting, fixed = any_drafted or k > 0, any(g.speculative and not g.adaptive for g in gens)
        until = 0 if drafting or fixed else batch.rounds_until_probe()
        wanted = capture is not None and any(g.speculative for g in gens) and capture_wanted(
            drafting, fixed, until, window + 1
        )  # fmt: skip
        pause = capture is not None and capture.can_pause
    if pause:
        capture.pause(not wanted)
    replay = gens[0].replay_batch(any_drafted) if len(gens) == 1 else None
    batches, features = verify(rounds, wanted, replay)
    offset = 0 if replay is None else len(replay.tree)
    accepted: list[list[int]] = []
    learnt: tuple[list[int], list[int]] = ([], [])
    for (gen, d), b in zip(rounds, batches, strict=True):
        accepted.append(gen.settle(d, b, features if gen.speculative else None, offset))
        offset += len(d.tree)
        if gen.adaptive:
            learnt[0].append(d.tree.drafted)
            learnt[1].append(d.observed.accepted)
    if not lone and learnt[0]:
        assert batch is not None
        verify_seconds = rounds[0][1].observed.verify_seconds
        host = max(0.0, clock() - started - verify_seconds - sum(s for _, s in calls))
        batch.observe(offset, verify_seconds, *learnt, drafter=calls, host=host)
    return accepted


class Generation(Sequence):
    """One call to ``Engine.stream``: a :class:`Sequence` and the phases that move it round by round."""

    def __init__(self, engine: EngineView, request: Request, constraint: Constraint | None = None) -> None:
        super().__init__(engine, request, constraint)
        tree = request.tree
        self.trees: TreeRounds | None = None
        if tree is not None and self.speculative:
            self.trees = (BlockTreeRounds if self.drafter.drafts_blocks else TreeRounds)(self, tree)

    def run(self) -> Iterator[str]:
        """The generation alone, in the caller's thread: prefill, then rounds of one until a stop."""
        self.reset_caches()
        started = clock()
        first = self.prefill()
        self.spec_stats.prefill_seconds = clock() - started
        if first is None:
            return self.cancelled_result()
        pending = [first]  # tokens chosen but not yet emitted
        started, llama = clock(), self.llama_seconds()
        try:
            while True:
                yield from self.emit(pending)
                if self.ended():
                    break
                pending = run_round([self], [pending[-1]])[0]
        finally:
            stats = self.spec_stats
            stats.decode_seconds = clock() - started
            if llama is not None:
                stats.python_seconds = max(0.0, stats.decode_seconds - (self.llama_seconds() - llama))
        tail, result = self.finish()
        if tail:
            yield tail
        return result

    def llama_seconds(self) -> float | None:
        """Seconds the target's and the drafter's contexts have spent inside llama.cpp so far (None for a context
        that does not keep the count)."""
        drafter = self.drafter
        contexts = [self.target] if drafter is None else [self.target, drafter.ctx]
        seconds = [getattr(ctx, "llama_seconds", None) for ctx in contexts]
        return None if None in seconds else sum(seconds)

    def reset_caches(self) -> None:
        drafter, capture = self.drafter, self.capture
        if self.shared:  # other generations' cells stay; capturing stays on for all of them
            self.target.seq_remove(self.seq)
            if drafter is not None:
                drafter.ctx.seq_remove(self.seq)
            if self.feed is not None:
                self.feed.reset()
            if capture is not None and capture.paused:
                capture.pause(False)
        else:
            self.target.clear()
            self.prefix_tags.reset()
            if self.feed is not None:
                self.feed.reset()
            if capture is not None:
                capture.set_enabled(self.speculative)
        if self.speculative:  # an MTP head's row at its position 0 (an EAGLE drafter has none)
            drafter.prime(int(self.request.prompt[0]), self.seq)

    # --- phases -------------------------------------------------------------------------------

    def prefill(self) -> int | None:
        """Decode the prompt into the target and queue its rows for the drafter; the first token (None
        when ``cancelled`` stopped the prompt's decoding between chunks: a server dropping a long prefill)."""
        chunks = self.prefill_chunks()
        while True:
            try:
                next(chunks)
            except StopIteration as done:
                return done.value

    def prefill_chunks(self) -> Iterator[None]:
        """:meth:`prefill` one ubatch at a time (a batch runs other sequences' rounds between the chunks); returns
        the first token, or None when cancelled.

        The drafter decodes the prompt's rows here too when drafting is likely to start at once (fixed
        drafting, or a policy that drafted lately); otherwise they wait, and only the last few are kept.
        """
        prompt = self.request.prompt
        n_prompt = len(prompt)
        features = []
        decoded = 0
        for rows in decode_prompt(self.target, prompt, self.request.cancelled, self.seq):
            decoded += rows
            if self.speculative and self.prefill_features:
                features.append(self.capture.features(rows))
            if decoded < n_prompt:  # the last chunk's logits are read before anything else decodes
                yield
        if decoded < n_prompt:
            return None
        logits = prompt_logits(self.target, n_prompt, self.engine.n_vocab)
        if self.constraint is not None:
            self.constraint.apply(logits)
        token, _ = choose(logits, np.asarray(self.history), self.sampling, self.rng)
        if self.request.logprobs is not None:
            processed = apply_repeat_penalty(logits, np.asarray(self.history), self.sampling.repeat_penalty,
                                             self.sampling.repeat_last_n)  # fmt: skip
            self.token_logprobs.append(token_logprob(processed, token, self.request.logprobs))
        if self.constraint is not None:
            self.constraint.consume(token)
        if self.speculative and not self.prefill_features:  # the drafter starts from a window of later rows
            self.feed.skip(0, n_prompt)
        elif self.speculative:
            self.feed.push(0, np.append(prompt[1:], token), np.concatenate(features))
            policy = self.lengths if isinstance(self.lengths, DraftLengthPolicy) else None
            if self.lengths is not None and (policy is None or policy.idle_rounds < IDLE_CONTEXT):
                self.feed.flush()
            else:
                self.feed.trim()
        self.n_past = n_prompt
        return token

    def settle(self, drafted: Drafted, batch: TreeBatch, features: VerifiedFeatures | None, offset: int) -> list[int]:
        """Accept, commit and learn once the round's target call has run (this sequence's rows from ``offset``);
        the tokens the round adds."""
        observed, tree = drafted.observed, drafted.tree
        path, next_token = self.accept(drafted, offset)
        accepted = [int(tree.tokens[r]) for r in path] + [next_token]
        if self.constraint is not None:  # up to an end token: the generation stops there
            model = self.engine.model
            started = clock()
            self.constraint.consume(accepted[: next((i + 1 for i, t in enumerate(accepted) if model.is_eog(t)), None)])
            self.add_grammar_seconds(clock() - started)
        rows = None if features is None else features[offset + np.array([0, *path])]  # before a replay decodes
        started = clock()
        if self.rollback.saved is not None and len(path) < drafted.tree.drafted:
            self.replay(drafted.last_token, accepted[:-1])
        else:
            batch.keep(self.target, path[-1] if path else 0)
            self.rollback.saved, self.rollback.rows = None, []
        observed.rollback_seconds = clock() - started
        self.commit(drafted.last_token, accepted, rows, observed)
        if drafted.tree_round:
            self.trees.learn(drafted, path, accepted)
        else:
            self.learn(observed, drafted.refused, next_token, clock() - drafted.started)
            self.spec_stats.observe(observed)
        return accepted

    def replay(self, last_token: int, kept: list[int]) -> None:
        """Roll a chain back by the round's checkpoint (a target without recurrent-state snapshots): the recurrent
        state as before the verify, the verify's rows (and any replayed with it) dropped from the attention cache;
        the kept rows are decoded again with the next round's verify, in the same target call, or now in a call of
        their own once more than a chain's worth of them wait.

        The verify's logits and features stay the round's: the replay only rebuilds the cache, as
        ``speculative-simple``'s ``load_tgt`` does (there the kept tokens are the next verify's draft). The
        checkpoint stays valid while the rows wait: the state is the one it saved.
        """
        rollback = self.rollback
        assert rollback.saved is not None
        start = self.n_past - len(rollback.rows)
        rows = [*rollback.rows, last_token, *kept]
        self.target.restore(rollback.saved, self.seq)
        self.target.remove_from(start, self.seq)
        if len(rows) <= self.draft_max + 1:
            rollback.rows = rows
            return
        self.target.decode(np.array(rows, dtype=np.int32), start + np.arange(len(rows)), False, seq=self.seq)
        self.spec_stats.replay_calls += 1
        rollback.saved, rollback.rows = None, []

    def replay_batch(self, drafted: bool) -> TreeBatch | None:
        """Before the verify, whose rows enter the recurrent state: the round's checkpoint (a target rolled back by
        one), and the kept rows an earlier restore dropped, decoded first in this verify's call (None: none)."""
        rollback = self.rollback
        if self.checkpoints and not rollback.rows:
            rollback.saved = self.target.checkpoint(self.seq) if drafted else None
        rows = rollback.rows
        if not rows:
            return None
        return TreeBatch(VerifyTree.chain(rows[0], rows[1:]), self.n_past - len(rows), self.seq)

    def accept(self, drafted: Drafted, offset: int = 0) -> tuple[list[int], int]:
        """The rows of the tree the target keeps (root excluded) and the token it adds after them.

        Every row's logits go through the same processing the target alone would apply at that position, so the
        output is the target's own: token-identical greedy, same distribution when sampling (recursive rejection
        sampling over siblings; on a chain, the classic rejection sampling of each draft in turn).
        """
        started = clock()
        tree, observed = drafted.tree, drafted.observed
        choices = TargetChoices(self, tree, drafted.last_token, offset)
        if self.sampling.greedy:
            path, next_token = walk_greedy(tree, choices)
        else:

            def target(row: int) -> np.ndarray:
                return probabilities(choices.row_logits(row), self.sampling)

            path, next_token = walk_sampling(tree, target, drafted.dists, self.rng)
        top = self.request.logprobs
        if top is not None:  # the target's own, from the rows that verified each token
            tokens = [int(tree.tokens[r]) for r in path] + [next_token]
            for row, token in zip([0, *path], tokens, strict=True):
                self.token_logprobs.append(token_logprob(choices.row_logits(row), token, top))
        observed.accepted = len(path)
        observed.accept_seconds = clock() - started
        return path, next_token

    def commit(
        self, last_token: int, accepted: list[int], verified_features: np.ndarray | None, observed: RoundStats
    ) -> None:
        """Keep the accepted path (the target's cache already holds only it: ``TreeBatch.keep``) and queue its rows
        for the drafter.

        The drafter's own rows past ``n_past`` (its chain, fed its own feedback) are dropped: the queued
        rows carry the target's features instead. The queue keeps at most ``feed.window`` rows.
        """
        n_accepted = len(accepted) - 1
        n_past = self.n_past
        if self.speculative:
            started = clock()
            if observed.steps > 1:
                self.drafter.remove_from(n_past, self.seq)
            if verified_features is None:
                self.feed.skip(n_past, n_accepted + 1)
            else:
                self.feed.push(n_past, accepted, verified_features[: n_accepted + 1])
                if self.feed.pending > self.feed.window:
                    self.feed.trim()
            observed.feed_seconds = clock() - started
        self.history.extend([last_token, *accepted[:-1]])
        self.n_past += 1 + n_accepted

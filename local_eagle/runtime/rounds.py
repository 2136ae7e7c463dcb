"""One generation's draft-verify rounds: the phases of the loop and the state they share.

Each round runs the phases llama.cpp's ``common/speculative`` names (docs/architecture.md): *draft* a
chain with the drafter, as long as the draft lengths say (``runtime.policy.lengths``), *verify* it in one target
decode, *accept* a prefix (greedy match or rejection sampling), *commit* it (the target's cache rolled back
to it, its rows queued for the drafter, ``runtime.feed``), and *learn* (the policy hears what it cost). The
*prefill* before the first round decodes the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.random  # noqa: F401  numpy 2 imports it on first use: 11 ms into the first generation, not at load

from local_eagle.llamacpp.model import Context
from local_eagle.runtime.chain import ChainDraft, draft_alone
from local_eagle.runtime.feed import IDLE_CONTEXT
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.lengths import DraftLengths, FixedLengths, state_dict
from local_eagle.runtime.sampling import (
    SamplingParams,
    apply_repeat_penalty,
    choose,
    probabilities,
    top_probability,
)
from local_eagle.runtime.stats import GenerationStats, RoundStats, SpecStats
from local_eagle.runtime.textstream import TextStream
from local_eagle.runtime.tree import TreeShape, VerifyTree, walk_greedy, walk_sampling
from local_eagle.runtime.treeround import TreeRounds
from local_eagle.runtime.treeverify import PrefixTags, TreeBatch
from local_eagle.runtime.verify import Drafted, TargetChoices, VerifiedFeatures, verify

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine
    from local_eagle.runtime.grammar import Constraint

STOP_EOS = "eos"
STOP_STRING = "stop"
STOP_LENGTH = "length"
STOP_CONTEXT = "context"
STOP_CANCELLED = "cancelled"
NO_HISTORY = np.zeros(0, dtype=np.int64)
clock = time.perf_counter


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    stats: GenerationStats
    spec_stats: SpecStats | None = None
    logprobs: list[TokenLogprob] | None = None  # one per token, when asked for (``Engine.stream(logprobs=)``)


@dataclass
class TokenLogprob:
    """A generated token's log-probability under the target (its processed logits: repeat penalty and grammar, not
    temperature), from the call that verified it, with the most likely alternatives there when asked for."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """``token``'s log-softmax in ``logits``, and the ``top`` most likely tokens' (most likely first)."""
    finite = np.isfinite(logits)
    row = logits[finite] if not finite.all() else logits
    peak = float(row.max())
    norm = peak + float(np.log(np.exp(row - peak).sum()))
    best: list[tuple[int, float]] = []
    if top > 0:
        ids = np.argpartition(logits, -top)[-top:]
        ids = ids[np.argsort(-logits[ids])]
        best = [(int(i), float(logits[i]) - norm) for i in ids if np.isfinite(logits[i])]
    return TokenLogprob(int(token), float(logits[token]) - norm, best)


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


class Generation:
    """One call to :meth:`Engine.stream`: the state its phases share, and the phases.

    Invariant at the start of every round, with ``last_token`` the last chosen token, at
    position ``n_past``: the target's cache holds positions 0..n_past-1 (``last_token`` is not
    decoded yet); the drafter's rows 0..n_past-1, row P being (token[P+1], g[P]) with g the
    drafter's projection of the target features at P, are either in its cache or queued in the
    engine's :class:`DrafterFeed` (the queued ones after the cached ones; after a long idle
    stretch only the last few are kept). The round's first draft step decodes the queue.
    """

    def __init__(
        self,
        engine: Engine,
        prompt: np.ndarray,
        max_tokens: int,
        sampling: SamplingParams,
        draft_max: int,
        draft_p_min: float,
        stop: list[str],
        adaptive: bool = False,
        tree: TreeShape | None = None,
    ) -> None:
        self.engine = engine
        self.target = engine.ctx
        self.drafter = engine.drafter
        self.capture = engine.capture
        self.feed = engine.feed
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.sampling = sampling
        self.draft_max = draft_max
        self.draft_p_min = draft_p_min
        self.speculative = self.drafter is not None and self.capture is not None and draft_max > 0
        self.adaptive = adaptive and self.speculative
        self.lengths: DraftLengths | None = None  # None: no drafting (plain decoding, or the policy is not built yet)
        if self.adaptive:
            self.lengths = engine.lengths.for_bound(draft_max)
        elif self.speculative:
            self.lengths = FixedLengths()
        self.window = max(IDLE_CONTEXT, draft_max + 1)
        if self.feed is not None:
            self.feed.window = self.window
        self.pausable = self.adaptive and self.capture is not None and self.capture.can_pause
        self.draft_ids = self.drafter.spec.draft_ids if self.drafter is not None else None
        self._confidence_row = np.empty(0 if self.draft_ids is None else len(self.draft_ids), dtype=np.float32)
        self.penalized = sampling.repeat_penalty != 1.0  # the token history is only read by the repeat penalty
        self.rng = np.random.default_rng(sampling.seed)
        self.history = [int(token) for token in prompt]
        self.text = TextStream(stop)
        self.output_tokens: list[int] = []
        self.stop_reason = ""
        self.spec_stats = SpecStats.for_draft_max(max(draft_max, 0 if tree is None else tree.nodes))
        self.spec_stats.adaptive = self.adaptive
        self.n_past = 0
        self.seq = 0  # the cache sequence this generation decodes on (a batch's seat, runtime.batch)
        self.constraint: Constraint | None = None  # a grammar the output follows: every choice masked by it
        self.draft_grammar = True  # mask the drafts by the grammar too (False: drafts as if unconstrained)
        self.special = False  # render control tokens (a template's [TOOL_CALLS]) as text, not as nothing
        self.logprobs: int | None = None  # None: none; n: each token's log-probability and the n likeliest
        self.token_logprobs: list[TokenLogprob] = []
        self.grammar_seconds = 0.0  # the grammar's host work (masks, consumes), reported in the stats
        self.prefill_features = True  # record the prompt's features (a batch that has not drafted lately does not)
        self.shared = False  # other generations share the caches: only this one's sequence is cleared
        self.cancelled: Callable[[], bool] | None = None
        self.trees = TreeRounds(self, tree) if tree is not None and self.speculative else None
        self.checkpoints = engine.checkpoints and self.speculative  # rounds roll back by a saved recurrent state
        self.saved = None  # this round's checkpoint of the target's recurrent state (``Context.checkpoint``)
        self.replay_rows: list[int] = []  # kept rows a restore dropped, decoded first in the next verify (``replay``)
        self.prefix_tags = PrefixTags()  # the leaf sequences sharing the target's prefix (tree verifies), from empty

    def run(self) -> Iterator[str]:
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
                pending = self.round(pending[-1])
        finally:
            stats = self.spec_stats
            stats.decode_seconds = clock() - started
            if llama is not None:
                stats.python_seconds = max(0.0, stats.decode_seconds - (self.llama_seconds() - llama))
        tail, result = self.finish()
        if tail:
            yield tail
        return result

    def ended(self) -> bool:
        """After emitting: has the generation stopped (``stop_reason``), the context being full included?"""
        if not self.stop_reason and self.n_past >= self.engine.n_ctx:
            self.stop_reason = STOP_CONTEXT
        return bool(self.stop_reason)

    def cancelled_result(self) -> GenerationResult:
        """The result of a generation whose prefill was cancelled."""
        stats = self.spec_stats.generation_stats(len(self.prompt), 0, STOP_CANCELLED)
        return GenerationResult(text="", tokens=[], stats=stats, spec_stats=self.spec_stats)

    def finish(self) -> tuple[str, GenerationResult]:
        """The text held back for stop strings, and the result (once the generation has stopped)."""
        tail = self.text.finish()
        self.spec_stats.grammar_seconds = self.grammar_seconds
        if isinstance(self.lengths, DraftLengthPolicy):
            self.spec_stats.policy = state_dict(self.lengths.state())
        stats = self.spec_stats.generation_stats(len(self.prompt), len(self.output_tokens), self.stop_reason)
        logprobs = self.token_logprobs[: len(self.output_tokens)] if self.logprobs is not None else None
        return tail, GenerationResult(self.text.text, self.output_tokens, stats, self.spec_stats, logprobs)

    def llama_seconds(self) -> float | None:
        """Seconds the target's and the drafter's contexts have spent inside llama.cpp so far (None for a context
        that does not keep the count)."""
        contexts = [self.target] if self.drafter is None else [self.target, self.drafter.ctx]
        seconds = [getattr(ctx, "llama_seconds", None) for ctx in contexts]
        return None if None in seconds else sum(seconds)

    def reset_caches(self) -> None:
        if self.shared:  # other generations' cells stay; capturing stays on for all of them
            self.target.seq_remove(self.seq)
            if self.drafter is not None:
                self.drafter.ctx.seq_remove(self.seq)
            if self.feed is not None:
                self.feed.reset()
            if self.capture is not None and self.capture.paused:
                self.capture.pause(False)
        else:
            self.target.clear()
            self.prefix_tags.reset()
            if self.feed is not None:
                self.feed.reset()
            if self.capture is not None:
                self.capture.set_enabled(self.speculative)
        if self.speculative:  # an MTP head's row at its position 0 (an EAGLE drafter has none)
            self.drafter.prime(int(self.prompt[0]), self.seq)

    def recent_history(self, last_token: int, drafts: list[int]) -> np.ndarray:
        """The tokens before the next position the repeat penalty reads: its last ``repeat_last_n`` (all where that
        is negative), empty when it is off. Never the whole history for a window: a drafter step, a tree node and a
        verified row each ask, and converting 8K tokens costs 0.3 ms each time."""
        if not self.penalized:
            return NO_HISTORY
        n = self.sampling.repeat_last_n
        if n > 0:
            return np.asarray((self.history[-n:] + [last_token] + drafts)[-n:])
        return np.asarray(self.history + [last_token] + drafts)

    @property
    def draft_columns(self) -> np.ndarray | None:
        """The target ids a greedy chain drafts among, read alone from the drafter's rows (its draft vocabulary: the
        rest of a row is -inf, ``drafter.read_row``); None where a step needs the whole row (sampling, a repeat
        penalty or a grammar read every id, and an MTP head drafts the whole vocabulary)."""
        if self.draft_ids is None or not self.sampling.greedy or self.penalized or self.constraint is not None:
            return None
        return self.draft_ids

    def column_confidence(self, row: np.ndarray) -> float:
        """:meth:`confidence` of a row already gathered to the draft columns (it may be the buffer itself)."""
        buf = self._confidence_row
        np.subtract(row, row.max(), out=buf)
        np.exp(buf, out=buf)
        return float(1.0 / buf.sum())

    def confidence(self, logits: np.ndarray, distribution: np.ndarray | None) -> float:
        """The drafter's top probability for its draft: what the draft-length policy decides on.

        Sampling: the top of the processed draft distribution. Greedy: the softmax top probability over
        the draft vocabulary, computed in a buffer kept for the generation (8K values for Gemma's
        drafter rather than its 262K-wide logits row).
        """
        if distribution is not None:
            return float(distribution.max())
        if self.draft_ids is None:
            return top_probability(logits)
        return self.column_confidence(np.take(logits, self.draft_ids, out=self._confidence_row))

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
        prompt = self.prompt
        n_prompt = len(prompt)
        features = []
        decoded = 0
        for rows in decode_prompt(self.target, prompt, self.cancelled, self.seq):
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
        if self.logprobs is not None:
            processed = apply_repeat_penalty(logits, np.asarray(self.history), self.sampling.repeat_penalty,
                                             self.sampling.repeat_last_n)  # fmt: skip
            self.token_logprobs.append(token_logprob(processed, token, self.logprobs))
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

    def round(self, last_token: int) -> list[int]:
        """One draft-verify round after ``last_token``; the tokens it adds (accepted drafts, then one more)."""
        drafted = self.begin_round(last_token)
        capture = self.capturing(drafted.tree.drafted)
        if self.pausable:
            self.capture.pause(not capture)
        if self.checkpoints and not self.replay_rows:  # before the verify: its rows enter the recurrent state
            self.saved = self.target.checkpoint(self.seq) if drafted.tree.drafted else None
        replay = None
        if self.replay_rows:  # kept rows a checkpoint rollback dropped, decoded first in this verify's call
            rows = self.replay_rows
            replay = TreeBatch(VerifyTree.chain(rows[0], rows[1:]), self.n_past - len(rows), self.seq)
        batches, features = verify([(self, drafted)], capture, replay)
        return self.settle(drafted, batches[0], features, len(self.replay_rows))

    def begin_round(self, last_token: int, limit: int | None = None) -> Drafted:
        """The round's draft phase: a tree where the tree rounds want one (``runtime.treeround``), else a chain of
        at most ``limit`` drafts (default ``draft_max``), the tree with one branch."""
        if self.trees is not None and self.trees.wanted():
            return self.trees.draft_round(last_token)
        chain = self.chain(last_token, limit)
        draft_alone(chain)
        return self.drafted(chain)

    def chain(self, last_token: int, limit: int | None = None) -> ChainDraft:
        """A chain from ``last_token`` of at most ``limit`` drafts (default ``draft_max``), as long as
        ``self.lengths`` says and the drafter's confidence stays above ``draft_p_min``; its steps still to run."""
        return ChainDraft(self, last_token, RoundStats(), limit)

    def drafted(self, chain: ChainDraft) -> Drafted:
        """A chain whose steps have run, as the verify phase takes it: the tree with one branch."""
        drafts, dists, refused = chain.finish()
        tree = VerifyTree.chain(chain.last_token, drafts)
        return Drafted(chain.last_token, tree, chain.observed, dists.__getitem__, refused, started=chain.started)

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
            self.grammar_seconds += clock() - started
        rows = None if features is None else features[offset + np.array([0, *path])]  # before a replay decodes
        started = clock()
        if self.saved is not None and len(path) < drafted.tree.drafted:
            self.replay(drafted.last_token, accepted[:-1])
        else:
            batch.keep(self.target, path[-1] if path else 0)
            self.saved, self.replay_rows = None, []
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
        assert self.saved is not None
        start = self.n_past - len(self.replay_rows)
        rows = [*self.replay_rows, last_token, *kept]
        self.target.restore(self.saved, self.seq)
        self.target.remove_from(start, self.seq)
        if len(rows) <= self.draft_max + 1:
            self.replay_rows = rows
            return
        self.target.decode(np.array(rows, dtype=np.int32), start + np.arange(len(rows)), False, seq=self.seq)
        self.spec_stats.replay_calls += 1
        self.saved, self.replay_rows = None, []

    def draft_length(self, limit: int | None = None) -> int:
        """How many tokens this round may draft: the draft limit (``draft_max`` unless ``limit`` says), the
        context, max_tokens and the batch (verify decodes the last token and the drafts in one batch of at most
        n_batch rows) bound it."""
        if not self.speculative:
            return 0
        remaining = self.max_tokens - len(self.output_tokens)
        limit = self.draft_max if limit is None else limit
        batch = self.target.n_batch - 1 - len(self.replay_rows)
        return min(limit, self.engine.n_ctx - self.n_past - 1, remaining - 1, batch)

    def capturing(self, drafted: int) -> bool:
        """Must this round's verify capture the target's features? Yes while drafting, or when the policy may
        draft within the feed's window of rounds (the catch-up decodes the last ``window`` rows); an idle
        policy's other rounds skip them. Callback recording pauses (it costs a share of every target call,
        ``LayerCapture.pause``); native staging cannot, but its rows are not read (69 us a round of a tiny pair's
        0.7 ms, three layers copied out and queued for a drafter that is not going to draft).
        Only the policy's state decides, never the target's output."""
        if not self.speculative:
            return False
        if drafted or not isinstance(self.lengths, DraftLengthPolicy):
            return True
        return self.lengths.rounds_until_draft() <= self.feed.window

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
        if self.logprobs is not None:  # the target's own, from the rows that verified each token
            tokens = [int(tree.tokens[r]) for r in path] + [next_token]
            for row, token in zip([0, *path], tokens, strict=True):
                self.token_logprobs.append(token_logprob(choices.row_logits(row), token, self.logprobs))
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

    def learn(self, observed: RoundStats, refused: tuple[int, float] | None, next_token: int, seconds: float) -> None:
        """Tell the draft-length policy what the round cost and how many drafts the target kept.

        Before the adaptive policy exists, rounds without drafts measure the 1-row target call it starts
        from. A draft computed but refused is scored too (greedy: did the target pick it?), at no cost.
        """
        if not self.speculative:
            return
        lengths = self.lengths
        if lengths is None:
            if self.adaptive:
                self.lengths = self.engine.lengths.observe_t1(observed.verify_seconds, self.draft_max)
            return
        if refused is not None and self.sampling.greedy and observed.accepted == observed.drafted:
            lengths.shadow(refused[1], refused[0] == next_token)
        host = max(0.0, seconds - observed.verify_seconds - observed.draft_seconds)
        lengths.end_round(
            observed.accepted, verify_seconds=observed.verify_seconds, draft_seconds=observed.draft_seconds,
            draft_steps=observed.steps, host_seconds=host,
            first_seconds=observed.catch_up_seconds if observed.steps else None, first_rows=observed.catch_up_rows,
        )  # fmt: skip

    def emit(self, tokens: list[int]) -> Iterator[str]:
        """Text for the chosen tokens, until one of them ends the generation (``stop_reason`` says why)."""
        model = self.engine.model
        for token in tokens:
            if model.is_eog(token):
                self.stop_reason = STOP_EOS
                return
            self.output_tokens.append(token)
            piece = self.text.push(model.token_to_piece(token, self.special))
            if piece:
                yield piece
            if self.text.stopped:
                self.stop_reason = STOP_STRING
                return
            if len(self.output_tokens) >= self.max_tokens:
                self.stop_reason = STOP_LENGTH
                return

"""One sequence's request and state: what the loop's phases read and update, below the phases themselves.

A :class:`Request` is what a call to ``Engine.stream`` asked for, resolved by the engine and never changed after;
a :class:`Sequence` is the state of one generation between rounds (its cache sequence, position, history, output,
draft lengths, grammar). The phases (``runtime.chain``, ``runtime.treeround``, ``runtime.verify``) take a sequence,
never the driver (``runtime.rounds``) or the engine, which they see only as :class:`EngineView`: the models,
caches and what the engine's generations share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from local_eagle.runtime.feed import IDLE_CONTEXT
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.lengths import DraftLengths, FixedLengths, PolicyHolder, state_dict
from local_eagle.runtime.sampling import SamplingParams, top_probability
from local_eagle.runtime.seams import DraftModel, FeatureCapture
from local_eagle.runtime.stats import GenerationStats, RoundStats, SpecStats
from local_eagle.runtime.textstream import TextStream
from local_eagle.runtime.treeverify import PrefixTags

if TYPE_CHECKING:
    from local_eagle.llamacpp.model import Context, Model
    from local_eagle.runtime.feed import DrafterFeed
    from local_eagle.runtime.grammar import Constraint
    from local_eagle.runtime.policy.shapes import TreeChoice
    from local_eagle.runtime.tree import SlotCalibration, TreeShape

STOP_EOS = "eos"
STOP_STRING = "stop"
STOP_LENGTH = "length"
STOP_CONTEXT = "context"
STOP_CANCELLED = "cancelled"
NO_HISTORY = np.zeros(0, dtype=np.int64)


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


class EngineView(Protocol):
    """The engine as its sequences see it (``runtime.engine.Engine`` is one): read live, since a bench may swap the
    drafter and a test the tree calibration between generations."""

    model: Model
    ctx: Context
    drafter: DraftModel | None
    capture: FeatureCapture | None
    feed: DrafterFeed | None
    n_ctx: int
    n_vocab: int
    parallel: int
    lengths: PolicyHolder
    checkpoints: bool
    tree_calibration: SlotCalibration | None
    tree_choices: dict[TreeShape, TreeChoice]
    tree_quotas: dict[TreeShape, list[int]]


@dataclass(frozen=True)
class Request:
    """One call to ``Engine.stream`` as the engine resolved it (``draft_max`` 0: no drafting; ``adaptive`` only where
    it drafts; ``tree`` only where the engine can verify one)."""

    prompt: np.ndarray
    max_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_max: int = 0
    draft_p_min: float = 0.0
    stop: tuple[str, ...] = ()
    adaptive: bool = False
    tree: TreeShape | None = None
    draft_grammar: bool = True  # mask the drafts by the grammar too (False: drafts as if unconstrained)
    logprobs: int | None = None  # None: none; n: each token's log-probability and the n likeliest
    special: bool = False  # render control tokens (a template's [TOOL_CALLS]) as text, not as nothing
    cancelled: Callable[[], bool] | None = None  # asked between prefill chunks and rounds


@dataclass
class Rollback:
    """A round's checkpoint of the target's recurrent state (``Context.checkpoint``), and the kept rows a restore
    dropped, decoded first in the next verify (``Generation.replay``)."""

    saved: object | None = None
    rows: list[int] = field(default_factory=list)


class Sequence:
    """The state one generation's phases share between rounds.

    Invariant at the start of every round, with ``last_token`` the last chosen token, at
    position ``n_past``: the target's cache holds positions 0..n_past-1 (``last_token`` is not
    decoded yet); the drafter's rows 0..n_past-1, row P being (token[P+1], g[P]) with g the
    drafter's projection of the target features at P, are either in its cache or queued in the
    sequence's :class:`DrafterFeed` (the queued ones after the cached ones; after a long idle
    stretch only the last few are kept). The round's first draft step decodes the queue.
    """

    def __init__(self, engine: EngineView, request: Request, constraint: Constraint | None = None) -> None:
        self.engine = engine
        self.request = request
        self.feed = engine.feed
        self.lengths: DraftLengths | None = None  # None: no drafting (plain decoding, or the policy is not built yet)
        if self.adaptive:
            self.lengths = engine.lengths.for_bound(request.draft_max)
        elif self.speculative:
            self.lengths = FixedLengths()
        if self.feed is not None:
            self.feed.window = self.window
        self.pausable = self.adaptive and engine.capture is not None and engine.capture.can_pause
        draft_ids = self.draft_ids
        self._confidence_row = np.empty(0 if draft_ids is None else len(draft_ids), dtype=np.float32)
        self.rng = np.random.default_rng(request.sampling.seed)
        self.history = [int(token) for token in request.prompt]
        self.text = TextStream(list(request.stop))
        self.output_tokens: list[int] = []
        self.stop_reason = ""
        tree = request.tree
        self.spec_stats = SpecStats.for_draft_max(max(request.draft_max, 0 if tree is None else tree.nodes))
        self.spec_stats.adaptive = self.adaptive
        self.n_past = 0
        self.seq = 0  # the cache sequence this generation decodes on (a batch's seat, runtime.batch)
        self.constraint = constraint  # a grammar the output follows: every choice masked by it
        self.token_logprobs: list[TokenLogprob] = []
        self.prefill_features = True  # record the prompt's features (a batch that has not drafted lately does not)
        self.rollback = Rollback()  # a target without recurrent-state snapshots rolls rounds back by a checkpoint
        self.prefix_tags = PrefixTags()  # the leaf sequences sharing the target's prefix (tree verifies), from empty

    # --- what the request and the engine fix ------------------------------------------------------

    @property
    def sampling(self) -> SamplingParams:
        return self.request.sampling

    @property
    def draft_max(self) -> int:
        return self.request.draft_max

    @property
    def draft_p_min(self) -> float:
        return self.request.draft_p_min

    @property
    def speculative(self) -> bool:
        return self.request.draft_max > 0

    @property
    def adaptive(self) -> bool:
        return self.request.adaptive

    @property
    def penalized(self) -> bool:
        """The token history is only read by the repeat penalty."""
        return self.request.sampling.repeat_penalty != 1.0

    @property
    def window(self) -> int:
        """The drafter's rows the feed keeps queued while idle: enough to catch up to a whole chain."""
        return max(IDLE_CONTEXT, self.request.draft_max + 1)

    @property
    def shared(self) -> bool:
        """Other generations share the caches (a parallel engine's seats): only this one's sequence is cleared."""
        return self.engine.parallel > 1

    @property
    def target(self) -> Context:
        return self.engine.ctx

    @property
    def drafter(self) -> DraftModel | None:
        return self.engine.drafter

    @property
    def capture(self) -> FeatureCapture | None:
        return self.engine.capture

    @property
    def draft_ids(self) -> np.ndarray | None:
        drafter = self.engine.drafter
        return None if drafter is None else drafter.spec.draft_ids

    @property
    def checkpoints(self) -> bool:
        """Rounds roll back by a saved recurrent state (``runtime.mtp.CHECKPOINT_ROLLBACK_ARCHS``)."""
        return self.engine.checkpoints and self.speculative

    # --- reading the state ----------------------------------------------------------------------

    def ended(self) -> bool:
        """After emitting: has the generation stopped (``stop_reason``), the context being full included?"""
        if not self.stop_reason and self.n_past >= self.engine.n_ctx:
            self.stop_reason = STOP_CONTEXT
        return bool(self.stop_reason)

    def cancelled_result(self) -> GenerationResult:
        """The result of a generation whose prefill was cancelled."""
        stats = self.spec_stats.generation_stats(len(self.request.prompt), 0, STOP_CANCELLED)
        return GenerationResult(text="", tokens=[], stats=stats, spec_stats=self.spec_stats)

    def finish(self) -> tuple[str, GenerationResult]:
        """The text held back for stop strings, and the result (once the generation has stopped)."""
        tail = self.text.finish()
        if isinstance(self.lengths, DraftLengthPolicy):
            self.spec_stats.policy = state_dict(self.lengths.state())
        stats = self.spec_stats.generation_stats(len(self.request.prompt), len(self.output_tokens), self.stop_reason)
        logprobs = self.token_logprobs[: len(self.output_tokens)] if self.request.logprobs is not None else None
        return tail, GenerationResult(self.text.text, self.output_tokens, stats, self.spec_stats, logprobs)

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
        draft_ids = self.draft_ids
        if draft_ids is None or not self.sampling.greedy or self.penalized or self.constraint is not None:
            return None
        return draft_ids

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
        draft_ids = self.draft_ids
        if draft_ids is None:
            return top_probability(logits)
        return self.column_confidence(np.take(logits, draft_ids, out=self._confidence_row))

    def draft_length(self, limit: int | None = None) -> int:
        """How many tokens this round may draft: the draft limit (``draft_max`` unless ``limit`` says), the
        context, max_tokens and the batch (verify decodes the last token and the drafts in one batch of at most
        n_batch rows) bound it."""
        if not self.speculative:
            return 0
        remaining = self.request.max_tokens - len(self.output_tokens)
        limit = self.request.draft_max if limit is None else limit
        batch = self.engine.ctx.n_batch - 1 - len(self.rollback.rows)
        return min(limit, self.engine.n_ctx - self.n_past - 1, remaining - 1, batch)

    # --- what the phases hand back -------------------------------------------------------------

    def add_grammar_seconds(self, seconds: float) -> None:
        self.spec_stats.grammar_seconds += seconds

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
                self.lengths = self.engine.lengths.observe_t1(observed.verify_seconds, self.request.draft_max)
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
        special = self.request.special
        for token in tokens:
            if model.is_eog(token):
                self.stop_reason = STOP_EOS
                return
            self.output_tokens.append(token)
            piece = self.text.push(model.token_to_piece(token, special))
            if piece:
                yield piece
            if self.text.stopped:
                self.stop_reason = STOP_STRING
                return
            if len(self.output_tokens) >= self.request.max_tokens:
                self.stop_reason = STOP_LENGTH
                return

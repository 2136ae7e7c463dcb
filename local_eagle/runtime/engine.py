"""The lossless EAGLE 3 / 3.1 draft-verify loop on llama.cpp.

Each round runs the phases llama.cpp's ``common/speculative`` names (docs/architecture.md):
*draft* a chain with the drafter, *verify* it in one target decode, *accept* a prefix (greedy
match or rejection sampling), *commit* it (both caches rolled back to it, its rows fed to the
drafter). The *prefill* before the first round decodes the prompt and primes the drafter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.drafter import Drafter, check_pair, read_spec
from local_eagle.runtime.sampling import (
    GREEDY,
    SamplingParams,
    apply_repeat_penalty,
    choose,
    probabilities,
    top_probability,
    verify_greedy,
    verify_stochastic,
)
from local_eagle.runtime.stats import GenerationStats, RoundStats, SpecStats
from local_eagle.runtime.textstream import TextStream

__all__ = [
    "STOP_CONTEXT",
    "STOP_EOS",
    "STOP_LENGTH",
    "STOP_STRING",
    "Engine",
    "EngineOptions",
    "GenerationResult",
    "GenerationStats",
    "Stream",
]

STOP_EOS = "eos"
STOP_STRING = "stop"
STOP_LENGTH = "length"
STOP_CONTEXT = "context"
STOP_CANCELLED = "cancelled"
NO_HISTORY = np.zeros(0, dtype=np.int64)
clock = time.perf_counter


@dataclass
class EngineOptions:
    n_ctx: int = 4096
    n_batch: int = 512
    n_gpu_layers: int = -1
    n_threads: int = 0
    flash_attn: bool | None = None
    capture: str = "auto"  # "auto" | "native" | "callback"


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    stats: GenerationStats
    spec_stats: SpecStats | None = None


class Stream:
    """Iterate for text pieces; ``result`` holds the tokens and stats once iteration ends."""

    def __init__(self, gen: Iterator[str]) -> None:
        self._gen = gen
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        self.result = yield from self._gen

    def close(self) -> None:
        self._gen.close()


class Engine:
    """A target GGUF and an optional EAGLE drafter GGUF on llama.cpp."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        draft: str | os.PathLike[str] | None = None,
        options: EngineOptions | None = None,
    ) -> None:
        from local_eagle.runtime.capture import LayerCapture

        self.options = options = options or EngineOptions()
        self.model = Model(model, n_gpu_layers=options.n_gpu_layers, what="target")
        self.n_vocab = self.model.n_vocab
        context_options = ContextOptions(
            n_ctx=options.n_ctx, n_batch=options.n_batch, n_ubatch=options.n_batch, n_threads=options.n_threads,
            flash_attn=options.flash_attn,
        )  # fmt: skip
        self.capture = None
        self.drafter: Drafter | None = None
        if draft is not None:
            spec = read_spec(draft)
            check_pair(spec, self.model)
            self.capture = LayerCapture.create(self.model, spec.target_layers, options.capture)
        callback = self.capture.callback if self.capture is not None else None
        self.ctx = Context(self.model, context_options, cb_eval=callback)
        if self.capture is not None:
            self.capture.attach(self.ctx)
            self.drafter = Drafter(draft, self.ctx, context_options, n_gpu_layers=options.n_gpu_layers)
        self.n_ctx = self.ctx.n_ctx
        self.n_ubatch = self.ctx.n_ubatch

    @property
    def model_path(self) -> Path:
        return self.model.path

    def tokenize(self, text: str) -> np.ndarray:
        return self.model.tokenize(text, add_special=True, parse_special=True)

    def generate(self, prompt: str | np.ndarray, **options) -> GenerationResult:
        stream = self.stream(prompt, **options)
        for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def stream(
        self,
        prompt: str | np.ndarray,
        max_tokens: int = 128,
        sampling: SamplingParams = GREEDY,
        draft_max: int = 4,
        draft_p_min: float = 0.0,
        stop: list[str] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> Stream:
        """``cancelled`` is asked between prefill chunks: a long prompt's prefill can take minutes, and a
        server must be able to drop it (client gone, shutdown) before the first token; pieces end a stream
        at any other time. A cancelled prefill ends the stream with no text and stop reason "cancelled"."""
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else np.asarray(prompt, dtype=np.int32)
        if len(tokens) == 0:
            raise LocalEagleError("the prompt is empty")
        if len(tokens) >= self.n_ctx:
            raise LocalEagleError(
                f"the prompt has {len(tokens)} tokens, more than the context of {self.n_ctx} allows; raise --ctx"
            )
        if max_tokens < 1:
            raise LocalEagleError(f"max tokens must be at least 1, got {max_tokens}")
        if draft_max < 0:
            raise LocalEagleError(f"draft max must be >= 0, got {draft_max}")
        generation = _Generation(
            self, tokens, max_tokens, sampling, draft_max if self.drafter is not None else 0, draft_p_min, stop or []
        )
        generation.cancelled = cancelled
        return Stream(generation.run())

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()
        self.ctx.close()
        self.model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Generation:
    """One call to :meth:`Engine.stream`: the state its phases share, and the phases.

    Invariant at the start of every round, with ``last_token`` the last chosen token, at
    position ``n_past``: the target's cache holds positions 0..n_past-1 (``last_token`` is not
    decoded yet); the drafter's cache holds the rows 0..n_past-2, row P being (token[P+1], g[P])
    with g the drafter's projection of the target features at P, and ``last_projection`` is
    g[n_past-1]. When ``primed_step`` is set, the drafter has also decoded row n_past-1 and
    these are its logits and prenorm state, the first step of the next chain.
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
    ) -> None:
        self.engine = engine
        self.target = engine.ctx
        self.drafter = engine.drafter
        self.capture = engine.capture
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.sampling = sampling
        self.draft_max = draft_max
        self.draft_p_min = draft_p_min
        self.speculative = self.drafter is not None and self.capture is not None and draft_max > 0
        self.penalized = sampling.repeat_penalty != 1.0  # the token history is only read by the repeat penalty
        self.rng = np.random.default_rng(sampling.seed)
        self.history = [int(token) for token in prompt]
        self.text = TextStream(stop)
        self.output_tokens: list[int] = []
        self.stop_reason = ""
        self.spec_stats = SpecStats.for_draft_max(draft_max)
        self.n_past = 0
        self.last_projection: np.ndarray | None = None
        self.primed_step: tuple[np.ndarray, np.ndarray] | None = None
        self.cancelled: Callable[[], bool] | None = None

    def run(self) -> Iterator[str]:
        self._reset_caches()
        started = clock()
        first = self.prefill()
        self.spec_stats.prefill_seconds = clock() - started
        if first is None:
            stats = self.spec_stats.generation_stats(len(self.prompt), 0, STOP_CANCELLED)
            return GenerationResult(text="", tokens=[], stats=stats, spec_stats=self.spec_stats)
        pending = [first]  # tokens chosen but not yet emitted
        started = clock()
        try:
            while True:
                yield from self.emit(pending)
                if self.stop_reason:
                    break
                if self.n_past >= self.engine.n_ctx:
                    self.stop_reason = STOP_CONTEXT
                    break
                pending = self.round(pending[-1])
        finally:
            self.spec_stats.decode_seconds = clock() - started
        tail = self.text.finish()
        if tail:
            yield tail
        stats = self.spec_stats.generation_stats(len(self.prompt), len(self.output_tokens), self.stop_reason)
        return GenerationResult(text=self.text.text, tokens=self.output_tokens, stats=stats, spec_stats=self.spec_stats)

    def _reset_caches(self) -> None:
        self.target.clear()
        if self.drafter is not None:
            self.drafter.ctx.clear()
        if self.capture is not None:
            self.capture.set_enabled(self.speculative)

    def recent_history(self, last_token: int, drafts: list[int]) -> np.ndarray:
        """The tokens before the next position, for the repeat penalty (empty when it is off)."""
        return np.asarray(self.history + [last_token] + drafts) if self.penalized else NO_HISTORY

    # --- phases -------------------------------------------------------------------------------

    def prefill(self) -> int | None:
        """Decode the prompt into the target, prime the drafter with its features; the first token
        (None when ``cancelled`` said so between chunks)."""
        prompt, ubatch = self.prompt, self.engine.n_ubatch
        n_prompt = len(prompt)
        features = []
        for start in range(0, n_prompt, ubatch):
            if self.cancelled is not None and self.cancelled():
                return None
            chunk = prompt[start : start + ubatch]
            outputs = np.zeros(len(chunk), dtype=bool)
            outputs[-1] = start + len(chunk) == n_prompt
            self.target.decode(chunk, np.arange(start, start + len(chunk)), outputs)
            if self.speculative:
                features.append(self.capture.features(len(chunk)))
        last_chunk_start = (n_prompt - 1) // ubatch * ubatch
        logits = self.target.logits(n_prompt - 1 - last_chunk_start, self.engine.n_vocab)
        token, _ = choose(logits, np.asarray(self.history), self.sampling, self.rng)
        if self.speculative:
            projections = self.drafter.encode(np.concatenate(features))
            if n_prompt > 1:
                self.drafter.decode_kv(prompt[1:], projections[:-1], np.arange(n_prompt - 1))
            self.last_projection = projections[-1]
        self.n_past = n_prompt
        return token

    def round(self, last_token: int) -> list[int]:
        """One draft-verify round after ``last_token``; the tokens it adds (accepted drafts, then one more)."""
        observed = RoundStats()
        drafts, draft_distributions = self.draft(last_token, observed)
        target_logits, verified_features = self.verify(last_token, drafts, observed)
        n_accepted, next_token = self.accept(last_token, drafts, draft_distributions, target_logits, observed)
        accepted = drafts[:n_accepted] + [next_token]
        self.commit(last_token, accepted, verified_features, observed)
        self.spec_stats.observe(observed)
        return accepted

    def draft_length(self) -> int:
        """How many tokens this round may draft: the draft limit, the context, max_tokens and the batch
        (verify decodes the last token and the drafts in one batch of at most n_batch rows) bound it."""
        if not self.speculative:
            return 0
        remaining = self.max_tokens - len(self.output_tokens)
        return min(self.draft_max, self.engine.n_ctx - self.n_past - 1, remaining - 1, self.target.n_batch - 1)

    def draft(self, last_token: int, observed: RoundStats) -> tuple[list[int], list[np.ndarray]]:
        """A chain of drafter steps from ``last_token``; the drafts and, when sampling, their distributions.

        The chain stops early once the drafter's top probability falls under ``draft_p_min``.
        """
        drafts: list[int] = []
        distributions: list[np.ndarray] = []
        length = self.draft_length()
        if length <= 0:
            return drafts, distributions
        started = clock()
        drafter = self.drafter
        if self.primed_step is None:
            position = np.array([self.n_past - 1])
            self.primed_step = drafter.decode(np.array([last_token]), self.last_projection[None, :], position)
        logits, prenorm = self.primed_step
        for step in range(length):
            row = logits[0]
            if self.draft_p_min > 0.0 and top_probability(row) < self.draft_p_min:
                break
            history = self.recent_history(last_token, drafts)
            token, distribution = choose(row, history, self.sampling, self.rng)
            drafts.append(token)
            if distribution is not None:
                distributions.append(distribution)
            if step + 1 == length:
                break
            position = np.array([self.n_past + step])
            logits, prenorm = drafter.decode(np.array([token]), drafter.feedback(prenorm), position)
        observed.drafted = len(drafts)
        observed.draft_seconds = clock() - started
        return drafts, distributions

    def verify(self, last_token: int, drafts: list[int], observed: RoundStats) -> tuple[np.ndarray, np.ndarray | None]:
        """One target decode of [last_token, *drafts], every row with logits; those and the rows' features."""
        started = clock()
        batch = np.array([last_token, *drafts], dtype=np.int32)
        n_rows = len(batch)
        self.target.decode(batch, np.arange(self.n_past, self.n_past + n_rows), True)
        target_logits = np.stack([self.target.logits(row, self.engine.n_vocab) for row in range(n_rows)])
        features = self.capture.features(n_rows) if self.speculative else None
        observed.verify_seconds = clock() - started
        return target_logits, features

    def accept(
        self,
        last_token: int,
        drafts: list[int],
        draft_distributions: list[np.ndarray],
        target_logits: np.ndarray,
        observed: RoundStats,
    ) -> tuple[int, int]:
        """How many drafts the target keeps, and the token it adds after them.

        Every row's logits go through the same processing the target alone would apply at that
        position, so the output is the target's own: token-identical greedy, same distribution
        when sampling.
        """
        started = clock()
        sampling = self.sampling
        history = self.recent_history(last_token, drafts)
        n_history = len(self.history) + 1
        penalty, last_n = sampling.repeat_penalty, sampling.repeat_last_n

        def processed(row: int) -> np.ndarray:
            return apply_repeat_penalty(target_logits[row], history[: n_history + row], penalty, last_n)

        draft_tokens = np.array(drafts, dtype=np.int64)
        if sampling.greedy:
            if self.penalized:
                target_choices = np.array([int(np.argmax(processed(row))) for row in range(len(target_logits))])
            else:
                target_choices = np.argmax(target_logits, axis=1)
            n_accepted = verify_greedy(draft_tokens, target_choices)
            next_token = int(target_choices[n_accepted])
        else:
            targets = [probabilities(processed(row), sampling) for row in range(len(target_logits))]
            n_accepted, next_token = verify_stochastic(draft_tokens, draft_distributions, targets, self.rng)
        observed.accepted = n_accepted
        observed.accept_seconds = clock() - started
        return n_accepted, next_token

    def commit(
        self, last_token: int, accepted: list[int], verified_features: np.ndarray | None, observed: RoundStats
    ) -> None:
        """Keep the accepted prefix: roll both caches back to it and feed its rows to the drafter.

        The drafter decodes the accepted rows and the next chain's first step in one call.
        """
        n_accepted = len(accepted) - 1
        n_past = self.n_past
        started = clock()
        self.target.remove_from(n_past + 1 + n_accepted)
        observed.rollback_seconds = clock() - started
        if self.speculative:
            started = clock()
            drafter = self.drafter
            drafter.remove_from(n_past)
            projections = drafter.encode(verified_features[: n_accepted + 1])
            tokens, first = np.array(accepted), n_past
            if self.primed_step is None:  # the drafter has not decoded row n_past-1 yet
                tokens, first = np.array([last_token, *accepted]), n_past - 1
                projections_fed = np.vstack([self.last_projection[None, :], projections])
            else:
                projections_fed = projections
            logits, prenorm = drafter.decode(tokens, projections_fed, np.arange(first, n_past + n_accepted + 1))
            self.primed_step = (logits[-1:], prenorm[-1:])
            self.last_projection = projections[n_accepted]
            observed.feed_seconds = clock() - started
        self.history.extend([last_token, *accepted[:-1]])
        self.n_past += 1 + n_accepted

    def emit(self, tokens: list[int]) -> Iterator[str]:
        """Text for the chosen tokens, until one of them ends the generation (``stop_reason`` says why)."""
        model = self.engine.model
        for token in tokens:
            if model.is_eog(token):
                self.stop_reason = STOP_EOS
                return
            self.output_tokens.append(token)
            piece = self.text.push(model.token_to_piece(token))
            if piece:
                yield piece
            if self.text.stopped:
                self.stop_reason = STOP_STRING
                return
            if len(self.output_tokens) >= self.max_tokens:
                self.stop_reason = STOP_LENGTH
                return

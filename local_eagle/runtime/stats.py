"""What speculative decoding cost and gained: one record per round, summed per generation.

The engine hands every draft-verify round to one :class:`SpecStats` (as vLLM's spec-decode
metrics observe every step), and :class:`GenerationStats`, what the CLI, the bench and the
server print, is derived from it at the end. Costs are kept per phase and verify time per
number of verified rows, because a target call's cost grows with its rows on a CPU and barely
at all on a GPU (docs/architecture.md): a draft-length policy weighs exactly those numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _acceptance_length(accepted: int, calls: int) -> float:
    return 1.0 + accepted / calls if calls else 1.0


@dataclass(slots=True)
class RoundStats:
    """One round, phase by phase, as the engine measured it."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0  # drafter steps run (a draft the policy refused after computing it included)
    draft_rows: int = 0  # rows of the drafter calls after the first (a chain's 1 each, a tree's frontier)
    probe: bool = False  # drafted because the policy probes, not because drafting looked worth it
    captured: bool = False  # the verify recorded the target's features for the drafter (else paused: idle)
    catch_up_rows: int = 0  # rows the first step decoded to bring the drafter up to date (0: no step)
    catch_up_seconds: float = 0.0  # that first step: catch-up, reading its logits, choosing the draft
    draft_seconds: float = 0.0  # the drafter's chain of steps, choosing each draft included
    verify_seconds: float = 0.0  # one target call of 1 + drafted rows until its outputs are on the host, features read
    accept_seconds: float = 0.0  # greedy match or rejection sampling, on the host
    rollback_seconds: float = 0.0  # commit: the target's cache back to the accepted prefix
    feed_seconds: float = 0.0  # commit: the drafter's rollback and queueing the accepted rows (catch-up is drafting)
    forced: int = 0  # drafts a grammar forced, drafted without a drafter call

    @property
    def verify_rows(self) -> int:
        return self.drafted + 1


@dataclass
class DecodeCounts:
    """The counts and costs a generation's record and its printed totals share, declared once: :class:`SpecStats`
    gathers them round by round, :class:`GenerationStats` carries them out, :class:`GenerationTotals` sums them."""

    adaptive: bool = False  # draft lengths chosen by the cost-aware policy (else fixed at draft_max)
    policy: dict | None = None  # the adaptive policy's estimates at the end (``PolicyState``, times in ms)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    draft_steps: int = 0
    probes: int = 0  # rounds the adaptive policy drafted one token to test whether drafting pays again
    captured_rounds: int = 0  # rounds whose target call recorded features for the drafter (the rest idled)
    catch_ups: int = 0  # drafter calls that decoded the rows queued while it was idle (and the first step)
    catch_up_rows: int = 0
    catch_up_seconds: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    replay_calls: int = 0
    """Target calls besides the verifies: a checkpoint rollback's kept rows decoded again in a call of their own
    (``Generation.replay``, after rejections in a row on a target llama.cpp keeps no snapshots for). The speedup
    includes their time; ``acceptance_length`` stays tokens per verify."""
    forced_tokens: int = 0  # drafts a grammar forced (its keys and punctuation), drafted without a drafter call
    grammar_seconds: float = 0.0  # the grammar's work on the host: masks, consumes, forced tokens
    python_seconds: float | None = None
    """Decoding's wall time outside llama.cpp's calls: every phase's Python (drafting's too), which ``host_seconds``
    leaves in the phases. What a faster device cannot cut. None where generations shared the calls
    (``runtime.batch``), so no one generation's share is known."""


@dataclass
class SpecStats(DecodeCounts):
    """Every round of one generation, summed; ``observe`` is called once per round.

    ``verify_calls_by_rows[n]`` and ``verify_seconds_by_rows[n]`` count the target calls that
    verified n rows (the last token plus n - 1 drafts) and their total time. ``trace_drafted`` and
    ``trace_accepted`` keep every round in order, so a verify batch can be replayed (``runtime.identity``).
    """

    draft_max: int = 0
    trace_drafted: list[int] = field(default_factory=list)
    trace_accepted: list[int] = field(default_factory=list)
    trace_trees: list = field(default_factory=list)  # tree rounds: (VerifyTree, accepted rows), for the replay
    trace_tree_rounds: list[int] = field(default_factory=list)  # which rounds those were (an adaptive run mixes)
    # every round's (verify rows, accepted, drafter calls, catch-up rows, rows of the later drafter calls): what a
    # cost profile of another machine prices (bench --cost-profile)
    trace_rounds: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    rounds: int = 0
    verify_calls_by_rows: list[int] = field(default_factory=list)
    verify_seconds_by_rows: list[float] = field(default_factory=list)
    draft_seconds: float = 0.0
    accept_seconds: float = 0.0
    rollback_seconds: float = 0.0
    feed_seconds: float = 0.0

    @classmethod
    def for_draft_max(cls, draft_max: int) -> SpecStats:
        """Counters sized once for chains of up to ``draft_max`` drafts; ``observe`` only appends to the trace."""
        return cls(
            draft_max=draft_max,
            drafted_per_position=[0] * draft_max,
            accepted_per_position=[0] * draft_max,
            verify_calls_by_rows=[0] * (draft_max + 2),
            verify_seconds_by_rows=[0.0] * (draft_max + 2),
        )

    def observe(self, round_stats: RoundStats) -> None:
        self.rounds += 1
        self.forced_tokens += round_stats.forced
        self.trace_drafted.append(round_stats.drafted)
        self.trace_accepted.append(round_stats.accepted)
        self.trace_rounds.append((round_stats.verify_rows, round_stats.accepted, round_stats.steps,
                                  round_stats.catch_up_rows, round_stats.draft_rows))  # fmt: skip
        self.probes += round_stats.probe
        self.captured_rounds += round_stats.captured
        self.draft_steps += round_stats.steps
        if round_stats.catch_up_rows:
            self.catch_ups += 1
            self.catch_up_rows += round_stats.catch_up_rows
            self.catch_up_seconds += round_stats.catch_up_seconds
        self.drafted_tokens += round_stats.drafted
        self.accepted_tokens += round_stats.accepted
        for position in range(round_stats.drafted):
            self.drafted_per_position[position] += 1
        for position in range(round_stats.accepted):
            self.accepted_per_position[position] += 1
        rows = round_stats.verify_rows
        self.verify_calls_by_rows[rows] += 1
        self.verify_seconds_by_rows[rows] += round_stats.verify_seconds
        self.draft_seconds += round_stats.draft_seconds
        self.accept_seconds += round_stats.accept_seconds
        self.rollback_seconds += round_stats.rollback_seconds
        self.feed_seconds += round_stats.feed_seconds

    def verify_seconds_per_call(self, rows: int) -> float:
        """Mean time of a target call verifying ``rows`` rows (0.0 before one was seen)."""
        return _ratio(self.verify_seconds_by_rows[rows], self.verify_calls_by_rows[rows])

    @property
    def draft_seconds_per_token(self) -> float:
        """Mean time the draft phase spent per drafted token."""
        return _ratio(self.draft_seconds, self.drafted_tokens)

    @property
    def target_seconds(self) -> float:
        return sum(self.verify_seconds_by_rows) + self.rollback_seconds

    @property
    def drafter_seconds(self) -> float:
        return self.draft_seconds + self.feed_seconds

    @property
    def host_seconds(self) -> float:
        """Decode time spent outside llama.cpp calls: accepting, detokenizing, stop strings."""
        return max(0.0, self.decode_seconds - self.target_seconds - self.drafter_seconds)

    def generation_stats(self, prompt_tokens: int, generated_tokens: int, stop_reason: str) -> GenerationStats:
        """The generation's :class:`GenerationStats`: the shared :class:`DecodeCounts` (lists copied) and the few
        this record knows under other names."""
        shared = {name: list(v) if isinstance(v := getattr(self, name), list) else v for name in _SHARED_FIELDS}
        return GenerationStats(
            **shared, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens, stop_reason=stop_reason,
            target_calls=self.rounds, target_seconds=self.target_seconds, drafter_seconds=self.drafter_seconds,
            draft_lengths=self.verify_calls_by_rows[1:],
        )  # fmt: skip


@dataclass
class GenerationStats(DecodeCounts):
    """One generation's totals, the shape callers print and serialize (``to_dict``)."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    target_calls: int = 0
    target_seconds: float = 0.0
    drafter_seconds: float = 0.0
    stop_reason: str = ""
    draft_lengths: list[int] = field(default_factory=list)  # [k]: rounds that drafted k tokens

    @property
    def acceptance_length(self) -> float:
        """Tokens each target verify call produced: 1 plus the drafts it accepted, on average (1.0 without drafts).

        Counted from the calls, not from the emitted text: the prefill chooses the first token without a verify
        call, and an end-of-generation token or a stop ends the text inside a call's tokens, so
        ``generated_tokens / target_calls`` reads below 1 for an answer with nothing drafted.
        """
        return _acceptance_length(self.accepted_tokens, self.target_calls)

    @property
    def acceptance_per_position(self) -> list[float]:
        pairs = zip(self.accepted_per_position, self.drafted_per_position, strict=True)
        return [_ratio(accepted, drafted) for accepted, drafted in pairs]

    @property
    def acceptance_drafted(self) -> list[float]:
        """:attr:`acceptance_per_position` up to the last position ever drafted: what a person reads (an engine
        opened for trees of 63 nodes counts 63 positions, most of them never reached)."""
        n = max((i + 1 for i, d in enumerate(self.drafted_per_position) if d), default=0)
        return self.acceptance_per_position[:n]

    @property
    def host_seconds(self) -> float:
        return max(0.0, self.decode_seconds - self.target_seconds - self.drafter_seconds)

    @property
    def tokens_per_second(self) -> float:
        return _ratio(self.generated_tokens, self.decode_seconds)

    @property
    def prompt_tokens_per_second(self) -> float:
        return _ratio(self.prompt_tokens, self.prefill_seconds)

    @classmethod
    def from_dict(cls, data: dict) -> GenerationStats:
        """``to_dict`` read back (a runner's answer): its fields, the derived values recomputed from them."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(
            acceptance_length=self.acceptance_length,
            acceptance_per_position=self.acceptance_per_position,
            host_seconds=self.host_seconds,
            tokens_per_second=self.tokens_per_second,
        )
        return out


@dataclass
class GenerationTotals:
    """Several generations summed, e.g. a chat session's answers."""

    answers: int = 0
    total: GenerationStats = field(default_factory=GenerationStats)

    def add(self, stats: GenerationStats) -> None:
        """Every field at once, from the dataclass itself: counts and seconds summed, position counts added
        position-wise, flags and the policy's estimates as the latest answer has them (a field added to
        :class:`GenerationStats` is totalled without a line here)."""
        total = self.total
        self.answers += 1
        for f in fields(GenerationStats):
            name = f.name
            value, into = getattr(stats, name), getattr(total, name)
            if name in _LATEST:
                if value or name == "adaptive":
                    setattr(total, name, value)
            elif isinstance(value, list):
                _add_counts(into, value)
            elif value is not None:
                setattr(total, name, (into or 0) + value)

    @property
    def acceptance_length(self) -> float:
        return self.total.acceptance_length

    @property
    def acceptance_per_position(self) -> list[float]:
        return self.total.acceptance_per_position


_LATEST = frozenset({"adaptive", "policy", "stop_reason"})  # not summed: the latest answer's
_SHARED_FIELDS = tuple(f.name for f in fields(DecodeCounts))


def _add_counts(into: list[int], counts: list[int]) -> None:
    """Add position-wise; generations may have drafted chains of different lengths."""
    into.extend([0] * (len(counts) - len(into)))
    for position, count in enumerate(counts):
        into[position] += count

"""Drafts arranged to a real pair's acceptance, so the real engine runs a random-weight pair at realistic speed.

A random-weight pair of published shapes (``bench.pair``) costs on a GPU what the real models do, but its drafter
accepts nothing, so a bench of it says nothing about how the engine fares when drafts are accepted. Here the
engine runs unchanged (its rounds, policy, verify, accept, trees, batches of many sequences) with its drafter
wrapped by :class:`ArrangedDrafter`: every drafter call runs for real at its shape, and then the rows the engine
reads are rewritten so that the target's next token sits at a rank drawn from a real pair's recorded statistics
(:class:`RankTable`: the rank of the target's token among the drafter's candidates, and the candidates'
probabilities, by depth, recorded from the demo pair on held-out prompts by :func:`record_ranks`). The verify
stays the target's own, so the output must still equal the target alone; acceptance is arranged, never faked.

The target's token is known because the target alone runs first (``truths``): greedy decoding is deterministic,
so while drafts are verified the context stays on that text. A drafter row at position P holds token[P+1] and
predicts token[P+2]; a row is *on the path* when its token is the text's own. Rows off the path (after a wrong
draft, or a tree's other branches) draw from the recorded rows after a miss and never hold the text's next
token, so no branch can reach the text by chance: only arranged ranks are accepted.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.files import atomic_output
from local_eagle.runtime.clock import paused, paused_seconds

if TYPE_CHECKING:
    from local_eagle.runtime.drafter import Drafter
    from local_eagle.runtime.engine import Engine

K = 8  # candidates recorded and arranged a row: a tree's widest frontier (EngineOptions.tree_width)
LABEL = "arranged acceptance"
NOTE = ("arranged acceptance: every drafter call ran at its shape, then the rows the engine read were rewritten "
        "so that the target's next token sits at a rank drawn from {source}; the verify, accept and output are the "
        "real engine's, so speed and acceptance are the engine's at that pair's acceptance, not a trained drafter's "
        "on this model")  # fmt: skip
MIN_SAMPLES = 20  # rows a depth needs to draw from; a deeper depth with fewer draws from the one above


@dataclass
class RankTable:
    """Per depth (1 = a round's first draft): the candidates' probabilities (top ``K``, sorted) of rows on the text's
    path with the rank of the text's token among them (-1: not among them), and of rows after a miss."""

    source: str
    on: list[np.ndarray]  # per depth [n, K]
    ranks: list[np.ndarray]  # per depth [n]
    off: list[np.ndarray]  # per depth [m, K]
    _logs: list | None = field(default=None, repr=False, compare=False)

    def acceptance(self) -> list[float]:
        """A greedy chain's acceptance at each depth given the drafts before it were: rank 0's share."""
        return [float(np.mean(r == 0)) if len(r) else 0.0 for r in self.ranks]

    def samples(self) -> list[int]:
        return [len(r) for r in self.ranks]

    def _depth(self, rows: list[np.ndarray], depth: int) -> int:
        d = min(max(depth, 1), len(rows)) - 1
        while d > 0 and len(rows[d]) < MIN_SAMPLES:
            d -= 1
        return d

    def draw(self, depth: int, on_path: bool, rng: Draws) -> tuple[np.ndarray, float, int]:
        """A recorded row at this depth: its candidates' log-probabilities, the log of the mass the other ids share,
        and the text's token's rank (-1 off the path)."""
        if self._logs is None:  # once: a row rewritten costs no logarithm
            self._logs = [tuple(_logs(rows) for rows in (on, off)) for on, off in zip(self.on, self.off, strict=True)]
        if on_path:
            d = self._depth(self.ranks, depth)
            i = rng.index(len(self.ranks[d]))
            logp, rest = self._logs[d][0]
            return logp[i], float(rest[i]), int(self.ranks[d][i])
        d = self._depth(self.off, depth)
        logp, rest = self._logs[d][1] if len(self.off[d]) else self._logs[self._depth(self.ranks, depth)][0]
        i = rng.index(len(logp))
        return logp[i], float(rest[i]), -1

    def to_dict(self) -> dict:
        return {"source": self.source, "k": K, "acceptance": [round(a, 4) for a in self.acceptance()],
                "depths": [{"on": np.round(on, 5).tolist(), "ranks": r.tolist(), "off": np.round(off, 5).tolist()}
                           for on, r, off in zip(self.on, self.ranks, self.off, strict=True)]}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> RankTable:
        if not isinstance(raw, dict) or not isinstance(raw.get("depths"), list) or not raw["depths"]:
            raise LocalEagleError(f"{where}: expected an object with a non-empty 'depths' list (a rank table)")
        if raw.get("k") != K:
            raise LocalEagleError(f"{where}: 'k' must be {K}, got {raw.get('k')!r}")
        on, ranks, off = [], [], []
        for i, d in enumerate(raw["depths"]):
            try:
                a = np.asarray(d["on"], dtype=np.float64).reshape(-1, K)
                r = np.asarray(d["ranks"], dtype=np.int64).reshape(-1)
                b = np.asarray(d["off"], dtype=np.float64).reshape(-1, K)
            except (KeyError, TypeError, ValueError) as e:
                raise LocalEagleError(f"{where}: depths[{i}] needs 'on' and 'off' rows of {K} numbers and "
                                      f"'ranks' ({type(e).__name__})") from None  # fmt: skip
            if len(a) != len(r) or ((r < -1) | (r >= K)).any() or (a < 0).any() or (b < 0).any():
                raise LocalEagleError(f"{where}: depths[{i}]: one rank (-1..{K - 1}) per 'on' row, probabilities >= 0")
            on.append(a)
            ranks.append(r)
            off.append(b)
        if len(ranks[0]) == 0:
            raise LocalEagleError(f"{where}: depth 1 has no recorded rows")
        return cls(str(raw.get("source", where)), on, ranks, off)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RankTable:
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise LocalEagleError(f"{path}: cannot read a rank table ({e})") from None
        return cls.from_dict(raw, str(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(self.to_dict()) + "\n")


class Draws:
    """Uniform draws from a generator taken a buffer at a time: a row rewritten costs no generator call."""

    def __init__(self, seed: list[int] | int) -> None:
        self._rng = np.random.default_rng(seed)
        self._buf = np.empty(0)
        self._at = 0

    def _take(self, n: int) -> np.ndarray:
        if self._at + n > len(self._buf):
            self._buf, self._at = self._rng.random(4096), 0
        out = self._buf[self._at : self._at + n]
        self._at += n
        return out

    def index(self, n: int) -> int:
        """One of ``range(n)``."""
        return min(int(self._take(1)[0] * n), n - 1)

    def indices(self, n: int, size: int) -> list[int]:
        return np.minimum((self._take(size) * n).astype(np.int64), n - 1).tolist()


def _logs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates' log-probabilities, and the log of what the rest of a row shares (at least 1e-6)."""
    return np.log(np.maximum(rows, 1e-12)).astype(np.float32), np.log(np.maximum(1.0 - rows.sum(axis=1), 1e-6))


BUILTIN = Path(__file__).parent / "ranks" / "gemma3-270m-eagle31.json"


@dataclass
class _Seq:
    """What the wrapper knows of one drafter sequence: its text (an index into the truths) and its round's start."""

    truth: int | None = None
    start: int = 0  # the position of the round's catch-up row (depth 1)
    last_on: int | None = None  # recording: the position of the last row found on the path
    text: list[int] = field(default_factory=list)  # the tokens its catch-ups showed, by index (-1: not shown)
    learnt: int | None = None  # the truth this sequence's text is written into, where it left every known text
    rng: Draws = field(default_factory=lambda: Draws(0))  # draws of its generation


@dataclass
class Counts:
    rows: int = 0  # rows the engine read
    on_path: int = 0
    placed: int = 0  # on the path, the text's token placed among the candidates
    unknown: int = 0  # rows of a text not among the truths: left as the drafter computed them
    learnt: int = 0  # texts that left every known one (at a near-tie), learnt as the engine wrote them
    seconds: float = 0.0  # spent rewriting rows, the engine's clock paused: not the engine's host work

    def to_dict(self) -> dict:
        return {"rows": self.rows, "on_path": self.on_path, "placed": self.placed, "unknown": self.unknown,
                "learnt": self.learnt, "seconds": round(self.seconds, 4)}  # fmt: skip


@dataclass
class _Record:
    on: list[list[np.ndarray]] = field(default_factory=list)
    ranks: list[list[int]] = field(default_factory=list)
    off: list[list[np.ndarray]] = field(default_factory=list)

    def add(self, depth: int, probs: np.ndarray, rank: int | None) -> None:
        while len(self.on) < depth:
            self.on.append([])
            self.ranks.append([])
            self.off.append([])
        if rank is None:
            self.off[depth - 1].append(probs)
        else:
            self.on[depth - 1].append(probs)
            self.ranks[depth - 1].append(rank)

    def table(self, source: str) -> RankTable:
        def stack(rows: list[np.ndarray]) -> np.ndarray:
            return np.stack(rows) if rows else np.zeros((0, K))

        return RankTable(source, [stack(o) for o in self.on], [np.asarray(r, dtype=np.int64) for r in self.ranks],
                         [stack(o) for o in self.off])  # fmt: skip


class ArrangedDrafter:
    """A drafter whose output rows are arranged (``table``) or recorded (``table`` None) against known texts.

    It stands in for the engine's :class:`~local_eagle.runtime.drafter.Drafter` (every attribute not defined here
    is the wrapped drafter's). A catch-up is the call after :meth:`encode` (its rows are the text's own); the later
    steps of a round (a chain's, a tree's frontiers, a batch's) are the calls after it, each row at depth
    ``position - start + 1``.
    """

    def __init__(self, inner: Drafter, truths: list[np.ndarray], table: RankTable | None = None, seed: int = 0,
                 max_depth: int = 16) -> None:  # fmt: skip
        if inner.spec.draft_ids is not None and len(inner.spec.draft_ids) <= K:
            raise LocalEagleError(f"the drafter's vocabulary must hold more than {K} ids to arrange drafts")
        self.inner = inner
        self.truths = [np.asarray(t, dtype=np.int64) for t in truths]
        self.table = table
        self.seed = seed
        self.max_depth = max_depth
        self.counts = Counts()
        self.record = _Record()
        self._seqs: dict[int, _Seq] = {}
        self._catching_up = False
        self._owner = 0  # the sequence whose catch-up came last: a tree's branches belong to it
        ids = inner.spec.draft_ids
        self._ids = ids
        self._column: np.ndarray | None = None  # target id -> column in the draft vocabulary (-1: none)
        if ids is not None:
            self._column = np.full(max(inner.n_vocab, int(ids.max()) + 1), -1, dtype=np.int64)
            self._column[ids] = np.arange(len(ids))
        self._n_draft = len(ids) if ids is not None else inner.n_vocab
        self._log_others = float(np.log(max(1, self._n_draft - K)))  # the ids that share a row's rest
        self._jitter: dict[int, np.ndarray] = {}  # by row length: what keeps a row's rest from being one value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # --- the drafter's calls ----------------------------------------------------------------------

    def encode(self, features: np.ndarray) -> np.ndarray:
        self._catching_up = True
        return self.inner.encode(features)

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        if self._catching_up:
            self._match(seq, tokens, positions)
        self.inner.decode_kv(tokens, g, positions, seq)

    def decode_last(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0,
                    columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        logits, prenorm = self.inner.decode_last(tokens, g, positions, seq, columns=columns)
        self._catch_up(seq, tokens, positions)
        self._row(logits[0], seq, int(positions[-1]), int(tokens[-1]), columns, depth=1)
        return logits, prenorm

    def decode(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0,
               columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        logits, prenorm = self.inner.decode(tokens, g, positions, seq, columns=columns)
        if self._catching_up:
            self._catch_up(seq, tokens, positions)
        for i in range(len(tokens)):
            self._row(logits[i], seq, int(positions[i]), int(tokens[i]), columns)
        return logits, prenorm

    def decode_branches(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[list[int]],
                        columns: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        logits, prenorm = self.inner.decode_branches(tokens, g, positions, seqs, columns)
        self._catching_up = False
        for i in range(len(tokens)):
            self._row(logits[i], self._owner, int(positions[i]), int(tokens[i]), columns, branch=True)
        return logits, prenorm

    def decode_rows(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int],
                    wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        logits, prenorm = self.inner.decode_rows(tokens, g, positions, seqs, wanted)
        catching_up = self._catching_up
        self._catching_up = False
        if catching_up:
            starts = np.concatenate([[0], np.asarray(wanted)[:-1] + 1])
            for s, e in zip(starts, wanted, strict=True):
                self._catch_up(seqs[e], tokens[s : e + 1], positions[s : e + 1])
        for j, i in enumerate(wanted):
            self._row(logits[j], seqs[i], int(positions[i]), int(tokens[i]), None, depth=1 if catching_up else None)
        return logits, prenorm

    # --- the texts --------------------------------------------------------------------------------

    def _fits(self, t: int, tokens: np.ndarray, positions: np.ndarray) -> bool:
        truth = self.truths[t]
        at = np.asarray(positions) + 1
        return bool(at[-1] < len(truth) and at[0] >= 0 and (truth[at] == tokens).all())

    def _match(self, seq: int, tokens: np.ndarray, positions: np.ndarray) -> _Seq:
        """The sequence's text: kept while its rows fit, else the first of the truths they fit.

        Where none fits, the engine's text left every known one at a near-tie (a tree's or a batch's verify rounds
        apart from the target alone's one-row decode): from there it is learnt as the engine writes it, a truth of
        its own, so a later run that parts there alike is arranged on (this one's rows stay unknown: the text's
        next token is not known before the target writes it)."""
        s = self._seqs.get(seq)
        if s is None:
            s = self._seqs[seq] = _Seq()
        at = np.asarray(positions) + 1
        if at[0] <= 1 or (at[0] < len(s.text) and s.text[at[0]] != tokens[0]):  # a new generation, or a rewind
            del s.text[at[0] :]
            s.learnt = None
            # draws seeded by the text's first rows: a generation run again draws alike, whatever runs beside it
            s.rng = Draws([self.seed, *np.asarray(tokens[:16], dtype=np.int64).tolist()])
        if len(s.text) <= at[-1]:
            s.text.extend([-1] * (at[-1] + 1 - len(s.text)))
        for i, t in zip(at.tolist(), np.asarray(tokens).tolist(), strict=True):
            s.text[i] = t
        if s.truth is None or not self._fits(s.truth, tokens, positions):
            s.truth = next((t for t in range(len(self.truths)) if self._fits(t, tokens, positions)), None)
        if s.learnt is not None:
            self.truths[s.learnt] = np.asarray(s.text, dtype=np.int64)
        elif s.truth is None and at[0] > 1:
            self.truths.append(np.asarray(s.text, dtype=np.int64))
            s.learnt = s.truth = len(self.truths) - 1
            self.counts.learnt += 1
        return s

    def _catch_up(self, seq: int, tokens: np.ndarray, positions: np.ndarray) -> None:
        self._catching_up = False
        s = self._match(seq, tokens, positions)
        s.start = int(positions[-1])
        s.last_on = int(positions[-1]) if s.truth is not None else None
        self._owner = seq

    # --- one row ----------------------------------------------------------------------------------

    def _row(self, row: np.ndarray, seq: int, pos: int, token: int, columns: np.ndarray | None,
             depth: int | None = None, branch: bool = False) -> None:  # fmt: skip
        """Rewrite (or record) one row the engine reads, with the engine's clock paused: the rewriting is this
        bench's work, not the engine's, so neither its costs nor a reported speed count it (``runtime.clock``)."""
        before = paused_seconds()
        with paused():
            self._rewrite(row, seq, pos, token, columns, depth, branch)
        self.counts.seconds += paused_seconds() - before

    def _rewrite(self, row: np.ndarray, seq: int, pos: int, token: int, columns: np.ndarray | None,
                 depth: int | None, branch: bool) -> None:  # fmt: skip
        self.counts.rows += 1
        s = self._seqs.get(seq)
        if s is None or s.truth is None:
            self.counts.unknown += 1
            return
        truth = self.truths[s.truth]
        depth = depth if depth is not None else pos - s.start + 1
        on = pos + 1 < len(truth) and truth[pos + 1] == token
        if self.table is None:  # recording: a chain's row is on the path if the one before it was
            on = on and (depth == 1 or (not branch and s.last_on == pos - 1))
            s.last_on = pos if on else None
        nxt = int(truth[pos + 2]) if pos + 2 < len(truth) else -1
        self.counts.on_path += on
        if 1 <= depth <= self.max_depth:
            if self.table is None:
                self._observe(row, depth, nxt if on else None, columns)
            else:
                self._arrange(row, depth, on, nxt, columns, s.rng)

    def _column_of(self, token: int) -> int:
        """A target id's column in the draft vocabulary (itself without one); -1: the drafter cannot draft it."""
        if token < 0:
            return -1
        if self._column is None:
            return token
        return int(self._column[token]) if token < len(self._column) else -1

    def _observe(self, row: np.ndarray, depth: int, nxt: int | None, columns: np.ndarray | None) -> None:
        q = row if columns is not None or self._ids is None else row[self._ids]
        q = np.exp(q - q.max())
        q /= q.sum()
        top = np.sort(q)[::-1][:K]
        if nxt is None:
            self.record.add(depth, top, None)
            return
        c = self._column_of(nxt)
        rank = int((q > q[c]).sum()) if c >= 0 else K
        self.record.add(depth, top, rank if rank < K else -1)

    def _spread(self, n: int) -> np.ndarray:
        """A fixed jitter in [0, 1e-3) for rows of ``n`` ids, drawn once (its own generator: no draw of a row's)."""
        if n not in self._jitter:
            self._jitter[n] = (np.random.default_rng([self.seed, n]).random(n) * 1e-3).astype(np.float32)
        return self._jitter[n]

    def _arrange(self, row: np.ndarray, depth: int, on: bool, nxt: int, columns: np.ndarray | None,
                 rng: Draws) -> None:  # fmt: skip
        """Rewrite the row: ``K`` candidates at the drawn probabilities (the text's next token at its drawn rank when
        on the path), every other id sharing what is left; the text's next token is never a candidate otherwise.

        A whole row (a batch's, or a penalised tree's) gets the rest's value at every id, not only the draft
        vocabulary's: one fill, where -inf outside it would cost a scatter of 32K ids a row. The rest is spread
        by a fixed jitter of at most 1e-3 (``_spread``): a row of one repeated value is what no drafter gives, and
        the engine's top-k search would meet a tie among its group maxima on about one row in nine and sort the
        whole row, so trees would pay for this bench's rows, not for the engine's work. A confidence is read
        over the draft vocabulary alone and an argmax anywhere, so both are as drawn; only a penalised tree's
        softmax over the whole row sees the rest spread wider."""
        assert self.table is not None
        logp, rest, rank = self.table.draw(depth, on, rng)
        avoid = self._column_of(nxt)
        if on and rank >= 0 and avoid >= 0:
            self.counts.placed += 1
        else:
            rank = -1
        np.add(self._spread(len(row)), rest - self._log_others, out=row)
        fillers = [c for c in dict.fromkeys(rng.indices(self._n_draft, K + 2)) if c != avoid][:K]
        if rank >= 0:
            fillers.insert(rank, avoid)
        columns_at = np.asarray(fillers[:K], dtype=np.int64)
        at = columns_at if columns is not None or self._ids is None else self._ids[columns_at]
        row[at] = logp[: len(at)]


def wrap(engine: Engine, truths: list[np.ndarray], table: RankTable | None = None, seed: int = 0) -> ArrangedDrafter:
    """Put an arranged (or recording) drafter in the engine's place; every later generation's drafter is it."""
    from local_eagle.runtime.drafter import Drafter

    if not isinstance(engine.drafter, Drafter | ArrangedDrafter):
        raise LocalEagleError("arranged drafts need an EAGLE drafter (--draft); an MTP head drafts otherwise")
    arranged = ArrangedDrafter(engine.drafter, truths, table, seed)
    engine.drafter = arranged  # type: ignore[assignment]
    engine.feed.drafter = arranged  # type: ignore[assignment]
    return arranged


def truths_of(engine: Engine, prompts: list[str], max_tokens: int) -> list[np.ndarray]:
    """Each prompt's text as the target alone writes it (greedy): the prompt's tokens, then its output's."""
    from local_eagle.runtime.sampling import GREEDY

    out = []
    for p in prompts:
        r = engine.generate(p, max_tokens=max_tokens, sampling=GREEDY, draft_max=0)
        out.append(np.concatenate([engine.tokenize(p), np.asarray(r.tokens, dtype=np.int64)]))
    return out


def record_ranks(engine: Engine, prompts: list[str], max_tokens: int = 128, depth: int = 8,
                 source: str = "") -> RankTable:  # fmt: skip
    """The drafter's ranks by depth on these prompts: a fixed greedy chain of ``depth`` drafts every round (so rows
    after a miss are seen too), every row recorded against the target alone's text."""
    from local_eagle.runtime.sampling import GREEDY

    truths = truths_of(engine, prompts, max_tokens)
    rec = wrap(engine, truths)
    try:
        for p in prompts:
            engine.generate(p, max_tokens=max_tokens, sampling=GREEDY, draft_max=depth, adaptive=False)
    finally:
        engine.drafter = rec.inner
        engine.feed.drafter = rec.inner
    return rec.record.table(source or f"{len(prompts)} prompts x {max_tokens} tokens")


def put_in_draft_vocabulary(path: str | os.PathLike[str], tokens: np.ndarray) -> int:
    """Rewrite a drafter GGUF's ``d2t`` (its draft vocabulary's target ids) in place so it holds ``tokens``.

    A random drafter's draft vocabulary is the first ids, and a random target's text rarely falls in it, where a
    trained drafter's holds the ids its target writes most. The ids stay sorted and distinct; returns how many of
    ``tokens`` were outside before."""
    from gguf import GGMLQuantizationType

    from local_eagle.gguf.reader import read_header

    header = read_header(path, "drafter GGUF")
    t = header.tensor("d2t")
    if t is None or t.type != GGMLQuantizationType.I64:
        raise LocalEagleError(f"{path}: no d2t tensor (I64) to rewrite")
    ids = np.memmap(header.path, dtype=np.int64, mode="r+", offset=header.data_offset + t.offset, shape=(t.ne[0],))
    wanted = np.unique(np.asarray(tokens, dtype=np.int64))
    missing = np.setdiff1d(wanted, ids)
    if len(wanted) > len(ids):
        raise LocalEagleError(f"{path}: {len(wanted)} ids do not fit a draft vocabulary of {len(ids)}")
    if len(missing):
        keep = np.setdiff1d(ids, wanted)[: len(ids) - len(wanted)]
        ids[:] = np.sort(np.concatenate([wanted, keep]))
        ids.flush()
    del ids
    return len(missing)


def load_table(name: str) -> RankTable:
    """``demo`` (the built-in table, recorded from the demo pair) or a rank table file."""
    return RankTable.load(BUILTIN if name == "demo" else name)


class Arrangement:
    """One bench run's arranged acceptance: the texts, the drafter copied with them in its draft vocabulary, and
    the drafters wrapped, whose counts the run reports."""

    def __init__(self, table: RankTable, truths: list[np.ndarray], drafter: Path, moved: int,
                 tmp: tempfile.TemporaryDirectory) -> None:  # fmt: skip
        self.table, self.truths, self.drafter, self.moved = table, truths, drafter, moved
        self._tmp = tmp
        self.wrapped: list[ArrangedDrafter] = []

    def wrap(self, engine: Engine, seed: int = 0) -> ArrangedDrafter:
        arranged = wrap(engine, self.truths, self.table, seed)
        self.wrapped.append(arranged)
        return arranged

    def summary(self) -> dict:
        counts = Counts()
        for w in self.wrapped:
            for k in ("rows", "on_path", "placed", "unknown", "learnt"):
                setattr(counts, k, int(getattr(counts, k) + getattr(w.counts, k)))
            counts.seconds += w.counts.seconds
        return {"label": LABEL, "note": NOTE.format(source=self.table.source), "source": self.table.source,
                "recorded_acceptance": [round(a, 3) for a in self.table.acceptance()],
                "recorded_rows": self.table.samples(), "texts": len(self.truths),
                "ids_put_in_draft_vocabulary": self.moved, **counts.to_dict()}  # fmt: skip

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> Arrangement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def arrange(alone: Engine, drafter: str | os.PathLike[str], prompts: list[str], max_tokens: int,
            table: RankTable) -> Arrangement:  # fmt: skip
    """The target alone's texts (``alone``: an engine of the target), and a copy of ``drafter`` whose draft
    vocabulary holds every id of them (the drafter file itself is left as it is)."""
    from local_eagle.runtime.drafter import read_spec

    truths = truths_of(alone, prompts, max_tokens)
    tmp = tempfile.TemporaryDirectory(prefix="local-eagle-arranged-")
    try:
        copy = Path(tmp.name) / Path(drafter).name
        shutil.copyfile(drafter, copy)
        moved = 0 if read_spec(copy).draft_ids is None else put_in_draft_vocabulary(copy, np.concatenate(truths))
    except BaseException:
        tmp.cleanup()
        raise
    return Arrangement(table, truths, copy, moved, tmp)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a thin wrapper
    import argparse

    from local_eagle.bench.run import read_prompts
    from local_eagle.runtime.engine import Engine, EngineOptions

    ap = argparse.ArgumentParser(description="Record a drafter's ranks by depth against its target's own text.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="a rank table (JSON) from a real pair on held-out prompts")
    r.add_argument("target")
    r.add_argument("drafter")
    r.add_argument("--prompts", required=True)
    r.add_argument("--limit", type=int, default=16)
    r.add_argument("-n", "--max-tokens", type=int, default=128)
    r.add_argument("--depth", type=int, default=8)
    r.add_argument("--ctx", type=int, default=2048)
    r.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        prompts = read_prompts(a.prompts)[: a.limit]
        engine = Engine(a.target, a.drafter, EngineOptions(n_ctx=a.ctx))
        source = (f"{Path(a.target).name} + {Path(a.drafter).name}, greedy, {len(prompts)} prompts of "
                  f"{Path(a.prompts).name} x {a.max_tokens} tokens, chains of {a.depth}")  # fmt: skip
        table = record_ranks(engine, prompts, a.max_tokens, a.depth, source)
        engine.close()
        table.save(a.out)
    except LocalEagleError as e:
        raise SystemExit(f"error: {e}") from None
    print(json.dumps({"out": a.out, "acceptance": table.acceptance(), "rows": table.samples()}))


if __name__ == "__main__":  # pragma: no cover
    main()

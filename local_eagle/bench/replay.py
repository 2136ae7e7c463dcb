"""A speculative run's end-to-end speed on a pair whose drafter accepts nothing: its recorded rounds replayed.

Random-weight pairs (``bench.pair``) cost on a GPU what the real models do, but their drafter accepts
about nothing, so a bench of them says nothing about speculative speed. A bench run with ``--rounds``
recorded every round's shape on a real pair (rows verified, tokens accepted, drafter calls, catch-up
rows, later drafter rows); acceptance does not depend on the device. Replaying those rounds with
every target and drafter call run for real at its recorded shape, only accept/reject taken from the
record, gives the end-to-end speed the real pair would have here, host loop included. Set against
``project.projected_ms`` on the cost curve measured in the same run, the difference is the
projection's error: what the cost curve leaves out (host time, cache growth, call overheads).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.bench.costs import drafter_call, target_call
from local_eagle.errors import LocalEagleError

if TYPE_CHECKING:
    from local_eagle.llamacpp.model import Context
    from local_eagle.runtime.drafter import Drafter

Round = tuple[int, int, int, int, int]  # rows verified, accepted, drafter calls, catch-up rows, later drafter rows

NOTE = ("every target and drafter call ran at its recorded shape, accept/reject came from the record; tree verifies "
        "and tree frontiers ran as one sequence of the same rows at consecutive positions (a real tree uses a tree "
        "attention mask over several sequences); every target call is timed as the cost curve times it (complete, "
        "every row's logits read), and so is each round's first drafter call, the catch-up (its last row read, "
        "without the engine's feature capture and encode); the later drafter calls read every row whole (a chain "
        "step its one row; a tree frontier reads only the draft vocabulary's columns in the engine); host time is "
        "this Python loop's, included as is")  # fmt: skip
BASELINE_MAX = 1024  # target-alone tokens at most: a few seconds of an 8B model on a GPU
CTX_MAX = 8192  # past this the replay resets to the prefix instead of growing the cache


@dataclass(frozen=True)
class RecordedSetting:
    """One bench setting's recorded rounds and what the projection needs from its record."""

    label: str
    draft_max: int
    adaptive: bool
    tree_nodes: int | None
    rounds: list[Round]
    host_ms_per_round: float | None = None
    acceptance_length: float | None = None


def setting_label(draft_max: int, adaptive: bool, tree_nodes: int | None) -> str:
    """Short names a person reads across settings ("auto", "chain 3", "tree 15")."""
    if adaptive:
        return "auto"
    return f"tree {tree_nodes}" if tree_nodes is not None else f"chain {draft_max}"


def unique_labels(labels: list[str]) -> list[str]:
    """Labels keyed into a result must not collide: a repeated one gets ``#2``, ``#3``..."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def split_rows(total: int, calls: int) -> list[int]:
    """``total`` rows over ``calls`` calls as evenly as whole rows allow, each call at least one row.

    This is ``projected_ms``'s even share in whole rows: they sum to ``total`` whenever it is at least
    ``calls`` (a drafter call never decodes nothing).
    """
    if calls <= 0:
        return []
    base, extra = divmod(max(0, total), calls)
    return [max(1, base + (i < extra)) for i in range(calls)]


def drafter_call_rows(rnd: Round) -> list[int]:
    """The rows of each drafter call of a round: the catch-up (at least one row), then the later calls' share."""
    _rows, _accepted, steps, catch_up, draft_rows = rnd
    if not steps:
        return []
    return [max(1, catch_up), *split_rows(draft_rows, steps - 1)]


def is_chain_round(rnd: Round) -> bool:
    """A chain decodes one drafter row a later step and verifies its drafts (a refused last step drafts none);
    a tree's frontiers decode several rows a step."""
    rows, _accepted, steps, _catch_up, draft_rows = rnd
    return draft_rows == max(0, steps - 1) and rows - 1 <= steps


def acceptance_per_position(rounds: list[Round]) -> list[float] | None:
    """For chains, position i's acceptance among the rounds that drafted at least i tokens (as the engine counts
    it); None where a round was a tree, whose rows say nothing of positions."""
    drafting = [r for r in rounds if r[0] > 1]
    if not drafting or not all(is_chain_round(r) for r in drafting):
        return None
    out = []
    for i in range(1, max(r[0] for r in drafting)):
        reached = [r for r in drafting if r[0] - 1 >= i]
        out.append(sum(r[1] >= i for r in reached) / len(reached))
    return out


def _round(value: object, where: str) -> Round:
    whole = isinstance(value, list | tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    if not whole or len(value) != 5 or min(value) < 0:  # type: ignore[arg-type]
        raise LocalEagleError(f"{where}: expected 5 whole numbers >= 0 (rows verified, tokens accepted, drafter calls, "
                              f"catch-up rows, later drafter rows), got {json.dumps(value)[:80]}")  # fmt: skip
    rows, accepted, steps, catch_up, draft_rows = value
    if rows < 1 or accepted > rows - 1:
        raise LocalEagleError(f"{where}: a round verifies at least 1 row and accepts at most rows - 1 tokens, "
                              f"got {rows} rows and {accepted} accepted")  # fmt: skip
    return rows, accepted, steps, catch_up, draft_rows


def _number(s: dict, key: str, where: str, kind: type, optional: bool = True):
    v = s.get(key)
    if v is None and optional:
        return None
    if kind is bool:
        ok = isinstance(v, bool)
    else:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and (kind is float or float(v).is_integer())
    if not ok:
        raise LocalEagleError(f"{where}.{key}: expected {'true/false' if kind is bool else kind.__name__}, "
                              f"got {json.dumps(v)[:40]}")  # fmt: skip
    return kind(v)


def settings_from(raw: object, where: str) -> list[RecordedSetting]:
    """Settings from a ``bench --json --rounds`` list; a bad one is one line naming the setting and the field."""
    if not isinstance(raw, list) or not raw:
        raise LocalEagleError(f"{where}: expected a non-empty list of bench settings (bench --json --rounds)")
    out = []
    for i, s in enumerate(raw):
        at = f"{where}: setting {i}"
        if not isinstance(s, dict):
            raise LocalEagleError(f"{at}: expected an object, got {type(s).__name__}")
        rounds = s.get("rounds")
        if not isinstance(rounds, list) or not rounds:
            raise LocalEagleError(f"{at}.rounds: expected a non-empty list of rounds (record them with bench --json "
                                  f"--rounds), got {json.dumps(rounds)[:40]}")  # fmt: skip
        parsed = [_round(r, f"{at}.rounds[{j}]") for j, r in enumerate(rounds)]
        draft_max = _number(s, "draft_max", at, int, optional=False)
        adaptive = bool(_number(s, "adaptive", at, bool))
        tree_nodes = _number(s, "tree_nodes", at, int)
        host = _number(s, "host_ms_per_round", at, float)
        length = _number(s, "acceptance_length", at, float)
        out.append(RecordedSetting(setting_label(draft_max, adaptive, tree_nodes), draft_max, adaptive, tree_nodes,
                                   parsed, host, length))  # fmt: skip
    labels = unique_labels([s.label for s in out])
    return [replace(s, label=label) for label, s in zip(labels, out, strict=True)]


def read_settings(path: str | os.PathLike[str]) -> list[RecordedSetting]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise LocalEagleError(f"{path}: not a bench rounds file ({type(e).__name__}: {e})") from None
    return settings_from(raw, str(path))


def round_tokens(rounds: list[Round]) -> int:
    """Tokens the rounds emitted: each verify emits its accepted drafts and one token of its own."""
    return sum(1 + r[1] for r in rounds)


def projection(rounds: list[Round], curve: dict, host_ms: float, measured_tps: float | None,
               baseline_tps: float | None) -> dict:  # fmt: skip
    """The rounds priced on the cost curve with ``host_ms`` a round, and how far that lands from the replay."""
    from local_eagle.bench.project import profile_from, projected_ms, projected_speedup

    profile = profile_from(curve, "cost curve", "measured")
    ms = projected_ms(rounds, profile, host_ms)
    tps = round_tokens(rounds) / ms * 1e3 if ms else None
    speedup = projected_speedup(rounds, profile, host_ms)
    measured_speedup = measured_tps / baseline_tps if measured_tps and baseline_tps else None
    return {
        "host_ms": host_ms,
        "ms": ms,
        "tokens_per_second": tps,
        "speedup": speedup,
        "baseline_tokens_per_second": 1e3 / (profile.verify(1) + host_ms),
        "projection_error": {
            "tokens_per_second": tps / measured_tps - 1 if tps and measured_tps else None,
            "speedup": speedup / measured_speedup - 1 if measured_speedup else None,
        },
    }


def _context_size(settings: list[RecordedSetting], prefix: int) -> int:
    """Room for the longest setting without a reset: its tokens and largest verify for the target, its catch-ups
    and largest round of drafter rows for the drafter."""
    need = widest = 1
    for s in settings:
        target = round_tokens(s.rounds) + max(r[0] for r in s.rounds)
        drafter = sum(max(1, r[3]) for r in s.rounds if r[2]) + max(sum(drafter_call_rows(r)) for r in s.rounds)
        need = max(need, target, drafter)
        widest = max(widest, *(max(r[0], sum(drafter_call_rows(r))) for r in s.rounds))
    return max(prefix + widest + 8, min(CTX_MAX, prefix + need + 8))  # one round always fits after a reset


def _late(deadline: float | None, next_s: float) -> bool:
    return deadline is not None and time.monotonic() + next_s >= deadline


def replay_rounds(
    target: str | os.PathLike[str],
    drafter: str | os.PathLike[str],
    settings: list[RecordedSetting] | list[dict],
    prefix: int = 256,
    gpu_layers: int = -1,
    threads: int = 0,
    seed: int = 0,
    max_rounds: int | None = None,
    deadline: float | None = None,
    costs: dict | None = None,
    baseline_max: int = BASELINE_MAX,
) -> dict:
    """The target alone, then each setting's rounds replayed, on one model, context and drafter.

    ``costs`` (a ``bench.costs`` curve measured in the same run, as a dict) adds each setting's projection;
    ``max_rounds`` replays the first rounds of each setting; ``deadline`` (a ``time.monotonic()`` value) stops
    before a round that would not finish in time, marking its setting ``truncated``.
    """
    from local_eagle.llamacpp.model import Context, ContextOptions, Model
    from local_eagle.runtime.drafter import Drafter

    if not settings:
        raise LocalEagleError("no settings to replay")
    if all(isinstance(s, RecordedSetting) for s in settings):
        recorded = [s for s in settings if isinstance(s, RecordedSetting)]
    else:
        recorded = settings_from(settings, "settings")
    if max_rounds is not None:
        recorded = [replace(s, rounds=s.rounds[: max(1, max_rounds)]) for s in recorded]
    n_ctx = _context_size(recorded, prefix)
    n_batch = max(512, max(r[0] for s in recorded for r in s.rounds))
    rng = np.random.default_rng(seed)
    result: dict = {"target": str(target), "drafter": str(drafter), "prefix": prefix, "n_ctx": n_ctx,
                    "gpu_layers": gpu_layers, "note": NOTE}  # fmt: skip
    model = Model(Path(target), n_gpu_layers=gpu_layers)
    try:
        opts = ContextOptions(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads)
        ctx = Context(model, opts)
        try:
            d = Drafter(drafter, ctx, opts, n_gpu_layers=gpu_layers)
            try:
                n_vocab = model.n_vocab
                tokens = rng.integers(100, min(n_vocab, 30000), size=n_ctx).astype(np.int32)
                d_tokens = tokens % max(d.n_vocab, 1)
                g = (rng.standard_normal((n_ctx, d.n_embd)) / np.sqrt(d.n_embd)).astype(np.float32)
                ctx.decode(tokens[:prefix], np.arange(prefix), np.arange(prefix) == prefix - 1)
                d.decode_kv(d_tokens[:prefix], g[:prefix], np.arange(prefix))
                longest = max(round_tokens(s.rounds) for s in recorded)
                n_base = max(1, min(baseline_max, longest, n_ctx - prefix))
                base = _target_alone(ctx, tokens, prefix, n_base, n_vocab, deadline)
                result["baseline"] = base
                io = _Calls(ctx, d, tokens, d_tokens, g, prefix, n_ctx, n_vocab)
                if not _late(deadline, 0.0):
                    result["warm_up_seconds"] = _warm_up(io, recorded)
                result["settings"] = []
                for i, s in enumerate(recorded):
                    share = None  # a short call replays the start of every setting, not all of the first few
                    if deadline is not None:
                        now = time.monotonic()
                        share = now + max(0.0, deadline - now) / (len(recorded) - i)
                    result["settings"].append(_replay_one(io, s, base["tokens_per_second"], costs, share))
            finally:
                d.close()
        finally:
            ctx.close()
    finally:
        model.close()
    return result


def _target_alone(ctx: Context, tokens: np.ndarray, prefix: int, n: int, n_vocab: int, deadline: float | None) -> dict:
    """One token a call, its logits read as a verify reads them: the speed speculative decoding is set against."""
    for pos in range(prefix, prefix + min(4, n)):  # the first calls of a shape warm it up
        target_call(ctx, tokens[pos : pos + 1], np.array([pos]), n_vocab)
    ctx.remove_from(prefix)
    done, truncated, per = 0, False, 0.0
    t0 = time.perf_counter()
    for pos in range(prefix, prefix + n):
        if _late(deadline, per):
            truncated = True
            break
        target_call(ctx, tokens[pos : pos + 1], np.array([pos]), n_vocab)
        done += 1
        per = (time.perf_counter() - t0) / done
    seconds = time.perf_counter() - t0
    ctx.remove_from(prefix)
    return {"tokens": done, "seconds": seconds, "tokens_per_second": done / seconds if done and seconds else None,
            "ms_per_token": 1e3 * seconds / done if done else None, "truncated": truncated}  # fmt: skip


@dataclass
class _Calls:
    """What every replayed call needs: both contexts and the rows they decode."""

    ctx: Context
    d: Drafter
    tokens: np.ndarray
    d_tokens: np.ndarray
    g: np.ndarray
    prefix: int
    n_ctx: int
    n_vocab: int


def _warm_up(io: _Calls, settings: list[RecordedSetting]) -> float:
    """One untimed call of every shape the replay will run: a backend's first call of a shape (graph capture,
    kernel choice) would otherwise land on whichever setting meets it first."""
    t0 = time.perf_counter()
    rounds = [r for s in settings for r in s.rounds]
    p = io.prefix
    for rows in sorted({r[0] for r in rounds}):
        target_call(io.ctx, io.tokens[p : p + rows], np.arange(p, p + rows), io.n_vocab)
        io.ctx.remove_from(p)
    for n in sorted({n for r in rounds for n in drafter_call_rows(r)}):
        io.d.decode(io.d_tokens[p : p + n], io.g[p : p + n], np.arange(p, p + n))
        io.d.remove_from(p)
    return time.perf_counter() - t0


def _replay_one(io: _Calls, s: RecordedSetting, baseline_tps: float | None, costs: dict | None,
                deadline: float | None) -> dict:  # fmt: skip
    ctx, d, prefix, n_vocab = io.ctx, io.d, io.prefix, io.n_vocab
    ctx.remove_from(prefix)
    d.remove_from(prefix)
    pos = dpos = prefix
    target_s = drafter_s = 0.0
    done: list[Round] = []
    resets, truncated, per = 0, False, 0.0
    clock = time.perf_counter
    t0 = clock()
    for rnd in s.rounds:
        if _late(deadline, per):
            truncated = True
            break
        rows, accepted = rnd[0], rnd[1]
        calls = drafter_call_rows(rnd)
        if pos + rows > io.n_ctx or dpos + sum(calls) > io.n_ctx:
            ctx.remove_from(prefix)
            d.remove_from(prefix)
            pos = dpos = prefix
            resets += 1
        if calls:
            t = clock()
            at = dpos
            for i, n in enumerate(calls):
                rows_at = io.d_tokens[at : at + n], io.g[at : at + n], np.arange(at, at + n)
                if i == 0:
                    drafter_call(d, *rows_at)  # the catch-up, as the cost curve times a drafter call
                else:
                    d.decode(*rows_at)  # a later step reads every row
                at += n
            dpos += calls[0]  # the catch-up rows stay; the drafts go, as the engine rolls its drafter back
            d.remove_from(dpos)
            drafter_s += clock() - t
        t = clock()
        target_call(ctx, io.tokens[pos : pos + rows], np.arange(pos, pos + rows), n_vocab)
        pos += accepted + 1
        ctx.remove_from(pos)
        target_s += clock() - t
        done.append(rnd)
        per = (clock() - t0) / len(done)
    seconds = clock() - t0
    return _summary(s, done, seconds, target_s, drafter_s, resets, truncated, baseline_tps, costs)


def _summary(s: RecordedSetting, done: list[Round], seconds: float, target_s: float, drafter_s: float, resets: int,
             truncated: bool, baseline_tps: float | None, costs: dict | None) -> dict:  # fmt: skip
    n = len(done)
    tokens = round_tokens(done)
    tps = tokens / seconds if n and seconds else None
    out: dict = {
        "label": s.label,
        "draft_max": s.draft_max,
        "adaptive": s.adaptive,
        "tree_nodes": s.tree_nodes,
        "rounds": n,
        "rounds_recorded": len(s.rounds),
        "truncated": truncated,
        "tokens": tokens,
        "target_calls": n,
        "seconds": seconds,
        "tokens_per_second": tps,
        "acceptance_length": tokens / n if n else None,
        "recorded_acceptance_length": s.acceptance_length,
        "speedup": tps / baseline_tps if tps and baseline_tps else None,
        "acceptance_per_position": acceptance_per_position(done),
        "mean_verify_rows": sum(r[0] for r in done) / n if n else None,
        "drafter_calls": sum(r[2] for r in done),
        "target_seconds": target_s,
        "drafter_seconds": drafter_s,
        "host_ms_per_round": 1e3 * max(0.0, seconds - target_s - drafter_s) / n if n else None,
        "recorded_host_ms_per_round": s.host_ms_per_round,
        "resets": resets,
        "projected": None,
        "projection_error": None,
    }
    if costs is not None and n:
        hosts = {"host_0": 0.0, "host_replay": out["host_ms_per_round"]}
        if s.host_ms_per_round is not None:
            hosts["host_record"] = s.host_ms_per_round
        out["projected"] = {k: projection(done, costs, h, tps, baseline_tps) for k, h in hosts.items()}
        headline = "host_record" if "host_record" in out["projected"] else "host_0"
        out["projection_error"] = out["projected"][headline]["projection_error"]
    return out

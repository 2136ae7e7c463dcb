"""local-eagle's DFlash block drafting against llama.cpp's own ``draft-dflash`` (and ``draft-dspark``), on the same
target GGUF, drafter GGUF and prompt tokens, in one run.

``python -m local_eagle.bench.against_llamacpp --spec-simple BIN`` writes the tiny generated pairs (``--pairs``:
``random``, the tests' random target and a random DFlash drafter; ``agree-x`` / ``agree-xy``, ``testing.tiny_agree``'s
pairs that accept every draft / some drafts), or takes ``--target`` and ``--drafter``, and, prompt by prompt, runs

1. local-eagle's target alone (``draft_max=0``), the run's baseline for speed;
2. local-eagle's engine drafting DFlash blocks of ``k`` (``BlockDrafter``, fixed length, greedy, ``p_min`` 0);
3. ``llama-speculative-simple --spec-type draft-dflash --spec-draft-n-max k`` from the same vendored llama.cpp
   (``--temp 0 --top-k 1``, ``p_min`` 0, ``n_min`` 0, one thread), timed, then once more with ``-lv 5`` (untimed: the
   debug log prints each block row's first candidate and each round's ``accepted A/D ... (last)``);
4. with ``--completion``, the stock ``llama-completion`` alone; with ``--dspark``, ``draft-dspark`` on the pair's
   DSpark drafter, and local-eagle's engine drafting with that drafter too (the same ``k``, clamped to what the
   DSpark block gives: ``block_size`` anchor-first), its rounds compared with draft-dspark's as DFlash's are with
   draft-dflash's (``transcription_dspark``); with ``--dflash2``, the same for the pair's DFlash2 drafter, which
   llama.cpp drafts with ``draft-dflash`` too (it tells DFlash2 by its selector), compared with it
   (``transcription_dflash2``).

**DFlash2.** draft-dflash's DFlash2 walk logs no draft candidates, only each round's ``accepted A/D ... (last)``: its
rounds are compared on the rest (position, anchor, drafts verified and kept, the target's token). Its kept drafts
are known only through the bytes the tool printed, so its output is checked on those (against the engine's tokens'
pieces, special tokens rendered as llama.cpp renders them). On the agreeing pairs a round's accepted count pins the
drafts down: agree-x keeps every draft (each is x), agree-xy keeps one after ``y`` (x, where the target then wants
y) and none after ``x``.

**Same rounds.** speculative-simple decodes the prompt but its last token, then verifies ``[last, drafts]``; the
engine decodes the whole prompt and samples its first token in the prefill. So llama.cpp is given the prompt plus
the target's own first token (checked to tokenize back to exactly those tokens; a prompt that does not is skipped):
each side's round r then drafts from the same anchor, at the same position, over the same context, and the
transcription check compares the rounds one by one: the block's greedy rows, the drafts verified, the drafts kept.
The output tokens of llama.cpp's run are rebuilt from its log (a round's kept drafts, then its last token) and
compared with the engine's (after the first, which llama.cpp was given).

**Ends.** The engine is asked for ``max_tokens + 1`` tokens (the first included), llama.cpp for ``-n max_tokens``;
both shorten the draft to what is left the same way, except where nothing is left: speculative-simple truncates a
draft only when ``n_max > 0`` (``common_speculative_draft``), so its last round verifies a full block and runs past
``-n``, where the engine's last round drafts none. Tokens per target call is reported over the rounds both ran in
full (``k`` drafts each) and, as each ran, over all its rounds. Both decode ``n_max`` mask rows in a shortened
round and cut the draft (non-causal attention makes the rows depend on the block's length), so an end round's
block rows are compared whole too; the end rounds are listed apart.

Speed: each side's decode tok/s (prompt processing left out: the engine's ``decode_seconds``, the stock's
``decoded ... in`` timer) and its ratio to local-eagle's target alone measured in the same run. With ``--size tiny``
a target call costs little more than each loop's own overhead; ``--size mid`` widens the generated models until a
call's compute dominates. Generated models either way: the ratios say little about a real model and drafter.
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from local_eagle.bench.mtp_stock import SideTotals, emit, parse_completion
from local_eagle.errors import LocalEagleError

# "tiny": the tests' shapes (a target call costs little more than the loop's own overhead); "mid": a target of 8
# blocks of 1024 (372 MB f32) and drafters of 2 blocks of that width, where a call's compute dominates
SIZES = ("tiny", "mid")
PROMPTS = ["hello ", "The quick brown fox", "def add(a, b):", "1, 2, 3, 4,", "once upon a time "]
PAIRS = ("random", "agree-x", "agree-xy")
BLOCK_SIZE = 5  # the tiny drafters' trained block: 4 drafts (DFlash, DFlash2), 5 (DSpark, anchor-first)
# the block drafters beside DFlash that a pair may carry: llama.cpp's spec type for each and the sides' label
EXTRA_KINDS = {"dspark": ("draft-dspark", "DSpark"), "dflash2": ("draft-dflash", "DFlash2")}

_CANDIDATE = re.compile(r"draft candidate\s+0, pos\s+(\d+):\s+(-?\d+)")
_ACCEPTED = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((-?\d+)\)")


@dataclass
class Round:
    """One round, either side's: the anchor's position and token, the block's greedy rows, the drafts verified and
    kept, the target's own token that ends it."""

    pos: int
    anchor: int
    rows: list[int]
    drafted: int
    accepted: int
    last: int

    @property
    def tokens(self) -> list[int]:
        """What the round commits: the drafts kept, then the target's token."""
        return [*self.rows[: self.accepted], self.last]

    @property
    def first(self) -> int | None:
        """The round's first committed token; None where it is a kept draft whose row the log does not give
        (DFlash2)."""
        if self.accepted == 0:
            return self.last
        return self.rows[0] if self.rows else None

    def key(self, rows: bool = True) -> tuple:
        drafts = self.rows[: self.drafted] if rows else None
        return (self.pos, self.anchor, drafts, self.drafted, self.accepted, self.last)


def parse_stock_rounds(log: str, n_prompt: int, first_anchor: int, rows_logged: bool = True) -> list[Round]:
    """Rounds from ``llama-speculative-simple -lv 5``: each block row's first candidate (``draft candidate 0, pos
    i: ID``), then the round's ``accepted A/D draft tokens, the last target token is: (ID)``. The first round's anchor
    is the prompt's last token at ``n_prompt - 1``; each next one is the previous round's last token, ``A + 1``
    further on. ``rows_logged`` False: the drafter logs no rows (DFlash2's walk), the rounds have none."""
    rounds: list[Round] = []
    rows: list[int] = []
    pos, anchor = n_prompt - 1, first_anchor
    for line in log.splitlines():
        m = _CANDIDATE.search(line)
        if m:
            rows.append(int(m.group(2)))
            continue
        m = _ACCEPTED.search(line)
        if m:
            accepted, drafted, last = (int(g) for g in m.groups())
            if rows_logged and len(rows) < drafted:
                raise LocalEagleError(f"round {len(rounds)}: {drafted} drafts verified but {len(rows)} rows logged")
            rounds.append(Round(pos, anchor, rows, drafted, accepted, last))
            pos, anchor, rows = pos + accepted + 1, last, []
    return rounds


def stock_dflash_command(binary: str | Path, target: Path, drafter: Path, prompt: bytes, n: int, draft: int,
                         threads: int = 1, n_ctx: int = 512, spec_type: str = "draft-dflash",
                         verbose: bool = False, p_min: float = 0.0) -> list[str | bytes]:  # fmt: skip
    """speculative-simple, greedy, drafting ``draft`` tokens a round with ``p_min`` (0: every row) and ``n_min`` 0,
    on ``threads`` for the target and the drafter alike (the prompt as bytes: a byte vocabulary's pieces need not be
    UTF-8)."""
    cmd: list[str | bytes] = [
        str(binary), "-m", str(target), "-md", str(drafter), "-p", prompt, "-n", str(n), "-c", str(n_ctx),
        "-b", "512", "-ub", "512", "-t", str(threads), "-tb", str(threads), "-td", str(threads), "-tbd", str(threads),
        "--temp", "0", "--top-k", "1", "--seed", "1", "-ngl", "0", "-ngld", "0",
        "--spec-type", spec_type, "--spec-draft-n-max", str(draft), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", f"{p_min:g}",
    ]  # fmt: skip
    return [*cmd, "-lv", "5"] if verbose else cmd


def _run(cmd: list[str | bytes], parse: Callable, timeout: float = 300, tries: int = 5, raw: bool = False):
    """Run a stock tool, parse what it printed (bytes decoded with replacement; ``raw``: stdout left as bytes, as a
    byte vocabulary's pieces need not be UTF-8); repeat a run whose log lost lines (see ``mtp_stock._stock``).
    ``(parsed, retries)``."""
    for attempt in range(tries):
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        err = proc.stderr.decode(errors="replace")
        out = proc.stdout if raw else proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            raise LocalEagleError(f"{Path(str(cmd[0])).name} exited {proc.returncode}:\n{err[-3000:]}")
        try:
            return parse(out, err), attempt
        except LocalEagleError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def parse_decoded(out: str, err: str) -> tuple[int, float]:
    """``decoded N tokens in S seconds``: the tokens the loop produced and its timer, prompt processing left out.

    The summary's other lines (``n_drafted``, ``n_accept``) come later and are the likelier to be lost at exit (the
    log's queue is not flushed, ``mtp_stock._stock``); the counts are taken from the rounds instead."""
    m = re.search(r"decoded\s+(\d+)\s+tokens in\s+([0-9.]+) seconds", err + out)
    if m is None:
        raise LocalEagleError(f"llama-speculative-simple printed no 'decoded ... tokens in' line:\n{err[-2000:]}")
    return int(m.group(1)), float(m.group(2))


def _verbose_parser(n_prompt: int, first_anchor: int, rows_logged: bool = True) -> Callable[[str, str], list[Round]]:
    """The rounds of a ``-lv 5`` run, refused (so repeated) unless they add up to the tokens it decoded."""

    def parse(out: str, err: str) -> list[Round]:
        tokens, _ = parse_decoded(out, err)
        rounds = parse_stock_rounds(err + out, n_prompt, first_anchor, rows_logged)
        if sum(r.accepted + 1 for r in rounds) != tokens:
            raise LocalEagleError(f"the debug log's rounds do not add up to the {tokens} tokens decoded (lost lines)")
        return rounds

    return parse


def _text_parser(n_prompt: int, first_anchor: int, prompt: bytes) -> Callable[[bytes, str], tuple[list[Round], bytes]]:
    """A DFlash2 ``-lv 5`` run (stdout as bytes): its rounds (no rows) and what it printed after ``prompt`` (its echo),
    the only record of its kept drafts; a run whose stdout lacks the echo is refused."""
    rounds_of = _verbose_parser(n_prompt, first_anchor, rows_logged=False)

    def parse(out: bytes, err: str) -> tuple[list[Round], bytes]:
        i = out.find(prompt)
        if i < 0:
            raise LocalEagleError("llama-speculative-simple's stdout lacks the prompt's echo")
        return rounds_of("", err), out[i + len(prompt) :]

    return parse


@dataclass
class Side(SideTotals):
    """One side's totals over the prompts, and its rounds with a full block."""

    full_rounds: int = 0  # rounds both DFlash sides ran with a full block of k drafts (DSpark: its own such rounds)
    full_accepted: int = 0
    output_checked: bool = True

    def add(self, prompt: str, want: list[int], draft: int, counts: tuple[int, int, int, int, float],
            out: list[int] | None, rounds: list[Round] | None = None, same: bool | None = None) -> None:  # fmt: skip
        """One prompt's run: ``counts`` (tokens, target calls, accepted, drafted, seconds), the output tokens (a
        mismatch if they leave ``want``; None: not known, as llama-completion prints text, unless ``same`` says
        whether its text is ``want``'s), and its rounds (the full ones counted apart)."""
        tokens, calls, accepted, drafted, seconds = counts
        self.tokens += tokens
        self.target_calls += calls
        self.accepted += accepted
        self.drafted += drafted
        self.seconds += seconds
        if out is None and same is None:
            self.output_checked = False
        elif not same if out is None else out[: len(want)] != want:
            self.mismatches.append(prompt)
        for r in rounds or ():
            if r.drafted == draft:
                self.full_rounds += 1
                self.full_accepted += r.accepted

    def to_dict(self, baseline_tps: float) -> dict:
        return {
            **self.totals(baseline_tps),
            "tokens_per_call_full_rounds": 1.0 + self.full_accepted / self.full_rounds if self.full_rounds else 0.0,
        }


@dataclass
class Transcription:
    """The round-by-round check over the prompts."""

    rounds_compared: int = 0  # rounds both sides ran with a full block
    rounds_identical: int = 0
    ours_accepted: int = 0  # drafts kept in those rounds, each side's
    stock_accepted: int = 0
    end_rounds: int = 0  # rounds where either side shortened its block or drafted none (compared apart)
    end_rounds_identical: int = 0
    differences: list[str] = field(default_factory=list)
    end_differences: list[str] = field(default_factory=list)


def record_blocks(engine) -> list[tuple[int, int, list[int]]]:
    """Record every block the engine's drafter proposes, ``(n_past, anchor, greedy rows)``, until
    :func:`stop_recording`."""
    blocks: list[tuple[int, int, list[int]]] = []
    drafter = engine.drafter
    propose = type(drafter).propose

    def recorded(last_token: int, n_past: int, seq: int = 0, n_draft: int | None = None):
        block = propose(drafter, last_token, n_past, seq, n_draft)
        blocks.append((int(n_past), int(last_token), [int(t) for t in block.tokens]))
        return block

    drafter.propose = recorded
    return blocks


def stop_recording(engine) -> None:
    engine.drafter.__dict__.pop("propose", None)


def recorded_run(engine, prompt: str, max_tokens: int, draft: int, n_prompt: int, p_min: float = 0.0
                 ) -> tuple[list[Round], tuple[int, int, int, int, float], list[int]]:  # fmt: skip
    """A fixed greedy generation with its blocks recorded: its rounds, its counts (``Side.add``) and the tokens
    after the first (what llama.cpp, given the first, writes)."""
    from local_eagle.runtime.sampling import GREEDY

    blocks = record_blocks(engine)
    try:
        res = engine.generate(prompt, max_tokens=max_tokens, sampling=GREEDY, draft_max=draft, adaptive=False,
                              draft_p_min=p_min)  # fmt: skip
    finally:
        stop_recording(engine)
    st = res.stats
    counts = (st.target_calls + st.accepted_tokens, st.target_calls, st.accepted_tokens, st.drafted_tokens,
              st.decode_seconds)  # fmt: skip
    return engine_rounds(blocks, res, n_prompt), counts, res.tokens[1:]


def engine_rounds(blocks: list[tuple[int, int, list[int]]], res, n_prompt: int) -> list[Round]:
    """The engine's rounds from its recorded blocks and its trace. A round with no room proposes no block, and one
    cut at ``p_min`` may propose a block and draft none: a block belongs to the round at its position."""
    st = res.spec_stats
    out: list[Round] = []
    tokens = res.tokens
    pos, i_tok, b = n_prompt, 0, 0
    for drafted, accepted in zip(st.trace_drafted, st.trace_accepted, strict=True):
        anchor = tokens[i_tok]
        rows: list[int] = []
        if b < len(blocks) and blocks[b][0] == pos:
            n_past, block_anchor, rows = blocks[b]
            b += 1
            if block_anchor != anchor:
                raise LocalEagleError(f"block {b} at {n_past} from {block_anchor}, expected {pos} from {anchor}")
        elif drafted:
            raise LocalEagleError(f"round at {pos} drafted {drafted} with no block proposed there")
        i_tok += accepted + 1
        last = tokens[i_tok] if i_tok < len(tokens) else -1
        out.append(Round(pos, anchor, rows, drafted, accepted, last))
        pos += accepted + 1
    return out


def compare_rounds(ours: list[Round], stock: list[Round], k: int, what: str, tr: Transcription,
                   rows: bool = True, room_end: int | None = None) -> None:  # fmt: skip
    """Round by round: a full round (k drafts on both sides) must be identical; the end rounds are counted apart.
    ``rows`` False: the stock log gives no rows (DFlash2), a full round is compared on the rest, an end round's first
    committed token only where both sides give it. ``room_end`` (a ``p_min`` cut): a full round is one with room
    for k drafts before that position, whatever each side drafted, so the cut itself is compared."""
    for i, (a, b) in enumerate(zip(ours, stock, strict=False)):
        if (a.drafted == k and b.drafted == k) if room_end is None else a.pos + k + 1 < room_end:
            tr.rounds_compared += 1
            tr.ours_accepted += a.accepted
            tr.stock_accepted += b.accepted
            if a.key(rows) == b.key(rows):
                tr.rounds_identical += 1
            else:
                tr.differences.append(f"{what} round {i}: local-eagle {a.key(rows)} llama.cpp {b.key(rows)}")
        else:
            tr.end_rounds += 1
            n = min(len(a.rows), len(b.rows))  # a round that drafted none proposed no block
            firsts = (a.first, b.first)
            if (a.pos, a.anchor, a.rows[:n]) == (b.pos, b.anchor, b.rows[:n]) and (
                None in firsts or firsts[0] == firsts[1]
            ):
                tr.end_rounds_identical += 1
            else:
                tr.end_differences.append(f"{what} round {i}: local-eagle {a.key(rows)} llama.cpp {b.key(rows)}")


def aligned_prompt(model, text: str, first: int) -> bytes | None:
    """The prompt llama.cpp is given: ``text`` and the target's first token, if that tokenizes back to exactly the
    engine's prompt tokens plus that token (None if not: the rounds would not line up)."""
    data = text.encode() + model.token_to_piece(first)
    want = [*model.tokenize(text.encode(), True, True).tolist(), int(first)]
    if b"\0" in data or model.tokenize(data, True, True).tolist() != want:
        return None
    return data


def _specs(size: str):
    """``(target spec, {kind: drafter spec})`` of a size, the kinds ``dflash`` and ``EXTRA_KINDS``."""
    from local_eagle.testing.tiny import TinyTargetSpec
    from local_eagle.testing.tiny_dflash import TinyDFlash2Spec, TinyDFlashSpec, TinyDSparkSpec

    if size not in SIZES:
        raise LocalEagleError(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    # "mid": 1024 is a multiple of the DFlash2 convolutions' group (16) and holds its lattice rows (top_k * (k + 1))
    wide = {"n_embd": 1024, "n_head": 8, "n_head_kv": 4, "n_ff": 2816} if size == "mid" else {}
    target = TinyTargetSpec(n_layer=8, **wide) if size == "mid" else TinyTargetSpec()
    return target, {kind: cls(block_size=BLOCK_SIZE, **wide) for kind, cls in (
        ("dflash", TinyDFlashSpec), ("dspark", TinyDSparkSpec), ("dflash2", TinyDFlash2Spec))}  # fmt: skip


def write_pairs(workdir: Path, names: list[str], dspark: bool, size: str = "tiny",
                dflash2: bool = False) -> dict[str, dict[str, Path]]:  # fmt: skip
    """The tiny generated pairs: ``{name: {"target", "dflash"[, "dspark"][, "dflash2"]}}``, written once into
    ``workdir``."""
    from converters.dflash_gguf import convert_dflash
    from local_eagle.testing.tiny import write_tiny_target
    from local_eagle.testing.tiny_agree import write_agree_pair
    from local_eagle.testing.tiny_dflash import write_dflash_checkpoint

    target_spec, specs = _specs(size)
    kinds = ["dflash", *(["dspark"] if dspark else []), *(["dflash2"] if dflash2 else [])]
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict[str, Path]] = {}
    for name in names:
        d = workdir / name
        if name == "random":
            d.mkdir(parents=True, exist_ok=True)
            target = write_tiny_target(d / "target.gguf", target_spec)
            files = {"target": target}
            for kind in kinds:
                ckpt = write_dflash_checkpoint(d / f"{kind}-ckpt", specs[kind], seed=3)
                files[kind] = convert_dflash(ckpt, target, d / f"{kind}.gguf", outtype="f32").outfile
        elif name.startswith("agree-"):
            cycle = name.split("-", 1)[1]
            target, drafter = write_agree_pair(d, cycle, specs["dflash"], target_spec=target_spec)
            files = {"target": target, "dflash": drafter}
            for kind in kinds[1:]:
                files[kind] = write_agree_pair(d / kind, cycle, specs[kind], target_spec=target_spec)[1]
        else:
            raise LocalEagleError(f"unknown pair {name!r}: one of {', '.join(PAIRS)}")
        out[name] = files
    return out


def run_pair(
    name: str,
    files: dict[str, Path],
    spec_simple: Path,
    completion: Path | None,
    prompts: list[str],
    max_tokens: int,
    draft: int,
    threads: int = 1,
    n_ctx: int = 512,
    log: Callable[[str], None] | None = None,
    p_min: float = 0.0,
) -> dict:
    """Every side on every prompt of one pair; the totals, the transcription checks and the speed ratios. ``p_min``
    > 0: both sides cut each draft there (DFlash: a row's top-1 probability over its top 10; DSpark: its confidence
    head), and every round with room for a whole block is compared, the cut included.

    The sides: the target alone, DFlash ours and stock; then, for each ``EXTRA_KINDS`` drafter in ``files``, stock
    and ours; llama-completion last."""
    from contextlib import ExitStack

    from local_eagle.runtime.engine import Engine, EngineOptions
    from local_eagle.runtime.sampling import GREEDY

    target = files["target"]
    extras = [kind for kind in EXTRA_KINDS if kind in files]
    names = ["local-eagle target alone", f"local-eagle DFlash k={draft}", f"llama.cpp draft-dflash k={draft}"]
    stock_name, ours_name = {"dflash": names[2]}, {"dflash": names[1]}
    for kind in extras:
        spec_type, label = EXTRA_KINDS[kind]
        stock_name[kind] = f"llama.cpp {spec_type} k={draft}" + (f" ({label})" if spec_type == "draft-dflash" else "")
        ours_name[kind] = f"local-eagle {label} k={draft}"
        names += [stock_name[kind], ours_name[kind]]
    if completion is not None:
        names.append("llama.cpp target alone (llama-completion)")
    sides = {n: Side(n) for n in names}
    trs = {kind: Transcription() for kind in ["dflash", *extras]}
    used: list[str] = []
    skipped: list[str] = []
    retries = 0
    opts = EngineOptions(n_ctx=n_ctx, n_batch=512, n_threads=threads, n_gpu_layers=0)
    with ExitStack() as stack:
        alone = stack.enter_context(Engine(target, None, opts))
        engines = {kind: stack.enter_context(Engine(target, files[kind], opts)) for kind in ["dflash", *extras]}
        # each drafter's full round: k clamped to what its block drafts (DSpark: block_size, anchor-first)
        ks = {kind: min(draft, e.drafter.spec.n_draft_max) for kind, e in engines.items()}
        ks["dflash"] = draft
        for e in engines.values():  # warm up
            e.generate(prompts[0], max_tokens=8, sampling=GREEDY, draft_max=draft, adaptive=False, draft_p_min=p_min)
        alone.generate(prompts[0], max_tokens=8, sampling=GREEDY, draft_max=0)
        for prompt in prompts:
            base = alone.generate(prompt, max_tokens=max_tokens + 1, sampling=GREEDY, draft_max=0)
            stock_prompt = aligned_prompt(alone.model, prompt, base.tokens[0])
            if stock_prompt is None:
                skipped.append(prompt)
                continue
            used.append(prompt)
            n_prompt = len(alone.tokenize(prompt))
            want = base.tokens[1:]  # what llama.cpp must write after the first token it is given
            # what llama.cpp must print after echoing the prompt it is given (DFlash2's output check): its pieces are
            # common_token_to_piece's, special tokens rendered
            want_text = b"".join(alone.model.token_to_piece(t, special=True) for t in want)

            st = base.stats
            sides[names[0]].add(prompt, want, draft, (st.target_calls, st.target_calls, 0, 0, st.decode_seconds),
                                base.tokens[1:])  # fmt: skip

            ours: dict[str, list[Round]] = {}
            for kind, engine in engines.items():
                ours[kind], counts, out = recorded_run(engine, prompt, max_tokens + 1, draft, n_prompt, p_min)
                sides[ours_name[kind]].add(prompt, want, draft, counts, out)

            stock_accepted: list[int] = []
            for kind in engines:
                spec_type = EXTRA_KINDS[kind][0] if kind in EXTRA_KINDS else "draft-dflash"
                cmd = stock_dflash_command(spec_simple, target, files[kind], stock_prompt, max_tokens, draft,
                                           threads, n_ctx, spec_type, p_min=p_min)  # fmt: skip
                (tokens, seconds), again = _run(cmd, parse_decoded)
                retries += again
                same = None
                if kind == "dflash2":  # no rows logged: the output is the text it printed
                    parse = _text_parser(n_prompt + 1, base.tokens[0], stock_prompt)
                    (rounds, text), again = _run([*cmd, "-lv", "5"], parse, raw=True)
                    same = text.startswith(want_text)  # its last round may run past -n (see "Ends")
                else:
                    rounds, again = _run([*cmd, "-lv", "5"], _verbose_parser(n_prompt + 1, base.tokens[0]))
                retries += again
                if tokens != sum(r.accepted + 1 for r in rounds):
                    raise LocalEagleError(f"{spec_type}: the timed run decoded {tokens} tokens, the logged one other")
                out = [t for r in rounds for t in r.tokens] if same is None else None
                counts = (tokens, len(rounds), sum(r.accepted for r in rounds), sum(r.drafted for r in rounds), seconds)
                sides[stock_name[kind]].add(prompt, want, draft, counts, out, same=same)
                room_end = n_prompt + max_tokens if p_min > 0 else None
                compare_rounds(ours[kind], rounds, ks[kind], prompt, trs[kind], kind != "dflash2", room_end)
                if kind == "dflash":
                    stock_accepted = [r.accepted for r in rounds]
            if completion is not None:
                from local_eagle.bench.mtp_stock import stock_command

                cmd = stock_command(completion, target, prompt, max_tokens, threads, n_ctx, None)
                run, again = _run(cmd, lambda o, e, p=prompt: parse_completion(o, e, p))  # bytes: not UTF-8
                retries += again
                sides[names[-1]].add(prompt, want, draft, (run.tokens, run.target_calls, 0, 0, run.seconds), None)
            if log is not None:
                log(f"{name} {prompt!r}: kept a round, local-eagle {[r.accepted for r in ours['dflash']]}, llama.cpp "
                    f"{stock_accepted}")  # fmt: skip
    for kind, tr in trs.items():  # tokens per target call over the rounds both sides ran in full
        for side, accepted in ((ours_name[kind], tr.ours_accepted), (stock_name[kind], tr.stock_accepted)):
            sides[side].full_rounds, sides[side].full_accepted = tr.rounds_compared, accepted
    base_tps = sides[names[0]].tokens_per_second
    report = {
        "pair": name,
        "files": {k: str(v) for k, v in files.items()},
        "prompts": used,
        "skipped_prompts": skipped,
        "sides": [sides[n].to_dict(base_tps) for n in names],
        "transcription": asdict(trs["dflash"]),
    }
    for kind in EXTRA_KINDS:
        report[f"transcription_{kind}"] = asdict(trs[kind]) if kind in trs else None
    report["stock_retries"] = retries
    return report


def run_comparison(pairs: dict[str, dict[str, Path]], spec_simple: Path, completion: Path | None, prompts: list[str],
                   max_tokens: int, draft: int, threads: int = 1, n_ctx: int = 512,
                   log: Callable[[str], None] | None = None, p_min: float = 0.0) -> dict:  # fmt: skip
    """Every pair; the report ``table`` prints."""
    return {
        "draft": draft,
        "p_min": p_min,
        "max_tokens": max_tokens,
        "threads": threads,
        "n_ctx": n_ctx,
        "spec_simple": str(spec_simple),
        "machine": f"{platform.machine()} {platform.processor() or ''} {platform.node()}".strip(),
        "pairs": [
            run_pair(n, f, spec_simple, completion, prompts, max_tokens, draft, threads, n_ctx, log, p_min)
            for n, f in pairs.items()
        ],
    }


def table(report: dict) -> str:
    """One Markdown table over the pairs: tokens per target call, acceptance, identical output, tok/s and the ratio
    to local-eagle's target alone; then each pair's round-by-round check."""
    lines = ["| pair | side | tokens | target calls | tokens per target call | same, common full rounds "
             "| drafts accepted "
             "| output = target alone | tok/s | x target alone |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]  # fmt: skip
    notes = []
    for p in report["pairs"]:
        for s in p["sides"]:
            same = "yes" if not s["mismatches"] else f"no ({len(s['mismatches'])} prompts)"
            same = same if s["output_checked"] else "not compared"
            full = f"{s['tokens_per_call_full_rounds']:.3f}" if s["full_rounds"] else "-"
            acc = f"{s['accepted_share']:.1%}" if s["drafted"] else "-"
            lines.append(f"| {p['pair']} | {s['name']} | {s['tokens']} | {s['target_calls']} | "
                         f"{s['tokens_per_call']:.3f} | {full} | {acc} | {same} | {s['tokens_per_second']:.1f} | "
                         f"{s['speed_ratio']:.2f} |")  # fmt: skip
        t = p["transcription"]
        notes.append(f"- {p['pair']}: {t['rounds_identical']}/{t['rounds_compared']} full rounds identical "
                     f"(position, anchor, the block's greedy rows, drafts verified and kept, the last token); "
                     f"{t['end_rounds_identical']}/{t['end_rounds']} end rounds alike in what both verified; "
                     f"{len(p['prompts'])} prompts" + (f", {len(p['skipped_prompts'])} skipped (not aligned)"
                                                       if p["skipped_prompts"] else ""))  # fmt: skip
        for kind, (spec_type, label) in EXTRA_KINDS.items():
            t = p.get(f"transcription_{kind}")
            if t:
                what = " (no rows: draft-dflash logs none for DFlash2)" if kind == "dflash2" else ""
                notes.append(f"- {p['pair']} {label}: {t['rounds_identical']}/{t['rounds_compared']} full rounds "
                             f"identical to {spec_type}'s{what}; {t['end_rounds_identical']}/{t['end_rounds']} end "
                             f"rounds alike")  # fmt: skip
    return "\n".join(lines + [""] + notes)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - a thin wrapper
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec-simple", required=True, type=Path, help="llama.cpp's llama-speculative-simple")
    ap.add_argument("--completion", type=Path, help="llama.cpp's llama-completion (the stock target alone)")
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"tiny generated pairs to write ({', '.join(PAIRS)})")
    ap.add_argument("--target", type=Path, help="a target GGUF (with --drafter: instead of the tiny pairs)")
    ap.add_argument("--drafter", type=Path, help="a DFlash drafter GGUF for --target")
    ap.add_argument("--dspark", action="store_true", help="also run llama.cpp's draft-dspark on DSpark drafters")
    ap.add_argument("--dspark-drafter", type=Path, help="a DSpark drafter GGUF for --target")
    ap.add_argument("--dflash2", action="store_true",
                    help="also run llama.cpp's draft-dflash on DFlash2 drafters (the pairs' DFlash2 GGUF)")
    ap.add_argument("--dflash2-drafter", type=Path, help="a DFlash2 drafter GGUF for --target")
    ap.add_argument("--size", choices=SIZES, default="tiny", help="the generated pairs' width (see SIZES)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/against-llamacpp"))
    ap.add_argument("--draft", type=int, default=BLOCK_SIZE - 1)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--p-min", type=float, default=0.0,
                    help="cut drafts below this (--spec-draft-p-min; ours: draft_p_min); all rounds with room compared")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--json", type=Path, help="write the report here too")
    a = ap.parse_args(argv)
    if a.target is not None:
        if a.drafter is None:
            ap.error("--target needs --drafter")
        files = {"target": a.target, "dflash": a.drafter}
        if a.dspark_drafter is not None:
            files["dspark"] = a.dspark_drafter
        if a.dflash2_drafter is not None:
            files["dflash2"] = a.dflash2_drafter
        pairs = {a.target.stem: files}
    else:
        pairs = write_pairs(a.workdir / a.size, [p for p in a.pairs.split(",") if p], a.dspark, a.size, a.dflash2)
    t0 = time.perf_counter()
    if not 0.0 <= a.p_min < 1.0:
        ap.error(f"--p-min must be in [0, 1), got {a.p_min}")
    report = run_comparison(pairs, a.spec_simple, a.completion, PROMPTS, a.max_tokens, a.draft, a.threads, a.n_ctx,
                            log=lambda s: print(s, flush=True), p_min=a.p_min)  # fmt: skip
    report["size"] = a.size if a.target is None else None
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    emit(report, table(report), a.json)


if __name__ == "__main__":  # pragma: no cover
    main()

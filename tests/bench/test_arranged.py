"""Arranged acceptance (bench.arranged): the real engine on a random pair, its drafts placed at recorded ranks.

The oracle is the target alone: outputs stay identical whatever the arrangement, and acceptance follows the table
(a table that never places the text's token accepts nothing, chains and trees alike: no branch reaches the text by
chance); recording an arranged drafter gives back its table's acceptance.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from local_eagle.bench.arranged import (
    BUILTIN,
    LABEL,
    ArrangedDrafter,
    K,
    RankTable,
    arrange,
    load_table,
    record_ranks,
    truths_of,
)
from local_eagle.bench.pair import make_pair
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.drafter import read_spec
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.identity import DIVERGENT, check_identity_batched
from local_eagle.runtime.sampling import GREEDY
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.threads import assert_one_team_at_a_time, decoding_threads

N = 24  # tokens a prompt
OPTS = EngineOptions(n_ctx=512, n_threads=1)


def table(accept: list[float], samples: int = 400, seed: int = 0, other: int = 2) -> RankTable:
    """Rows whose rank is 0 with probability ``accept[d]`` at depth d+1, else ``other`` (-1: not a candidate);
    confident candidates."""
    rng = np.random.default_rng(seed)
    probs = np.array([0.6, 0.2, 0.1, 0.04, 0.02, 0.01, 0.005, 0.005])
    on, ranks, off = [], [], []
    for a in accept:
        on.append(np.tile(probs, (samples, 1)))
        ranks.append(np.where(rng.random(samples) < a, 0, other))
        off.append(np.tile(probs / 2, (samples, 1)))
    return RankTable("test", on, ranks, off)


@pytest.fixture(scope="module")
def rand(tmp_path_factory) -> dict:
    """A tiny random pair of bench.pair's recipe: a draft vocabulary of the first ids, a target whose text has wide
    margins (``bench.pair._margin_jobs``)."""
    d = tmp_path_factory.mktemp("arranged")
    paths = make_pair(d, tiny=True)
    prompts = [json.loads(line)["prompt"] for line in Path(paths["prompts"]).read_text().splitlines()][:6]
    alone = Engine(paths["target"], None, OPTS)
    yield {**paths, "dir": d, "prompts": prompts, "alone": alone, "prompts_file": paths["prompts"],
           "baseline": [alone.generate(p, max_tokens=N, sampling=GREEDY, draft_max=0) for p in prompts]}
    alone.close()


@pytest.fixture(scope="module")
def cycle(pair) -> dict:
    """The suite's cycle pair (the target writes P, A, B, ... with clear margins: no near-ties to part at), whose
    drafter has no draft vocabulary (whole rows)."""
    d, target, draft = pair
    prompts = ["hello", "ABC xyz", "PAB", "a", "xyz, 12", "the end"]
    path = d / "arranged-prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in prompts) + "\n")
    alone = Engine(target, None, OPTS)
    yield {"target": str(target), "drafter": str(draft), "dir": d, "prompts": prompts, "alone": alone,
           "prompts_file": str(path),
           "baseline": [alone.generate(p, max_tokens=N, sampling=GREEDY, draft_max=0) for p in prompts]}
    alone.close()


def _run(pair: dict, tab: RankTable, opts: EngineOptions = OPTS, **gen) -> tuple[list, list, ArrangedDrafter]:
    with arrange(pair["alone"], pair["drafter"], pair["prompts"], N, tab) as arrangement:
        engine = Engine(pair["target"], arrangement.drafter, opts)
        try:
            wrapped = arrangement.wrap(engine)
            results = [engine.generate(p, max_tokens=N, sampling=GREEDY, **gen) for p in pair["prompts"]]
        finally:
            engine.close()
    return [r.tokens for r in results], results, wrapped


def _as_target_alone(pair: dict, results: list) -> bool:
    """Every output the target alone's, or parted from it only at a near-tie (a tree's or a batch's verify rounds
    apart from a one-row decode: random weights make near-ties common)."""
    return all(check_identity_batched(pair["alone"], p, base, r).verdict != DIVERGENT
               for p, base, r in zip(pair["prompts"], pair["baseline"], results, strict=True))  # fmt: skip


def _acceptance_length(results: list) -> float:
    """Tokens a round: every token but the prefill's first came from a round."""
    rounds = sum(r.spec_stats.rounds for r in results)
    return sum(len(r.tokens) - 1 for r in results) / rounds


def test_a_chain_accepts_as_the_table_says_and_the_output_is_the_target_alone(rand) -> None:
    _, results, wrapped = _run(rand, table([0.8, 0.8, 0.8]), draft_max=3, adaptive=False)
    assert _as_target_alone(rand, results)
    assert wrapped.counts.unknown == 0 and wrapped.counts.placed > 0
    expected = 1 + 0.8 + 0.8**2 + 0.8**3  # tokens a round of 3 drafts, before the text's end cuts rounds short
    assert 0.75 * expected < _acceptance_length(results) < 1.1 * expected


def test_rewriting_rows_is_left_out_of_the_engines_times(rand, monkeypatch) -> None:
    """The rewriting is the bench's work, not the engine's: made to take 10 s a row (on a clock moved by hand), it
    reaches neither a generation's time nor its drafting's, which the policy prices, and the counts say it all."""
    import local_eagle.runtime.clock as engine_clock

    moved = [0.0]
    monkeypatch.setattr(engine_clock, "_perf", lambda: time.perf_counter() + moved[0])
    rewrite = ArrangedDrafter._rewrite

    def slow(self, *args) -> None:
        rewrite(self, *args)
        moved[0] += 10.0

    monkeypatch.setattr(ArrangedDrafter, "_rewrite", slow)
    _, results, wrapped = _run(rand, table([0.8, 0.8, 0.8]), draft_max=3, adaptive=False)
    assert _as_target_alone(rand, results) and wrapped.counts.placed > 0
    assert wrapped.counts.seconds >= 10.0 * wrapped.counts.rows
    for r in results:
        assert r.stats.decode_seconds < 5.0
        assert r.spec_stats.draft_seconds < 5.0


def test_nothing_placed_nothing_accepted_for_chains_and_trees(rand) -> None:
    never = table([0.0, 0.0], other=-1)
    _, results, wrapped = _run(rand, never, draft_max=4, adaptive=False)
    assert _as_target_alone(rand, results) and _acceptance_length(results) == 1.0 and wrapped.counts.placed == 0
    opts = EngineOptions(n_ctx=512, n_threads=1, tree_nodes=15, tree_width=4)
    _, results, _ = _run(rand, never, opts, draft_max=15, adaptive=False, tree=TreeShape(15, 4, 4))
    assert _as_target_alone(rand, results) and _acceptance_length(results) == 1.0


def test_a_tree_takes_a_rank_a_chain_cannot(cycle) -> None:
    """Ranks 2 only: a chain (the argmax) accepts nothing, a tree of width 4 finds the text's token at depth 1."""
    second = table([0.0, 0.0, 0.0])
    opts = EngineOptions(n_ctx=512, n_threads=1, tree_nodes=15, tree_width=4)
    with arrange(cycle["alone"], cycle["drafter"], cycle["prompts"], N, second) as arrangement:
        engine = Engine(cycle["target"], arrangement.drafter, opts)
        try:
            wrapped = arrangement.wrap(engine)
            shape = TreeShape(15, 3, 4)
            runs = [[engine.generate(p, max_tokens=N, sampling=GREEDY, draft_max=15, adaptive=False, tree=shape)
                     for p in cycle["prompts"]] for _ in range(2)]  # fmt: skip
        finally:
            engine.close()
    assert all(_as_target_alone(cycle, r) for r in runs)
    # a text that left the target alone's at a near-tie is learnt: the second run is arranged where the first was not
    assert wrapped.counts.learnt > 0 or wrapped.counts.unknown == 0
    assert _acceptance_length(runs[1]) > 1.6


def test_many_sequences_at_once_keep_their_own_texts(cycle) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with arrange(cycle["alone"], cycle["drafter"], cycle["prompts"], N, table([0.9, 0.9])) as arrangement:
        engine = Engine(cycle["target"], arrangement.drafter, EngineOptions(n_ctx=512, n_threads=1, parallel=4))
        try:
            wrapped = arrangement.wrap(engine)
            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda p: engine.generate(p, max_tokens=N, sampling=GREEDY, draft_max=2,
                                                                  adaptive=False), cycle["prompts"]))  # fmt: skip
        finally:
            engine.close()
    assert wrapped.counts.unknown < wrapped.counts.rows / 4  # a batch's verify may part at a near-tie
    assert _acceptance_length(results) > 1.6
    assert _as_target_alone(cycle, results)


def test_recording_an_arranged_drafter_gives_its_table_back(cycle) -> None:
    placed = table([0.7, 0.5, 0.5])
    with arrange(cycle["alone"], cycle["drafter"], cycle["prompts"], 4 * N, placed) as arrangement:
        engine = Engine(cycle["target"], arrangement.drafter, OPTS)
        try:
            arrangement.wrap(engine)
            got = record_ranks(engine, cycle["prompts"], 4 * N, depth=3)
        finally:
            engine.close()
    assert got.samples()[0] > 150
    assert abs(got.acceptance()[0] - placed.acceptance()[0]) < 0.15
    assert set(np.concatenate(got.ranks).tolist()) <= {0, 2}  # as placed: the arranged candidates' order
    assert np.allclose(got.on[0][0], [0.6, 0.2, 0.1, 0.04, 0.02, 0.01, 0.005, 0.005], atol=1e-3)


def test_the_drafter_file_is_left_alone_and_its_copy_drafts_the_texts(rand) -> None:
    before = hashlib.sha256(Path(rand["drafter"]).read_bytes()).hexdigest()
    with arrange(rand["alone"], rand["drafter"], rand["prompts"], N, table([0.5])) as arrangement:
        ids = read_spec(arrangement.drafter).draft_ids
        assert ids is not None and (np.diff(ids) > 0).all()
        assert np.isin(np.concatenate(arrangement.truths), ids).all()
        assert len(ids) == len(read_spec(rand["drafter"]).draft_ids)
        copy = arrangement.drafter
    assert not copy.exists()
    assert hashlib.sha256(Path(rand["drafter"]).read_bytes()).hexdigest() == before


def test_truths_are_the_prompt_then_the_target_alone(rand) -> None:
    truths = truths_of(rand["alone"], rand["prompts"][:2], N)
    for p, t, ref in zip(rand["prompts"], truths, rand["baseline"], strict=False):
        assert t.tolist() == [*rand["alone"].tokenize(p).tolist(), *ref.tokens]


def test_the_builtin_table_is_the_demo_pairs_and_round_trips(tmp_path) -> None:
    demo = load_table("demo")
    assert "gemma-3-270m" in demo.source and demo.samples()[0] >= 200
    assert 0.5 < demo.acceptance()[0] < 0.95  # a trained drafter's first draft: right most of the time
    assert all(len(o) == len(r) for o, r in zip(demo.on, demo.ranks, strict=True))
    demo.save(tmp_path / "t.json")
    again = RankTable.load(tmp_path / "t.json")
    assert again.acceptance() == pytest.approx(demo.acceptance()) and BUILTIN.exists()


@pytest.mark.parametrize(("raw", "says"), [
    ({"k": K, "depths": []}, "non-empty 'depths'"),
    ({"k": 4, "depths": [{"on": [], "ranks": [], "off": []}]}, "'k' must be 8"),
    ({"k": K, "depths": [{"on": [[0.5] * K], "ranks": [9], "off": []}]}, "one rank (-1..7)"),
    ({"k": K, "depths": [{"on": [[0.5] * 3], "ranks": [0], "off": []}]}, "depths[0] needs"),
    ({"k": K, "depths": [{"on": [], "ranks": [], "off": []}]}, "depth 1 has no recorded rows"),
])  # fmt: skip
def test_a_bad_table_is_refused_in_one_line(tmp_path, raw, says) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(LocalEagleError) as e:
        RankTable.load(path)
    assert says in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_bench_arranged_says_so_and_checks_identity(cycle, monkeypatch) -> None:
    runner = CliRunner()
    args = ["bench", "-m", cycle["target"], "-d", cycle["drafter"], "--prompts", cycle["prompts_file"], "-n", "16",
            "--threads", "1", "--arranged", "demo", "--json"]  # fmt: skip
    r = runner.invoke(app, [*args, "--draft-max", "auto", "--draft-max", "2", "--fixed"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert all(row["arranged"]["label"] == LABEL and row["arranged"]["unknown"] == 0 for row in rows)
    fixed = next(row for row in rows if not row["adaptive"])
    assert fixed["acceptance_length"] > 1.3 and fixed["divergent"] == 0
    seen = decoding_threads(monkeypatch)
    r = runner.invoke(app, [*args, "--concurrency", "1,2", "--draft-max", "2", "--fixed"])
    assert r.exit_code == 0, r.output
    assert_one_team_at_a_time(seen)  # the texts were arranged on a thread that ended, not the main thread
    report = json.loads(r.output)
    assert report["arranged"]["label"] == LABEL and report["arranged"]["placed"] > 0
    assert all(row["divergent"] == 0 for row in report["rows"])
    r = runner.invoke(app, [*args[:-1], "--arranged", str(cycle["dir"] / "none.json")])
    assert r.exit_code != 0 and "cannot read a rank table" in r.output

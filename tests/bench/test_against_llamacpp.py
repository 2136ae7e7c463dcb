"""local-eagle's DFlash drafting against llama.cpp's ``draft-dflash`` (``bench.against_llamacpp``).

The parsing runs everywhere, on a captured sample of ``llama-speculative-simple -lv 5``'s log; the comparison itself
needs the binary built from the pinned llama.cpp: set ``LOCAL_EAGLE_LLAMACPP_BIN`` to ``llama-speculative-simple``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local_eagle.bench.against_llamacpp import (
    Round,
    Transcription,
    _text_parser,
    _verbose_parser,
    compare_rounds,
    parse_decoded,
    parse_stock_rounds,
    stock_dflash_command,
)
from local_eagle.errors import LocalEagleError

SAMPLE = Path(__file__).with_name("data") / "speculative-simple-dflash-lv5.txt"


def test_rounds_rebuilt_from_the_debug_log() -> None:
    """The sample: ``-p "hello x" -n 8 --spec-draft-n-max 4 -lv 5`` on the ``agree-xy`` pair (model loading cut):
    the prompt is 9 tokens (BOS, the space prefix, h e l l o, space, x = 123); every draft is x (123), the target
    alternates y (124) and x."""
    log = SAMPLE.read_text()
    rounds = parse_stock_rounds(log, n_prompt=9, first_anchor=123)
    assert rounds[0].pos == 8 and rounds[0].anchor == 123
    assert [r.accepted for r in rounds] == [0, 1, 1, 1, 1]
    # the draft is cut to what -n leaves (8 - 5 - 1 = 2), but not where nothing is left: its last round drafts 4
    assert [r.drafted for r in rounds] == [4, 4, 4, 2, 4]
    assert all(r.rows == [123] * 4 for r in rounds)  # the whole block is logged, the verified drafts are its first
    assert [t for r in rounds for t in r.tokens] == [124, 123] * 4 + [124]
    assert log.rstrip().endswith("hello x" + "yx" * 4 + "y")  # what the tool printed
    for a, b in zip(rounds, rounds[1:], strict=False):  # each round starts where the last one's tokens end
        assert b.pos == a.pos + a.accepted + 1 and b.anchor == a.last
    assert all(len(r.rows) >= r.drafted for r in rounds)


def test_verbose_parser_checks_the_rounds_against_the_tokens_decoded() -> None:
    log = SAMPLE.read_text()
    assert parse_decoded("", log)[0] == 9 == sum(r.accepted + 1 for r in _verbose_parser(9, 123)("", log))
    lost = log.replace("accepted 1/4", "lost", 1)  # a round's line lost: refused (the run is repeated), not counted
    with pytest.raises(LocalEagleError, match="do not add up"):
        _verbose_parser(9, 123)("", lost)
    with pytest.raises(LocalEagleError, match="decoded"):  # the log thread did not drain before exit
        parse_decoded("", log[: log.index(" I decoded")])


def test_round_tokens_and_comparison() -> None:
    a = Round(pos=10, anchor=5, rows=[7, 8, 9, 1], drafted=4, accepted=2, last=4)
    assert a.tokens == [7, 8, 4]
    tr = Transcription()
    compare_rounds([a, Round(13, 4, [], 0, 0, 6)], [a, Round(13, 4, [1, 2, 3, 4], 4, 0, 6)], 4, "p", tr)
    assert (tr.rounds_compared, tr.rounds_identical, tr.end_rounds, tr.end_rounds_identical) == (1, 1, 1, 1)
    compare_rounds([a], [Round(10, 5, [7, 8, 9, 2], 4, 2, 4)], 4, "p", tr)
    assert tr.rounds_identical == 1 and tr.differences


def test_dflash2_rounds_without_rows_and_its_printed_output() -> None:
    """draft-dflash's DFlash2 walk logs no candidates (the sample with them cut): the rounds carry no rows, a full
    round compares on the rest, an end round's first token only where both sides give it; the output is what
    stdout printed after the prompt's echo (bytes: a byte vocabulary's pieces need not be UTF-8)."""
    log = "\n".join(line for line in SAMPLE.read_text().splitlines() if "draft candidate" not in line)
    with pytest.raises(LocalEagleError, match="rows logged"):
        parse_stock_rounds(log, 9, 123)
    rounds = parse_stock_rounds(log, 9, 123, rows_logged=False)
    assert [r.accepted for r in rounds] == [0, 1, 1, 1, 1] and all(r.rows == [] for r in rounds)
    assert rounds[0].first == 124 and rounds[1].first is None  # a kept draft, its row not logged
    stdout = b"\n\n<s> hello x" + b"yx" * 4 + b"y\xe5\n\n"
    parsed, text = _text_parser(9, 123, b"hello x")(stdout, log)
    assert parsed == rounds and text.startswith(b"yx" * 4 + b"y\xe5")
    with pytest.raises(LocalEagleError, match="echo"):
        _text_parser(9, 123, b"hello z")(stdout, log)
    ours = [Round(r.pos, r.anchor, [123] * 4, r.drafted, r.accepted, r.last) for r in rounds]
    tr = Transcription()
    compare_rounds(ours, rounds, 4, "p", tr, rows=False)
    assert (tr.rounds_compared, tr.rounds_identical, tr.end_rounds, tr.end_rounds_identical) == (4, 4, 1, 1)
    compare_rounds(ours, rounds, 4, "p", Transcription(), rows=True)  # with rows, the same rounds differ
    tr = Transcription()
    compare_rounds(ours, rounds, 4, "p", tr)
    assert tr.rounds_identical == 0 and len(tr.differences) == 4


def test_command_is_greedy_and_fixed_length() -> None:
    cmd = stock_dflash_command("bin", Path("t.gguf"), Path("d.gguf"), b"hi\xe5", 32, 4)
    assert cmd[cmd.index("-p") + 1] == b"hi\xe5" and cmd[cmd.index("--spec-type") + 1] == "draft-dflash"
    for flag, value in (("--temp", "0"), ("--top-k", "1"), ("--spec-draft-n-max", "4"), ("--spec-draft-p-min", "0"),
                        ("-t", "1"), ("-td", "1")):  # fmt: skip
        assert cmd[cmd.index(flag) + 1] == value
    assert "-lv" not in cmd and "-lv" in stock_dflash_command("bin", Path("t"), Path("d"), b"x", 1, 1, verbose=True)
    cut = stock_dflash_command("bin", Path("t"), Path("d"), b"x", 1, 1, p_min=0.25)
    assert cut[cut.index("--spec-draft-p-min") + 1] == "0.25"


def test_a_round_cut_to_nothing_keeps_its_block_and_p_min_rounds_compare_by_room() -> None:
    """A ``p_min`` cut may propose a block and draft none: the block still belongs to that round; with ``room_end``
    a round is compared in full whatever each side drafted, so differing cuts are found."""
    from types import SimpleNamespace

    from local_eagle.bench.against_llamacpp import engine_rounds

    stats = SimpleNamespace(trace_drafted=[0, 2, 0], trace_accepted=[0, 1, 0])
    res = SimpleNamespace(spec_stats=stats, tokens=[7, 8, 9, 10, 11])
    blocks = [(5, 7, [1, 2, 3, 4]), (6, 8, [9, 5, 6, 6])]  # a block at 5 cut to nothing, one at 6 drafting 2
    rounds = engine_rounds(blocks, res, 5)
    assert [(r.pos, r.anchor, r.rows, r.drafted) for r in rounds] == [
        (5, 7, [1, 2, 3, 4], 0), (6, 8, [9, 5, 6, 6], 2), (8, 10, [], 0)]  # fmt: skip
    with pytest.raises(LocalEagleError, match="no block"):
        engine_rounds(blocks[:1], res, 5)
    stock = [Round(5, 7, [], 0, 0, 8), Round(6, 8, [9], 1, 1, 10), Round(8, 10, [], 0, 0, 11)]
    tr = Transcription()
    compare_rounds(rounds, stock, 4, "p", tr, room_end=30)
    assert (tr.rounds_compared, tr.rounds_identical) == (3, 2) and "round 1" in tr.differences[0]
    tr = Transcription()
    compare_rounds(rounds, stock, 4, "p", tr)  # without room_end only rounds of k drafts on both sides are full
    assert tr.rounds_compared == 0 and tr.end_rounds == 3


def test_engine_rounds_rebuild_the_engine_output(tmp_path: Path) -> None:
    """The engine's side needs no binary: its recorded blocks and its trace give rounds that chain from anchor to
    anchor and commit exactly its output; the prompts align (the prompt and the first token tokenize back)."""
    from local_eagle.bench.against_llamacpp import (
        aligned_prompt,
        engine_rounds,
        record_blocks,
        stop_recording,
        write_pairs,
    )
    from local_eagle.runtime.engine import Engine, EngineOptions

    files = write_pairs(tmp_path, ["agree-xy"], dspark=False)["agree-xy"]
    with Engine(files["target"], files["dflash"], EngineOptions(n_ctx=256, n_threads=1, n_gpu_layers=0)) as engine:
        blocks = record_blocks(engine)
        res = engine.generate("hello ", max_tokens=17, draft_max=4, adaptive=False)
        stop_recording(engine)
        assert "propose" not in vars(engine.drafter)
        n_prompt = len(engine.tokenize("hello "))
        rounds = engine_rounds(blocks, res, n_prompt)
        assert aligned_prompt(engine.model, "hello ", res.tokens[0]) == b"hello x"
    assert rounds[0].pos == n_prompt and rounds[0].anchor == res.tokens[0]
    assert [t for r in rounds for t in r.tokens] == res.tokens[1:]
    assert [r.accepted for r in rounds] == res.spec_stats.trace_accepted and max(r.accepted for r in rounds) == 1
    assert all(r.rows == [3 + ord("x")] * 4 for r in rounds if r.drafted)  # every row x, a shortened round's too


BIN = os.environ.get("LOCAL_EAGLE_LLAMACPP_BIN")


@pytest.mark.llamacpp_bin
@pytest.mark.skipif(not BIN, reason="set LOCAL_EAGLE_LLAMACPP_BIN to llama.cpp's llama-speculative-simple")
@pytest.mark.parametrize("pair", ["random", "agree-x", "agree-xy"])
def test_same_drafts_and_tokens_per_call_as_draft_dflash(tmp_path: Path, pair: str) -> None:
    from local_eagle.bench.against_llamacpp import run_pair, write_pairs

    files = write_pairs(tmp_path, [pair], dspark=True)[pair]
    report = run_pair(pair, files, Path(BIN), None, ["hello ", "1, 2, 3, 4,"], max_tokens=24, draft=4)
    alone, ours, stock, dspark, ours_dspark = report["sides"]
    assert not report["skipped_prompts"]
    assert not alone["mismatches"] and not ours["mismatches"] and not stock["mismatches"]  # the same tokens
    assert not dspark["mismatches"] and dspark["target_calls"] > 0  # llama.cpp drafts with our DSpark GGUF too
    tr = report["transcription"]
    assert tr["rounds_compared"] > 0 and tr["rounds_identical"] == tr["rounds_compared"], tr["differences"]
    assert tr["end_rounds_identical"] == tr["end_rounds"], tr["end_differences"]  # shortened blocks alike too
    assert ours["full_rounds"] == stock["full_rounds"] and ours["full_accepted"] == stock["full_accepted"]
    # our engine drafting the DSpark GGUF: draft-dspark's rounds, one by one (the Markov head in both graphs)
    assert not ours_dspark["mismatches"]
    tr = report["transcription_dspark"]
    assert tr["rounds_compared"] > 0 and tr["rounds_identical"] == tr["rounds_compared"], tr["differences"]
    assert tr["end_rounds_identical"] == tr["end_rounds"], tr["end_differences"]
    assert ours_dspark["full_accepted"] == dspark["full_accepted"]
    if pair == "agree-x":
        assert ours["tokens_per_call_full_rounds"] == stock["tokens_per_call_full_rounds"] == 5.0
    elif pair == "agree-xy":
        assert 1.0 < stock["tokens_per_call_full_rounds"] < 5.0


@pytest.mark.llamacpp_bin
@pytest.mark.skipif(not BIN, reason="set LOCAL_EAGLE_LLAMACPP_BIN to llama.cpp's llama-speculative-simple")
@pytest.mark.parametrize("pair", ["random", "agree-x"])
def test_a_whole_anchor_first_block_as_draft_dspark(tmp_path: Path, pair: str) -> None:
    """k = block_size: DSpark's anchor-first block drafts all of it (DFlash is clamped to block_size - 1), our
    engine's rounds draft-dspark's one by one."""
    from local_eagle.bench.against_llamacpp import BLOCK_SIZE, run_pair, write_pairs

    files = write_pairs(tmp_path, [pair], dspark=True)[pair]
    report = run_pair(pair, files, Path(BIN), None, ["hello ", "1, 2, 3, 4,"], max_tokens=24, draft=BLOCK_SIZE)
    _, _, _, dspark, ours_dspark = report["sides"]
    assert not dspark["mismatches"] and not ours_dspark["mismatches"]
    tr = report["transcription_dspark"]
    assert tr["rounds_compared"] > 0 and tr["rounds_identical"] == tr["rounds_compared"], tr["differences"]
    assert tr["end_rounds_identical"] == tr["end_rounds"], tr["end_differences"]
    if pair == "agree-x":
        assert ours_dspark["tokens_per_call_full_rounds"] == dspark["tokens_per_call_full_rounds"] == BLOCK_SIZE + 1


@pytest.mark.llamacpp_bin
@pytest.mark.skipif(not BIN, reason="set LOCAL_EAGLE_LLAMACPP_BIN to llama.cpp's llama-speculative-simple")
@pytest.mark.parametrize("pair", ["random", "agree-x", "agree-xy"])
def test_dflash2_rounds_as_draft_dflash(tmp_path: Path, pair: str) -> None:
    """Our engine drafting the pair's DFlash2 GGUF (the selector walk) against stock draft-dflash on it: every round
    the same position, anchor, drafts verified and kept and target token (the log gives no drafts), the printed
    output the target alone's; on the agreeing pairs the counts pin the drafts down (x every row)."""
    from local_eagle.bench.against_llamacpp import run_pair, write_pairs

    files = write_pairs(tmp_path, [pair], dspark=False, dflash2=True)[pair]
    report = run_pair(pair, files, Path(BIN), None, ["hello ", "1, 2, 3, 4,"], max_tokens=24, draft=4)
    _, _, _, stock, ours = report["sides"]
    assert stock["name"].endswith("(DFlash2)") and ours["name"] == "local-eagle DFlash2 k=4"
    assert not report["skipped_prompts"] and stock["output_checked"]
    assert not stock["mismatches"] and not ours["mismatches"] and stock["target_calls"] > 0
    tr = report["transcription_dflash2"]
    assert tr["rounds_compared"] > 0 and tr["rounds_identical"] == tr["rounds_compared"], tr["differences"]
    assert tr["end_rounds_identical"] == tr["end_rounds"], tr["end_differences"]
    assert ours["full_accepted"] == stock["full_accepted"]
    if pair == "agree-x":  # every draft kept
        assert ours["tokens_per_call_full_rounds"] == stock["tokens_per_call_full_rounds"] == 5.0
    elif pair == "agree-xy":  # after y one kept, after x none: only the first round's anchor (x, both prompts) is x
        assert tr["ours_accepted"] == tr["stock_accepted"] == tr["rounds_compared"] - 2


@pytest.mark.llamacpp_bin
@pytest.mark.skipif(not BIN, reason="set LOCAL_EAGLE_LLAMACPP_BIN to llama.cpp's llama-speculative-simple")
@pytest.mark.parametrize("p_min", [0.3, 0.5])
def test_the_p_min_cut_as_draft_dflash_and_draft_dspark(tmp_path: Path, p_min: float) -> None:
    """With ``p_min`` both sides cut each draft at the same row (DFlash: its top-1 probability over the top 10;
    DSpark: its confidence head): every round with room for a block is identical, the cut included, on the random
    pair, where the cut varies from round to round."""
    from local_eagle.bench.against_llamacpp import run_pair, write_pairs

    files = write_pairs(tmp_path, ["random"], dspark=True)["random"]
    report = run_pair("random", files, Path(BIN), None, ["hello ", "1, 2, 3, 4,"], max_tokens=24, draft=4,
                      p_min=p_min)  # fmt: skip
    alone, ours, stock, dspark, ours_dspark = report["sides"]
    assert not any(s["mismatches"] for s in report["sides"])
    for kind, side in (("transcription", stock), ("transcription_dspark", dspark)):
        tr = report[kind]
        assert tr["rounds_compared"] > 0 and tr["rounds_identical"] == tr["rounds_compared"], tr["differences"]
        assert tr["end_rounds_identical"] == tr["end_rounds"], tr["end_differences"]
        assert 0 < side["drafted"] < 4 * side["target_calls"]  # cut, but not to nothing
    assert ours["drafted"] < 4 * ours["target_calls"] and ours_dspark["drafted"] < 4 * ours_dspark["target_calls"]

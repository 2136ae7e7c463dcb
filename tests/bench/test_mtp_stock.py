"""The stock-comparison bench reads llama.cpp's tools' summaries as they print them, and says so when one is lost."""

from __future__ import annotations

import pytest

from local_eagle.bench.mtp_stock import (
    Side,
    at_horizon,
    parse_completion,
    parse_rounds,
    parse_speculative_simple,
    stock_command,
    table,
)
from local_eagle.errors import LocalEagleError

SPEC_STDOUT = "\n\n<s> xyzABCDEFGHIJKLMNOPABCDEFGHIJKLMNOPABCDEFGHIJKLM\n\n"
SPEC_STDERR = """0.00.016.263 I cmn          init: llama threadpool init, n_threads = 2
0.00.040.959 I encoded    6 tokens in    0.002 seconds, speed: 2918.288 t/s
0.00.040.988 I decoded   44 tokens in    0.008 seconds, speed: 5408.063 t/s
0.00.041.006 I
0.00.041.024 I n_draft   = 3
0.00.041.042 I n_predict = 44
0.00.041.059 I n_drafted = 33
0.00.041.077 I n_accept  = 30
0.00.041.096 I accept    = 90.909%
"""
COMPLETION_STDOUT = " xyzABCDEFGHIJKLMNOPABCDEFGHIJKLMNOPABCDEFGHI\n\n"
COMPLETION_STDERR = """0.00.061.443 I common_perf_print: prompt eval time =       0.63 ms /     6 tokens
0.00.061.445 I common_perf_print:        eval time =      18.81 ms /    39 runs   (    0.48 ms per token)
0.00.061.445 I common_perf_print:       total time =      20.93 ms /    45 tokens
"""


def test_speculative_simple_summary():
    run = parse_speculative_simple(SPEC_STDOUT, SPEC_STDERR, "xyzA")
    assert (run.tokens, run.accepted, run.drafted, run.seconds) == (44, 30, 33, 0.008)
    assert run.target_calls == 14  # a round a call: each yields its accepted drafts and one token
    assert run.text == "BCDEFGHIJKLMNOPABCDEFGHIJKLMNOPABCDEFGHIJKLM"


def test_completion_summary_times_the_generated_tokens_by_wall_clock():
    run = parse_completion(COMPLETION_STDOUT, COMPLETION_STDERR, "xyzA")
    assert (run.tokens, run.target_calls, run.accepted) == (39, 39, 0)
    assert run.seconds == pytest.approx((20.93 - 0.63) / 1000)
    assert run.text.startswith("BCDEFG")


def test_a_lost_summary_is_an_error_not_a_zero():
    cut = SPEC_STDERR.split("n_predict")[0]  # the log thread did not drain before exit
    with pytest.raises(LocalEagleError, match="n_predict"):
        parse_speculative_simple(SPEC_STDOUT, cut, "xyzA")


def test_commands_match_the_sides():
    spec = stock_command("bin/spec", "m.gguf", "hi", 64, 2, 512, 3)
    assert spec[spec.index("--spec-type") + 1] == "draft-mtp" and spec[spec.index("--spec-draft-n-max") + 1] == "3"
    assert spec[spec.index("-t") + 1] == spec[spec.index("-td") + 1] == "2" and "--temp" in spec
    alone = stock_command("bin/completion", "m.gguf", "hi", 64, 2, 512, None)
    assert "--spec-type" not in alone and "-no-cnv" in alone


def test_table_reports_ratios_to_the_target_alone():
    base = Side("alone", tokens=100, target_calls=100, seconds=2.0, ratios=[1.0])
    mtp = Side("mtp", tokens=100, target_calls=25, accepted=75, drafted=75, seconds=1.0, ratios=[2.0])
    report = {"sides": [base.to_dict(base.tokens_per_second), mtp.to_dict(base.tokens_per_second)]}
    assert report["sides"][1]["speed_ratio"] == 2.0 and report["sides"][1]["tokens_per_call"] == 4.0
    assert "| mtp | 100 | 25 | 4.000 | - | 100.0% | 100.0 | 2.000 | 2.000 | same |" in table(report)


def test_rounds_counted_to_a_common_horizon():
    log = "0.1 D accepted 3/3 draft tokens, the last target token is: (72)\n0.2 D accepted 1/3 draft tokens, x\n"
    assert parse_rounds(log) == [3, 1]
    # the same rounds give the same figure however each side ends: a shortened last round or an extra one
    assert at_horizon([3, 1, 3, 0, 2], 8) == (10, 3) == at_horizon([3, 1, 3, 3, 3], 8)
    assert at_horizon([3, 1], 8) is None  # short of it: the caller refuses rather than count a partial run

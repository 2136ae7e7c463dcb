"""Which drafter precision to run: the saving timed on a machine against the acceptance kept on the demo pair."""

from __future__ import annotations

import pytest

from local_eagle.bench.precision import Kept, advice, chain_speed, fit_note, measured_acceptance, measured_call_ratio

KEPT = {"F16": Kept("F16", 2.50, (0.6, 0.4)), "Q8_0": Kept("Q8_0", 2.45, (0.6, 0.39))}
TYPES = {"d-f16.gguf": "F16", "d-q8_0.gguf": "Q8_0"}


def test_chain_speed_weighs_acceptance_against_the_rounds_time() -> None:
    # a round of chain 3: verify of 4 rows 10 ms + 3 drafter calls; q8_0 2 ms a call against 4
    speed = chain_speed({1: 9.0, 4: 10.0}, {1: 4.0}, {1: 2.0}, KEPT["F16"], KEPT["Q8_0"])
    assert speed == pytest.approx((2.45 / 2.50) / (16.0 / 22.0))
    # row counts as a file keeps them (strings), the verify read at the nearest measured count above 4
    assert chain_speed({"1": 9.0, "5": 10.0}, {"1": 4.0}, {"1": 2.0}, KEPT["F16"], KEPT["Q8_0"]) == pytest.approx(speed)
    assert chain_speed({1: 9.0}, {1: 4.0}, {1: 2.0}, KEPT["F16"], KEPT["Q8_0"]) is None


def test_advice_names_the_faster_file_and_the_figures_behind_it() -> None:
    line = advice("d-f16.gguf", {1: 4.0}, "d-q8_0.gguf", {1: 2.0}, {1: 9.0, 4: 10.0}, TYPES, KEPT)
    assert line is not None
    for part in ("2.00 ms against 4.00 ms", "0.50x", "44% and 22% of a 1-row target call", "2.450 against F16's 2.500",
                 "run `d-q8_0.gguf`"):  # fmt: skip
        assert part in line, part
    # where q8_0's call saves nothing its lost acceptance decides: keep f16
    slow = advice("d-f16.gguf", {1: 4.0}, "d-q8_0.gguf", {1: 4.1}, {1: 9.0, 4: 10.0}, TYPES, KEPT)
    assert slow is not None and "run `d-f16.gguf`" in slow


def test_no_advice_without_both_precisions_measured() -> None:
    assert advice("a.gguf", {1: 4.0}, "b.gguf", {1: 2.0}, {1: 9.0, 4: 10.0}, {}, KEPT) is None
    assert advice("d-f16.gguf", {}, "d-q8_0.gguf", {1: 2.0}, {1: 9.0}, TYPES, KEPT) is None
    # no verify of 4 rows: the figures, no verdict
    line = advice("d-f16.gguf", {1: 4.0}, "d-q8_0.gguf", {1: 2.0}, {1: 9.0}, TYPES, KEPT)
    assert line is not None and "run `" not in line


def test_the_shipped_acceptance_has_f16_and_q8_0() -> None:
    kept = measured_acceptance()
    assert {"F16", "Q8_0"} <= set(kept)
    assert all(1.0 <= k.acceptance_length <= 5.0 and len(k.per_position) == 4 for k in kept.values())


def test_the_fit_note_quotes_the_share_of_acceptance_kept_and_the_call() -> None:
    note = fit_note("F16", 400 * 2**20, 213 * 2**20, KEPT, 0.83)
    for part in ("matrices are F16, 400 MiB; at q8_0 213 MiB", "98.0% of f16's acceptance length (2.450 against "
                 "2.500)", "0.83x f16's on a 2-core CPU", "prefer q8_0"):  # fmt: skip
        assert part in note, part
    bare = fit_note("BF16", 400 * 2**20, 213 * 2**20, {}, 0.83)
    assert bare.endswith("(local-eagle convert --outtype q8_0)") and "prefer" not in bare
    assert 0.5 < measured_call_ratio() < 1.5

"""The one parameter table: types, ranges and the bounds that keep llama.cpp away from crashing values."""

from __future__ import annotations

import pytest

from local_eagle.ollama import parameters as P


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("num_thread", 100000, "num_thread must be between 0 and 512, got 100000"),
        ("num_ctx", 10**9, "num_ctx must be between 16 and 1048576"),
        ("num_ctx", 1, "num_ctx must be between 16"),
        ("draft_num_predict", 10**7, "draft_num_predict must be between 0 and 64"),
        ("top_p", 1.5, "top_p must be between 0 and 1"),
        ("repeat_penalty", 0.0, "repeat_penalty must be at least"),
        ("num_predict", 0, "num_predict must be at least 1 or -1"),
        ("top_p", float("nan"), "top_p must be a number, got nan"),
        ("top_k", 1.5, "top_k must be an integer"),
        ("top_k", True, "top_k must be an integer"),
        ("stop", "x", "stop must be a list of strings"),
        ("temprature", 1.0, "unknown parameter 'temprature'; did you mean temperature?"),
    ],
)
def test_bad_values_are_named(name, value, needle) -> None:
    with pytest.raises(P.ParameterError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        P.check(name, value)


def test_good_values_pass_and_ints_count_as_numbers() -> None:
    assert P.check("temperature", 1) == 1.0 and isinstance(P.check("temperature", 1), float)
    assert P.check("num_predict", -1) == -1
    assert P.check("seed", -1) == -1
    assert P.check("stop", ["a", "b"]) == ["a", "b"]
    assert P.check("draft_num_predict", 0) == 0


def test_text_follows_go_parsing_then_the_range() -> None:
    assert P.parse_text("temperature", "0.7") == 0.7
    assert P.parse_text("use_mmap", "T") is True
    with pytest.raises(P.ParameterError, match="expects an integer"):
        P.parse_text("num_ctx", "4k")
    with pytest.raises(P.ParameterError, match="num_ctx must be between"):
        P.parse_text("num_ctx", "8")


def test_every_default_is_valid() -> None:
    for p in P.PARAMETERS.values():
        if p.default is not None:
            P.check(p.name, p.default)

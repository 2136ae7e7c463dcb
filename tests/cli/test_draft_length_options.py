"""--draft-max auto|N and --fixed: where the bound comes from, and chat's session options."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle.cli.chat import ChatSession
from local_eagle.cli.options import ModelPair, given, parse_draft_max
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.policy.defaults import AUTO_DRAFT_MAX, FIXED_DRAFT_MAX
from local_eagle.settings import DraftMode


def test_parse_draft_max() -> None:
    assert parse_draft_max("auto") is None and parse_draft_max(" AUTO ") is None and parse_draft_max(None) is None
    assert parse_draft_max("6") == 6 and parse_draft_max("0") == 0
    with pytest.raises(LocalEagleError, match="--draft-max must be 'auto' or a number"):
        parse_draft_max("lots")


def test_the_bound_comes_from_the_flag_then_the_modelfile_then_the_mode() -> None:
    def bound(pair: ModelPair, value: str, fixed: bool) -> int:
        return pair.settings(given(draft_max=parse_draft_max(value)), DraftMode(fixed)).draft_max

    pair = ModelPair(Path("t.gguf"), Path("d.gguf"), {"draft_num_predict": 3})
    assert bound(pair, "5", fixed=False) == 5 and bound(pair, "5", fixed=True) == 5
    assert bound(pair, "auto", fixed=False) == 3 and bound(pair, "auto", fixed=True) == 3
    plain = ModelPair(Path("t.gguf"), Path("d.gguf"))
    assert bound(plain, "auto", fixed=False) == AUTO_DRAFT_MAX == 8
    assert bound(plain, "auto", fixed=True) == FIXED_DRAFT_MAX == 4
    replaced = ModelPair(Path("t.gguf"), Path("other.gguf"), {"draft_num_predict": 3}, own_draft=False)  # --draft
    assert bound(replaced, "auto", fixed=False) == AUTO_DRAFT_MAX
    off = ModelPair(Path("t.gguf"), None, {"draft_num_predict": 3}, mtp=False)  # DRAFT none: nothing drafts
    assert bound(off, "5", fixed=False) == 0


def test_chat_session_passes_the_mode_and_its_default_bound() -> None:
    s = ChatSession(Path("t.gguf"), Path("d.gguf"))
    o = s.stream_options()
    assert o["adaptive"] and o["draft_max"] == AUTO_DRAFT_MAX  # the cost-aware policy by default, as serve's
    s.parameters["draft_num_predict"] = 2
    assert s.stream_options()["draft_max"] == 2
    o = ChatSession(Path("t.gguf"), Path("d.gguf"), mode=DraftMode(fixed=True)).stream_options()
    assert not o["adaptive"] and o["draft_max"] == 4

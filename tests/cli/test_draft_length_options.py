"""--draft-max auto|N and --fixed: where the bound comes from, and chat's session options."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from local_eagle.cli.chat import ChatSession
from local_eagle.cli.options import ModelPair, draft_bound, parse_draft_max
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.policy.lengths import AUTO_DRAFT_MAX, FIXED_DRAFT_MAX


def test_parse_draft_max() -> None:
    assert parse_draft_max("auto") is None and parse_draft_max(" AUTO ") is None and parse_draft_max(None) is None
    assert parse_draft_max("6") == 6 and parse_draft_max("0") == 0
    with pytest.raises(LocalEagleError, match="--draft-max must be 'auto' or a number"):
        parse_draft_max("lots")


def test_the_bound_comes_from_the_flag_then_the_modelfile_then_the_mode() -> None:
    with_param = SimpleNamespace(draft=Path("d.gguf"), draft_num_predict=3)
    pair = ModelPair(Path("t.gguf"), Path("d.gguf"), {"draft_num_predict": 3}, with_param)  # type: ignore[arg-type]
    assert draft_bound(pair, "5", fixed=False) == 5 and draft_bound(pair, "5", fixed=True) == 5
    assert draft_bound(pair, "auto", fixed=False) == 3 and draft_bound(pair, "auto", fixed=True) == 3
    plain = ModelPair(Path("t.gguf"), Path("d.gguf"))
    assert draft_bound(plain, "auto", fixed=False) == AUTO_DRAFT_MAX == 8
    assert draft_bound(plain, "auto", fixed=True) == FIXED_DRAFT_MAX == 4
    no_param = SimpleNamespace(draft=Path("d.gguf"), draft_num_predict=4)  # a DRAFT without the parameter
    pair = ModelPair(Path("t.gguf"), Path("d.gguf"), {}, no_param)  # type: ignore[arg-type]
    assert draft_bound(pair, "auto", fixed=False) == AUTO_DRAFT_MAX


def test_chat_session_passes_the_mode_and_its_default_bound() -> None:
    s = ChatSession(Path("t.gguf"), Path("d.gguf"), adaptive=True)
    o = s.stream_options()
    assert o["adaptive"] and o["draft_max"] == AUTO_DRAFT_MAX
    s.parameters["draft_num_predict"] = 2
    assert s.stream_options()["draft_max"] == 2
    o = ChatSession(Path("t.gguf"), Path("d.gguf")).stream_options()
    assert not o["adaptive"] and o["draft_max"] == 4

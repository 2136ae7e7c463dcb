"""Streamed text: whole UTF-8 characters, stop strings withheld and never emitted."""

from __future__ import annotations

from local_eagle.runtime.textstream import TextStream


def feed(stream: TextStream, pieces: list[bytes]) -> list[str]:
    out = [stream.push(p) for p in pieces]
    out.append(stream.finish())
    return out


def test_multibyte_character_split_across_tokens():
    s = TextStream()
    data = "é日".encode()
    out = feed(s, [data[:1], data[1:3], data[3:4], data[4:]])
    assert out == ["", "é", "", "日", ""]
    assert s.text == "é日"


def test_incomplete_character_at_the_end_becomes_replacement():
    s = TextStream()
    assert feed(s, [b"a", "日".encode()[:2]]) == ["a", "", "\ufffd"]


def test_stop_string_across_tokens_is_withheld():
    s = TextStream(stop=["</end>"])
    out = feed(s, [b"hello </", b"en", b"d> more"])
    assert "".join(out) == "hello "
    assert s.stopped and s.text == "hello "


def test_false_alarm_prefix_is_released():
    s = TextStream(stop=["STOP"])
    out = feed(s, [b"ST", b"OCK"])
    assert out[0] == ""
    assert "".join(out) == "STOCK"
    assert not s.stopped


def test_earliest_of_several_stop_strings_wins():
    s = TextStream(stop=["bb", "abc"])
    assert "".join(feed(s, [b"xxabcbb"])) == "xx"

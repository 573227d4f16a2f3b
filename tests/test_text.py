"""Streaming detokenization: never a split character, stop strings held back and cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lookahead.core.text import TextStream


@given(st.text(), st.lists(st.integers(min_value=1, max_value=7), max_size=50))
def test_chunked_bytes_decode_to_the_same_text(text: str, cuts: list[int]) -> None:
    data = text.encode("utf-8")
    s = TextStream()
    out, pos = [], 0
    for c in cuts:
        piece = s.feed(data[pos : pos + c])
        assert "\ufffd" not in piece or "\ufffd" in text  # no half characters shown
        out.append(piece)
        pos += c
    out.append(s.feed(data[pos:]))
    out.append(s.finish())
    assert "".join(out) == text


def test_multibyte_character_waits_for_its_last_byte() -> None:
    s = TextStream()
    data = "é".encode()
    assert s.feed(data[:1]) == ""
    assert s.feed(data[1:]) == "é"


@given(st.text(alphabet="ab\nX", max_size=40), st.sampled_from(["XX", "\n\n", "aXb"]))
def test_stop_string_cuts_and_nothing_after_it_is_emitted(text: str, stop: str) -> None:
    s = TextStream([stop])
    out = "".join(s.feed(ch.encode()) for ch in text) + s.finish()
    expected = text.split(stop)[0]
    assert out == expected
    assert s.stopped == (stop in text)


def test_partial_stop_is_released_when_it_does_not_complete() -> None:
    s = TextStream(["END"])
    assert s.feed(b"abc E") == "abc "
    assert s.feed(b"N") == ""
    assert s.feed(b"x") == "ENx"

"""`logit_bias` read as llama.cpp's server and OpenAI take it (no model: a stand-in tokenizer)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from lookahead.server.errors import APIError
from lookahead.server.logit_bias import parse_logit_bias


def tokenize(text: str) -> list[int]:
    return [ord(c) for c in text]  # one token per character


def parse(value: Any) -> tuple[tuple[int, float], ...]:
    return parse_logit_bias(value, tokenize, n_vocab=1000)


def test_pairs_objects_ids_and_texts() -> None:
    assert parse([[5, -100], [6, False]]) == ((5, -100.0), (6, -math.inf))
    assert parse({"5": 2, "ab": -1.5}) == ((5, 2.0), (97, -1.5), (98, -1.5))
    assert parse([["hi", 3]]) == ((104, 3.0), (105, 3.0))
    assert parse(None) == () and parse([]) == () and parse({}) == ()


@pytest.mark.parametrize(
    "value, needle",
    [
        (3, "list of [token, bias] pairs"),
        ([[1, 2, 3]], "list of [token, bias] pairs"),
        ([[5, "x"]], "number or false"),
        ([[5, True]], "number or false"),
        ({"5": float("nan")}, "number or false"),
        ([[1000, 1]], "not in the vocabulary"),
        ({"-1": 1}, "not in the vocabulary"),
        ([[1.5, 1]], "id or a text"),
    ],
)
def test_what_cannot_be_read_is_a_400_naming_the_field(value: Any, needle: str) -> None:
    with pytest.raises(APIError) as err:
        parse(value)
    assert err.value.status == 400 and needle in err.value.message and "logit_bias" in err.value.message

"""Predicted Outputs' usage accounting: `accepted + rejected` is always the prediction's
length, the matched tokens are a common subsequence (never more than the exact count), and a
long repetitive prediction is counted in linear time."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.server.accounting import prediction_counts

BODY = list(range(100, 160))


def counts(predicted: list[int], completion: list[int]) -> tuple[int, int]:
    c = prediction_counts(predicted, completion)
    return c["accepted_prediction_tokens"], c["rejected_prediction_tokens"]


def lcs(a: list[int], b: list[int]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], prev + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def test_a_completion_equal_to_the_prediction_accepts_all_of_it() -> None:
    assert counts(BODY, BODY) == (60, 0)


def test_an_empty_completion_rejects_all_of_it() -> None:
    assert counts(BODY, []) == (0, 60)
    assert counts([], BODY) == (0, 0)


def test_a_block_left_out_of_the_completion_is_rejected() -> None:
    completion = BODY[:20] + BODY[35:]  # 15 tokens of the prediction not written
    assert counts(BODY, completion) == (45, 15)


def test_text_added_in_the_completion_costs_nothing() -> None:
    completion = BODY[:30] + [1, 2, 3, 4, 5] + BODY[30:]
    assert counts(BODY, completion) == (60, 0)


def test_an_edit_in_the_middle() -> None:
    completion = BODY[:25] + [7, 8, 9] + BODY[28:]  # three tokens replaced by three others
    assert counts(BODY, completion) == (57, 3)


def test_an_unrelated_completion_accepts_nothing() -> None:
    assert counts(BODY, list(range(500, 540))) == (0, 60)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
)
def test_counts_add_up_and_never_exceed_the_exact_count(predicted: list[int], completion: list[int]) -> None:
    accepted, rejected = counts(predicted, completion)
    assert accepted + rejected == len(predicted)
    assert 0 <= accepted <= lcs(predicted, completion)


def test_a_long_repetitive_prediction_is_counted_in_linear_time() -> None:
    # difflib's exact matcher took ~55 s on 10k predicted tokens against 900 written
    predicted = [1, 2, 3, 4, 5, 6, 7, 8] * 1250
    completion = ([1, 2, 3, 4, 5, 6, 7, 9] * 110)[:900]
    t0 = time.perf_counter()
    accepted, rejected = counts(predicted, completion)
    assert time.perf_counter() - t0 < 1.0
    assert accepted + rejected == 10000 and accepted >= 700

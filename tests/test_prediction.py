"""The predicted-output source follows the output through the prediction, edits included."""

from __future__ import annotations

import pytest

from lookahead.core.draft import SOURCE_PREDICTION
from lookahead.index.prediction import Q_START, PredictionIndex

PRED = list(range(100, 140))  # 40 distinct tokens


def drafted(index: PredictionIndex, depth: int = 5) -> list[int]:
    found = index.propose(depth, 1)
    return [] if not found else found[0].tokens.tolist()


def test_before_any_output_it_drafts_the_start_of_the_prediction() -> None:
    index = PredictionIndex(PRED)
    index.observe([1, 2, 3, 100, 101])  # the prompt, even if it contains prediction text
    (cand,) = index.propose(4, 1)
    assert cand.tokens.tolist() == [100, 101, 102, 103]
    assert cand.source == SOURCE_PREDICTION
    assert float(cand.q[0]) == pytest.approx(Q_START)


def test_agreeing_output_moves_the_cursor_and_raises_the_estimate() -> None:
    index = PredictionIndex(PRED)
    index.observe([7])
    index.observe(PRED[:3])
    first = index.estimate()
    assert drafted(index, 3) == [103, 104, 105]
    index.observe(PRED[3:15])
    assert drafted(index, 2) == [115, 116]
    assert index.estimate() > first


def test_an_edit_realigns_on_the_tokens_after_it() -> None:
    index = PredictionIndex(PRED)
    index.observe([7])
    index.observe(PRED[:10])
    index.observe([999])  # the edit: not in the prediction
    assert drafted(index) == []  # lost until the output meets the prediction again
    index.observe([999, 112, 113])  # the output rejoins two tokens past where it left
    assert drafted(index, 3) == [114, 115, 116]


def test_a_deletion_skips_ahead() -> None:
    index = PredictionIndex(PRED)
    index.observe([7])
    index.observe(PRED[:5] + PRED[20:22])  # tokens 5..19 deleted
    assert drafted(index, 2) == [122, 123]


def test_realignment_prefers_the_occurrence_at_or_after_the_cursor() -> None:
    pred = [1, 2, 3, 4, 9, 9, 1, 2, 3, 4, 8, 8]
    index = PredictionIndex(pred)
    index.observe([0])
    index.observe([1, 2, 3, 4, 9, 9, 5, 3, 4])  # an edit, then "3 4": both occurrences match
    assert drafted(index, 2) == [8, 8]


def test_the_end_of_the_prediction_drafts_nothing() -> None:
    index = PredictionIndex([5, 6])
    index.observe([0])
    index.observe([5, 6])
    assert drafted(index) == []


def test_unaligned_text_is_drafted_only_once_the_output_meets_it() -> None:
    # a completion's suffix: the output ends where it begins, so its first tokens are not
    # the output's first
    index = PredictionIndex(PRED, aligned=False)
    index.observe([1, 2, 3])  # the prompt
    assert drafted(index) == []
    index.observe([100])  # one shared token is not yet a meeting
    assert drafted(index) == []
    index.observe([101])
    assert drafted(index, 3) == [102, 103, 104]

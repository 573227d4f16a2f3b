"""Predicted Outputs' usage accounting, in linear time.

OpenAI reports `accepted_prediction_tokens` (prediction tokens that appeared in the
completion) and `rejected_prediction_tokens` (the rest). The exact count is a longest common
subsequence, quadratic in the lengths: a repetitive 10k-token prediction took close to a
minute. This walks both sequences once instead, like a diff that trusts anchors: while the
next tokens agree they are accepted; on a disagreement it looks up where the completion's
next `ANCHOR` tokens occur next in the prediction (a table built once) and skips the
prediction to there (those tokens are rejected), or else skips the completion's token (an
insertion). The matched pairs form a common subsequence, so `accepted` never exceeds the
exact count, and `accepted + rejected` is always the prediction's length.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

ANCHOR = 4  # tokens that must agree to re-synchronise after a disagreement


def prediction_counts(predicted: Sequence[int], completion: Sequence[int]) -> dict[str, int]:
    """accepted: prediction tokens matched, in order, in the completion; rejected: the rest."""
    n, m = len(predicted), len(completion)
    starts: defaultdict[tuple[int, ...], list[int]] = defaultdict(list)  # n-gram -> its positions, ascending
    for i in range(n - ANCHOR + 1):
        starts[tuple(predicted[i : i + ANCHOR])].append(i)
    cursor: dict[tuple[int, ...], int] = {}  # per n-gram: first position not yet behind `p`
    accepted = p = i = 0
    while i < m and p < n:
        if completion[i] == predicted[p]:
            accepted += 1
            i += 1
            p += 1
            continue
        key = tuple(completion[i : i + ANCHOR])
        positions = starts.get(key) if len(key) == ANCHOR else None
        if positions:
            c = cursor.get(key, 0)
            while c < len(positions) and positions[c] < p:  # p only grows: each cursor moves forward once
                c += 1
            cursor[key] = c
            if c < len(positions):
                p = positions[c]  # > p, as predicted[p] != completion[i]: the tokens between are rejected
                continue
        i += 1  # a completion token the prediction does not have here
    return {"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": n - accepted}

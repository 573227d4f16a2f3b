"""Helpers shared by the index tests: chunked feeding and ranked-estimate comparison."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol


class _Observer(Protocol):
    def observe(self, tokens: Iterable[int]) -> None: ...


def feed_in_chunks(index: _Observer, stream: list[int], cuts: list[int]) -> None:
    """Observe `stream` in pieces split at `cuts` (taken modulo the length, sorted)."""
    prev = 0
    for cut in sorted(c % (len(stream) + 1) for c in cuts) + [len(stream)]:
        index.observe(stream[prev:cut])
        prev = max(prev, cut)


def same_ranking(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """Same tokens in the same order, estimates equal to rounding."""
    assert [t for t, _ in got] == [t for t, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert math.isclose(a, b, rel_tol=1e-9)

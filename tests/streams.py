"""Helpers shared by the index tests: chunked feeding, ranked-estimate comparison, and the
contract of `propose` (greedy first, then alternatives)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np


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


def check_greedy_then_alternatives(
    index: Any, cands: list[Any], source: int, depth: int, n_cand: int, context: list[int]
) -> None:
    """`cands = index.propose(depth, n_cand)` keeps its contract, with `context` the tokens
    `index.next_tokens` is asked after (the whole stream for an n-gram index, nothing for a
    suffix index, which continues the stream's end): at most `n_cand` distinct paths, none a
    prefix of another, each 1..depth tokens from `source`, every token one of next_tokens'
    options with its q, the product of q at least min_p; the first path the greedy chain of
    next_tokens followed to its end; and a second root option worth drafting, a second path."""
    assert len(cands) <= n_cand
    paths = [tuple(c.tokens.tolist()) for c in cands]
    for c, path in zip(cands, paths, strict=True):
        assert c.source == source
        assert 1 <= len(path) <= depth
        assert np.all(c.q > 0) and np.all(c.q <= 1)
        assert np.prod(c.q.astype(np.float64)) >= index.min_p * (1 - 1e-6)
        for other in paths:  # distinct, and no path is a prefix of another
            assert other == path or other[: len(path)] != path
        for j, tok in enumerate(path):  # every token is an option of next_tokens, with its q
            q_of = dict(index.next_tokens(context + list(path[:j])))
            assert math.isclose(q_of[tok], float(c.q[j]), rel_tol=1e-6)
    greedy: list[int] = []
    p = 1.0
    while len(greedy) < depth:
        opts = index.next_tokens(context + greedy, limit=1)
        if not opts or p * opts[0][1] < index.min_p:
            break
        greedy.append(opts[0][0])
        p *= opts[0][1]
    assert (paths[0] if paths else ()) == tuple(greedy)
    first = index.next_tokens(context, limit=2)
    if n_cand > 1 and len(first) == 2 and first[1][1] >= index.min_p:
        assert len(cands) >= 2

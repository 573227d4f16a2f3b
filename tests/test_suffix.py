"""SuffixIndex against brute-force scans of the whole stream."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.core.draft import SOURCE_SUFFIX
from lookahead.index.suffix import SuffixIndex
from tests.streams import check_greedy_then_alternatives, feed_in_chunks, same_ranking


def ends(stream: list[int], x: list[int]) -> set[int]:
    """End positions of the occurrences of x in stream (a vectorised scan of all of it)."""
    k, n = len(x), len(stream)
    if k > n:
        return set()
    arr = np.asarray(stream, dtype=np.int64)
    hit = np.ones(n - k + 1, dtype=bool)
    for j, t in enumerate(x):
        hit &= arr[j : n - k + 1 + j] == t
    return {int(s) + k - 1 for s in np.flatnonzero(hit)}


def ref_match_length(stream: list[int]) -> int:
    n = len(stream)
    best = 0
    for k in range(1, n):
        if not any(e < n - 1 for e in ends(stream, stream[n - k :])):
            break  # a longer suffix cannot occur where this one does not
        best = k
    return best


def ref_followers(stream: list[int], x: list[int]) -> list[tuple[int, int, int]]:
    """(token, count, last position) after earlier occurrences of x, by count then recency."""
    stats: dict[int, list[int]] = {}
    for e in sorted(ends(stream, x)):
        if e + 1 < len(stream):
            s = stats.setdefault(stream[e + 1], [0, -1])
            s[0] += 1
            s[1] = e + 1
    return sorted(
        ((t, c, last) for t, (c, last) in stats.items()), key=lambda x: (x[1], x[2]), reverse=True
    )


def last_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The largest k in [lo, hi] with pred(k), for pred true up to some k and false after
    (pred(lo) is taken as true)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def ref_next_tokens(
    stream: list[int], drafted: list[int], min_match: int, escape: float
) -> list[tuple[int, float]]:
    """The estimate of the module docstring, from brute-force occurrence sets: start at the
    longest suffix of stream + drafted found in the stream, back off to the longest shorter
    suffix with a different set of end positions."""
    text = stream + drafted
    # Occurrence sets only grow as a suffix gets shorter, so both searches are bisections.
    length = last_true(0, len(text), lambda k: bool(ends(stream, text[len(text) - k :])))
    out: list[tuple[int, float]] = []
    w = 1.0
    while length >= max(1, min_match):
        occ = ends(stream, text[len(text) - length :])
        fol = ref_followers(stream, text[len(text) - length :])
        if fol:
            n = sum(c for _, c, _ in fol)
            esc = len(fol) * escape / length
            for t, c, _ in fol:
                if t not in [x for x, _ in out]:
                    out.append((t, w * c / (n + esc)))
            w *= esc / (n + esc)
        n_occ = len(occ)

        def more_occurrences(k: int, n_occ: int = n_occ) -> bool:
            return len(ends(stream, text[len(text) - k :])) > n_occ

        length = last_true(0, length - 1, more_occurrences)
    return out


def observed(stream: list[int], cuts: list[int], min_match: int) -> SuffixIndex:
    index = SuffixIndex(min_match=min_match, max_walk=10**9)  # uncapped walk: exact counts
    feed_in_chunks(index, stream, cuts)
    return index


streams = st.lists(st.integers(0, 2), max_size=50)
chunk_cuts = st.lists(st.integers(0, 50), max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    stream=streams,
    cuts=chunk_cuts,
    drafted=st.lists(st.integers(0, 3), max_size=5),
    min_match=st.integers(1, 3),
)
def test_matches_brute_force(
    stream: list[int], cuts: list[int], drafted: list[int], min_match: int
) -> None:
    index = observed(stream, cuts, min_match=min_match)
    assert len(index) == len(stream)
    assert index.n_states <= max(1, 2 * len(stream))  # memory-linear
    assert index.match_length() == ref_match_length(stream)
    for k in range(1, len(stream) + 1):
        assert index.followers(k) == ref_followers(stream, stream[len(stream) - k :])
    same_ranking(
        index.next_tokens(drafted), ref_next_tokens(stream, drafted, min_match, index.escape)
    )
    same_ranking(
        index.next_tokens(drafted, limit=2),
        ref_next_tokens(stream, drafted, min_match, index.escape)[:2],
    )


def test_thousands_of_appends_in_random_chunks() -> None:
    rng = random.Random(11)
    phrases = [[rng.randrange(5) for _ in range(rng.randrange(5, 30))] for _ in range(6)]
    stream: list[int] = []
    while len(stream) < 3000:  # copies of a few phrases, with noise in between
        stream += (
            rng.choice(phrases) if rng.random() < 0.7 else [rng.randrange(5) for _ in range(5)]
        )
    index = SuffixIndex(max_walk=10**9)
    done = 0
    while done < len(stream):
        step = rng.randrange(1, 250)
        index.observe(np.array(stream[done : done + step], dtype=np.int32))
        done = min(len(stream), done + step)
        seen = stream[:done]
        length = index.match_length()
        assert length == ref_match_length(seen)
        for k in {1, 2, length, length + 1}:
            assert index.followers(k) == ref_followers(seen, seen[len(seen) - k :])
        same_ranking(index.next_tokens(), ref_next_tokens(seen, [], index.min_match, index.escape))


def test_long_unique_match_is_confident() -> None:
    rng = random.Random(3)
    block = [rng.randrange(1000) for _ in range(200)]
    index = SuffixIndex()
    index.observe(block + [rng.randrange(1000, 2000) for _ in range(50)] + block[:30])
    assert index.match_length() == 30
    (cand, *_) = index.propose(16, 1)
    assert cand.tokens.tolist() == block[30:46]
    assert cand.q[0] >= 0.9 and np.all(np.diff(cand.q) >= 0)  # longer match, more sure
    # A short match with many different continuations is not.
    index = SuffixIndex()
    index.observe([7, 1, 7, 2, 7, 3, 7, 4, 7])
    assert all(q < 0.3 for _, q in index.next_tokens())


def test_periodic_run_with_capped_walk() -> None:
    index = SuffixIndex(max_walk=8)
    index.observe([5, 6] * 3000)
    (cand, *_) = index.propose(20, 1)
    assert cand.tokens.tolist() == [5, 6] * 10
    assert cand.q.min() > 0.9


@settings(max_examples=100, deadline=None)
@given(stream=streams, depth=st.integers(1, 8), n_cand=st.integers(1, 4))
def test_propose_is_greedy_then_alternatives(stream: list[int], depth: int, n_cand: int) -> None:
    index = SuffixIndex(min_match=1, min_p=0.01)
    index.observe(stream)
    check_greedy_then_alternatives(index, index.propose(depth, n_cand), SOURCE_SUFFIX, depth, n_cand, [])

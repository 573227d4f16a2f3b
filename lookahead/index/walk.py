"""Turn a source's next-token estimates into its few best continuations (shared by indexes).

A source describes itself with a `step(state, limit, floor)` function: the ranked options
for the next token from `state`, each `(token, q, next_state)`, at most `limit` of them;
options with `q < floor` may be left out (so a source can stop looking early).
`best_paths` grows the greedy chain, then chains from the best branch points, in order of
the path probability p (product of q) through the branch:

    root ── a ── b ── c ── d        path 0: greedy; every node's runner-up is a branch point
         │         └─ c' ── e       path 1: best branch point (p(a)·p(b)·q(c')), then greedy
         └─ a' ── f ── g            path 2: next best branch point, then greedy

Paths come back whole (from the root); the tree builder merges their shared prefixes.
No path is a prefix of another. Cost: about max_candidates · max_depth calls to `step`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np

from lookahead.core.tokens import TokenArray

S = TypeVar("S")


def best_paths(
    start: S,
    step: Callable[[S, int, float], list[tuple[int, float, S]]],
    max_depth: int,
    max_candidates: int,
    min_p: float,
) -> list[tuple[list[int], list[float]]]:
    """Up to `max_candidates` distinct token paths from `start`, each with its q per token.

    A path stops at `max_depth` tokens, where `step` has no option, or before its
    probability would drop below `min_p`.
    """
    if max_depth <= 0 or max_candidates <= 0:
        return []
    width = 2 if max_candidates > 1 else 1  # runner-ups are only needed for alternatives
    order = itertools.count()  # tiebreak: equal p pops in push order
    # Branch point: (-p through the option, order, prefix tokens, prefix q, prefix p,
    # node state, rank of the option among the node's options, the option).
    heap: list[tuple[float, int, list[int], list[float], float, S, int, tuple[int, float, S]]]
    heap = []

    def push(
        tokens: list[int],
        qs: list[float],
        p: float,
        node: S,
        rank: int,
        option: tuple[int, float, S],
    ) -> None:
        heapq.heappush(heap, (-p * option[1], next(order), tokens, qs, p, node, rank, option))

    def follow(tokens: list[int], qs: list[float], p: float, option: tuple[int, float, S]) -> None:
        while True:
            tok, q, node = option
            tokens.append(tok)
            qs.append(q)
            p *= q
            if len(tokens) >= max_depth:
                return
            floor = min_p / p
            opts = step(node, width, floor)
            if not opts or opts[0][1] < floor:
                return
            if len(opts) > 1 and opts[1][1] >= floor:
                push(tokens.copy(), qs.copy(), p, node, 1, opts[1])
            option = opts[0]

    first = step(start, width, min_p)
    for rank, option in enumerate(first[:width]):
        if option[1] >= min_p:
            push([], [], 1.0, start, rank, option)

    paths: list[tuple[list[int], list[float]]] = []
    while heap and len(paths) < max_candidates:
        _, _, tokens, qs, p, node, rank, option = heapq.heappop(heap)
        if rank >= 1:
            # The popped runner-up's next sibling becomes a branch point in its turn.
            floor = min_p / p
            sibs = step(node, rank + 2, floor)
            if len(sibs) > rank + 1 and sibs[rank + 1][1] >= floor:
                push(tokens, qs, p, node, rank + 1, sibs[rank + 1])
        tokens, qs = tokens.copy(), qs.copy()
        follow(tokens, qs, p, option)
        paths.append((tokens, qs))
    return paths


def int_list(tokens: Iterable[int] | TokenArray) -> list[int]:
    """`tokens` as plain Python ints: numpy scalars hash and compare slowly as dict keys."""
    if isinstance(tokens, np.ndarray):
        return list(tokens.tolist())
    return [int(t) for t in tokens]

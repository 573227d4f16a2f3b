"""best_paths against a brute-force search over the same option trees."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.index.walk import best_paths

Path = tuple[int, ...]
Options = Callable[[Path], list[tuple[int, float, Path]]]
Step = Callable[[Path, int, float], list[tuple[int, float, Path]]]


def make_step(seed: int) -> tuple[Options, Step]:
    """A random tree of options: the state is the path so far; q are distinct and sum < 1."""

    def options(path: Path) -> list[tuple[int, float, Path]]:
        rng = random.Random(hash((seed, path)))
        n = rng.choice([0, 1, 1, 2, 3]) if len(path) < 7 else 0
        toks = rng.sample(range(6), n)
        qs = sorted((rng.random() for _ in range(n)), reverse=True)
        total = sum(qs) + rng.random()
        return [(t, q / total, path + (t,)) for t, q in zip(toks, qs, strict=True)]

    def step(path: Path, limit: int, floor: float) -> list[tuple[int, float, Path]]:
        # Options under `floor` may be left out or not: best_paths must cope with both.
        return [o for o in options(path) if o[1] >= floor or seed % 2][:limit]

    return options, step


def reference(
    options: Options, max_depth: int, max_candidates: int, min_p: float
) -> list[tuple[Path, list[float]]]:
    """Repeatedly take, over every node of the paths chosen so far, the best option no chosen
    path takes, then follow the best options from it while p stays >= min_p."""
    chosen: list[tuple[Path, list[float]]] = []

    def extend(path: Path, qs: list[float], p: float) -> tuple[Path, list[float]]:
        while len(path) < max_depth:
            opts = options(path)
            if not opts or p * opts[0][1] < min_p:
                break
            path, qs, p = path + (opts[0][0],), qs + [opts[0][1]], p * opts[0][1]
        return path, qs

    while len(chosen) < max_candidates:
        best: tuple[float, Path, list[float]] | None = None
        nodes: dict[Path, tuple[list[float], float]] = {(): ([], 1.0)}
        for path, qs in chosen:
            p = 1.0
            for j in range(len(path)):
                p *= qs[j]
                nodes[path[: j + 1]] = (qs[: j + 1], p)
        for node, (qs, p) in nodes.items():
            if len(node) >= max_depth:
                continue
            taken = {
                path[len(node)]
                for path, _ in chosen
                if len(path) > len(node) and path[: len(node)] == node
            }
            for t, q, _ in options(node):
                if t not in taken and p * q >= min_p and (best is None or p * q > best[0]):
                    best = (p * q, node + (t,), qs + [q])
        if best is None:
            break
        chosen.append(extend(best[1], best[2], best[0]))
    return chosen


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    max_depth=st.integers(1, 8),
    max_candidates=st.integers(1, 6),
    min_p=st.sampled_from([0.0, 0.01, 0.1]),
)
def test_best_paths_is_the_greedy_k_best(
    seed: int, max_depth: int, max_candidates: int, min_p: float
) -> None:
    options, step = make_step(seed)
    start: Path = ()
    got = best_paths(start, step, max_depth, max_candidates, min_p)
    want = reference(options, max_depth, max_candidates, min_p)
    assert [(tuple(t), q) for t, q in got] == want

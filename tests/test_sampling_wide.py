"""Sampling over a whole vocabulary (top_k 0) sorts only the head the draw reaches: the same
token as the full sort, for every rule and draw point."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import lookahead.core.sampling as sampling
from lookahead.core.sampling import Sampler, SamplingConfig, draw_wide


def full_sort(row: np.ndarray, u: float, temperature: float, top_p: float, min_p: float) -> int:
    """The token the whole-row sort picks (the sampler with the wide path turned off)."""
    old = sampling.WIDE
    sampling.WIDE = 10**9
    try:
        config = SamplingConfig(temperature=temperature, top_k=0, top_p=top_p, min_p=min_p)
        return Sampler(config)._draw(row, u)
    finally:
        sampling.WIDE = old


@pytest.mark.parametrize("scale", [0.3, 3.0, 12.0])  # flat (the draw reaches the tail) to peaked
def test_the_head_sort_draws_what_the_full_sort_draws(scale: float) -> None:
    rng = np.random.default_rng(int(scale * 10))
    n = 20_000
    row = (rng.standard_normal(n) * scale).astype(np.float32)
    row[rng.integers(0, n, 40)] = row.max()  # ties at the top
    row[rng.integers(0, n, 40)] = np.float32(np.sort(row)[-200])  # ties at a prefix's edge
    row[rng.integers(0, n, 500)] = -np.inf  # banned tokens
    points = [0.0, 0.5, 0.999999, *rng.random(5).tolist()]
    for temperature, top_p, min_p in itertools.product([0.3, 1.0, 1.7], [1.0, 0.9, 0.3], [0.0, 0.01, 0.5]):
        for u in points:
            got = draw_wide(row, u, temperature, top_p, min_p)
            assert got == full_sort(row, u, temperature, top_p, min_p), (temperature, top_p, min_p, u)


def test_a_sampler_without_top_k_takes_the_wide_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(sampling, "draw_wide", lambda row, *a: calls.append(len(row)) or 0)
    row = np.zeros(sampling.WIDE + 1, dtype=np.float32)
    Sampler(SamplingConfig(temperature=1.0, top_k=0, seed=1)).pick(row, [])
    Sampler(SamplingConfig(temperature=1.0, top_k=40, seed=1)).pick(row, [])  # top-k: the k best, sorted
    assert calls == [len(row)]

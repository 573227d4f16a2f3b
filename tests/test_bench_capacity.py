"""The capacity formula (bench/capacity_model.py) against a simulated queue: one replica
answering a mix of requests one at a time, Poisson arrivals (Lindley's recursion)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.capacity_model import (
    Kind,
    moments,
    replicas_needed,
    service_quantile,
    time_to_suggestion,
    wait_quantile,
)

MIX = [Kind("completion", 0.8, 0.9), Kind("edit", 0.2, 3.0)]


def simulate(lam: float, mix: list[Kind], n: int = 200_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Waits and times to suggestion of n requests through one first-come-first-served server."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / lam, n)
    shares = np.array([k.share for k in mix])
    service = np.array([k.seconds for k in mix])[rng.choice(len(mix), n, p=shares / shares.sum())]
    wait = np.zeros(n)
    for i in range(1, n):  # W_i = max(0, W_{i-1} + S_{i-1} - gap_i)
        wait[i] = max(0.0, wait[i - 1] + service[i - 1] - gaps[i])
    return wait, wait + service


def test_moments_and_the_service_quantile() -> None:
    mean, square = moments(MIX)
    assert mean == pytest.approx(0.8 * 0.9 + 0.2 * 3.0)
    assert square == pytest.approx(0.8 * 0.81 + 0.2 * 9.0)
    assert service_quantile(MIX) == 3.0  # 20% of requests are edits: the p95 is an edit
    assert service_quantile(MIX, 0.5) == 0.9
    with pytest.raises(ValueError):
        moments([Kind("x", 1.0, 0.0)])


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.8])
def test_the_formula_follows_a_simulated_queue(rho: float) -> None:
    mean, square = moments(MIX)
    lam = rho / mean
    wait, total = simulate(lam, MIX)
    # Pollaczek-Khinchine's mean wait is exact for M/G/1
    assert wait[1000:].mean() == pytest.approx(lam * square / (2 * (1 - rho)), rel=0.1)
    # the p95 of the wait: an approximation, close to the simulated one
    assert wait_quantile(lam, MIX) == pytest.approx(np.quantile(wait[1000:], 0.95), rel=0.25)
    # the p95 of the time to suggestion: W95 + S95 errs on the safe side, not by much
    simulated = np.quantile(total[1000:], 0.95)
    assert simulated <= time_to_suggestion(lam, MIX) <= 1.6 * simulated


def test_a_saturated_replica_never_meets_a_target() -> None:
    mean, _ = moments(MIX)
    assert math.isinf(wait_quantile(1 / mean, MIX))
    assert wait_quantile(0.01, MIX) == 0.0  # almost idle: nobody waits at the 95th percentile


def test_replicas_needed_is_the_fewest_that_meet_the_target() -> None:
    for developers in (5, 20, 80):
        r = replicas_needed(developers, 0.1, MIX, target=5.0, imbalance=1.2)
        assert r is not None
        assert time_to_suggestion(1.2 * developers * 0.1 / r, MIX) <= 5.0
        if r > 1:
            assert time_to_suggestion(1.2 * developers * 0.1 / (r - 1), MIX) > 5.0
    counts = [replicas_needed(n, 0.1, MIX, target=5.0) for n in (5, 20, 80, 320)]
    assert counts == sorted(counts) and counts[-1] > counts[0]  # type: ignore[type-var]


def test_no_count_of_replicas_beats_a_request_slower_than_the_target() -> None:
    assert replicas_needed(10, 0.1, MIX, target=2.0) is None  # an edit alone takes 3 s
    with pytest.raises(ValueError):
        replicas_needed(10, 0.1, MIX, target=5.0, imbalance=0.5)

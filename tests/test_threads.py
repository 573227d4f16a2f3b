"""The thread governor on synthetic step times (no model, no clock)."""

from __future__ import annotations

import numpy as np
import pytest

from lookahead.threads import ThreadGovernor, candidates


def idle(n: int) -> float:
    return 0.04 * (1 + 0.3 * (n - 1))  # seconds of a batch of n at full threads, idle


def run(gov: ThreadGovernor, slowdown, steps: int, seed: int = 0, spikes: float = 0.0) -> float:
    """Feed `steps` verifies; slowdown(threads, step) is the true time / idle. Returns seconds."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for i in range(steps):
        n = int(rng.integers(1, 9))
        x = slowdown(gov.threads, i) * idle(n) * float(rng.uniform(0.95, 1.05))
        if spikes and rng.random() < spikes:
            x *= 10  # a page fault, a burst of another process
        total += x
        gov.observe(n, x)
    return total


def test_candidates():
    assert candidates(2) == [2, 1]
    assert candidates(8) == [8, 7, 4]
    assert candidates(1) == [1]


def test_an_idle_machine_keeps_every_thread_even_with_outliers():
    gov = ThreadGovernor(2, idle)
    run(gov, lambda k, i: 1.0 if k == 2 else 1.6, 2000, spikes=0.1)
    assert gov.switches == 0 and gov.threads == 2


def test_a_busy_machine_moves_to_the_faster_count_and_back_when_the_load_ends():
    gov = ThreadGovernor(2, idle)
    busy_until = 600

    def slowdown(k: int, i: int) -> float:
        if i < busy_until:  # one CPU-bound process beside us: 2 threads stall, 1 does not
            return 2.8 if k == 2 else 1.7
        return 1.0 if k == 2 else 1.6

    seen = []
    rng = np.random.default_rng(1)
    for i in range(1200):
        n = int(rng.integers(1, 9))
        gov.observe(n, slowdown(gov.threads, i) * idle(n))
        seen.append(gov.threads)
    assert seen[60] == 1  # found within a few windows
    assert np.mean(np.array(seen[60:busy_until]) == 1) > 0.85  # and mostly kept
    assert seen[-1] == 2  # back to every thread once the load went away
    assert np.mean(np.array(seen[busy_until + 300 :]) == 2) > 0.9


def test_a_load_that_slows_every_count_alike_keeps_every_thread_and_backs_off():
    gov = ThreadGovernor(2, idle)
    run(gov, lambda k, i: 2.0 if k == 2 else 3.2, 3000)
    assert gov.threads == 2
    assert gov.switches < 3000 / 100  # rounds back off instead of trying every window


@pytest.mark.parametrize("seed", range(4))
def test_under_load_within_15_percent_of_the_best_fixed_count(seed):
    rng = np.random.default_rng(seed)
    load = rng.uniform(1.8, 3.0)  # how badly a descheduled thread stalls the others
    one = rng.uniform(1.5, 1.8)

    def slowdown(k: int, i: int) -> float:
        return load if k == 2 else one

    adaptive = run(ThreadGovernor(2, idle), slowdown, 2000, seed=seed)
    fixed = min(
        run(ThreadGovernor(2, idle, busy=float("inf")), slowdown, 2000, seed=seed),  # never moves
        run(ThreadGovernor(1, idle), lambda k, i: one, 2000, seed=seed),
    )
    assert adaptive <= 1.15 * fixed


def test_a_cost_curve_measured_under_load_is_not_plausible():
    from lookahead.api import plausible

    assert plausible({1: 0.04, 2: 0.08, 4: 0.1, 8: 0.18})
    assert plausible({1: 0.04, 2: 0.035})  # within noise of t(1)
    assert not plausible({1: 0.12, 2: 0.04, 4: 0.05})  # the one-token decodes were stalled

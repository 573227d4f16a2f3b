"""The thread governor on synthetic step times (no model, no clock)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lookahead.tuning.cpuload import CpuLoad, Reading, proc_reader
from lookahead.tuning.threads import PROBE_EVERY, ThreadGovernor, candidates


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
    from lookahead.tuning.calibrate import plausible

    assert plausible({1: 0.04, 2: 0.08, 4: 0.1, 8: 0.18})
    assert plausible({1: 0.04, 2: 0.035})  # within noise of t(1)
    assert not plausible({1: 0.12, 2: 0.04, 4: 0.05})  # the one-token decodes were stalled


class FakeLoad:
    """A CPU probe whose reading the test sets: other processes' CPUs in use."""

    def __init__(self, cpus: int, others: float | None) -> None:
        self.cpus = cpus
        self.value = others
        self.reads = 0

    def now(self) -> float | None:  # the load looking ahead: the same as looking back here
        return self.value

    def others(self) -> float | None:
        self.reads += 1
        return self.value


def loaded_steps(gov: ThreadGovernor, load: FakeLoad, busy_until: int, steps: int) -> list[int]:
    """Drive the governor at one CPU-bound process beside us until `busy_until`, with the
    probe seeing it; the counts in use per step."""
    seen = []
    for i in range(steps):
        load.value = 1.0 if i < busy_until else 0.02
        slow = (2.8 if gov.threads == 2 else 1.7) if i < busy_until else (1.0 if gov.threads == 2 else 1.6)
        gov.observe(4, slow * idle(4))
        seen.append(gov.threads)
    return seen


def test_with_the_probe_a_loaded_machine_starts_reduced_and_never_tries_two_threads_while_loaded():
    load = FakeLoad(2, 1.0)
    gov = ThreadGovernor(2, idle, load=load)
    assert gov.begin() == 1 and gov.threads == 1
    seen = loaded_steps(gov, load, busy_until=600, steps=1200)
    assert seen[:600] == [1] * 600  # no slow detection steps, no trial rounds under load
    first_back = seen.index(2)
    assert 600 <= first_back <= 600 + 16 + 4  # the probe's next reading sees the CPUs free
    assert seen[-1] == 2 and np.mean(np.array(seen[650:]) == 2) > 0.95


def test_without_a_reading_the_probe_changes_nothing():
    gov = ThreadGovernor(2, idle, load=FakeLoad(2, None))
    assert gov.begin() is None and gov.threads == 2
    run(gov, lambda k, i: 1.0 if k == 2 else 1.6, 500)
    assert gov.switches == 0


def test_an_idle_probe_keeps_every_thread_and_a_light_load_is_not_load():
    for others in (0.0, 0.3):
        gov = ThreadGovernor(2, idle, load=FakeLoad(2, others))
        assert gov.begin() is None and gov.threads == 2


def test_a_probe_that_misleads_falls_back_to_the_step_times():
    # the probe says the CPUs are free, but two threads stay slower (say, memory bandwidth
    # taken by a process the CPU accounting cannot blame): rounds back off as without a probe
    load = FakeLoad(2, 0.0)
    gov = ThreadGovernor(2, idle, load=load)
    run(gov, lambda k, i: 2.8 if k == 2 else 1.7, 3000)
    plain = ThreadGovernor(2, idle)
    run(plain, lambda k, i: 2.8 if k == 2 else 1.7, 3000)
    assert gov.threads == 1
    assert gov.switches <= plain.switches + 4


def test_the_probe_fits_the_free_cpus_of_a_larger_machine():
    load = FakeLoad(16, 3.2)
    gov = ThreadGovernor(16, idle, load=load)
    assert gov.begin() == 13 and 13 in gov.counts
    load.value = 9.0
    for _ in range(PROBE_EVERY):
        gov.observe(4, idle(4))
    assert gov.threads == 7  # more load: fewer threads at once, no trial round


def test_cpu_load_counts_other_processes_only():
    readings = iter(
        [
            Reading(busy=100.0, own=10.0, wall=0.0),
            Reading(busy=100.05, own=10.05, wall=0.05),  # too soon: no value yet
            Reading(busy=101.5, own=10.5, wall=1.05),  # 1.45 CPU-s busy, 0.45 ours, in 1 s
            Reading(busy=101.8, own=10.7, wall=1.25),  # since the newest reading 0.2 s old: 0.3 - 0.2
        ]
    )
    load = CpuLoad(lambda: next(readings), cpus=2)
    assert load.others() is None
    assert load.others() == pytest.approx(1.0)
    assert load.others() == pytest.approx(0.5)


def test_proc_reader_sums_the_busy_fields_of_our_cpus(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  9 9 9 9 9 9 9 9 0 0\n"
        "cpu0 100 10 20 500 7 1 2 3 0 0\n"
        "cpu1 1000 0 0 0 0 0 0 0 0 0\n"  # not ours
        "cpu2 200 0 30 400 0 0 0 5 0 0\n"
        "intr 12345\n"
    )
    read = proc_reader(frozenset({0, 2}), stat)
    r = read()
    hz = os.sysconf("SC_CLK_TCK")
    assert r is not None and r.busy == pytest.approx((100 + 10 + 20 + 1 + 2 + 3 + 200 + 30 + 5) / hz)
    assert proc_reader(frozenset({0, 5}), stat)() is None  # a CPU it cannot see: no reading

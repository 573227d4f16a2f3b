"""The CPU probe judges the last moments, not the whole idle gap before a request (fake
counters and clock, no real timing, except the one test of the background thread)."""

from __future__ import annotations

import gc
import time

import pytest

from lookahead.tuning.cpuload import PERIOD, WINDOW, CpuLoad, Reading, Sampler, cpu_load
from lookahead.tuning.threads import ThreadGovernor


def idle(n: int) -> float:
    return 0.04 * (1 + 0.3 * (n - 1))


class Machine:
    """Counters of a fake 2-CPU machine: `others` CPUs used by other processes from now on,
    `own` by us; `run(seconds)` moves the clock in the sampler's ticks."""

    def __init__(self) -> None:
        self.t = 0.0
        self.busy = 0.0
        self.own_s = 0.0
        self.others = 0.0
        self.own = 0.0
        self.load: CpuLoad | None = None

    def read(self) -> Reading:
        return Reading(self.busy, self.own_s, self.t)

    def run(self, seconds: float, tick: float = PERIOD) -> None:
        end = self.t + seconds
        while self.t < end - 1e-9:
            dt = min(tick, end - self.t)
            self.t += dt
            self.busy += (self.others + self.own) * dt
            self.own_s += self.own * dt
            if self.load is not None:
                self.load.sample()  # what the background sampler does, at its period


def probed() -> tuple[Machine, CpuLoad, ThreadGovernor]:
    m = Machine()
    m.load = load = CpuLoad(m.read, cpus=2, wait=m.run)
    return m, load, ThreadGovernor(2, idle, load=load)


def test_after_an_idle_gap_in_which_another_process_ran_and_stopped_a_request_starts_at_every_thread():
    m, load, gov = probed()
    m.others = 1.0  # an editor, a browser, another server: one CPU for 8 s of the gap
    m.run(8.0)
    m.others = 0.0  # ... then quiet for a second before the request
    m.run(1.0)
    assert gov.begin() is None and gov.threads == 2


def test_a_process_that_stopped_a_moment_before_the_request_costs_no_thread():
    # an interleaved client: another server answered just before this request, so the last
    # moments show one CPU busy; it is idle as the request starts, and a look ahead says so
    m, load, gov = probed()
    m.run(5.0)
    m.others = 1.0
    m.run(2.0)
    m.others = 0.0
    m.run(0.02)
    assert load.others() is not None and load.others() > 0.5  # looking back, still busy
    assert gov.begin() is None and gov.threads == 2


def test_with_another_process_busy_right_now_a_request_starts_reduced():
    m, load, gov = probed()
    m.run(20.0)  # a long quiet gap
    m.others = 1.0  # a busy loop started just before the request
    m.run(0.5)
    assert gov.begin() == 1 and gov.threads == 1


def test_a_request_after_a_reduced_one_starts_at_every_thread_once_the_load_has_gone():
    m, load, gov = probed()
    m.others = 1.0
    m.run(2.0)
    assert gov.begin() == 1
    m.own = 1.0  # our generation, one thread, beside the load: our own time is not load
    m.run(3.0)
    m.own = 0.0
    m.run(4.0)  # the load stayed through part of the gap
    m.others = 0.0
    m.run(0.5)
    assert gov.begin() == 2


def test_our_own_cpu_time_is_not_load():
    m, load, gov = probed()
    m.own = 2.0  # a prefill on both CPUs up to the moment of reading
    m.run(3.0)
    assert load.others() == pytest.approx(0.0)
    assert gov.begin() is None


def test_the_reading_spans_the_window_and_no_more():
    m, load, _ = probed()
    m.others = 2.0
    m.run(5.0)
    m.others = 0.0
    m.run(WINDOW + PERIOD)  # the whole window since the load stopped
    assert load.others() == pytest.approx(0.0)
    m.others = 1.0
    m.run(PERIOD)  # a load begins: half the window sees it
    value = load.others()
    assert value is not None and 0.2 <= value <= 0.6


def test_without_the_sampler_a_reading_spans_the_time_since_the_last():
    m = Machine()
    load = CpuLoad(m.read, cpus=2)  # nobody samples: each reading is the base of the next
    assert load.others() is None  # no interval yet
    m.others = 1.0
    m.run(1.0)
    assert load.others() == pytest.approx(1.0)
    m.others = 0.0
    m.run(WINDOW / 4)
    assert load.others() == pytest.approx(1.0 / 1.05)  # too soon after the last: since the one before


def test_an_unreadable_moment_gives_no_reading_and_forgets_the_counters():
    m = Machine()
    readings: list[Reading | None] = [m.read(), None]
    load = CpuLoad(lambda: readings.pop(0) if readings else m.read(), cpus=2)
    assert load.others() is None
    m.others = 1.0
    m.run(1.0)
    assert load.others() is None  # no base: the counters before the gap are not compared


def test_the_sampler_reads_in_the_background_and_ends_with_its_load():
    reads = 0

    def read() -> Reading:
        nonlocal reads
        reads += 1
        return Reading(0.0, 0.0, time.monotonic())

    load = CpuLoad(read, cpus=2)
    sampler = Sampler(load, period=0.005)
    deadline = time.monotonic() + 2.0
    while reads < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert reads >= 4
    del load
    gc.collect()
    sampler.thread.join(timeout=2.0)
    assert not sampler.thread.is_alive()  # no reference left: the thread ended


def test_the_machine_probe_starts_its_sampler():
    load = cpu_load()
    if load is None:
        pytest.skip("no /proc/stat for this process's CPUs here")
    assert load.sampler is not None and load.sampler.thread.is_alive()
    load.sampler.stop()
    load.sampler.thread.join(timeout=2.0)
    assert not load.sampler.thread.is_alive()


def test_a_trial_round_left_open_by_the_last_generation_does_not_set_the_next_prefill():
    m, load, gov = probed()
    assert gov.begin() is None  # idle: every thread
    m.others = 1.0  # a load arrives mid-generation, unseen by the probe until the steps slow
    m.run(0.5)
    for _ in range(6):  # slow steps at two threads: a round starts, trying one thread
        gov.observe(4, 2.8 * idle(4))
    assert gov.threads == 1
    m.others = 0.0  # the generation ends mid-round; the load goes, a quiet gap
    m.run(3.0)
    assert gov.begin() == 2  # the probe's reading of now, not the round's trial count
    for _ in range(200):  # and the governor goes on from there: idle steps keep every thread
        gov.observe(4, idle(4))
    assert gov.threads == 2


def test_a_long_prefill_lets_the_governor_read_the_machine_again_between_its_chunks():
    # a load that stopped just before the request (or starts during its prefill) is seen
    # at the next chunk; the chunks are the verifier's own, so the output does not change
    import numpy as np

    from lookahead.core.engine import Done, GenerationConfig, generate
    from tests.fake_backend import FakeModel

    prompt = np.random.default_rng(0).integers(0, 6, 50).tolist()

    def run(hooked: bool) -> tuple[list[int], list[int]]:
        model = FakeModel(n_vocab=6, seed=2, n_batch=16)
        calls: list[int] = []
        *_, done = generate(
            model, prompt, GenerationConfig(max_tokens=8),
            between_chunks=(lambda: calls.append(model.prefilled)) if hooked else None,
        )  # fmt: skip
        assert isinstance(done, Done)
        return done.result.tokens, calls

    plain, _ = run(False)
    tokens, calls = run(True)
    assert calls == [16, 32, 48]  # before each chunk after the first
    assert tokens == plain

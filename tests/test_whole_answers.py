"""An answer sent whole (not streamed) wakes the event loop once, at its end, not at every
step: the worker holds its Steps and hands them over with the end, in order. Its llama.cpp
timings are still taken step by step, on the worker (`Watch.decide`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

from lookahead.core.draft_state import DraftConfig
from lookahead.core.request import Done, Result, Stats, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.server.generation import Generation, jobs_for
from lookahead.server.jobs import END, Job
from lookahead.server.llamacpp.run import Watch
from lookahead.server.metrics import Metrics
from lookahead.server.worker import Worker
from tests.test_route_stops import Counted


def step(token: int) -> Step:
    return Step(
        tokens=[token], text=f"t{token} ", drafted=0, accepted=0, depth=0, verify_s=0.01, draft_s=0.0, alpha=0.0
    )


class CountingLoop:
    """Stands in for the event loop: counts the wake-ups (`call_soon_threadsafe`) and runs
    what they carry when told."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        self.calls.append((fn, args))

    def run(self) -> None:
        for fn, args in self.calls:
            fn(*args)


def job(loop: Any, whole: bool) -> Job:
    return Job(tokens=[1], max_tokens=8, stop=(), sampling=SamplingConfig(), draft=DraftConfig(),
               sources=(), loop=loop, whole=whole)  # fmt: skip


def drained(j: Job) -> list[object]:
    out = []
    while not j.events.empty():
        out.append(j.events.get_nowait())
    return out


def test_a_whole_answers_steps_wake_the_loop_once_with_its_end_in_order() -> None:
    loop = CountingLoop()
    j = job(loop, whole=True)
    for t in (1, 2, 3):
        j.emit(step(t))
    assert loop.calls == [] and j.written == [1, 2, 3]
    j.emit(END)
    assert len(loop.calls) == 1
    loop.run()
    events = drained(j)
    assert [e.tokens for e in events[:-1]] == [[1], [2], [3]] and events[-1] is END  # type: ignore[attr-defined]


def test_a_streamed_answer_hands_over_every_step_at_once() -> None:
    loop = CountingLoop()
    j = job(loop, whole=False)
    for t in (1, 2):
        j.emit(step(t))
    assert len(loop.calls) == 2
    j.emit(END)
    loop.run()
    assert [getattr(e, "tokens", e) for e in drained(j)] == [[1], [2], END]


def test_a_streamed_answer_without_a_stop_is_taken_by_the_route() -> None:
    streamed = job(CountingLoop(), whole=False)
    Watch().watched_by(streamed)
    assert streamed.on_step is None
    Watch(t_max_predict_ms=250).watched_by(streamed)
    assert streamed.on_step is not None


def test_jobs_are_whole_as_the_route_asks() -> None:
    g = Generation(tokens=[1], max_tokens=4, stop=(), sampling=SamplingConfig(), draft=DraftConfig())
    loop = asyncio.new_event_loop()
    try:
        assert [j.whole for j in jobs_for([g, g], loop, choices=2, whole=True)] == [True, True]
        assert not jobs_for([g], loop)[0].whole
    finally:
        loop.close()


class Slow(Counted):
    """A model that writes one token per step, each step taking `seconds`."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def stream(self, prompt: str, **kw: Any) -> Iterator[Step | Done]:
        for i in range(kw["max_tokens"]):
            time.sleep(self.seconds)
            yield step(i + 1)
        yield Done(Result("", [], Stats(), "length"))


def test_a_whole_answers_decode_time_is_taken_as_its_steps_come() -> None:
    # the route reads the steps only at the end; the Watch took each on the worker, so
    # the time between the first and the last is the steps' (4 of them, 20 ms each at least)
    loop = asyncio.new_event_loop()
    worker = Worker(Slow(0.02), Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        j = job(loop, whole=True)
        j.max_tokens = 5
        watch = Watch()  # no stop of llama.cpp's own
        watch.watched_by(j)
        assert j.on_step is not None
        worker.submit(j)
        events: list[object] = []
        t0 = time.monotonic()
        while not events or events[-1] is not END:
            assert time.monotonic() - t0 < 30, "the job did not end"
            loop.run_until_complete(asyncio.sleep(0.01))
            events += drained(j)
        steps = [e for e in events if isinstance(e, Step)]
        assert len(steps) == 5
        assert [watch.take(s)[0] for s in steps] == [f"t{i} " for i in range(1, 6)]
        assert watch.stats.decode_s >= 4 * 0.02 and watch.first_tokens == 1
    finally:
        worker.close(5)
        loop.close()

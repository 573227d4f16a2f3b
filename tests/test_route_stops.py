"""llama.cpp's own stops (`n_indent`, `t_max_predict_ms`) are decided by the worker, on its
thread, as each step comes out (`Job.on_step`): the job ends at the step where one fired,
no further step is started, and the worker never waits for the event loop between steps.
The route then hands out what was decided for each step. No model: a stand-in whose
steps are counted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.request import Done, Result, Stats, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.server.batch_worker import BatchWorker
from lookahead.server.jobs import END, Job
from lookahead.server.llamacpp.run import Watch
from lookahead.server.metrics import Metrics
from lookahead.server.worker import Worker


def step(tokens: list[int], text: str) -> Step:
    return Step(tokens=tokens, text=text, drafted=0, accepted=0, depth=0, verify_s=0.01, draft_s=0.0, alpha=0.0)


class Counted:
    """A model that writes one line per step ("line 1\\n", ...), counting the steps it began."""

    def __init__(self) -> None:
        self.n_ctx = 4096
        self.begun = 0
        self.backend = SimpleNamespace(
            interrupt=None, cache_tokens=[], n_used=0, tokens_shifted=0, n_decoded=0, prefill_chunk=None,
            reset=lambda: None,
        )  # fmt: skip

    def stream(self, prompt: str, **kw: Any) -> Iterator[Step | Done]:
        for i in range(kw["max_tokens"]):
            self.begun += 1
            yield step([i + 1], f"line {i + 1}\n")
        yield Done(Result("", [], Stats(), "length"))


def test_only_a_request_with_a_stop_of_llamacpps_own_is_watched_by_the_worker() -> None:
    assert not Watch().stops
    assert Watch(t_max_predict_ms=250).stops
    assert Watch(n_indent=4).stops


def test_the_worker_ends_the_job_at_the_step_its_stop_fired_and_starts_no_other() -> None:
    loop = asyncio.new_event_loop()
    model, remembered = Counted(), []
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        job = Job(tokens=[1, 2], max_tokens=50, stop=(), sampling=SamplingConfig(), draft=DraftConfig(),
                  sources=(), loop=loop, on_done=lambda j, written: remembered.append(list(written)))  # fmt: skip
        job.on_step = lambda s: s.tokens == [3]  # the third step fires the stop
        worker.submit(job)
        t0 = time.monotonic()
        while worker.busy or not remembered:
            assert time.monotonic() - t0 < 5.0, "the job did not end"
            time.sleep(0.005)
        loop.run_until_complete(asyncio.sleep(0))  # deliver what the worker queued
        events = []
        while not job.events.empty():
            events.append(job.events.get_nowait())
        assert model.begun == 3  # no fourth step was begun, nor waited for
        assert [e.tokens for e in events if isinstance(e, Step)] == [[1], [2], [3]]
        assert events[-1] is END and not any(isinstance(e, Done) for e in events)
        assert job.stopped and remembered == [[1, 2, 3]]  # an answer: remembered as one
    finally:
        worker.close(5)
        loop.close()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_route_reads_each_steps_decision_not_the_workers_latest() -> None:
    clock = Clock()
    watch = Watch(t_max_predict_ms=100, clock=clock)
    first, second = step([1], "x = 1"), step([2], "\ny = 2\nz")
    clock.t = 0.05
    assert watch.decide(first) is False
    clock.t = 0.30  # past the budget: the second step's newline stops the job
    assert watch.decide(second) is True
    # the route reads the first step only now: it still goes on there
    assert watch.take(first) == ("x = 1", False)
    assert watch.take(second) == ("\n", True)  # cut at the step's first newline, as llama.cpp
    assert watch.text == "x = 1\n"


def test_a_step_the_worker_did_not_take_is_taken_by_the_route() -> None:
    watch = Watch(n_indent=4)
    assert watch.take(step([1], "    a = 1")) == ("    a = 1", False)
    assert watch.take(step([2], "\nb = 2")) == ("\n", True)  # a line indented less ends it


def _events_until_end(loop: asyncio.AbstractEventLoop, job: Job, seconds: float = 60.0) -> list[object]:
    events: list[object] = []
    t0 = time.monotonic()
    while not events or events[-1] is not END:
        assert time.monotonic() - t0 < seconds, "the job did not end"
        loop.run_until_complete(asyncio.sleep(0.01))  # deliver what the worker queued
        while not job.events.empty():
            events.append(job.events.get_nowait())
    return events


@pytest.mark.model
@pytest.mark.parametrize("parallel", [1, 2])
def test_a_stop_rule_that_fails_fails_its_request_alone(smol_model: Any, parallel: int) -> None:
    """A bug in a request's stop rule, now run on the worker's thread, fails that request; the
    worker (one request at a time, or the batch) goes on serving the others."""
    loop = asyncio.new_event_loop()
    worker = (
        Worker(smol_model, Metrics(), max_queue=4) if parallel == 1
        else BatchWorker(smol_model, Metrics(), max_queue=4, parallel=parallel)
    )  # fmt: skip
    tokens = smol_model.prompt_tokens("1, 2, 3, 4,", False)

    def job() -> Job:
        return Job(tokens=tokens, max_tokens=6, stop=(), sampling=SamplingConfig(), draft=DraftConfig(enabled=False),
                   sources=(), loop=loop)  # fmt: skip

    def broken(step: Step) -> bool:
        raise RuntimeError("a bug in the stop rule")

    try:
        bad, good = job(), job()
        bad.on_step = broken
        worker.submit(bad)
        worker.submit(good)
        bad_events, good_events = _events_until_end(loop, bad), _events_until_end(loop, good)
        assert any(isinstance(e, RuntimeError) for e in bad_events)
        assert not any(isinstance(e, Done) for e in bad_events)
        assert isinstance(good_events[-2], Done) and good_events[-2].result.tokens
        after = job()  # the worker is still there for the next request
        worker.submit(after)
        assert isinstance(_events_until_end(loop, after)[-2], Done)
    finally:
        worker.close(5)
        loop.close()

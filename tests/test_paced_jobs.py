"""Which of llama.cpp's requests are paced (the worker waits for the route's word on each
step, so an editor's stop comes before another step starts): those with a stop of the
route's own (`n_indent`, `t_max_predict_ms`), and never a stream, whose route reads a step
only once its client took the last one. And the wait itself: a route that never answers (a
bug, a client gone quiet) slows its job for at most `PACE_TIMEOUT` a step, it does not hang
the worker. No model: the job settings alone."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.server.jobs import PACE_TIMEOUT, Job
from lookahead.server.llamacpp.prepare import Prepared, generation_of
from lookahead.server.llamacpp.schemas import InfillRequest


@pytest.mark.parametrize(
    ("fields", "paced"),
    [
        ({}, False),
        ({"t_max_predict_ms": 250}, True),
        ({"n_indent": 4}, True),
        ({"t_max_predict_ms": 250, "stream": True}, False),  # a slow reader must not hold the worker
    ],
)
def test_paced_only_with_a_stop_of_the_routes_own_and_no_stream(fields: dict[str, object], paced: bool) -> None:
    body = InfillRequest.model_validate({"input_prefix": "def f(", "input_suffix": "", **fields})
    g = generation_of(Prepared([1, 2, 3], 8, False, []), body, SamplingConfig(), DraftConfig())
    assert g.paced is paced


def job() -> Job:
    loop = asyncio.new_event_loop()
    j = Job(tokens=[1, 2], max_tokens=4, stop=(), sampling=SamplingConfig(), draft=DraftConfig(),
            sources=(), loop=loop, paced=True)  # fmt: skip
    loop.close()
    return j


def test_the_worker_goes_on_when_the_route_never_answers() -> None:
    j = job()
    t0 = time.monotonic()
    j.wait_ack(timeout=0.2)
    waited = time.monotonic() - t0
    assert 0.15 <= waited < 5.0
    assert 0 < PACE_TIMEOUT <= 30  # the default bounds every wait the same way


def test_an_ack_ends_the_wait_at_once_and_counts_once() -> None:
    j = job()
    threading.Timer(0.05, j.ack).start()
    t0 = time.monotonic()
    j.wait_ack(timeout=10.0)
    assert time.monotonic() - t0 < 5.0  # woken by the ack, not the timeout
    t0 = time.monotonic()
    j.wait_ack(timeout=0.2)  # the ack was used up: the next step waits again
    assert time.monotonic() - t0 >= 0.15


def test_a_stop_or_a_cancel_wakes_the_worker_too() -> None:
    for end in ("stop_here", "cancel"):
        j = job()
        threading.Timer(0.05, getattr(j, end)).start()
        t0 = time.monotonic()
        j.wait_ack(timeout=10.0)
        assert time.monotonic() - t0 < 5.0
        assert j.cancelled.is_set()

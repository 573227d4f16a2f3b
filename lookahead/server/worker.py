"""One model, one generation at a time: a queue in arrival order and the thread that decodes.

The engine is a plain (blocking) generator; it runs on this thread, and each event goes
to the request's asyncio queue through `call_soon_threadsafe`. A request that goes away
sets `cancelled`: the thread notices between two verify steps, closes the generator and
clears the KV cache, so the next request starts within one step. A failure in one
generation is that request's error, never the thread's end.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lookahead.api import Model
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Event, Result
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import LookaheadError
from lookahead.index.base import DraftSource
from lookahead.server.metrics import Metrics

log = logging.getLogger("lookahead.server")

END = object()  # the last item of every job's event queue


class QueueFull(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__("too many requests waiting")
        self.retry_after = retry_after


class ShuttingDown(Exception):
    pass


@dataclass
class Job:
    """One request's generation: its inputs, and the queue its events arrive on."""

    tokens: list[int]
    max_tokens: int
    stop: tuple[str, ...]
    sampling: SamplingConfig
    draft: DraftConfig
    sources: Sequence[DraftSource]
    loop: asyncio.AbstractEventLoop
    on_done: Callable[[Job, Result], None] | None = None
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, item: object) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancelled.set()

    def cancel(self) -> None:
        self.cancelled.set()


class Worker:
    def __init__(self, model: Model, metrics: Metrics, max_queue: int) -> None:
        self.model = model
        self.metrics = metrics
        self.max_queue = max_queue
        self._waiting: deque[Job] = deque()
        self._cv = threading.Condition()
        self._running: Job | None = None
        self._closing = False
        self._mean_s = 5.0  # running mean of a generation's seconds, for Retry-After
        self.n_ctx = model.backend.n_ctx  # what one request may use
        metrics.slots.set(1)
        self._thread = threading.Thread(target=self._run, name="generation", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closing:
                raise ShuttingDown
            # an idle model takes the next job at once: it does not count as waiting
            if len(self._waiting) >= self.max_queue + (self._running is None):
                ahead = len(self._waiting) + (self._running is not None)
                raise QueueFull(max(1, math.ceil(self._mean_s * ahead)))
            self._waiting.append(job)
            self.metrics.queue_depth.set(len(self._waiting))
            self._cv.notify()

    @property
    def busy(self) -> bool:
        with self._cv:
            return self._running is not None or bool(self._waiting)

    def close(self, timeout: float) -> None:
        """Stop taking work; the waiting jobs end at once, the running one gets `timeout`."""
        with self._cv:
            self._closing = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._cv.notify_all()
        for job in waiting:
            job.emit(ShuttingDown())
            job.emit(END)
        self._thread.join(timeout)
        with self._cv:
            running = self._running
        if running is not None:
            running.cancel()
            self._thread.join(timeout=30)

    # ---- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._waiting or self._closing)
                if not self._waiting:
                    return  # closing, nothing left
                job = self._running = self._waiting.popleft()
                self.metrics.queue_depth.set(len(self._waiting))
            try:
                if not job.cancelled.is_set():
                    self._generate(job)
            finally:
                with self._cv:
                    self._running = None
                    closing = self._closing
                if closing and job.cancelled.is_set():
                    job.emit(ShuttingDown())  # cut short by close(): say so, not a bare end
                job.emit(END)

    def _generate(self, job: Job) -> None:
        t0 = time.perf_counter()
        self.metrics.running.set(1)
        events: Iterator[Event] | None = None
        try:
            events = self.model.stream(
                "",
                tokens=job.tokens,
                max_tokens=job.max_tokens,
                stop=job.stop,
                sampling=job.sampling,
                draft=job.draft,
                sources=job.sources,
            )
            for event in events:
                if job.cancelled.is_set():
                    self.metrics.cancelled.inc()
                    break
                job.emit(event)
                if isinstance(event, Done):
                    self.metrics.finished(len(job.tokens), event.result.stats)
                    if job.on_done is not None:
                        job.on_done(job, event.result)
        except LookaheadError as exc:
            job.emit(exc)
        except Exception as exc:  # a bug: this request fails, the service goes on
            log.exception("generation failed")
            job.emit(exc)
        finally:
            close = getattr(events, "close", None)  # a generator: end it where it stopped
            if close is not None:
                close()
            self.model.backend.reset()  # free every KV cell, parked ones too
            self.metrics.running.set(0)
            seconds = time.perf_counter() - t0
            self._mean_s += 0.2 * (seconds - self._mean_s)

"""One model, one generation at a time: a queue in arrival order and the thread that decodes.

The engine is a plain (blocking) generator; it runs on this thread, and each event goes
to the request's asyncio queue through `call_soon_threadsafe`. A request that goes away
sets `cancelled`: the thread notices between two verify steps, or between two chunks of its
prompt's prefill (`n_batch` tokens each), and closes the generator, so the next request
starts within one step or one chunk. A request with `cache_prompt` leaves its KV cells (the
committed ones are consistent at either point): the next one keeps those of the prefix it
shares with them and frees the rest; any other frees every cell when it ends. A warm-up
(`n_predict: 0`, `Job.warm_up`) only prefills its prompt into the cache (`Model.warm`). A failure in
one generation is that request's error, never the thread's end. The queue, the shutdown and
the guarded `on_done` are `jobs.WorkerBase`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from lookahead.api import Model
from lookahead.core.engine import Done, Event, Step
from lookahead.errors import Interrupted, LookaheadError
from lookahead.server.jobs import END, Job, QueueFull, ShuttingDown, WorkerBase
from lookahead.server.metrics import Metrics

__all__ = ["END", "Job", "QueueFull", "ShuttingDown", "Worker"]

log = logging.getLogger("lookahead.server")


class Worker(WorkerBase):
    def __init__(self, model: Model, metrics: Metrics, max_queue: int) -> None:
        super().__init__(metrics, max_queue, capacity=1)
        self.model = model
        self._running: Job | None = None
        self._cache_owner = ""  # whose request left the cached cells (`Job.owner`)
        self.n_ctx = model.n_ctx  # what one request may use
        self._thread.start()

    def _running_jobs(self) -> list[Job]:
        return [self._running] if self._running is not None else []

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
        backend = self.model.backend
        backend.interrupt = job.cancelled.is_set  # a long prompt's prefill stops when its client leaves
        if job.owner != self._cache_owner:
            backend.reset()  # another API key's cells: never reused, nor seen as cached
        self._cache_owner = job.owner
        try:
            if job.warm_up:  # n_predict 0: the prompt into the cache, nothing written
                events = iter([Done(self.model.warm(job.tokens))])
            else:
                events = self.model.stream(
                    "",
                    tokens=job.tokens,
                    max_tokens=job.max_tokens,
                    stop=job.stop,
                    sampling=job.sampling,
                    draft=job.draft,
                    sources=job.sources,
                    cache_prompt=job.cache_prompt,
                    progress=job.progress,
                )
            for event in events:
                if job.cancelled.is_set():
                    self._cancelled(job)
                    break
                if isinstance(event, Done):
                    # the cache settled and the gauges set before the client hears the end,
                    # so what it reads from /metrics next includes this request
                    self._settle(job, events)
                job.emit(event)
                if isinstance(event, Done):
                    self._done(job, event.result)
                elif job.paced and isinstance(event, Step):
                    job.wait_ack()  # the route may stop it here: do not start the next step first
                    if job.cancelled.is_set():
                        self._cancelled(job)
                        break
        except Interrupted:  # in the prompt's prefill: nothing written yet
            self._cancelled(job)
        except LookaheadError as exc:
            backend.reset()  # the cache may be mid-step: free every cell
            job.emit(exc)
        except Exception as exc:  # a bug: this request fails, the service goes on
            log.exception("generation failed")
            backend.reset()
            job.emit(exc)
        finally:
            self._settle(job, events)
            backend.interrupt = None
            self.metrics.running.set(0)
            self._took(time.perf_counter() - t0)

    def _settle(self, job: Job, events: Iterator[Event] | None) -> None:
        """End the request's generation and leave the cache as the next request finds it;
        set the KV gauges. Once the last event is out or on any exit (a second call finds
        the generator closed and the cells as they were)."""
        backend = self.model.backend
        # a generator: end it where it stopped (between steps, so the cells it committed
        # stay consistent and cached for the next request's prompt)
        close = getattr(events, "close", None)
        if close is not None:
            close()
        if not job.cache_prompt and not job.warm_up:
            backend.reset()  # free every KV cell, parked ones too
        self.metrics.kv_cells.set(backend.n_used)  # a cached prompt's cells, else 0
        self.metrics.kv_cells_cached.set(len(backend.cache_tokens))
        self.metrics.shifted_total(backend.tokens_shifted)

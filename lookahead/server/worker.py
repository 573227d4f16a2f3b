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

While nothing waits, the thread may begin the request an editor most likely sends next
(`idle.py`): any request that arrives stops it part way through a prefill chunk (the
backend's `abort`; a chunk of its own prompt finishes) or between two steps, finds its cells
cached, and drafts from what it wrote.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from lookahead.api import Model
from lookahead.backend.prompt_reuse import common_prefix
from lookahead.core.engine import Done, Event, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import Interrupted, LookaheadError
from lookahead.server.idle import IDLE_CHUNK, Continuation, IdleJob, continuation_source, keeps_chunk
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
        self._idle: IdleJob | None = None  # a guessed next request, begun once nothing waits
        self.continuation: Continuation | None = None  # what the last idle job read and wrote
        # the cells cached before the last idle job, copied out (`kv_snapshot.py`), with their owner
        self._aside: tuple[str, Any] | None = None
        self._thread.start()

    def takes_idle_work(self) -> bool:
        return True

    def idle(self, job: IdleJob) -> bool:
        """Begin `job` once nothing waits; declined (False) when another request came
        after the one it follows, or the worker is closing."""
        with self._cv:
            if self._closing or self._submitted != job.after:
                return False
            self._idle = job
            self._cv.notify()
            return True

    def _running_jobs(self) -> list[Job]:
        return [self._running] if self._running is not None else []

    # ---- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._waiting or self._idle is not None or self._closing)
                if self._closing and not self._waiting:
                    return  # closing, nothing left
                idle, self._idle = self._idle, None
                if not self._waiting:
                    assert idle is not None
                    self.metrics.idle_running.set(1)
                else:
                    idle = None  # a request came first: the guess is moot
                    job = self._running = self._waiting.popleft()
                    self.metrics.queue_depth.set(len(self._waiting))
            if idle is not None:
                try:
                    self._continue(idle)
                finally:
                    self.metrics.idle_running.set(0)
                continue
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
        self._take_back(job)
        cont, self.continuation = self.continuation, None  # for this request only
        source = None if job.warm_up else continuation_source(cont, job.tokens, job.owner)
        if source is not None:
            job.sources = [*job.sources, source]
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
                stop = job.stops_at(event)  # the route's own stop, decided here: no next step
                job.emit(event)
                if isinstance(event, Done):
                    self._done(job, event.result)
                elif stop:
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

    def _continue(self, job: IdleJob) -> None:
        """An idle job (`idle.py`): its prompt into the cache in small chunks, then up to
        `max_tokens` greedy tokens, kept as `continuation`; stopped by any request that
        arrives. Not a request: no request metrics, no memory, no answer."""
        backend = self.model.backend
        if job.owner != self._cache_owner:
            return  # another key's cells are cached now: not this guess's to replace
        try:
            snap = backend.snapshot() if hasattr(backend, "snapshot") else None
        except LookaheadError:
            return  # nothing could be set aside: no guess may replace the cells
        self._aside = (job.owner, snap) if snap is not None else None
        cont = Continuation(job.owner, job.tokens)
        arrived = lambda: bool(self._waiting) or self._closing  # noqa: E731
        backend.interrupt = arrived
        before = getattr(backend, "n_decoded", 0)
        backend.abort = self._chunk_stop(job, before)
        backend.prefill_chunk = IDLE_CHUNK
        events = None
        try:
            events = self.model.stream("", tokens=job.tokens, max_tokens=job.max_tokens, sampling=SamplingConfig(),
                                       draft=job.draft, sources=job.sources, cache_prompt=True)  # fmt: skip
            for event in events:
                if isinstance(event, Step):
                    cont.written += event.tokens
                if arrived():
                    break
        except Interrupted:  # a request came while the prompt went in: its chunks stay cached
            pass
        except LookaheadError:
            backend.reset()
        except Exception:  # a bug: the guess is dropped, the service goes on
            log.exception("idle work failed")
            backend.reset()
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
            backend.interrupt = None
            backend.abort = None
            backend.prefill_chunk = None
            self.metrics.idle_tokens.labels("decoded").inc(max(0, getattr(backend, "n_decoded", 0) - before))
            self.metrics.idle_tokens.labels("written").inc(len(cont.written))
            self.metrics.kv_cells.set(backend.n_used)
            self.metrics.kv_cells_cached.set(len(backend.cache_tokens))
            self.metrics.shifted_total(backend.tokens_shifted)
        self.continuation = cont

    def _chunk_stop(self, job: IdleJob, before: int) -> Callable[[], bool]:
        """The backend's `abort` while `job` runs (`before`: the backend's `n_decoded` at its
        start): whether the prefill chunk in progress stops part way for the request that
        arrived, decided once per request (llama.cpp asks some hundreds of times per chunk).
        It finishes when the request's prompt holds it (`idle.keeps_chunk`) and it is not the
        job's first: a follow-up sent the moment a suggestion shows arrives as the first
        chunk begins, with little of it done, and reads its prompt faster in one batch than
        after the rest of a small chunk; a request after Tab arrives with the prompt part read."""
        backend = self.model.backend
        decided: dict[int, bool] = {}

        def stop() -> bool:
            if self._closing:
                return True
            try:
                waiting = self._waiting[0]
            except IndexError:  # nothing waits
                return False
            if waiting.seq not in decided:
                begun = backend.n_decoded > before  # a chunk of this job was read
                decided[waiting.seq] = not (begun and keeps_chunk(waiting.tokens, waiting.owner, job, backend.n_past))
            return decided[waiting.seq]

        return stop

    def cached_prompts(self, owner: str, slot: int = -1) -> list[list[int]]:
        if owner != self._cache_owner:
            return []
        return [list(self.model.backend.cache_tokens)]  # a copy: the worker thread changes it

    def _take_back(self, job: Job) -> None:
        """Before a request: put back the cells the last idle job replaced when the request
        shares more of its prompt with them than with the guess (the guess was wrong)."""
        aside, self._aside = self._aside, None
        if aside is None or aside[0] != job.owner or not job.cache_prompt:
            return
        backend, snap = self.model.backend, aside[1]
        prompt = job.tokens[:-1]  # the engine decodes the last one itself
        if common_prefix(snap.tokens, prompt) <= common_prefix(backend.cache_tokens, prompt):
            return
        try:
            backend.restore(snap)
        except LookaheadError:
            log.warning("the cached cells could not be put back: the prompt is read again")

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

"""Up to N generations at once, in one batched decode per step (`serve --parallel N`).

The same contract as `Worker` (submit, busy, close; events on each job's queue, END last),
so the routes do not know which one runs. One thread steps a `lookahead.core.multi.Batch` on a
multi-slot context (`lookahead.backend.slots`; by default one KV stream per request, chain
drafts, so a request's cells keep their solo order whatever its neighbours do): between two
steps it takes waiting jobs into free slots (their prefill goes in chunks, so running
requests keep writing) and drops cancelled ones, whose cells are freed at once. The node
budget of each step is shared by the requests (`lookahead.core.allocate`: ranked by expected
accepted tokens, each capped at a fair share, within the promise to each request). A failed
step fails the requests in it, never the thread. The queue, the shutdown and the guarded
`on_done` are `jobs.WorkerBase`'s.
"""

from __future__ import annotations

import logging
import time

from lookahead.api import Model
from lookahead.backend.slots import LlamaSlots
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done
from lookahead.core.multi import BatchRequest
from lookahead.core.request import GenerationConfig
from lookahead.errors import LookaheadError
from lookahead.server.jobs import END, Job, ShuttingDown, WorkerBase
from lookahead.server.metrics import Metrics

log = logging.getLogger("lookahead.server")


class BatchWorker(WorkerBase):
    def __init__(
        self,
        model: Model,
        metrics: Metrics,
        max_queue: int,
        parallel: int,
        draft: DraftConfig | None = None,
        kv_unified: bool = False,
    ) -> None:
        super().__init__(metrics, max_queue, capacity=parallel)
        self.model = model
        self.parallel = parallel
        self.slots = LlamaSlots(model.backend, parallel, separate=not kv_unified)
        self.n_ctx = self.slots.slot_ctx  # what one request may use
        # a busy machine: fewer threads while faster (the batch's own thread governor)
        self.batch = model.new_batch(self.slots, draft or DraftConfig())
        self.batch.isolate = True  # one request's drafting bug fails that request only
        self._req_of: dict[int, BatchRequest] = {}  # id(job) -> its request
        self._jobs: dict[int, Job] = {}  # request id -> its job, while it runs
        self._started: dict[int, float] = {}
        self._thread.start()

    def cached_prompts(self, owner: str, slot: int = -1) -> list[list[int]]:
        return self.slots.cached_prompts(owner, slot)

    def _running_jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def _after_close(self) -> None:
        self.slots.close()

    # ---- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._waiting or self._jobs or self._closing)
                if self._closing and not self._jobs:
                    return
                joining: list[Job] = []
                while self._waiting and len(self._jobs) + len(joining) < self.parallel:
                    joining.append(self._waiting.popleft())
                self.metrics.queue_depth.set(len(self._waiting))
            for job in joining:
                self._join(job)
            self._drop_cancelled()
            if self.batch.idle:
                continue
            self._step()

    def _join(self, job: Job) -> None:
        if job.cancelled.is_set():
            job.emit(END)
            return
        try:
            req = self._request(job)
        except LookaheadError as exc:
            job.emit(exc)
            job.emit(END)
            return
        except Exception as exc:  # a bug: this request fails, the service goes on
            log.exception("could not start a generation")
            job.emit(exc)
            job.emit(END)
            return
        with self._cv:
            self._jobs[req.id] = job
        self._started[req.id] = time.perf_counter()
        self._req_of[id(job)] = req

    def _request(self, job: Job) -> BatchRequest:
        """The job as a batch request: the pieces `Model.stream` builds for one generation;
        it reuses only cached cells its own API key's requests left (`Job.owner`)."""
        req = self._new_request(job)
        req.cache_owner = job.owner  # read when it takes a slot, at a later step
        req.want_slot = job.slot
        return req

    def _new_request(self, job: Job) -> BatchRequest:
        if job.warm_up:  # n_predict 0: the prompt into a slot's cache, nothing written
            return self.batch.add(job.tokens, GenerationConfig(1), warm_up=True)
        # another choice of the same request: its slot starts from a copy of the first
        # choice's prompt cells (if that one still runs), so the prompt is decoded once
        parent = self._req_of.get(id(job.sibling_of)) if job.sibling_of is not None else None
        return self.model.add_to(
            self.batch,
            job.tokens,
            max_tokens=job.max_tokens,
            stop=job.stop,
            sampling=job.sampling,
            draft=job.draft,
            sources=job.sources,
            cache_prompt=job.cache_prompt,
            progress=job.progress,
            parent=parent,
        )

    def _drop_cancelled(self) -> None:
        for rid, job in list(self._jobs.items()):
            if job.cancelled.is_set():
                self.batch.cancel(self._req_of.pop(id(job)))
                self._cancelled(job)
                if self._closing:
                    job.emit(ShuttingDown())  # cut short by close(): say so, not a bare end
                self._end(rid)
                self._gauges()

    def _gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.batch.active))
        m.occupancy.set(len(self.batch.active) / self.parallel)
        m.kv_cells.set(self.slots.n_used)
        m.kv_cells_cached.set(self.slots.n_cached)
        m.shifted_total(self.slots.tokens_shifted)

    def _end(self, rid: int) -> None:
        with self._cv:
            job = self._jobs.pop(rid)
        self._req_of.pop(id(job), None)
        self._took(time.perf_counter() - self._started.pop(rid, time.perf_counter()))
        job.emit(END)

    def _step(self) -> None:
        try:
            events = self.batch.step()
        except Exception as exc:  # the whole step failed: its requests fail, the thread goes on
            if not isinstance(exc, LookaheadError):
                log.exception("a batched step failed")
            for rid, job in list(self._jobs.items()):
                job.emit(exc)
                self._end(rid)
            self.batch.close()
            self.slots.reset()
            self._gauges()
            return
        for req, error in self.batch.failed:  # already cancelled by the batch
            if not isinstance(error, LookaheadError):  # a bug, not the request's own input
                log.error("drafting failed for one request", exc_info=error)
            failed = self._jobs.get(req.id)
            if failed is not None:
                failed.emit(error)
                self._end(req.id)
        self.batch.failed.clear()
        info = self.batch.last
        m = self.metrics
        if info.requests:
            m.batch_size.observe(info.requests)
            m.batch_tokens.observe(info.tokens)
        self._gauges()
        for req, event in events:
            running = self._jobs.get(req.id)
            if running is None or running.cancelled.is_set():
                continue  # a cancelled job is dropped before the next step
            job = running
            try:
                job.stops_at(event)  # the route's own stop: the job is dropped before the next step
            except Exception as exc:  # a bug in it: this request fails, the batch goes on
                log.exception("a request's stop rule failed")
                job.emit(exc)
                job.cancel()  # dropped before the next step
                continue
            job.emit(event)
            if isinstance(event, Done):
                self._done(job, event.result)
                self._end(req.id)

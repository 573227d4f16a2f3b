"""One request's generation as the workers see it (`Job`), and the queue both workers share.

`WorkerBase` keeps what the serial worker (`worker.py`) and the batched one
(`batch_worker.py`) have in common, so it is written once: the waiting line in arrival order
with its 429 and Retry-After, the shutdown (waiting jobs end at once, running ones get a
grace period), and what happens when a generation ends (metrics, then `on_done`, whose
failure is logged and never turns a finished answer into an error).

`on_done` is the one place a request's text is remembered (the service's memory of earlier
requests), and it runs on the worker's thread, never on the event loop: for a generation that
finished, and for one a dialect stopped early with `Job.stop_here` (llama.cpp's `n_indent` and
`t_max_predict_ms`), with the tokens written so far. A job cancelled with `Job.cancel` (its
client went away, a 429, shutting down) is not remembered.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Result, Step
from lookahead.core.sampling import SamplingConfig
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
    # run by the worker once the job ends with an answer, with the tokens it wrote (all of
    # them, or those written before `stop_here`); not run for a cancelled job
    on_done: Callable[[Job, Sequence[int]], None] | None = None
    predicted: list[int] | None = None  # the request's Predicted Output, tokenized once
    # reuse the KV cells of a prefix shared with an earlier request, and leave this one's
    # cells cached when it ends (off: a cold start, and every cell freed at the end)
    cache_prompt: bool = False
    progress: bool = False  # Progress events while the prompt goes in (`return_progress`)
    # whose cached KV cells this request may reuse: its API key's (`cache_owner`); "" without keys
    owner: str = ""
    # the slot it asks for (llama.cpp's `id_slot`, -1: any): taken when free (`--parallel`),
    # so an editor that names one finds its own cached cells there
    slot: int = -1
    sibling_of: Job | None = None  # another choice of the same request (same prompt), queued before this one
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    stopped: bool = False  # ended early by `stop_here`: what it wrote is an answer (remembered)
    written: list[int] = field(default_factory=list)  # tokens of the Steps emitted so far (worker side)
    # The route's own stops (llama.cpp's `n_indent`, `t_max_predict_ms`), run by the worker
    # on its thread after each Step, before it emits the Step: True ends the job there with
    # what it wrote as its answer (as `stop_here`). The worker decides at once, so no step
    # runs past the stop and none waits for the event loop to read the last one (a round
    # trip between two threads per step, ~2% of a step on a 2-vCPU machine).
    on_step: Callable[[Step], bool] | None = None
    # The answer is sent whole (not streamed): the worker hands its Steps to the event loop
    # with the job's next other event (its end), not one at a time. Waking the loop every
    # step made plain decoding of llama.vim's requests 0.2-2.6% slower per token in three
    # runs (two paired) on a 2-vCPU machine: the loop's Python ran beside llama.cpp's two
    # threads. The route's stops and its clock then run on the worker (`on_step`).
    whole: bool = False
    _held: list[Step] = field(default_factory=list, repr=False)  # worker side: Steps not yet handed over
    seq: int = 0  # the worker's count of jobs submitted, this one included (`WorkerBase.submit`)

    @property
    def warm_up(self) -> bool:
        """An editor's `n_predict: 0` request: prefill the prompt into the cache, write nothing."""
        return self.max_tokens == 0

    def emit(self, item: object) -> None:
        """Worker side: hand `item` to the route (a Step of a `whole` answer waits for the
        next other event, and goes with it, in order)."""
        if isinstance(item, Step):
            self.written += item.tokens
            if self.whole:
                self._held.append(item)
                return
        try:
            if self._held:
                items, self._held = [*self._held, item], []
                self.loop.call_soon_threadsafe(self._put_all, items)
            else:
                self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancelled.set()

    def _put_all(self, items: list[object]) -> None:
        for item in items:
            self.events.put_nowait(item)

    def cancel(self) -> None:
        """End the generation; nothing of it is remembered (the client left, or it failed)."""
        self.cancelled.set()

    def stops_at(self, event: object) -> bool:
        """Worker side, before emitting `event`: whether the route's own stop ends the job at
        this Step (`on_step`); if so the job is stopped here (`stop_here`)."""
        if self.on_step is None or not isinstance(event, Step) or not self.on_step(event):
            return False
        self.stop_here()
        return True

    def stop_here(self) -> None:
        """End the generation here with what it wrote as its answer (a dialect's own stop
        fired): the worker ends it as `cancel` does, then runs `on_done` with the tokens
        written so far."""
        self.stopped = True
        self.cancelled.set()


def cache_owner(api_key: str | None) -> str:
    """The prompt cache's name for a caller: a hash of its API key ("" without keys), so a
    request reuses only cells its own key's requests left (the key itself is not kept)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:32] if api_key else ""


class WorkerBase:
    """The waiting line and the shutdown of a worker that generates up to `capacity` jobs at once.

    A subclass runs `_run` on its thread and says which jobs are running (`_running_jobs`,
    called with `_cv` held); it takes jobs from `_waiting` under `_cv`.
    """

    def __init__(self, metrics: Metrics, max_queue: int, capacity: int) -> None:
        self.metrics = metrics
        self.max_queue = max_queue
        self.capacity = capacity
        self._waiting: deque[Job] = deque()
        self._cv = threading.Condition()
        self._closing = False
        self._submitted = 0  # jobs submitted so far (`Job.seq`)
        self._mean_s = 5.0  # running mean of a generation's seconds, for Retry-After
        metrics.slots.set(capacity)
        self._thread = threading.Thread(target=self._run, name="generation", daemon=True)

    # ---- what a subclass provides -------------------------------------------------------
    def _run(self) -> None:
        raise NotImplementedError

    def _running_jobs(self) -> list[Job]:
        """The jobs generating now (called with `_cv` held)."""
        raise NotImplementedError

    def _after_close(self) -> None:
        """Free what the worker holds once its thread has ended (or given up)."""

    # ---- the queue ----------------------------------------------------------------------
    def check_room(self) -> None:
        """Raise QueueFull or ShuttingDown if a job submitted now would be refused, so a
        request is turned away before its costly parts (a prediction's index) are built."""
        with self._cv:
            self._check_room()

    def _check_room(self) -> None:
        if self._closing:
            raise ShuttingDown
        running = len(self._running_jobs())
        # an idle slot takes the next job at once: it does not count as waiting
        if len(self._waiting) >= self.max_queue + max(0, self.capacity - running):
            ahead = len(self._waiting) + running
            raise QueueFull(max(1, math.ceil(self._mean_s * ahead / self.capacity)))

    def submit(self, job: Job) -> None:
        with self._cv:
            self._check_room()
            self._submitted += 1
            job.seq = self._submitted
            self._waiting.append(job)
            self.metrics.queue_depth.set(len(self._waiting))
            self._cv.notify()

    def takes_idle_work(self) -> bool:
        """Whether this worker begins a guessed next request while idle (`idle.py`)."""
        return False

    def idle(self, job: Any) -> bool:
        """Begin `job` (an `idle.IdleJob`) once nothing waits; False: declined."""
        return False

    def cached_prompts(self, owner: str, slot: int = -1) -> list[list[int]]:
        """The prompts whose cells the KV cache holds for `owner`'s next request (the slot
        it names first), as a new prompt may be shaped to share them (`apps/fim_window.py`)."""
        return []

    @property
    def running(self) -> int:
        """Jobs generating now (not waiting)."""
        with self._cv:
            return len(self._running_jobs())

    @property
    def busy(self) -> bool:
        with self._cv:
            return bool(self._running_jobs()) or bool(self._waiting)

    def close(self, timeout: float) -> None:
        """Stop taking work; the waiting jobs end at once, the running ones get `timeout`."""
        with self._cv:
            self._closing = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._cv.notify_all()
        for job in waiting:
            job.emit(ShuttingDown())
            job.emit(END)
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._cv:
                running = self._running_jobs()
            for job in running:
                job.cancel()
            self._thread.join(timeout=30)
        self._after_close()

    # ---- shared by both threads ---------------------------------------------------------
    def _done(self, job: Job, result: Result) -> None:
        """A generation finished: count it, then remember it."""
        self.metrics.finished(len(job.tokens), result.stats)
        self._remember(job, result.tokens)

    def _cancelled(self, job: Job) -> None:
        """A generation ended before its Done: count it; remember what it wrote if a dialect
        stopped it (`Job.stop_here`), not if it was cancelled."""
        self.metrics.cancelled.inc()
        if job.stopped and job.written:
            self._remember(job, job.written)

    @staticmethod
    def _remember(job: Job, tokens: Sequence[int]) -> None:
        """`on_done`, on this thread (a failure is logged; the answer, already sent, stands)."""
        if job.on_done is None:
            return
        try:
            job.on_done(job, tokens)
        except Exception:  # a bug in remembering: the answer stands
            log.exception("on_done failed")

    def _took(self, seconds: float) -> None:
        self._mean_s += 0.2 * (seconds - self._mean_s)

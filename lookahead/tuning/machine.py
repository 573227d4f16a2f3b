"""`MachineTuning`: what this machine's measurements decide for one loaded model, in one place.

- the verify cost curve t(n) and its context slope (calibrated once, cached per model,
  build, thread count and backend configuration: `lookahead.tuning.calibrate`), handed to
  the drafting state's controllers;
- the thread count on a busy machine (a `ThreadGovernor` per generation or batch; a switch
  also switches the controllers' cost curve, one per thread count);
- exact mode's bit-identical batch sizes (a self-test: `lookahead.tuning.exact`);
- the default number of requests decoded together (`--parallel`), from the curve.

The model (`lookahead.api.Model`), the server and the bench ask this object; the model
itself only loads and generates.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from lookahead.backend.llama import LlamaBackend
from lookahead.backend.slots import LlamaSlots
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig, DraftState
from lookahead.core.multi import Batch
from lookahead.core.parallel_choice import default_parallel
from lookahead.tuning.calibrate import calibrated_costs
from lookahead.tuning.cpuload import CpuLoad, cpu_load
from lookahead.tuning.exact import measure_exact_limits, node_cap
from lookahead.tuning.threads import BatchThreads, ThreadCosts, ThreadGovernor

VerifyHook = Callable[[int, float], None]


class MachineTuning:
    """The measured machine behind one model: cost curve, threads, exact limits, parallel."""

    def __init__(
        self, backend: LlamaBackend, cache_dir: Path, drafting: DraftState, cpu: CpuLoad | None = None
    ) -> None:
        self.backend = backend
        self.cache_dir = cache_dir  # the cost cache file lives here
        self.drafting = drafting  # whose cost curve (and controllers' curves) this sets
        # a busy machine: fewer threads while that is faster (only when the thread count
        # was left to us; see lookahead/tuning/threads.py). Set False to pin the count.
        self.adapt_threads = backend.config.n_threads == 0
        self.governor: ThreadGovernor | None = None
        # the kernel's count of other processes' CPU time over the last moments
        # (lookahead/tuning/cpuload.py; None: unreadable here, or the thread count is pinned)
        self.cpu = (cpu or cpu_load()) if self.adapt_threads else None
        self.full_threads = backend.n_threads
        # extra fraction of t(n) per cell in the cache, per n (see CostModel); set by calibrate
        self.cost_slope: dict[int, float] = {}
        self.ready = False  # calibrated
        # the calibrated t(n), idle, full thread count: sizes and seconds, for interpolation,
        # and per size up to the largest calibrated one as plain floats (looked up every step)
        self._idle_sizes = np.zeros(0)
        self._idle_seconds = np.zeros(0)
        self._idle_list: list[float] = []
        self._thread_costs: ThreadCosts | None = None  # made by calibrate()
        self._exact_limits: tuple[int, int] | None = None

    def calibrate(self) -> dict[int, float]:
        """Measure (or load from the cache) the verify cost t(n) on this machine, and give
        the drafting state a cost model and a thread governor built on it."""
        b = self.backend
        if b.n_threads != self.full_threads:  # the idle curve is the full count's
            b.set_threads(self.full_threads)
        costs, slope = calibrated_costs(b, self.cache_dir)
        self.cost_slope = slope
        self.drafting.cost = CostModel(costs, slope=slope, cells=lambda: b.n_used)
        self.drafting.controllers.clear()
        self.ready = True
        self._new_governor(costs)
        return costs

    def ensure_calibrated(self) -> None:
        """Calibrate once (the adaptive controller needs the cost curve)."""
        if not self.ready:
            self.calibrate()

    def default_parallel(self) -> int:
        """Requests to decode together by default: the most that batching pays for on the
        calibrated curve (1: none)."""
        return default_parallel(CostModel(self.calibrate()))

    def exact_limits(self) -> tuple[int, int]:
        """Largest verify batches whose logits are bit-identical to one-token decoding here,
        (below, above) EXACT_SPLIT cells in the cache (self-test, once per model)."""
        if self._exact_limits is None:
            self._exact_limits = measure_exact_limits(self.backend)
        return self._exact_limits

    def exact_cap(self) -> Callable[[int], int]:
        """Draft nodes allowed per step in exact mode, given the cells in use."""
        return node_cap(self.exact_limits())

    def prepare(self, draft: DraftConfig) -> VerifyHook | None:
        """Ready one generation with `draft`: calibrate if its controller needs the curve,
        let the governor pick a thread count; the hook to call after every verify (None:
        the thread count stays). Not in exact mode: its promise is plain decoding's logits at
        the configured count."""
        adapt = self.adapt_threads and not draft.exact
        hook = self._after_verify if adapt and self.governor is not None else None
        if draft.enabled and draft.adaptive and not self.ready:
            self.calibrate()
            hook = self._after_verify if adapt else None
        if hook is not None:
            self.begin()
        return hook

    def govern_batch(self, batch: Batch, slots: LlamaSlots) -> None:
        """Give a batched loop on `slots` its own thread governor (as a generation has one),
        when the thread count is ours to choose and the cost curve is calibrated."""
        if not self.adapt_threads or self.governor is None:
            return
        if slots.n_threads != self.full_threads:  # made while one generation ran reduced
            slots.set_threads(self.full_threads)
        gov = ThreadGovernor(self.full_threads, lambda n: self.idle_cost(n, slots.n_used), load=self.cpu)
        threads = BatchThreads(gov, batch, slots.set_threads)
        threads.attach()
        threads.begin()

    def idle_cost(self, size: int, cells: int) -> float:
        """Seconds of a verify of `size` tokens on the idle machine at the full thread count, at
        `cells` cells in use (a long prompt is not load)."""
        if size < len(self._idle_list):
            t = self._idle_list[size]
        else:
            t = float(np.interp(size, self._idle_sizes, self._idle_seconds))
        return t * self.drafting.cost.factor_at(size, cells)

    def _new_governor(self, costs: dict[int, float]) -> None:
        self._idle_sizes = np.array(sorted(costs), dtype=np.float64)
        self._idle_seconds = np.array([costs[k] for k in sorted(costs)], dtype=np.float64)
        self._idle_list = []
        if costs:
            top = int(self._idle_sizes[-1])
            self._idle_list = np.interp(np.arange(top + 1), self._idle_sizes, self._idle_seconds).tolist()
        cost = self.drafting.cost
        self.governor = ThreadGovernor(self.full_threads, lambda n: self.idle_cost(n, cost.context), load=self.cpu)
        self._thread_costs = ThreadCosts(self.full_threads, cost)

    def _after_verify(self, size: int, seconds: float) -> None:
        """Feed the thread governor a verify time; apply its switch (threads, cost curve)."""
        gov = self.governor
        if gov is None or not self.adapt_threads:
            return
        self._use_threads(gov.observe(size, seconds))

    def begin(self) -> None:
        """A request starts (a generation, or a prefill alone): the governor may pick a count
        from the CPU probe's reading of the last moments first."""
        if self.governor is not None and self.adapt_threads:
            self._use_threads(self.governor.begin())

    def _use_threads(self, threads: int | None) -> None:
        """Switch the backend, and the controllers' cost curve, to `threads` (None: stay)."""
        if threads is None:
            return
        self.backend.set_threads(threads)
        if self._thread_costs is None:  # not calibrated: no curve to switch
            return
        cost = self._thread_costs.at(threads, self.drafting.cost)
        self.drafting.cost = cost
        for controller in self.drafting.controllers.values():
            controller.cost = cost

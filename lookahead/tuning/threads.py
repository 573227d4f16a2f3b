"""A busy machine: decode with the thread count that is fastest under the load of the moment.

llama.cpp's threads meet at a barrier after every operation of a decode, so one thread
that the OS deschedules (another process wants its core) stalls all of them: on a 2-vCPU
machine with one CPU-bound process beside it, two threads ran 3-4x slower than idle and
one thread was faster than two. The controller already times every verify; this watches
those times, and when they run well above what the machine measured idle, tries fewer
threads, keeps whichever count is fastest now, and tries all of them again from time to
time so that it returns when the load goes away.

Robust to outliers: a step's slowdown is its time over the idle cost of its batch
size, and decisions read the median of the last `window` slowdowns of a thread count,
which a few outliers (a page fault, one slow step) cannot move. Pure: it is fed sizes and
seconds, and says which thread count to use; `MachineTuning` applies it to the backend and swaps
the controller's cost model with it, one per thread count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from statistics import median
from typing import Protocol

from lookahead.core.control import CostModel
from lookahead.tuning.cpuload import CpuLoad

# Median slowdown (measured / idle cost at full threads) above which the machine is busy.
BUSY = 1.5
# Steps whose median decides for a thread count.
WINDOW = 16
# Steps before a count's median is trusted, and the length of a trial of another count: a
# drafting generation is only 15-40 steps, so a load must be found within a few.
FIRST = 4
# Steps at a reduced count before all counts are tried again (has the load gone?).
RECHECK = 96
# With the CPU probe: steps between its readings while running reduced.
PROBE_EVERY = 16


def candidates(max_threads: int) -> list[int]:
    """Thread counts worth trying: all, one fewer (one core taken by another process), half."""
    return sorted({max_threads, max(1, max_threads - 1), max(1, max_threads // 2)}, reverse=True)


class ThreadGovernor:
    """Picks a thread count from verify times; `observe` returns a new count to switch to."""

    def __init__(
        self,
        max_threads: int,
        idle_cost: Callable[[int], float],
        *,
        busy: float = BUSY,
        window: int = WINDOW,
        recheck: int = RECHECK,
        load: CpuLoad | None = None,
    ) -> None:
        self.counts = candidates(max_threads)
        self.max_threads = max_threads
        self.idle_cost = idle_cost  # seconds of a batch of n tokens, idle, at max_threads
        self.busy = busy
        self.window = window
        self.recheck = recheck
        self.threads = max_threads  # the count in use
        self._slow: dict[int, deque[float]] = {k: deque(maxlen=window) for k in self.counts}
        self._trial: list[int] = []  # counts still to try in this round, in order
        self._in_round = False
        self._since = 0  # steps since the current count was chosen
        self._wait = 0  # steps before another round may start
        self._same = 0  # rounds in a row that kept the count they started from
        self._origin = max_threads  # the count the current round started from
        self.switches = 0
        self.load = load  # the kernel's view of other processes (None: not readable here)

    def fit(self, confirm: bool = False) -> int | None:
        """The thread count the CPUs left free by other processes hold (the probe's reading
        of the last moments, not of the idle time before a request), or None without a
        probe or a reading. With `confirm` (a generation's start), a load the last moments
        show is checked to be still there before a thread is given up for it."""
        others = self.load.others() if self.load is not None else None
        if others is None:
            return None
        if confirm and others > 0.5:
            ahead = self.load.now()  # type: ignore[union-attr]
            others = others if ahead is None else ahead
        free = int(self.load.cpus - others + 0.5)  # type: ignore[union-attr]
        count = max(1, min(self.max_threads, free))
        if count not in self._slow:  # a count between the candidates: try it like them
            self.counts = sorted([*self.counts, count], reverse=True)
            self._slow[count] = deque(maxlen=self.window)
        return count

    def begin(self) -> int | None:
        """A generation starts: with a probe, start at the count that fits the free CPUs
        (kept for `recheck` steps, as a round's verdict is). Returns a count to switch to.
        A round of trials the last generation left open ends here: its trial count was
        chosen for a load the probe says is gone (or still there), and would otherwise set
        this generation's prefill."""
        count = self.fit(confirm=True)
        if count is None:
            return None
        was_trying, self._in_round, self._trial = self._in_round, False, []
        wait = self.recheck if count < self.max_threads else 0
        if count == self.threads:
            if was_trying:
                self._since, self._wait = 0, wait
            return None
        switched = self._switch(count)
        self._wait = wait
        return switched

    def median(self, threads: int) -> float | None:
        """The median slowdown of `threads` over its recent steps (None before enough)."""
        xs = self._slow[threads]
        return median(xs) if len(xs) >= min(FIRST, self.window) else None

    def observe(self, size: int, seconds: float) -> int | None:
        """One verify of `size` tokens took `seconds` at the current count; maybe switch."""
        idle = self.idle_cost(size)
        if idle <= 0 or seconds <= 0:
            return None
        self._slow[self.threads].append(seconds / idle)
        self._since += 1
        mid = self.median(self.threads)
        if mid is None:
            return None
        if self._in_round:  # a round of trials: each count gets FIRST steps
            if self._since >= min(FIRST, self.window):
                return self._switch(self._trial.pop(0)) if self._trial else self._settle()
            return None
        if self.threads != self.max_threads and self.load is not None:
            return self._recheck_by_probe()
        if self._since < self._wait:
            return None
        if self.threads == self.max_threads:
            if mid >= self.busy and len(self.counts) > 1:
                return self._start_round()
            return None
        return self._start_round()  # running reduced for a while: has the load gone?

    def _recheck_by_probe(self) -> int | None:
        """Running reduced, with a probe: a round of trials only once the probe sees the
        CPUs free again (or a round kept the reduced count despite it: then after the
        round's wait, as without a probe)."""
        if self._since % PROBE_EVERY:
            return None
        count = self.fit()
        if count is None:
            return self._start_round() if self._since >= self._wait else None
        if count < self.threads:  # more load than before: fewer threads at once
            switched = self._switch(count)
            self._wait = self.recheck
            return switched
        if count == self.threads:  # the load is still there: stay, no trial steps
            return None
        if self._same and self._since < self._wait:  # the probe misled the last round
            return None
        return self._start_round()

    def _start_round(self) -> int | None:
        self._origin = self.threads
        self._in_round = True
        order = [k for k in self.counts if k != self.threads]
        self._trial = order[1:]
        return self._switch(order[0])

    def _settle(self) -> int | None:
        """End of a round: the count with the lowest median slowdown; ties keep more threads.
        A round that changes nothing makes the next one wait longer (up to 8x)."""
        self._in_round = False
        best = min(self.counts, key=lambda k: (self.median(k) or float("inf"), -k))
        self._same = self._same + 1 if best == self._origin else 0
        wait = self.recheck * 2 ** min(self._same, 3)
        if best == self.threads:
            self._since, self._wait = 0, wait
            return None
        switched = self._switch(best)
        self._wait = wait
        return switched

    def _switch(self, threads: int) -> int:
        self.threads = threads
        self._slow[threads].clear()  # what it measured before is from another load
        self._since = self._wait = 0
        self.switches += 1
        return threads


class _Stepping(Protocol):
    """What BatchThreads needs of a batched loop (`lookahead.core.multi.Batch`)."""

    cost: CostModel
    after_verify: Callable[[int, float], None] | None
    before_start: Callable[[], None] | None


class ThreadCosts:
    """A cost model per thread count. The count calibrated first has its own; another's
    starts from what was measured so far (the idle curve, scaled to that count by its
    first steps) and then learns from that count's own steps. `context`: whether the
    spawned models price the cache's cells (a batch's cells are its slots': no)."""

    def __init__(self, threads: int, cost: CostModel, *, context: bool = True) -> None:
        self.costs: dict[int, CostModel] = {threads: cost}
        self.context = context

    def at(self, threads: int, current: CostModel) -> CostModel:
        """The cost model for `threads` (made from `current`'s measurements the first time)."""
        cost = self.costs.get(threads)
        if cost is None:
            cost = self.costs[threads] = current.spawn(current.measured, context=self.context)
        return cost


class BatchThreads:
    """The governor for a batched loop (`generate_many`, `serve --parallel`): fed each
    batched verify's size and seconds (`Batch.after_verify`), it sets the thread count of
    the multi-slot context (`set_threads`) and gives the batch a cost model per count, as
    `MachineTuning` does for one generation at a time. A count's model starts from what the batch
    measured so far, then learns from that count's own steps."""

    def __init__(self, governor: ThreadGovernor, batch: _Stepping, set_threads: Callable[[int], None]) -> None:
        self.governor = governor
        self.batch = batch
        self.set_threads = set_threads
        self.thread_costs = ThreadCosts(governor.threads, batch.cost, context=False)

    def attach(self) -> None:
        """Watch the batch: told every batched verify, and asked before a step that starts
        requests in an idle batch (a long-running server's batch sits idle between them)."""
        self.batch.after_verify = self
        self.batch.before_start = self.begin

    def begin(self) -> None:
        """Before the first step: a count from the CPU probe, if it has one."""
        self._use(self.governor.begin())

    def __call__(self, size: int, seconds: float) -> None:
        self._use(self.governor.observe(size, seconds))

    def _use(self, threads: int | None) -> None:
        if threads is None:
            return
        self.set_threads(threads)
        self.batch.cost = self.thread_costs.at(threads, self.batch.cost)

    @property
    def costs(self) -> dict[int, CostModel]:
        """The cost model of each thread count used so far."""
        return self.thread_costs.costs

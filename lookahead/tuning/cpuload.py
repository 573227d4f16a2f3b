"""How many CPUs other processes use, from the kernel's own accounting (Linux).

The thread governor (lookahead/tuning/threads.py) finds a busy machine from slow verify steps:
it needs a few slow steps to see the load, and a few steps at every thread count, from
time to time, to see whether it has gone; each such step under load costs about two.
The kernel already knows: /proc/stat counts the busy time of each CPU, os.times() our
own, and the difference is what other processes (or, in a VM, the hypervisor's steal)
took from the CPUs we may run on. So a generation can start at the right count, and a
reduced count can stay while the load lasts without trial steps.

The reading judges the last WINDOW seconds only, not the time since the previous request:
after an idle gap in which an editor or a browser ran for a while and stopped, the CPUs are
free now, and a request that started at one thread for it ran its prefill at half speed. A
background thread (`Sampler`) reads the counters every PERIOD seconds and keeps the last
few readings, so a request's start costs one more reading (a fraction of a millisecond),
not a wait.

Not available (None) off Linux, or under a cgroup CPU quota smaller than the CPUs we may
run on: the quota then limits us, and /proc/stat shows the host, not the limit.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

# Seconds of recent history a reading judges: /proc/stat counts in ticks of 1/100 s per CPU,
# so one CPU busy throughout reads 1.0 +- 0.1 over 0.2 s, clear of the 0.5 that costs a thread.
WINDOW = 0.2
# Seconds between the background sampler's readings (each costs ~0.1 ms of one CPU).
PERIOD = 0.1
# Seconds a request's start waits to see whether a load the last moments showed is still
# there (`CpuLoad.now`): one CPU busy throughout reads 1.0 +- 0.2 over it, idle 0 +- 0.2.
CONFIRM = 0.05


class Reading(NamedTuple):
    busy: float  # CPU-seconds busy on our CPUs, everyone's
    own: float  # CPU-seconds this process used (with its children that have ended)
    wall: float  # seconds, monotonic


def proc_reader(cpus: frozenset[int], stat: Path = Path("/proc/stat")) -> Callable[[], Reading | None]:
    """A reader of /proc/stat's busy time over `cpus`: user, nice, system, irq, softirq and
    steal (the fields before and after idle and iowait)."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read() -> Reading | None:
        try:
            lines = stat.read_text().splitlines()
        except OSError:
            return None
        busy = 0
        found = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu":
                continue
            try:
                if int(name[3:]) not in cpus:
                    continue
                f = [int(x) for x in rest.split()[:8]]
            except ValueError:
                return None
            if len(f) < 8:
                return None
            busy += f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
            found += 1
        if found != len(cpus):
            return None
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return Reading(busy / hz, own, time.monotonic())

    return read


def _between(first: Reading, second: Reading) -> float:
    """CPUs other processes used on average from `first` to `second` (busy time not ours)."""
    return max(0.0, ((second.busy - first.busy) - (second.own - first.own)) / (second.wall - first.wall))


def _quota_cpus(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> float | None:
    """CPUs the cgroup v2 quota allows (None: no quota, or no cgroup v2)."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


class CpuLoad:
    """`others()`: CPUs other processes used over about the last `window` seconds: since the
    newest kept reading at least that old (None before one at least half that old exists).
    Readings come from `others()` itself and from `sample()`, which a `Sampler` calls in
    the background so that one that old is always at hand."""

    def __init__(
        self,
        read: Callable[[], Reading | None],
        cpus: int,
        window: float = WINDOW,
        wait: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cpus = cpus
        self.window = window
        self._read = read
        self._wait = wait
        self._lock = threading.Lock()  # the sampler's thread and the caller's share the ring
        # readings, oldest first; of those at least `window` old only the newest is kept
        self._ring: deque[Reading] = deque()
        self.sampler: Sampler | None = None  # the background reader, if one was started
        self.sample()

    def sample(self) -> None:
        """Take a reading and keep it (the background sampler's tick)."""
        with self._lock:  # read inside: the ring stays in time order
            self._keep(self._read())

    def others(self) -> float | None:
        """CPUs other processes used over about the last `window` seconds (see the class)."""
        with self._lock:
            now = self._read()
            self._keep(now)
            if now is None:
                return None
            base = self._ring[0]  # the newest reading at least `window` old, if there is one
        if now.wall - base.wall < self.window / 2:  # only in the first moments, or after an unreadable one
            return None
        return _between(base, now)

    def now(self, seconds: float = CONFIRM) -> float | None:
        """CPUs other processes use over the next `seconds` (blocking): what a request about
        to start shares the CPUs with. `others()` looks back, so it also sees a process that
        stopped a moment ago: the request just answered by another server, or an editor's
        burst, right before ours; this looks ahead. None without two readings."""
        first = self._read()
        self._wait(seconds)
        second = self._read()
        if first is None or second is None or second.wall - first.wall < seconds / 2:
            return None
        return _between(first, second)

    def _keep(self, now: Reading | None) -> None:
        """Append `now`; drop readings the window no longer needs (an unreadable moment
        forgets them all: a difference across it could mix counters)."""
        ring = self._ring
        if now is None:
            ring.clear()
            return
        ring.append(now)
        while len(ring) > 1 and ring[1].wall <= now.wall - self.window:
            ring.popleft()


class Sampler:
    """A daemon thread that calls `load.sample()` every `period` seconds until `stop()`, or
    until `load` is no longer used anywhere else (it holds only a weak reference)."""

    def __init__(self, load: CpuLoad, period: float = PERIOD) -> None:
        self._stop = threading.Event()
        ref = weakref.ref(load)
        self.thread = threading.Thread(target=_sample, args=(ref, period, self._stop), name="cpu-load", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()


def _sample(ref: weakref.ref[CpuLoad], period: float, stop: threading.Event) -> None:
    while not stop.wait(period):
        load = ref()
        if load is None:
            return
        load.sample()
        del load  # no strong reference while waiting: the load may be collected meanwhile


def _our_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on, or None where their counts do not tell what limits
    us (not Linux, or a cgroup quota smaller than them; see above)."""
    try:
        cpus = frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    quota = _quota_cpus()
    if not cpus or (quota is not None and quota < len(cpus) - 0.5):
        return None
    return cpus


def cpu_load() -> CpuLoad | None:
    """The probe for this process's CPUs, or None where it cannot see them (see above)."""
    cpus = _our_cpus()
    if cpus is None:
        return None
    read = proc_reader(cpus)
    if read() is None:
        return None
    load = CpuLoad(read, len(cpus))
    load.sampler = Sampler(load)
    return load


def others_meter(read: Callable[[], Reading | None] | None = None) -> Callable[[], float | None]:
    """Start counting what other processes take of this process's CPUs: the function returned
    gives the CPUs they used on average since (None where the kernel's count cannot be read,
    as for `cpu_load`). For a measurement that must not be kept if it shared the machine.
    `read`: the counters' reader (default: /proc/stat over our CPUs)."""
    if read is None:
        cpus = _our_cpus()
        if cpus is None:
            return lambda: None
        read = proc_reader(cpus)
    start = read()

    def since() -> float | None:
        now = read()
        if start is None or now is None or now.wall <= start.wall:
            return None
        return _between(start, now)

    return since


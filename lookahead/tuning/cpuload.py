"""How many CPUs other processes use, from the kernel's own accounting (Linux).

The thread governor (lookahead/tuning/threads.py) finds a busy machine from slow verify steps:
it needs a few slow steps to see the load, and a few steps at every thread count, from
time to time, to see whether it has gone; each such step under load costs about two.
The kernel already knows: /proc/stat counts the busy time of each CPU, os.times() our
own, and the difference is what other processes (or, in a VM, the hypervisor's steal)
took from the CPUs we may run on. So a generation can start at the right count, and a
reduced count can stay while the load lasts without trial steps.

Not available (None) off Linux, or under a cgroup CPU quota smaller than the CPUs we may
run on: the quota then limits us, and /proc/stat shows the host, not the limit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

# Shortest interval worth a reading: /proc/stat counts in ticks of 1/100 s per CPU.
MIN_INTERVAL = 0.25


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


def _quota_cpus(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> float | None:
    """CPUs the cgroup v2 quota allows (None: no quota, or no cgroup v2)."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


class CpuLoad:
    """`others()`: CPUs other processes used since the previous reading (at least
    MIN_INTERVAL ago; a call sooner returns the last value)."""

    def __init__(self, read: Callable[[], Reading | None], cpus: int) -> None:
        self.cpus = cpus
        self._read = read
        self._last = read()
        self._value: float | None = None

    def others(self) -> float | None:
        now = self._read()
        last = self._last
        if now is None or last is None:
            self._last = now
            return None
        dt = now.wall - last.wall
        if dt < MIN_INTERVAL:
            return self._value
        self._value = max(0.0, ((now.busy - last.busy) - (now.own - last.own)) / dt)
        self._last = now
        return self._value


def cpu_load() -> CpuLoad | None:
    """The probe for this process's CPUs, or None where it cannot see them (see above)."""
    try:
        cpus = frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    quota = _quota_cpus()
    if not cpus or (quota is not None and quota < len(cpus) - 0.5):
        return None
    read = proc_reader(cpus)
    if read() is None:
        return None
    return CpuLoad(read, len(cpus))

"""The verify cost curve t(n) of this machine: measured once per model, build, thread count
and backend configuration, then read from a cache file.

Measured on an empty cache: cells left by an earlier generation (a longer context, parked
cells) would make every size look dearer, and the table is kept for good. Then measured
again deeper in the cache, for the context slope (how much dearer a verify is per cell in
use; see `CostModel`). The measurements behind the sizes are in bench/README.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lookahead.backend import probe
from lookahead.backend.llama import LlamaBackend
from lookahead.tuning.cpuload import others_meter

# Batch sizes t(n) is calibrated at: every size up to 20, where drafts mostly are, then a
# sparser grid the controller interpolates. CPU matmul kernels work on blocks of columns,
# so t(n) is a sawtooth at small n, which interpolating between even sizes priced wrong.
COST_SIZES = (*range(1, 21), 24, 28, 32, 40, 48, 64)
# Part of the cost cache key: bump it when the measurement changes, so old tables are
# measured again (v2: more sizes, interleaved rounds; v3: the context slope too; v4: the
# fastest round, not the median; v5: every size up to 20; v6: none measured beside a busy
# process, so a curve cached before, perhaps under load, is measured again, its context slope
# at more sizes).
COST_VERSION = "v6"
# The context slope: t(n) measured again with this many cells in the cache (or half the
# context, if smaller), at these sizes.
SLOPE_DEPTH = 1024
# Every size where the slope is not interpolated between its neighbours well: measured 1,600
# cells deep on a 2-vCPU EPYC, interpolating from 1, 2, 4, 8, 16, 32 and 64 alone priced a
# batch of 12 at 0.88 of its cost and one of 48 at 0.83 (within 5% at these sizes).
SLOPE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
COST_CACHE = "costs.json"  # in the cache root, beside the models folder
# A curve measured while other processes used this many of our CPUs or more, on average, is
# used by this process only, never cached: a compiler or a test run beside the calibration
# made one-token steps twice as dear and the context slope six times too steep here: 1,500
# cells deep it priced a verify of 2 tokens below one of 1, and the controller drafted at
# twice as many steps as on an idle curve, in every later process that read the cache.
BUSY_CPUS = 0.3


def cost_machine(threads: int) -> str:
    """The part of a cost curve's cache key that names the machine: the thread count, the
    CPU model and a hash of its flags (`platform.processor()` is empty on Linux, so a home
    folder shared by two machines would reuse one's curve on the other)."""
    flags = hashlib.sha256(" ".join(probe.cpu_flags()).encode()).hexdigest()[:12]
    return f"{threads}:{platform.machine()}:{probe.cpu_model()}:{flags}"


def cost_key(b: LlamaBackend) -> str:
    """The cache key of `b`'s curve: model file, thread count, CPU, backend configuration."""
    key = f"{COST_VERSION}:{b.path.name}:{b.path.stat().st_size}:{cost_machine(b.n_threads)}"
    if not b.config.repack:  # costs are per backend configuration
        key += f":{probe.NO_EXTRA_BUFTS.name}"
    return key


def calibrated_costs(
    b: LlamaBackend, cache_root: Path, others: Callable[[], Callable[[], float | None]] = others_meter
) -> tuple[dict[int, float], dict[int, float]]:
    """t(n) on an empty cache and the context slope, from the cache file in `cache_root` or
    measured now (and then cached, unless implausible or measured beside another busy
    process: `others` starts a meter of their CPU use). Leaves `b`'s cache empty when it
    measures."""
    path = cache_root / COST_CACHE
    key = cost_key(b)
    try:
        entry = json.loads(path.read_text())[key]
        costs = {int(n): float(t) for n, t in entry["costs"].items()}
        slope = {int(n): float(t) for n, t in entry["slope"].items()}
        if not plausible(costs):  # a damaged or hand-edited entry is measured again
            raise ValueError("implausible cached cost curve")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        b.reset()
        busy = others()
        costs = b.measure_cost(COST_SIZES, repeats=4)
        slope = measure_slope(b, costs)
        shared = busy()  # (None: unknown, kept as before)
        # one measured while something else ran is not kept
        if plausible(costs) and (shared is None or shared < BUSY_CPUS):
            store_costs(path, key, {"costs": costs, "slope": slope})
    return costs, slope


def measure_slope(b: LlamaBackend, costs: dict[int, float]) -> dict[int, float]:
    """Extra fraction of t(n) per cached cell, per n: t(n) measured again with SLOPE_DEPTH
    cells in the cache (or half the context), against `costs` (an empty cache). Empty when
    the context is too small to tell; the cache is left empty."""
    depth = min(SLOPE_DEPTH, b.n_ctx // 2)
    sizes = [n for n in SLOPE_SIZES if n in costs and depth + n + 1 < b.n_ctx]
    if depth < 256 or not sizes:
        return {}
    b.reset()
    # any tokens do: attention's cost depends on how many cells there are, not what they hold
    b.prefill(np.arange(depth, dtype=np.int32) % b.n_vocab)
    deep = b.measure_cost(sizes, repeats=3)
    b.reset()
    return {n: max(0.0, deep[n] / costs[n] - 1.0) / depth for n in sizes if n in deep}


def store_costs(path: Path, key: str, entry: dict[str, dict[int, float]]) -> None:
    """Add `entry` (the cost curve and its context slope) under `key` to the cost cache file,
    atomically, through a temporary file of this call's own (two processes calibrating at
    once must not write one temporary file)."""
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = entry
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data))
        tmp.replace(path)
    except OSError:
        if tmp is not None:
            tmp.unlink(missing_ok=True)  # a read-only cache only costs the measurement next time


def plausible(costs: dict[int, float]) -> bool:
    """False for a cost curve no idle machine measures: a batch much cheaper than one token
    (the one-token decodes were stalled by another process). Such a curve is used for this
    process only, never cached, and one found in the cache is measured again."""
    t1 = costs.get(1)
    if not t1:
        return False
    return all(t >= 0.8 * t1 for n, t in costs.items() if n > 1)

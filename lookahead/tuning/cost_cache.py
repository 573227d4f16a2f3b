"""The measured verify-cost curve's cache file (`costs.json` in the cache folder): its key
names the machine, and what it holds is trusted only when plausible."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path

from lookahead.backend import probe


def cost_machine(threads: int) -> str:
    """The part of a cost curve's cache key that names the machine: the thread count, the
    CPU model and a hash of its flags (`platform.processor()` is empty on Linux, so a home
    folder shared by two machines would reuse one's curve on the other)."""
    flags = hashlib.sha256(" ".join(probe.cpu_flags()).encode()).hexdigest()[:12]
    return f"{threads}:{platform.machine()}:{probe.cpu_model()}:{flags}"


def plausible(costs: dict[int, float]) -> bool:
    """False for a cost curve no idle machine measures: a batch much cheaper than one token
    (the one-token decodes were stalled by another process). Such a curve is used for this
    process only, never cached, and one found in the cache is measured again."""
    t1 = costs.get(1)
    if not t1:
        return False
    return all(t >= 0.8 * t1 for n, t in costs.items() if n > 1)


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

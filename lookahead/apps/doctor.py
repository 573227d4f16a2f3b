"""What `lookahead doctor` reports: this machine, this llama.cpp build, and what they allow.

One plain dict (the `--json` output is exactly it), so a user can paste it into a bug
report and a test can check it. Loading the model runs the backend probe, the verify cost
calibration and the exactness self-test, each cached after the first time.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from lookahead.backend import probe
from lookahead.errors import LookaheadError
from lookahead.models import catalog as models

# CPU flags that decide which llama.cpp kernels can run (the full list is in `flags`).
KEY_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd",
)  # fmt: skip


def machine_info() -> dict[str, Any]:
    flags = probe.cpu_flags()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    return {
        "cpu": probe.cpu_model(),
        "arch": platform.machine(),
        "cpus_usable": usable,
        "key_flags": [f for f in KEY_FLAGS if f in flags],
        "flags": flags,
        "os": platform.platform(),
        "python": sys.version.split()[0],
    }


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return 0


def cache_info(cache_root: Path) -> dict[str, Any]:
    """Where lookahead keeps things, and how big each is (bytes)."""
    places = {
        "models": cache_root / "models",
        "corpora": cache_root / "corpora",
        "costs": cache_root / "costs.json",
        "probe": cache_root / "probe.json",
    }
    return {name: {"path": str(p), "bytes": _size(p), "exists": p.exists()} for name, p in places.items()}


def cost_curve(costs: dict[int, float]) -> dict[str, Any]:
    """t(n)/t(1) per measured n, and the ceiling: the best speedup with every draft accepted,
    max over n of n t(1) / t(n) (a batch of n yields at most n tokens)."""
    t1 = costs[1]
    relative = {n: costs[n] / t1 for n in sorted(costs)}
    ceiling = max(n / r for n, r in relative.items())
    best_n = max(relative, key=lambda n: n / relative[n])
    return {
        "t1_ms": round(t1 * 1e3, 3),
        "relative": {str(n): round(r, 3) for n, r in relative.items()},
        "ceiling": round(ceiling, 3),
        "ceiling_at": best_n,
    }


def report(
    model: str,
    *,
    cache_dir: Path,
    threads: int = 0,
    exact: bool = True,
    progress: models.Progress | None = None,
) -> dict[str, Any]:
    """Everything `lookahead doctor` shows. A model that cannot load is reported, not raised."""
    from lookahead.api import PROBE_CACHE, load
    from lookahead.backend.llama import BackendConfig, build_info, default_threads, system_info
    from lookahead.tuning.exact import EXACT_SPLIT

    cache_root = cache_dir.parent
    out: dict[str, Any] = {
        "machine": machine_info(),
        "llama_cpp": {"build": build_info(), "system_info": system_info()},
        "threads": threads or default_threads(),
        "models": [
            {"name": m.name, "cached": m.cached, "default": m.default, "path": str(m.path), "bytes": m.size}
            for m in models.list_models(cache_dir)
        ],
    }
    entry: dict[str, Any] = {"model": model}
    try:
        lm = load(model, cache_dir=cache_dir, backend=BackendConfig(n_threads=threads), progress=progress)
    except LookaheadError as exc:
        entry["error"] = str(exc)
    else:
        try:
            verdict = lm.verdict
            assert verdict is not None  # load() probes by default
            entry["path"] = str(lm.backend.path)
            entry["backend"] = {
                "choice": verdict.choice,
                "description": verdict.candidate.description,
                "cached": verdict.cached,
                "trials": [t.__dict__ for t in verdict.trials],
            }
            if progress is not None:
                progress("measuring the verify cost (cached after the first run)", 0, None)
            entry["verify_cost"] = cost_curve(lm.tuning.calibrate())
            if exact:
                if progress is not None:
                    progress("testing which batch sizes give bit-identical logits", 0, None)
                short, long = lm.tuning.exact_limits()
                entry["exact_batch"] = {f"below_{EXACT_SPLIT}_cells": short, f"above_{EXACT_SPLIT}_cells": long}
        except LookaheadError as exc:
            entry["error"] = str(exc)
        finally:
            lm.close()
    out["model"] = entry
    out["caches"] = cache_info(cache_root)  # after the model: its probe and costs are there now
    verdicts = probe.cached_verdicts(cache_root / PROBE_CACHE)
    out["probe_cache"] = [
        {k: v.get(k) for k in ("model", "threads", "choice", "probed_at")}
        for v in verdicts.values()
        if isinstance(v, dict)
    ]
    return out

"""Which llama.cpp configuration runs correctly on this CPU, found in a child process.

Some llama.cpp CPU paths crash or compute garbage on some CPUs: its AMX weight buffers
(one of its "extra buffer types", beside CPU_REPACK) die with SIGILL in
`ggml_backend_amx_mul_mat` on Intel Xeons with AMX, and a wheel built on another machine
may use instructions this CPU lacks. A crash in our own process would take the user's
program down with no message, so the first time a model is used with a given llama.cpp
build, CPU and thread count, a child process loads it with each candidate configuration,
fastest first, decodes a few batch sizes and checks the logits:

    candidate  1. llama.cpp's default (extra buffer types on: AMX / repacked weights)
               2. extra buffer types off (plain CPU weights; what `--no-repack` does)

A child that dies by a signal, hangs past its timeout, or returns logits that are not
finite or whose batched and one-token rows disagree beyond a tolerance rules its candidate
out. The first candidate that passes is cached in `probe.json` (written atomically; an
entry that does not parse, or whose key no longer matches the build, CPU or model file,
is probed again, never trusted), and the parent loads that one. A verdict reached after a
timeout is used but not cached: a timeout may be a busy machine, not a broken path. When none passes there
is no verdict to cache: `BackendUnsupported` says which CPU path failed and what to do.

The parent never imports llama_cpp here; the child (`python -m lookahead.backend.probe`)
does, through the backend module.

Testing without the CPU that crashes: the child reads `LOOKAHEAD_PROBE_FAULT`, e.g.
`default=sigill,no-extra-bufts=hang`, and fails that candidate that way on purpose
(`sigill`: kills itself with SIGILL, `hang`: sleeps past the timeout, `nan`: reports
non-finite logits, `garbage`: finite batched logits far from the one-token ones). Only the
child reads it, at its entry point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead.errors import BackendError, BackendUnsupported

FAULT_ENV = "LOOKAHEAD_PROBE_FAULT"
# Part of every key: bump when the checks change, so old verdicts are probed again.
PROBE_VERSION = "v2"  # v2: a batch as large as the largest prefill is decoded too
# Batched rows may differ from one-token rows by a few tenths of a logit (other matmul
# kernels; measured up to ~0.3-0.6 on Qwen2.5-Coder-0.5B); a broken kernel is off by far
# more or gives NaN. The check is about crashes and garbage, not bit-exactness (--exact
# has its own self-test).
TOLERANCE = 2.0
# Sizes decoded in one batch and compared with one-token decoding.
BATCH_SIZES = (2, 4, 8, 16)
_PROBE_TEXT = (
    "def mean(values):\n    total = 0.0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n\nThe quick brown fox jumps over the lazy dog.\n"
)


@dataclass(frozen=True)
class Candidate:
    """One configuration to try: a name for people and caches, and the backend flags."""

    name: str
    repack: bool  # llama.cpp's extra buffer types (AMX, repacked weights)
    description: str


DEFAULT = Candidate("default", True, "llama.cpp's default (extra buffer types: AMX, repacked weights)")
NO_EXTRA_BUFTS = Candidate("no-extra-bufts", False, "extra buffer types off (plain CPU weights)")
CANDIDATES = (DEFAULT, NO_EXTRA_BUFTS)


@dataclass(frozen=True)
class Trial:
    """What the child found for one candidate."""

    candidate: str
    ok: bool
    detail: str  # "ok", "killed by SIGILL (illegal instruction)", "timed out after 60 s", ...
    seconds: float
    max_diff: float | None = None  # largest |batched - one-token| logit seen


@dataclass(frozen=True)
class Verdict:
    """The configuration to load, and how it was found."""

    choice: str  # a Candidate name
    trials: tuple[Trial, ...]
    key: str
    cached: bool = False  # read from the cache, not probed now

    @property
    def candidate(self) -> Candidate:
        return next(c for c in CANDIDATES if c.name == self.choice)

    @property
    def is_default(self) -> bool:
        return self.choice == DEFAULT.name

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.choice,
            "trials": [dataclasses.asdict(t) for t in self.trials],
            "probed_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }


# ---- the key: what a verdict depends on -------------------------------------------------


def cpu_flags() -> list[str]:
    """The CPU's feature flags (Linux: /proc/cpuinfo), sorted; empty where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return sorted(set(line.partition(":")[2].split()))
    except OSError:
        pass
    return []


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def probe_key(path: Path, threads: int, candidates: Sequence[Candidate], build: str) -> str:
    """A verdict holds for this model file, llama.cpp build (version + system info), CPU
    (its flags) and thread count, and this list of candidates."""
    st = path.stat()
    parts = {
        "version": PROBE_VERSION,
        "model": [path.name, st.st_size],
        "build": build,
        "cpu": hashlib.sha256(" ".join(cpu_flags()).encode()).hexdigest()[:16],
        "machine": platform.machine(),
        "threads": threads,
        "candidates": [c.name for c in candidates],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


# ---- the cache ---------------------------------------------------------------------------


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _parse_verdict(entry: object, key: str, names: Sequence[str]) -> Verdict | None:
    """A cached entry as a Verdict, or None if it is not one we wrote for these candidates."""
    if not isinstance(entry, dict) or entry.get("choice") not in names:
        return None
    try:
        trials = tuple(Trial(**t) for t in entry.get("trials", []))
    except TypeError:
        return None
    if not any(t.ok and t.candidate == entry["choice"] for t in trials):
        return None
    return Verdict(entry["choice"], trials, key, cached=True)


def _write_cache(path: Path, key: str, verdict: Verdict, about: dict[str, Any]) -> None:
    """Add `verdict` under `key`, atomically: a reader sees the old file or the new one."""
    data = _read_cache(path)
    data[key] = {**verdict.to_json(), **about}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a read-only cache only costs a probe next time


def cached_verdicts(cache_file: Path) -> dict[str, Any]:
    """Every verdict in the cache, as stored (for `lookahead doctor`)."""
    return _read_cache(cache_file)


# ---- the parent side --------------------------------------------------------------------


def choose(
    path: Path,
    *,
    threads: int,
    cache_file: Path,
    build: str,
    candidates: Sequence[Candidate] = CANDIDATES,
    timeout: float | None = None,
    system_info: str = "",
) -> Verdict:
    """The first candidate that runs correctly here: from the cache, or probed now.

    Raises BackendUnsupported (and caches nothing) when every candidate fails.
    """
    key = probe_key(path, threads, candidates, build)
    names = [c.name for c in candidates]
    cached = _parse_verdict(_read_cache(cache_file).get(key), key, names)
    if cached is not None:
        return cached
    limit = timeout if timeout is not None else default_timeout(path)
    trials: list[Trial] = []
    for cand in candidates:
        trial = run_child(path, cand, threads, limit)
        trials.append(trial)
        if trial.ok:
            verdict = Verdict(cand.name, tuple(trials), key)
            # A timeout may only mean a busy machine (llama.cpp's spinning threads crawl when
            # another process holds a core): use the fallback now, but probe again next time
            # rather than give up the faster configuration for good.
            if not any(t.detail.startswith("timed out") for t in trials):
                _write_cache(cache_file, key, verdict, {"model": path.name, "threads": threads})
            return verdict
    raise BackendUnsupported(unsupported_message(trials, system_info))


def default_timeout(path: Path) -> float:
    """Seconds a child may take: loading reads the whole file, so allow for a slow disk."""
    return 60.0 + path.stat().st_size / 20e6


def run_child(path: Path, cand: Candidate, threads: int, timeout: float) -> Trial:
    """Probe one candidate in a fresh interpreter; whatever happens there, return a Trial."""
    cmd = [sys.executable, "-m", "lookahead.backend.probe", str(path), cand.name, str(threads)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            cwd=_package_root(),
        )
    except subprocess.TimeoutExpired:
        return Trial(cand.name, False, f"timed out after {timeout:.0f} s", time.perf_counter() - t0)
    except OSError as exc:
        raise BackendError(f"could not start the backend probe: {exc}") from exc
    seconds = time.perf_counter() - t0
    if proc.returncode < 0:
        return Trial(cand.name, False, f"killed by {_signal_name(-proc.returncode)}", seconds)
    report = _last_json_line(proc.stdout)
    if report is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Trial(cand.name, False, f"exited with code {proc.returncode}: {tail}", seconds)
    diff = report.get("max_diff")
    return Trial(
        cand.name,
        bool(report.get("ok")) and proc.returncode == 0,
        str(report.get("detail", "")),
        seconds,
        float(diff) if isinstance(diff, int | float) else None,
    )


def _package_root() -> str:
    # the child must import this same lookahead, also when it runs from a checkout
    return str(Path(__file__).resolve().parents[2])


def _signal_name(num: int) -> str:
    try:
        sig = signal.Signals(num)
    except ValueError:
        return f"signal {num}"
    text = signal.strsignal(sig) or ""
    return f"{sig.name} ({text.lower()})" if text else sig.name


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    return None


def unsupported_message(trials: Sequence[Trial], system_info: str) -> str:
    """One line: what failed, on which CPU path, and the command that fixes it."""
    tried = "; ".join(f"{t.candidate}: {t.detail}" for t in trials)
    features = build_features(system_info)
    missing = sorted(f for f in features if not cpu_has(f))
    pin = "llama-cpp-python==" + _llama_version()
    if any("SIGILL" in t.detail for t in trials):
        if missing:
            cause = (
                f"this llama-cpp-python was built for CPU features this CPU lacks "
                f"({', '.join(missing)}); rebuild it on this machine: "
                f"pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python {pin}"
            )
        else:
            flags = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
            cause = (
                f"llama.cpp hit an illegal instruction on this CPU (its build uses "
                f"{', '.join(sorted(features)) or 'unknown features'}); rebuild it without AMX: "
                f'CFLAGS="{flags}" CXXFLAGS="{flags}" '
                f"pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python {pin}"
            )
    else:
        cause = (
            "llama.cpp gives no usable results on this CPU; rebuild it on this machine: "
            f"pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python {pin}"
        )
    return f"llama.cpp failed in every configuration tried ({tried}): {cause}"


# llama.cpp system-info names -> /proc/cpuinfo flags that must be present for them
_FEATURE_FLAGS = {
    "AVX": ("avx",),
    "AVX2": ("avx2",),
    "AVX_VNNI": ("avx_vnni",),
    "FMA": ("fma",),
    "F16C": ("f16c",),
    "AVX512": ("avx512f",),
    "AVX512_VBMI": ("avx512_vbmi", "avx512vbmi"),
    "AVX512_VNNI": ("avx512_vnni", "avx512vnni"),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_INT8": ("amx_int8",),
    "AMX_BF16": ("amx_bf16",),
}


def build_features(system_info: str) -> set[str]:
    """CPU features llama.cpp says its build uses ("AVX2 = 1 | AMX_INT8 = 1 | ...")."""
    found = set()
    for item in system_info.replace("\n", "|").split("|"):
        name, _, value = item.partition("=")
        name = name.strip().rpartition(":")[2].strip()
        if value.strip() == "1" and name in _FEATURE_FLAGS:
            found.add(name)
    return found


def cpu_has(feature: str) -> bool:
    flags = set(cpu_flags())
    if not flags:
        return True  # unknown: do not accuse the CPU
    return any(f in flags for f in _FEATURE_FLAGS.get(feature, (feature.lower(),)))


def _llama_version() -> str:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:  # noqa: BLE001 - only for a message
        return "0.3.36"


# ---- the child side ---------------------------------------------------------------------


def _fault_for(name: str) -> str | None:
    spec = os.environ.get(FAULT_ENV, "")
    for item in spec.split(","):
        cand, _, kind = item.partition("=")
        if cand.strip() == name:
            return kind.strip()
    return None


def _child(path: str, name: str, threads: int) -> dict[str, Any]:
    """Load with candidate `name`, decode, check; a report for the parent."""
    import numpy as np

    from lookahead.backend.llama import BackendConfig, LlamaBackend
    from lookahead.core.draft import Draft

    cand = next(c for c in CANDIDATES if c.name == name)
    fault = _fault_for(name)
    if fault == "sigill":
        os.kill(os.getpid(), signal.SIGILL)
    if fault == "hang":
        time.sleep(3600)
    # the process's largest decode is a prefill chunk of n_batch tokens: large batches take other kernels
    big = BackendConfig().n_batch
    config = BackendConfig(n_ctx=2 * big, n_batch=big, n_threads=threads, max_branches=2, repack=cand.repack)
    backend = LlamaBackend(path, config)
    toks = backend.tokenize(_PROBE_TEXT)
    n = max(BATCH_SIZES)
    toks = toks if len(toks) >= n + 9 else (toks * (n + 9))[: n + 9]
    # a prefill batch first: large batches take other kernels (the AMX crash is there)
    backend.prefill(np.asarray(toks[:8], dtype=np.int32))
    start = backend.n_past
    ref = []
    for t in toks[8 : 8 + n]:
        ref.append(np.array(backend.verify(t, Draft.empty())[0], dtype=np.float32))
        backend.commit(Draft.empty(), [])
    worst = 0.0
    for size in BATCH_SIZES:
        backend.truncate(start)
        rows = backend.verify(toks[8], Draft.chain(toks[9 : 8 + size]))
        for i in range(size):
            row = np.array(rows[i], dtype=np.float32)
            if fault == "garbage":  # finite, so only the tolerance check can catch it
                row = row + np.linspace(-8.0, 8.0, len(row), dtype=np.float32)
            if fault == "nan" or not np.all(np.isfinite(row)):
                return {"ok": False, "detail": f"non-finite logits in a batch of {size}"}
            worst = max(worst, float(np.max(np.abs(row - ref[i]))))
    if not all(np.all(np.isfinite(r)) for r in ref):
        return {"ok": False, "detail": "non-finite logits decoding one token at a time"}
    backend.reset()
    backend.prefill(np.asarray((toks * (big // len(toks) + 1))[:big], dtype=np.int32))
    after = np.array(backend.verify(toks[0], Draft.empty())[0], dtype=np.float32)
    if not np.all(np.isfinite(after)):
        return {"ok": False, "detail": f"non-finite logits after a prefill batch of {big}"}
    backend.close()
    if worst > TOLERANCE:
        detail = f"batched logits differ from one-token logits by {worst:.2f} (> {TOLERANCE})"
        return {"ok": False, "detail": detail, "max_diff": worst}
    return {"ok": True, "detail": "ok", "max_diff": worst}


def main(argv: Sequence[str]) -> int:
    path, name, threads = argv[0], argv[1], int(argv[2])
    try:
        report = _child(path, name, threads)
    except BackendError as exc:
        report = {"ok": False, "detail": f"llama.cpp error: {exc}"}
    print(json.dumps(report), flush=True)
    return 0 if report.get("ok") else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

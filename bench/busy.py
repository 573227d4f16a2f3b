"""A busy machine: decode speed with one CPU-bound process beside the model, by thread count.

    python -m bench.busy                      # default model, code edits of the tune set
    python -m bench.busy --repeats 3 --max-tokens 128

Two conditions, idle and busy (a competing Python process spinning on one core), and five
methods on the same prompts, in a rotated order per repeat (interleaved):

    plain@all, plain@1     plain decoding with every CPU / one thread, pinned
    drafts@all, drafts@1   lookahead's default drafting, pinned (each with its own idle
                           cost curve, measured before the load starts)
    drafts                 lookahead's default: drafting, and the thread governor
                           (lookahead/threads.py) choosing the count as it goes

Each run starts like a new CLI process would: a fresh controller and governor. Reported:
decode seconds (median, min-max), and per condition each method relative to plain@all.
Results: bench/results/busy-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.run import git_commit, machine_info
from bench.tasks_tune import tasks_of as tune_tasks_of
from lookahead import models
from lookahead.api import Model, load
from lookahead.control import CostModel
from lookahead.draft_state import DraftConfig

RESULTS = Path(__file__).parent / "results"
METHODS = ("plain@all", "plain@1", "drafts@all", "drafts@1", "drafts")
SPIN = "while True: pass"
Costs = dict[int, dict[int, float]]  # threads -> calibrated t(size)


def _pin(model: Model, threads: int, costs: Costs) -> None:
    model.adapt_threads = False
    model.backend.set_threads(threads)
    b = model.backend
    model.drafting.cost = CostModel(costs[threads], slope=model.cost_slope, cells=lambda: b.n_used)
    model.drafting.controllers.clear()


def run_one(model: Model, method: str, prompt: str, max_tokens: int, costs: Costs) -> dict[str, Any]:
    full = max(costs)
    if method == "drafts":
        model.adapt_threads = True
        model.calibrate()  # cached: a fresh controller and governor at every thread count
    else:
        _pin(model, 1 if method.endswith("@1") else full, costs)
    draft = DraftConfig(enabled=not method.startswith("plain"))
    r = model.generate(prompt, chat=True, max_tokens=max_tokens, draft=draft)
    gov = model.governor
    return {
        "decode_s": r.stats.decode_s,
        "tokens": r.tokens,
        "alpha": r.stats.alpha,
        "switches": gov.switches if (method == "drafts" and gov is not None) else 0,
        "threads_end": model.backend.n_threads,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=models.DEFAULT_MODEL)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--tasks", default="rename_buf,attr_rename,logging", help="tune-set code edits")
    args = p.parse_args(argv)
    names = args.tasks.split(",")
    known = {t.id.split("/")[1]: t for t in tune_tasks_of("code_edit")}
    unknown = [n for n in names if n not in known]
    if unknown or args.repeats < 1 or args.max_tokens < 1:
        p.error(f"unknown tasks {', '.join(unknown)}; known: {', '.join(known)}" if unknown
                else "--repeats and --max-tokens must be >= 1")
    tasks = [known[n] for n in names]
    model = load(args.model)
    full = model.backend.n_threads
    # idle cost curves at every count first, before any load
    costs = {full: model.calibrate()}
    model.backend.set_threads(1)
    model.backend.reset()
    costs[1] = model.backend.measure_cost(sorted(costs[full]), repeats=3)
    model.backend.set_threads(full)
    runs: list[dict[str, Any]] = []
    for condition in ("idle", "busy"):
        spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if condition == "busy" else None
        try:
            time.sleep(1.0 if spinner else 0.0)
            for rep in range(args.repeats):
                for i, task in enumerate(tasks):
                    order = METHODS[(rep + i) % len(METHODS):] + METHODS[: (rep + i) % len(METHODS)]
                    for method in order:
                        rec = run_one(model, method, task.prompt, args.max_tokens, costs)
                        rec.update(condition=condition, task=task.id, method=method, repeat=rep)
                        runs.append(rec)
                        print(f"{condition:4s} {task.id:24s} {method:10s} {rec['decode_s']:6.2f}s "
                              f"threads@end {rec['threads_end']} switches {rec['switches']}", flush=True)
        finally:
            if spinner:
                spinner.kill()
                spinner.wait()
    write(args, model, runs, costs)


def write(args: argparse.Namespace, model: Model, runs: list[dict[str, Any]], costs: Costs) -> None:
    name = Path(model.backend.path).name.removesuffix(".gguf").lower()
    stem = RESULTS / f"busy-{args.model}"
    info = machine_info(model.backend.n_threads)
    plain_tokens = {(r["condition"], r["task"], r["repeat"]): r["tokens"] for r in runs if r["method"] == "plain@all"}
    lines = [
        f"# Busy machine: {name}, {args.max_tokens} tokens, {args.repeats} repeats, interleaved",
        "",
        f"Machine: {info.get('cpu', '?')}, {info.get('cpus_usable', '?')} CPUs. Commit {git_commit() or '?'}. "
        "Busy: one competing process spinning on one core. Speedup: plain@all's median decode "
        "time over the method's, per prompt, then the median over prompts (min-max over prompts).",
        "",
        "Idle t(n)/t(1): " + ", ".join(
            f"{k} threads: " + " ".join(f"{n}:{v / c[1]:.2f}" for n, v in sorted(c.items()) if n in (2, 4, 8, 16, 32))
            for k, c in sorted(costs.items(), reverse=True)
        ),
        "",
        "| condition | " + " | ".join(METHODS) + " | governor switches (median) |",
        "| --- | " + " | ".join("---" for _ in METHODS) + " | --- |",
    ]
    for condition in ("idle", "busy"):
        cells = []
        tasks = sorted({r["task"] for r in runs if r["condition"] == condition})
        for method in METHODS:
            ratios = []
            for task in tasks:
                here = [r for r in runs if (r["condition"], r["task"]) == (condition, task)]
                base = [r["decode_s"] for r in here if r["method"] == "plain@all"]
                mine = [r["decode_s"] for r in here if r["method"] == method]
                if base and mine:
                    ratios.append(statistics.median(base) / statistics.median(mine))
            cells.append(f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-")
        sw = [r["switches"] for r in runs if r["condition"] == condition and r["method"] == "drafts"]
        lines.append(f"| {condition} | " + " | ".join(cells) + f" | {statistics.median(sw) if sw else 0} |")
    same = sum(
        1 for r in runs if r["method"] != "plain@all"
        and r["tokens"] == plain_tokens.get((r["condition"], r["task"], r["repeat"]))
    )
    others = sum(1 for r in runs if r["method"] != "plain@all")
    lines += ["", f"Outputs equal to plain@all's: {same}/{others} runs.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps({"machine": info, "costs": costs, "runs": [
        {k: v for k, v in r.items() if k != "tokens"} for r in runs]}, indent=1))
    Path(f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

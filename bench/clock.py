"""Real against modeled: does the replay's clock predict the real runs of a bench folder?

`bench.replay` models each verify as t(n) from the calibrated cost curve. This checks that
clock against real runs, step by step: for every plain and adaptive run in a bench output
folder it sums the modeled seconds of the very steps the run took (its batch sizes, at the
cells the cache held then) and compares them with the measured verify seconds and the whole
decode time. So the clock is tested apart from the controller's decisions, which in a real
run also follow timing noise.

    python -m bench.clock bench/results/kinds-bench             # bench prompts
    python -m bench.clock /tmp/out --set tune

Per prompt it prints real speedup (median decode time, plain over adaptive), the modeled
one from the same steps, with and without the context slope (t(n) deeper in the cache, see
`CostModel`), and the adaptive runs' time outside verifies (drafting, acceptance, commits).
The cost curve is the one the bench recorded in its meta.json; the slope is this machine's
(calibrated now, or cached).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lookahead
from bench.run import RUNS_FILE, read_runs
from bench.tasks import KINDS, PROMPT_SETS, load_tasks
from lookahead.core.control import CostModel

METHODS = ("plain", "adaptive")


def modeled_seconds(run: dict[str, Any], prompt_len: int, cost: Callable[[int, int], float]) -> float:
    """Seconds of the run's verify steps on the modeled clock: step i verifies k_i + 1
    tokens with the prompt, the accepted output so far and the batch in the cache."""
    cells = prompt_len
    total = 0.0
    for k, accepted in zip(run["k_trace"], run["step_accepted"], strict=True):
        total += cost(k + 1, cells + k + 1)
        cells += accepted + 1
    return total


def compare(
    runs: list[dict[str, Any]], prompt_lens: dict[str, int], cal: dict[int, float], slope: dict[int, float]
) -> list[dict[str, Any]]:
    """Per task: real and modeled speedups (flat: an empty cache; deep: with the slope)."""
    flat = CostModel(cal)
    deep = CostModel(cal, slope=slope)

    def clock(model: CostModel) -> Callable[[int, int], float]:
        return lambda n, cells: flat.seconds(n) * model.factor_at(n, cells)

    per: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r["method"] not in METHODS or r["task"] not in prompt_lens or not r.get("k_trace"):
            continue
        d = per[(r["task"], r["method"])]
        d["decode"].append(r["decode_s"])
        d["verify"].append(sum(r["step_verify_s"]))
        d["flat"].append(modeled_seconds(r, prompt_lens[r["task"]], clock(flat)))
        d["deep"].append(modeled_seconds(r, prompt_lens[r["task"]], clock(deep)))
    rows = []
    for task in sorted({t for t, _ in per}):
        p, a = per.get((task, "plain")), per.get((task, "adaptive"))
        if not p or not a:
            continue

        def med(d: dict[str, list[float]], key: str) -> float:
            return statistics.median(d[key])

        rows.append({
            "task": task,
            "kind": task.split("/")[0],
            "cells": prompt_lens[task],
            "real": med(p, "decode") / med(a, "decode"),
            "flat": med(p, "flat") / med(a, "flat"),
            "deep": med(p, "deep") / med(a, "deep"),
            "outside": med(a, "decode") / med(a, "verify") - 1.0,
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.clock", description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path, help="a bench output folder (runs.jsonl, meta.json)")
    p.add_argument("--set", dest="prompt_set", choices=PROMPT_SETS, default="bench")
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = p.parse_args(argv)
    try:
        meta = json.loads((args.folder / "meta.json").read_text())
        cal = {int(n): float(t) for n, t in meta["verify_cost"]["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error(f"{args.folder} has no bench meta.json with a verify cost ({type(e).__name__}: {e})")
    runs = read_runs(args.folder / RUNS_FILE)
    model = lookahead.load(args.model)
    model.tuning.calibrate()
    tasks = load_tasks(list(KINDS), prompt_set=args.prompt_set)
    lens = {t.id: len(model.prompt_tokens(t.prompt, t.chat)) for t in tasks}
    rows = compare(runs, lens, cal, model.tuning.cost_slope)
    print(f"{'task':30s} {'cells':>5s}  {'real':>5s} {'flat':>5s} {'deep':>5s}  real/flat real/deep  outside")
    for r in rows:
        print(f"{r['task']:30s} {r['cells']:5d}  {r['real']:5.2f} {r['flat']:5.2f} {r['deep']:5.2f}"
              f"  {r['real'] / r['flat']:9.3f} {r['real'] / r['deep']:9.3f}  {r['outside']:6.1%}")
    print("median per kind (real / modeled):")
    for kind in KINDS:
        ks = [r for r in rows if r["kind"] == kind]
        if ks:
            flat = statistics.median(r["real"] / r["flat"] for r in ks)
            deep = statistics.median(r["real"] / r["deep"] for r in ks)
            print(f"  {kind:12s} no slope {flat:.3f}   with slope {deep:.3f}")


if __name__ == "__main__":
    main()

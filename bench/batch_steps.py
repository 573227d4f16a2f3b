"""Each request's pace in a batch, from the batch's own step timing, under each promise.

    python -m bench.batch_steps                          # default model, 4 slots, 3 rounds
    python -m bench.batch_steps --quick                  # 1 round, 48 tokens (a trial)
    python -m bench.batch_steps --model smollm2-135m --rounds 1 --max-tokens 16

Several requests decoded together (`serve --parallel`) share every step, so a request's time
is the time of the steps it took part in, not the wall time less its prefill (that moves
with the moment each request joins). Here each step is timed by the batch itself
(`lookahead.core.multi.StepInfo`: the prefill chunks' decodes, the verify decode, the whole
step), and a request is charged, for every step it took part in (prefilled in, or verified
in), that step's prefill and verify seconds. Its pace is its tokens over that sum.

A round is `--slots` requests of mixed kinds (code edit, report, prose chat prompts from
bench/tasks.py) added at once; the same rounds run in each mode, interleaved per repeat:

- plain: no drafts (the pace each request is promised a share of);
- fair: drafts only where no request's expected pace drops (`--fair`, slack 0);
- slack 0.1: no request's expected pace more than 10% below plain (the service's default);
- batch-total: the batch's total tokens/s (`--batch-total`).

Per mode: each request's pace over its pace in the plain mode (the same request, round and
neighbours), median per kind and the lowest over requests (the promise is about the expected
pace, so a request can fall under it by chance in one run), and the batch's tokens over the
sum of its steps. And where a step's time goes: decodes (prefill + verify) against the rest
(drafting, allocation, acceptance: Python). Results: bench/results/batch-steps-<model>-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.provenance import cpu_label, git_commit
from bench.tasks import Task, load_tasks
from lookahead.api import Model, load
from lookahead.backend.llama import BackendConfig
from lookahead.backend.slots import LlamaSlots
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done
from lookahead.models import catalog as models

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
KINDS = ("code_edit", "report", "prose")
PLAIN = "plain"
MODES: dict[str, DraftConfig] = {
    PLAIN: DraftConfig(enabled=False),
    "fair": DraftConfig(fairness_slack=0.0),
    "slack 0.1": DraftConfig(fairness_slack=0.1),
    "batch-total": DraftConfig(fairness_slack=None),
}


def rounds(n_rounds: int, slots: int, kinds: tuple[str, ...] = KINDS) -> list[list[Task]]:
    """Each round's requests: the kinds mixed within a round and rotated across rounds."""
    tasks = load_tasks(kinds)
    by_kind = {k: [t for t in tasks if t.kind == k] for k in kinds}
    out = []
    for r in range(n_rounds):
        mine = []
        for i in range(slots):
            pool = by_kind[kinds[(r + i) % len(kinds)]]
            mine.append(pool[(r * slots + i) % len(pool)])
        out.append(mine)
    return out


def charge(steps: list[dict[str, Any]]) -> dict[int, float]:
    """Seconds charged to each request id: for every step it was prefilled or verified in,
    that step's prefill and verify decodes (what it waited for in that step)."""
    charged: dict[int, float] = {}
    for s in steps:
        for rid in set(s["verified"]) | set(s["prefilled"]):
            charged[rid] = charged.get(rid, 0.0) + s["prefill_s"] + s["verify_s"]
    return charged


def run_round(model: Model, tasks: list[Task], draft: DraftConfig, max_tokens: int) -> dict[str, Any]:
    """The round's requests added at once to a batch of len(tasks) slots, stepped to the end."""
    slots = LlamaSlots(model.backend, len(tasks), separate=True)  # as serve: a KV stream per request
    try:
        batch = model.new_batch(slots, draft, govern=False)
        kind: dict[int, str] = {}
        tokens: dict[int, int] = {}
        order: list[int] = []
        for task in tasks:
            prompt = model.prompt_tokens(task.prompt, chat=task.chat)
            req = model.add_to(batch, prompt, max_tokens=max_tokens, draft=draft, cache_prompt=False)
            kind[req.id] = task.kind
            order.append(req.id)
        steps: list[dict[str, Any]] = []
        while not batch.idle:
            for req, event in batch.step():
                if isinstance(event, Done):
                    tokens[req.id] = event.result.stats.n_tokens
            i = batch.last
            steps.append(
                {"verify_s": i.verify_s, "prefill_s": i.prefill_s, "step_s": i.step_s,
                 "tokens": i.tokens, "verified": list(i.verified), "prefilled": list(i.prefilled)}
            )  # fmt: skip
    finally:
        slots.close()
    charged = charge(steps)
    requests = [
        {"kind": kind[rid], "tokens": tokens.get(rid, 0), "charged_s": charged.get(rid, 0.0)} for rid in order
    ]
    return {
        "requests": requests,
        "steps": len(steps),
        "verify_s": sum(s["verify_s"] for s in steps),
        "prefill_s": sum(s["prefill_s"] for s in steps),
        "step_s": sum(s["step_s"] for s in steps),
        "tokens": sum(r["tokens"] for r in requests),
    }


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per mode: pace ratios against plain (per kind medians, lowest), batch tokens/s, and
    the share of step time outside the decodes. `runs[mode][k]`: round k's run."""
    out: dict[str, Any] = {}
    for mode, mine in runs.items():
        ratios: dict[str, list[float]] = {}
        for run, base in zip(mine, runs[PLAIN], strict=True):
            for r, b in zip(run["requests"], base["requests"], strict=True):
                if r["charged_s"] > 0 and b["charged_s"] > 0 and r["tokens"] and b["tokens"]:
                    pace = r["tokens"] / r["charged_s"]
                    ratios.setdefault(r["kind"], []).append(pace / (b["tokens"] / b["charged_s"]))
        every = [x for v in ratios.values() for x in v]
        step_s = sum(r["step_s"] for r in mine)
        decode_s = sum(r["verify_s"] + r["prefill_s"] for r in mine)
        out[mode] = {
            "pace_vs_plain": {k: statistics.median(v) for k, v in sorted(ratios.items())},
            "lowest_pace_vs_plain": min(every) if every else None,
            "batch_tokens_per_s": sum(r["tokens"] for r in mine) / step_s if step_s else 0.0,
            "python_share": 1.0 - decode_s / step_s if step_s else 0.0,
            "steps": sum(r["steps"] for r in mine),
        }
    return out


def table(summary: dict[str, Any]) -> str:
    kinds = sorted({k for m in summary.values() for k in m["pace_vs_plain"]})
    head = "| mode | " + " | ".join(f"{k} pace vs plain" for k in kinds) + " | lowest | batch tok/s | Python share |"
    lines = [head, "|" + " --- |" * (len(kinds) + 4)]
    for mode, m in summary.items():
        cells = [f"{m['pace_vs_plain'].get(k, float('nan')):.2f}x" for k in kinds]
        low = m["lowest_pace_vs_plain"]
        lines.append(
            f"| {mode} | " + " | ".join(cells)
            + f" | {low:.2f}x | {m['batch_tokens_per_s']:.1f} | {100 * m['python_share']:.0f}% |"
        )  # fmt: skip
    return "\n".join(lines)




def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--slots", type=int, default=4, help="requests per round, decoded together")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1, help="each round again, modes interleaved")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="1 round, 48 tokens (a trial, not a measurement)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file (default: bench/results/...)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.max_tokens = 1, 48
    model = load(args.model, backend=BackendConfig(n_threads=args.threads))
    t0 = time.perf_counter()
    try:
        work = rounds(args.rounds, args.slots)
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for rep in range(args.repeats):
            for k, tasks in enumerate(work):
                for mode, draft in MODES.items():
                    run = run_round(model, tasks, draft, args.max_tokens)
                    if rep == 0:
                        runs[mode].append(run)
                    else:  # later repeats: each request's charged time summed with the first's
                        for r, more in zip(runs[mode][k]["requests"], run["requests"], strict=True):
                            r["tokens"] += more["tokens"]
                            r["charged_s"] += more["charged_s"]
                        for key in ("steps", "verify_s", "prefill_s", "step_s", "tokens"):
                            runs[mode][k][key] += run[key]
                    print(f"repeat {rep + 1} round {k + 1} {mode}: {run['tokens']} tokens, {run['step_s']:.1f} s")
    finally:
        model.close()
    summary = summarize(runs)
    commit = git_commit() or "unknown"
    record = {
        "model": args.model,
        "machine": f"{cpu_label()}, {os.cpu_count()} CPUs, {args.threads} threads",
        "commit": commit,
        "command": "python -m bench.batch_steps " + " ".join(argv or []),
        "slots": args.slots, "rounds": args.rounds, "repeats": args.repeats, "max_tokens": args.max_tokens,
        "seconds": time.perf_counter() - t0,
        "summary": summary,
        "runs": runs,
    }  # fmt: skip
    out = args.out or RESULTS / f"batch-steps-{Path(args.model).stem}-{commit}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(table(summary))
    print(f"written: {out}")


if __name__ == "__main__":
    main()

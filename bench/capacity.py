"""Capacity of `lookahead serve` replicas on this machine: a request mix's measured service
times, then the replicas needed for N developers at a p95 time-to-suggestion target (the
formula: bench/capacity_model.py; the write-up: docs/deploy.md).

    python -m bench.capacity                            # default model, 1 thread (~3 min idle)
    python -m bench.capacity --threads 1,2 --repeats 3 --developers 10,25,50 --target 2
    python -m bench.capacity --replan bench/results/capacity-qwen2.5-coder-0.5b.json --target 3 --imbalance 1.3

Measured per replica size (--threads): the prefill rate r (prompt tokens/s) and t(1) (one
decoded token's seconds), from plain decoding; and the service seconds S of each kind of
request in the mix, with drafts as `serve` runs them (prefill + decode, inside the engine:
no HTTP, no queue). Each figure twice: on the wall clock, and in the process's CPU seconds,
which with one thread are what a core of its own would take, even while other work shares
the machine (the wall clock then runs slower by the share of the CPU the process got).
The mix is an editor's:

- completion (80%): the 512 tokens of source code above the cursor, continued for 48 tokens
  (an editor sends the text around the cursor on each pause; each request prefills it all);
- edit (20%): a chat request to rewrite a 30-line function with type hints (~280 prompt
  tokens), answered with the whole function (up to 256 tokens): drafts copy most of it.

Source text comes from this repository's own files. Results: bench/results/capacity-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.capacity_model import Kind, moments, replicas_needed, service_quantile, time_to_suggestion
from lookahead.api import Model, load
from lookahead.backend.llama import BackendConfig
from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.models import catalog as models

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
SOURCES = ["lookahead/server/worker.py", "lookahead/server/memory.py", "lookahead/core/engine.py"]
COMPLETION = {"share": 0.8, "prompt": 512, "output": 48}
EDIT = {"share": 0.2, "lines": 30, "output": 256}
GREEDY = SamplingConfig(temperature=0.0)
# a completion's new prompt tokens when a prompt cache keeps the file's text from the last
# request (the "cached" scenario: computed from the measured prefill rate, not measured)
NEW_TOKENS = 32


def completion_prompts(model: Model, n: int) -> list[list[int]]:
    """n windows of 512 tokens of source code, each cut where a cursor could be."""
    text = "\n".join((ROOT / s).read_text() for s in SOURCES)
    tokens = model.prompt_tokens(text)
    step = max(1, (len(tokens) - COMPLETION["prompt"]) // max(1, n))
    return [tokens[i * step : i * step + COMPLETION["prompt"]] for i in range(n)]


def edit_prompts(model: Model, n: int) -> list[list[int]]:
    lines = "\n".join((ROOT / s).read_text() for s in SOURCES).splitlines()
    size = EDIT["lines"]
    out = []
    for i in range(n):
        chunk = "\n".join(lines[i * 3 * size : i * 3 * size + size])
        ask = ("Add type hints to every function in this code. Answer with the whole code only.\n\n"
               f"```python\n{chunk}\n```")
        out.append(model.prompt_tokens([{"role": "user", "content": ask}], chat=True))
    return out


def run(model: Model, tokens: list[int], max_tokens: int, drafts: bool) -> dict[str, float]:
    """One request through the engine: its wall seconds, and this process's CPU seconds."""
    draft = DraftConfig() if drafts else DraftConfig(enabled=False)
    c0 = time.process_time()
    result = model.generate("", tokens=tokens, max_tokens=max_tokens, sampling=GREEDY, draft=draft)
    cpu = time.process_time() - c0
    s = result.stats
    print(f"  {'drafts' if drafts else 'plain '} prompt {len(tokens)} tokens {s.n_tokens}: prefill {s.prefill_s:.2f} s,"
          f" decode {s.decode_s:.2f} s, cpu {cpu:.2f} s, accepted {s.accepted}", flush=True)
    return {"prompt": len(tokens), "tokens": s.n_tokens, "prefill_s": s.prefill_s, "decode_s": s.decode_s,
            "seconds": s.prefill_s + s.decode_s, "cpu_s": cpu, "accepted": s.accepted}


def prefill_cpu(model: Model, tokens: list[int]) -> float:
    """CPU seconds of prefilling `tokens` alone (the backend's prefill, nothing else)."""
    b = model.backend
    b.reset()
    c0 = time.process_time()
    b.prefill(np.asarray(tokens, dtype=np.int32))
    cpu = time.process_time() - c0
    b.reset()
    return cpu


def measure(model_name: str, threads: int, repeats: int) -> dict[str, Any]:
    """Wall-clock figures as measured, and CPU-time ones: with one thread, a request's CPU
    seconds are what it takes on a core of its own, whatever else runs on the machine."""
    t0 = time.perf_counter()
    model = load(model_name, backend=BackendConfig(n_ctx=4096, n_threads=threads))
    try:
        model.calibrate()
        print(f"{threads} thread(s): loaded and calibrated in {time.perf_counter() - t0:.1f} s", flush=True)
        run(model, completion_prompts(model, 1)[0], 8, drafts=False)  # warm up
        comp, edit = completion_prompts(model, repeats), edit_prompts(model, repeats)
        prefill = [prefill_cpu(model, t) for t in comp]
        plain = [run(model, t, COMPLETION["output"], drafts=False) for t in comp]
        kinds = {
            "completion": [run(model, t, COMPLETION["output"], drafts=True) for t in comp],
            "edit": [run(model, t, EDIT["output"], drafts=True) for t in edit],
        }
        edit_plain = [run(model, t, EDIT["output"], drafts=False) for t in edit]
    finally:
        model.close()
    med = statistics.median
    return {
        "threads": threads,
        "wall": {
            "prefill_tokens_per_s": med(r["prompt"] / r["prefill_s"] for r in plain),
            "t1_s": med(r["decode_s"] / r["tokens"] for r in plain + edit_plain if r["tokens"]),
            "edit_speedup": med(p["decode_s"] / d["decode_s"] for p, d in zip(edit_plain, kinds["edit"], strict=True)),
            "seconds": {k: med(r["seconds"] for r in v) for k, v in kinds.items()},
        },
        "cpu": {
            "prefill_tokens_per_s": med(len(t) / c for t, c in zip(comp, prefill, strict=True)),
            "t1_s": med((r["cpu_s"] - c) / r["tokens"] for r, c in zip(plain, prefill, strict=True)),
            "edit_speedup": med(p["cpu_s"] / d["cpu_s"] for p, d in zip(edit_plain, kinds["edit"], strict=True)),
            "seconds": {k: med(r["cpu_s"] for r in v) for k, v in kinds.items()},
        },
        "runs": {**kinds, "completion_plain": plain, "edit_plain": edit_plain, "prefill_cpu_s": prefill},
    }


def plan(figures: dict[str, Any], developers: list[int], rate: float, target: float, h: float) -> dict[str, Any]:
    mix = [Kind("completion", COMPLETION["share"], figures["seconds"]["completion"]),
           Kind("edit", EDIT["share"], figures["seconds"]["edit"])]
    mean, square = moments(mix)
    return {"mean_s": mean, "mean_square_s2": square, "s95": service_quantile(mix),
            "replicas": {n: replicas_needed(n, rate, mix, target, h) for n in developers},
            "t95_on_one_replica": {n: time_to_suggestion(h * n * rate, mix) for n in developers},
            "developers_per_replica_at_rho_1": (1 / mean) / (rate * h)}


def scenarios(size: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The measured figures (cpu, wall), and cpu with a completion's prefill cut to NEW_TOKENS."""
    cpu = size["cpu"]
    saved = (COMPLETION["prompt"] - NEW_TOKENS) / cpu["prefill_tokens_per_s"]
    completion = max(1e-3, cpu["seconds"]["completion"] - saved)
    cached = {**cpu, "seconds": {**cpu["seconds"], "completion": completion}}
    return {"cpu": cpu, "wall": size["wall"], "cached": cached}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} CPUs"


def write(out: dict[str, Any], path: Path) -> None:
    path.parent.joinpath(path.name + ".json").write_text(json.dumps(out, indent=1) + "\n")
    a = out["assumptions"]
    lines = [f"# Capacity: {out['model']} ({out['machine']})", "",
             f"{out['date']}. {out['note']}", "",
             f"Mix: completion {COMPLETION['share']:.0%} ({COMPLETION['prompt']} prompt tokens, "
             f"{COMPLETION['output']} out), edit {EDIT['share']:.0%} (~280 prompt tokens, up to {EDIT['output']} out). "
             f"Each developer sends {a['rate_per_developer']} requests/s; busiest replica x{a['imbalance']}; "
             f"p95 target {a['target_s']} s. 'wall': seconds as they passed here; 'cpu': the process's CPU "
             f"seconds (one thread: a core of its own); 'cached': cpu, with each completion prefilling "
             f"{NEW_TOKENS} new tokens instead of {COMPLETION['prompt']} (computed, not measured).", "",
             "| threads | clock | prefill tok/s | t(1) ms | S completion s | S edit s | edit speedup | E[S] s |"
             " S95 s | developers at rho = 1 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for size in out["sizes"]:
        for clock, f in scenarios(size).items():
            p = size["plan"][clock]
            lines.append(f"| {size['threads']} | {clock} | {f['prefill_tokens_per_s']:.0f} | {f['t1_s'] * 1000:.1f} | "
                         f"{f['seconds']['completion']:.2f} | {f['seconds']['edit']:.2f} | "
                         f"{f['edit_speedup']:.2f}x | {p['mean_s']:.2f} | {p['s95']:.2f} | "
                         f"{p['developers_per_replica_at_rho_1']:.0f} |")
    lines += ["", "| threads | clock | developers | replicas for p95 <= target |", "| --- | --- | --- | --- |"]
    for size in out["sizes"]:
        for clock in scenarios(size):
            for n, r in size["plan"][clock]["replicas"].items():
                lines.append(f"| {size['threads']} | {clock} | {n} | {r if r is not None else 'none: S95 > target'} |")
    path.parent.joinpath(path.name + ".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--threads", default="1", help="replica sizes to measure, a comma list [1]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--developers", default="10,25,50,100")
    ap.add_argument("--rate", type=float, default=0.1, help="requests/s per developer [0.1: one every 10 s]")
    ap.add_argument("--target", type=float, default=2.0, help="p95 time to suggestion, seconds [2]")
    ap.add_argument("--imbalance", type=float, default=1.0, help="busiest replica's share over the mean [1]")
    ap.add_argument("--note", default="", help="what else ran on the machine while measuring")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--replan", type=Path, default=None,
                    help="a capacity-*.json written earlier: plan again with these assumptions, measuring nothing")
    args = ap.parse_args(argv)
    developers = [int(x) for x in args.developers.split(",")]
    assumptions = {"rate_per_developer": args.rate, "target_s": args.target, "imbalance": args.imbalance}
    if args.replan is not None:
        out = json.loads(args.replan.read_text())
        sizes = out["sizes"]
    else:
        sizes = [measure(args.model, int(t), args.repeats) for t in args.threads.split(",")]
        out = {"model": str(args.model), "machine": cpu_name(), "date": time.strftime("%Y-%m-%d"),
               "note": args.note or "Nothing else ran on the machine.", "sizes": sizes}
    out["assumptions"] = assumptions
    for size in sizes:
        size["plan"] = {c: plan(f, developers, args.rate, args.target, args.imbalance)
                        for c, f in scenarios(size).items()}
        print(json.dumps({k: v for k, v in size.items() if k != "runs"}, indent=1))
    model = str(out["model"])
    name = (Path(model).stem if model.endswith(".gguf") else model).lower()
    RESULTS.mkdir(exist_ok=True)
    write(out, args.out or RESULTS / f"capacity-{name}")

if __name__ == "__main__":
    main()

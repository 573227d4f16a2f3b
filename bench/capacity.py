"""Capacity of `lookahead serve` replicas on this machine: a request mix's measured service
times, then the replicas needed for N developers at a p95 time-to-suggestion target (the
formula: bench/capacity_model.py; the write-up: docs/deploy.md).

    python -m bench.capacity                            # default model, 2 threads (~3 min)
    python -m bench.capacity --threads 1,2 --repeats 3 --developers 10,25,50 --target 2

Measured per replica size (--threads): the prefill rate r (prompt tokens/s) and t(1) (one
decoded token's seconds), from plain decoding; and the service seconds S of each kind of
request in the mix, with drafts as `serve` runs them (prefill + decode, inside the engine:
no HTTP, no queue). The mix is an editor's:

- completion (80%): the 512 tokens of source code above the cursor, continued for 48 tokens
  (an editor sends the text around the cursor on each pause; each request prefills it all);
- edit (20%): a chat request to rewrite a 30-line function with type hints (~400 prompt
  tokens), answered with the whole function (up to 256 tokens): drafts copy most of it.

Source text comes from this repository's own files. Results: bench/results/capacity-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

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
    draft = DraftConfig() if drafts else DraftConfig(enabled=False)
    result = model.generate("", tokens=tokens, max_tokens=max_tokens, sampling=GREEDY, draft=draft)
    s = result.stats
    print(f"  {'drafts' if drafts else 'plain '} prompt {len(tokens)} tokens {s.n_tokens}: prefill {s.prefill_s:.2f} s,"
          f" decode {s.decode_s:.2f} s, accepted {s.accepted}", flush=True)
    return {"prompt": len(tokens), "tokens": s.n_tokens, "prefill_s": s.prefill_s, "decode_s": s.decode_s,
            "seconds": s.prefill_s + s.decode_s, "accepted": s.accepted}


def measure(model_name: str, threads: int, repeats: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    model = load(model_name, backend=BackendConfig(n_ctx=4096, n_threads=threads))
    try:
        model.calibrate()
        print(f"{threads} thread(s): loaded and calibrated in {time.perf_counter() - t0:.1f} s", flush=True)
        run(model, completion_prompts(model, 1)[0], 8, drafts=False)  # warm up
        comp, edit = completion_prompts(model, repeats), edit_prompts(model, repeats)
        plain = [run(model, t, COMPLETION["output"], drafts=False) for t in comp]
        kinds = {
            "completion": [run(model, t, COMPLETION["output"], drafts=True) for t in comp],
            "edit": [run(model, t, EDIT["output"], drafts=True) for t in edit],
        }
        edit_plain = [run(model, t, EDIT["output"], drafts=False) for t in edit]
    finally:
        model.close()
    return {
        "threads": threads,
        "prefill_tokens_per_s": statistics.median(r["prompt"] / r["prefill_s"] for r in plain),
        "t1_s": statistics.median(r["decode_s"] / r["tokens"] for r in plain + edit_plain if r["tokens"]),
        "edit_speedup": statistics.median(p["decode_s"] / d["decode_s"] for p, d in zip(edit_plain, kinds["edit"],
                                                                                        strict=True)),
        "runs": {**kinds, "completion_plain": plain, "edit_plain": edit_plain},
        "seconds": {k: statistics.median(r["seconds"] for r in v) for k, v in kinds.items()},
    }


def plan(size: dict[str, Any], developers: list[int], rate: float, target: float, imbalance: float) -> dict[str, Any]:
    mix = [Kind("completion", COMPLETION["share"], size["seconds"]["completion"]),
           Kind("edit", EDIT["share"], size["seconds"]["edit"])]
    mean, square = moments(mix)
    need = {n: replicas_needed(n, rate, mix, target, imbalance) for n in developers}
    one = {n: time_to_suggestion(imbalance * n * rate, mix) for n in developers}
    return {"mean_s": mean, "mean_square_s2": square, "s95": service_quantile(mix), "replicas": need,
            "t95_on_one_replica": one, "max_developers_per_replica": int((1 / mean) / (rate * imbalance))}


def write(out: dict[str, Any], path: Path) -> None:
    path.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    a = out["assumptions"]
    lines = [f"# Capacity: {out['model']} ({out['machine']})", "",
             f"{out['date']}; {out['note']}", "",
             f"Mix: completion {COMPLETION['share']:.0%} ({COMPLETION['prompt']} prompt tokens, "
             f"{COMPLETION['output']} out), edit {EDIT['share']:.0%} (~400 prompt tokens, up to {EDIT['output']} out). "
             f"Each developer sends {a['rate_per_developer']} requests/s; busiest replica x{a['imbalance']}; "
             f"p95 target {a['target_s']} s.", "",
             "| threads | prefill tok/s | t(1) ms | S completion s | S edit s | edit decode speedup | E[S] s |"
             " S95 s | developers/replica (rho<1) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for size in out["sizes"]:
        p = size["plan"]
        lines.append(f"| {size['threads']} | {size['prefill_tokens_per_s']:.0f} | {size['t1_s'] * 1000:.1f} | "
                     f"{size['seconds']['completion']:.2f} | {size['seconds']['edit']:.2f} | "
                     f"{size['edit_speedup']:.2f}x | {p['mean_s']:.2f} | {p['s95']:.2f} | "
                     f"{p['max_developers_per_replica']} |")
    lines += ["", "| threads | developers | replicas for p95 <= target |", "| --- | --- | --- |"]
    for size in out["sizes"]:
        for n, r in size["plan"]["replicas"].items():
            lines.append(f"| {size['threads']} | {n} | {r if r is not None else 'none: S95 > target'} |")
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--threads", default="2", help="replica sizes to measure, a comma list [2]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--developers", default="10,25,50,100")
    ap.add_argument("--rate", type=float, default=0.1, help="requests/s per developer [0.1: one every 10 s]")
    ap.add_argument("--target", type=float, default=2.0, help="p95 time to suggestion, seconds [2]")
    ap.add_argument("--imbalance", type=float, default=1.0, help="busiest replica's share over the mean [1]")
    ap.add_argument("--note", default="", help="what else ran on the machine while measuring")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    developers = [int(x) for x in args.developers.split(",")]
    sizes = []
    for threads in (int(x) for x in args.threads.split(",")):
        size = measure(args.model, threads, args.repeats)
        size["plan"] = plan(size, developers, args.rate, args.target, args.imbalance)
        sizes.append(size)
        print(json.dumps({k: v for k, v in size.items() if k != "runs"}, indent=1))
    name = Path(str(args.model)).stem.lower()
    out = {"model": str(args.model), "machine": f"{platform.processor() or platform.machine()}",
           "date": time.strftime("%Y-%m-%d"), "note": args.note or "machine idle otherwise",
           "assumptions": {"rate_per_developer": args.rate, "target_s": args.target, "imbalance": args.imbalance},
           "sizes": sizes}
    RESULTS.mkdir(exist_ok=True)
    write(out, args.out or RESULTS / f"capacity-{name}")


if __name__ == "__main__":
    main()

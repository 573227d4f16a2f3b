"""Concurrent requests: one at a time (today's serial path) against one batched decode per
step for all of them (`serve --parallel`), through the library API (no HTTP).

    python -m bench.parallel                              # default model, full run
    python -m bench.parallel --quick                      # 1, 2, 4 clients, fewer tokens
    python -m bench.parallel --model smollm2-135m --clients 2 --max-tokens 8 --repeats 1

C clients each send a few requests one after another (closed loop) from a mix of code-edit,
report and prose chat prompts (bench/tasks.py), at C = 1, 2, 4, 8. Three ways to serve them:

- serial: one generation at a time with drafts (what `serve --parallel 1` does); a client's
  request waits for the ones ahead of it.
- serial, no drafts: the same, plain decoding: the baseline batching alone is measured against.
- parallel, no drafts: C slots, every step one decode of each running request's next token.
- parallel, drafts: the same with drafts, one node budget per step for the whole batch.

Per run: aggregate tokens/s (every request's tokens over the wall time of the level), the
same over the decode phase only (the wall time less the time spent prefilling prompts, which
batching does not change: on short outputs prefill is most of the wall time), and
per-request inter-token latency (its decode time after the first token over its tokens
after the first), p50 and p95 over requests. Beside each C, the bound C * t(1) / t(C) from
this machine's measured cost curve: the most batching C plain requests can gain in
aggregate. Results: bench/results/parallel-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from bench.provenance import run_info
from bench.tasks import Task, load_tasks
from lookahead.api import Model, load
from lookahead.backend.llama import BackendConfig
from lookahead.backend.slots import LlamaSlots
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Step
from lookahead.core.parallel_choice import batching_bound
from lookahead.models import catalog as models

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
KINDS = ("code_edit", "report", "prose")
MODES = ("serial", "serial, no drafts", "parallel, no drafts", "parallel, drafts")
# with --fair: batched drafts under strict per-request fairness (fairness slack 0) too
FAIR = "parallel, fair drafts"
ALL_MODES = (*MODES, FAIR)
# what each mode is compared with: the serial service with the same drafting, and for
# batched drafts, batching alone
BASE = {"parallel, no drafts": "serial, no drafts", "parallel, drafts": "serial", FAIR: "serial"}
DRAFTED = ("parallel, drafts", FAIR)  # the batched modes compared with batching alone
PLAIN = DraftConfig(enabled=False)
DRAFTS = DraftConfig()  # the service's default promise (fairness slack 0.1)
FAIR_DRAFTS = DraftConfig(fairness_slack=0.0)


def workload(clients: int, per_client: int, kinds: tuple[str, ...] = KINDS) -> list[list[Task]]:
    """Each client's requests, in order: the kinds mixed across clients and turns."""
    tasks = load_tasks(kinds)
    by_kind = {k: [t for t in tasks if t.kind == k] for k in kinds}
    out = []
    for c in range(clients):
        mine = []
        for j in range(per_client):
            kind = kinds[(c + j) % len(kinds)]
            pool = by_kind[kind]
            mine.append(pool[(c * per_client + j) % len(pool)])
        out.append(mine)
    return out


def _itl(times: list[float], n_tokens: int) -> float | None:
    """Seconds per token after the first, from the times each step's tokens arrived."""
    if n_tokens < 2 or len(times) < 2:
        return None
    return (times[-1] - times[0]) / (n_tokens - 1)


def run_serial(model: Model, queues: list[list[Task]], max_tokens: int, drafts: bool = True) -> dict[str, Any]:
    """One request at a time, clients served in turn (a FIFO of their requests)."""
    order = [q[j] for j in range(max(map(len, queues))) for q in queues if j < len(q)]
    itls: list[float] = []
    kinds: list[str] = []  # the kind of each itl's request
    tokens = 0
    prefill = 0.0
    t0 = time.perf_counter()
    for task in order:
        stamps: list[float] = []
        draft = DRAFTS if drafts else PLAIN
        for event in model.stream(task.prompt, chat=task.chat, max_tokens=max_tokens, draft=draft, cache_prompt=False):
            if isinstance(event, Step) and event.tokens:
                stamps.append(time.perf_counter())
            elif isinstance(event, Done):
                tokens += event.result.stats.n_tokens
                prefill += event.result.stats.prefill_s
                itl = _itl(stamps, event.result.stats.n_tokens)
                if itl is not None:
                    itls.append(itl)
                    kinds.append(task.kind)
    return {
        "wall_s": time.perf_counter() - t0, "tokens": tokens, "itl": itls, "kinds": kinds, "prefill_s": prefill,
    }  # fmt: skip


def run_batched(
    model: Model, queues: list[list[Task]], max_tokens: int, drafts: bool, govern: bool = False, fair: bool = False
) -> dict[str, Any]:
    """All clients at once, each in a slot; a client's next request joins when its last ends.
    `govern`: the thread governor chooses the count as `serve --parallel` does (else the
    count is the model backend's, pinned). `fair`: strict per-request fairness (slack 0)."""
    config = FAIR_DRAFTS if fair else DRAFTS
    slots = LlamaSlots(model.backend, len(queues), separate=True)  # as serve: a KV stream per request
    try:
        batch = model.new_batch(slots, config, govern=govern)
        pending = [deque(q) for q in queues]
        owner: dict[int, tuple[int, str]] = {}  # request id -> (client, kind of request)
        stamps: dict[int, list[float]] = {}
        itls: list[float] = []
        kinds: list[str] = []
        tokens = 0
        prefill = 0.0
        sizes: list[int] = []

        def send(client: int) -> None:
            if not pending[client]:
                return
            task = pending[client].popleft()
            prompt = model.prompt_tokens(task.prompt, chat=task.chat)
            req = model.add_to(
                batch, prompt, max_tokens=max_tokens, draft=config if drafts else PLAIN, cache_prompt=False
            )
            owner[req.id] = (client, task.kind)
            stamps[req.id] = []

        t0 = time.perf_counter()
        for c in range(len(queues)):
            send(c)
        while not batch.idle:
            events = batch.step()
            now = time.perf_counter()
            if batch.last.requests:
                sizes.append(batch.last.requests)
            for req, event in events:
                if isinstance(event, Step) and event.tokens:
                    stamps[req.id].append(now)
                elif isinstance(event, Done):
                    tokens += event.result.stats.n_tokens
                    prefill += event.result.stats.prefill_s  # its chunks' decodes: serial in the step
                    itl = _itl(stamps.pop(req.id), event.result.stats.n_tokens)
                    client, kind = owner.pop(req.id)
                    if itl is not None:
                        itls.append(itl)
                        kinds.append(kind)
                    send(client)
        wall = time.perf_counter() - t0
        threads = slots.n_threads
    finally:
        slots.close()
    gov = getattr(batch.after_verify, "governor", None)
    return {
        "wall_s": wall, "tokens": tokens, "itl": itls, "kinds": kinds, "prefill_s": prefill,
        "mean_batch": statistics.fmean(sizes) if sizes else 0.0,
        "switches": gov.switches if gov is not None else 0, "threads_end": threads,
    }  # fmt: skip


def _decode_s(run: dict[str, Any]) -> float:
    """The run's wall time less its prefill (older records have none: the wall time)."""
    return max(run["wall_s"] - run.get("prefill_s", 0.0), 1e-9)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--clients", default="1,2,4,8", help="comma-separated concurrency levels")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--per-client", type=int, default=3, help="requests each client sends in turn")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="1, 2, 4 clients, 64 tokens, 2 requests each, 1 repeat")
    ap.add_argument("--suffix", default="", help="added to the result files' names (--suffix=-x)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma list of request kinds to mix")
    ap.add_argument("--fair", action="store_true", help=f"also run '{FAIR}' (per-request fairness)")
    args = ap.parse_args(argv)
    try:
        levels = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        ap.error("--clients: a comma list of positive integers, e.g. 1,2,4,8")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--kinds: a comma list of {','.join(KINDS)}")
    if args.quick:
        levels = [c for c in levels if c <= 4] or [1, 2]
        args.max_tokens, args.per_client, args.repeats = min(args.max_tokens, 64), 2, 1

    path = models.resolve_model(args.model, models.default_cache_dir())
    model = load(path, backend=BackendConfig(n_ctx=8192, n_threads=args.threads))
    costs = model.tuning.calibrate()
    cost = CostModel(costs)
    bounds = {c: batching_bound(cost, c) for c in levels}
    print("cost curve t(n)/t(1): " + ", ".join(f"{n}: {t / costs[1]:.2f}" for n, t in sorted(costs.items())))
    print("bound C*t(1)/t(C): " + ", ".join(f"C={c}: {b:.2f}" for c, b in bounds.items()), flush=True)
    model.generate("Write a Python function that returns the square of x.", chat=True, max_tokens=8)  # warm

    records: list[dict[str, Any]] = []
    modes = ALL_MODES if args.fair else MODES
    for rep in range(args.repeats):
        for c in levels:
            queues = workload(c, args.per_client, kinds)
            k = (rep + c) % len(modes)
            for mode in modes[k:] + modes[:k]:  # interleaved, so drift hits every mode alike
                if mode.startswith("serial"):
                    run = run_serial(model, queues, args.max_tokens, drafts=mode == "serial")
                else:
                    drafts = mode.endswith(" drafts")
                    run = run_batched(model, queues, args.max_tokens, drafts=drafts, fair=mode == FAIR)
                records.append({"mode": mode, "clients": c, "repeat": rep, **run})
                print(f"repeat {rep + 1} C={c} {mode}: {run['tokens'] / run['wall_s']:.1f} tok/s", flush=True)

    rows = summarize(records, levels, bounds)
    kind_rows = summarize_kinds(records, levels)
    info = {
        **run_info(args.model, args.threads),
        "repeats": args.repeats,
        "max_tokens": args.max_tokens,
        "per_client": args.per_client,
        "kinds": list(kinds),
        "costs": {str(n): t for n, t in sorted(costs.items())},
        "bounds": {str(c): b for c, b in bounds.items()},
        "command": "python -m bench.parallel " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    RESULTS.mkdir(exist_ok=True)
    # the model name has dots ("qwen2.5-coder-0.5b"): build each name whole, no with_suffix
    stem = f"parallel-{Path(args.model).stem if args.model.endswith('.gguf') else args.model}{args.suffix}"
    data = {"info": info, "runs": records, "rows": rows, "kind_rows": kind_rows}
    (RESULTS / f"{stem}.json").write_text(json.dumps(data, indent=1))
    text = markdown(info, rows) + "\n" + kinds_markdown(kind_rows)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


def summarize(records: list[dict[str, Any]], levels: list[int], bounds: dict[int, float]) -> list[dict[str, Any]]:
    rows = []
    for c in levels:
        for mode in ALL_MODES:
            rs = [r for r in records if r["clients"] == c and r["mode"] == mode]
            if not rs:
                continue
            itl = [x for r in rs for x in r["itl"]]
            rows.append({
                "clients": c,
                "mode": mode,
                "tokens_per_s": statistics.median(r["tokens"] / r["wall_s"] for r in rs),
                "decode_tokens_per_s": statistics.median(r["tokens"] / _decode_s(r) for r in rs),
                "itl_p50_ms": 1000 * _pct(itl, 0.5),
                "itl_p95_ms": 1000 * _pct(itl, 0.95),
                "mean_batch": statistics.fmean(r.get("mean_batch", 1.0) for r in rs),
                "bound": bounds[c],
            })
    return rows


def summarize_kinds(records: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    """Per concurrency level, kind of request and mode: the median request's decode speed
    (1 / its inter-token latency), over every repeat's requests of that kind. In a mixed
    batch aggregate tokens/s has no per-kind share; a request's own pace has."""
    rows = []
    for c in levels:
        for kind in KINDS:
            for mode in ALL_MODES:
                itl = [
                    x
                    for r in records
                    if r["clients"] == c and r["mode"] == mode
                    for x, k in zip(r["itl"], r.get("kinds", ()), strict=False)
                    if k == kind
                ]
                if itl:
                    speed = statistics.median(1.0 / x for x in itl if x > 0)
                    rows.append({"clients": c, "kind": kind, "mode": mode, "requests": len(itl), "tokens_per_s": speed})
    return rows


def kinds_markdown(rows: list[dict[str, Any]]) -> str:
    """The per-kind table: each mode's median request pace, and batched drafts against
    batching alone and against the serial drafting service."""
    if not rows:
        return ""
    by = {(r["clients"], r["kind"], r["mode"]): r for r in rows}
    modes = ALL_MODES if any(r["mode"] == FAIR for r in rows) else MODES
    fair = modes == ALL_MODES
    out = [
        "By kind of request: the median request's decode pace (tokens/s after its first token, "
        "1 / its ITL), over the requests of that kind in every repeat.",
        "",
        "| clients | kind | requests | " + " | ".join(modes) + " | drafts vs batching | drafts vs serial |"
        + (" fair drafts vs batching |" if fair else ""),
        "| --- | --- | --- |" + " --- |" * (len(modes) + 2 + fair),
    ]

    def pace(c: int, kind: str, mode: str) -> float | None:
        r = by.get((c, kind, mode))
        return r["tokens_per_s"] if r else None

    for c, kind in dict.fromkeys((r["clients"], r["kind"]) for r in rows):
        paces = [pace(c, kind, m) for m in modes]
        cells = ["-" if p is None else f"{p:.1f}" for p in paces]
        drafts, batching, serial = (pace(c, kind, m) for m in ("parallel, drafts", "parallel, no drafts", "serial"))
        vs_b = f"{drafts / batching:.2f}x" if drafts and batching else "-"
        vs_s = f"{drafts / serial:.2f}x" if drafts and serial else "-"
        n = by.get((c, kind, "parallel, drafts"), {}).get("requests", "-")
        row = f"| {c} | {kind} | {n} | " + " | ".join(cells) + f" | {vs_b} | {vs_s} |"
        if fair:
            fd = pace(c, kind, FAIR)
            row += f" {fd / batching:.2f}x |" if fd and batching else " - |"
        out.append(row)
    return "\n".join(out) + "\n"


def markdown(info: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    out = [
        f"# Concurrent requests: {info['model']}",
        "",
        f"Machine: {info['cpu']}, {info['threads']} threads; commit {info['commit']}; "
        f"{info['repeats']} interleaved repeat(s); `{info['command'].strip()}`. Greedy decoding, "
        f"{info['max_tokens']} tokens at most per request, {info['per_client']} requests per client "
        f"({', '.join(info.get('kinds', KINDS))}). Aggregate tokens/s over the whole level, and over its decode "
        "phase (the wall time less prefill); inter-token latency (ITL) per request, p50 / p95 over "
        "requests. Bound: C * t(1) / t(C) from this machine's measured cost curve, the most "
        "batching C plain requests can gain in aggregate. `vs base`: decode-phase tokens/s over the "
        "serial service with the same drafting (no drafts: the serial plain service; drafts: the "
        "serial drafting service); `drafts vs batching`: batched drafts over batching alone. "
        f"`{FAIR}` (with --fair): drafts only where no request's expected pace drops.",
        "",
        "| clients | bound | mode | tokens/s | decode tokens/s | vs base | drafts vs batching "
        "| ITL p50 (ms) | ITL p95 (ms) | mean batch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by = {(r["clients"], r["mode"]): r for r in rows}

    def ratio(r: dict[str, Any], mode: str | None) -> str:
        base = by.get((r["clients"], mode)) if mode else None
        if base is None or not base.get("decode_tokens_per_s"):
            return "-"
        return f"{r['decode_tokens_per_s'] / base['decode_tokens_per_s']:.2f}x"

    for r in rows:
        batch = f"{r['mean_batch']:.2f}" if r["mode"].startswith("parallel") else "1"
        vs_batching = ratio(r, "parallel, no drafts") if r["mode"] in DRAFTED else "-"
        out.append(
            f"| {r['clients']} | {r['bound']:.2f} | {r['mode']} | {r['tokens_per_s']:.1f} | "
            f"{r.get('decode_tokens_per_s', float('nan')):.1f} | {ratio(r, BASE.get(r['mode']))} | {vs_batching} | "
            f"{r['itl_p50_ms']:.1f} | {r['itl_p95_ms']:.1f} | {batch} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()

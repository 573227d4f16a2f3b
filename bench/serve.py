"""The service under load: latency with and without drafts, and what its memory of earlier
requests is worth over a sequence of similar ones.

    python -m bench.serve                         # default model, full run (~25 min on 2 cores)
    python -m bench.serve --quick                 # fewer requests (~6 min)
    python -m bench.serve --model smollm2-135m --quick

Part 1, latency: clients send a mix of code-edit, report and prose chat requests over HTTP
(streaming) to one server; each request asks for drafts or not (`lookahead.enabled`), the
two modes alternating request by request, so both see the same machine state. Time to first
token (TTFT, from sending to the first content chunk; with 4 clients it includes waiting
for the model) and inter-token latency (ITL: a request's decode time over its tokens after
the first) at 1 and 4 concurrent clients, p50 and p95 over requests.

Part 2, memory: sequences of similar requests (one report template with new data each
time; several edits of one file), each sent in order to two servers of the same model,
one with the shared index and one without (a fresh API key per sequence, so each starts
with an empty memory), the two alternating sequence by sequence. Decode speed per position
in the sequence; from the second request on, the memory can draft what the earlier
answers wrote.

Results go to bench/results/serve-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.provenance import run_info
from bench.tasks import load_tasks
from lookahead.api import load
from lookahead.backend.llama import BackendConfig
from lookahead.models import catalog as models
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving

RESULTS = Path(__file__).parent / "results"

REPORT_TEMPLATE = (
    "Write the weekly status report. For each region in the table, one section in exactly "
    "this format:\n\n### <region>\n- Revenue: <revenue> (<change> vs last week)\n"
    "- Orders: <orders>\n- Status: <one short sentence>\n\n"
    "| region | revenue | change | orders |\n| --- | --- | --- | --- |\n{rows}\n"
)
REGIONS = ("North", "South", "East", "West", "Central", "Coast", "Valley", "Harbor")

EDIT_FILE = '''def summarize_orders(orders, currency="EUR"):
    """Total, count and average order value per customer."""
    totals = {}
    counts = {}
    for order in orders:
        customer = order["customer"]
        amount = order["amount"]
        if order.get("currency", currency) != currency:
            continue
        totals[customer] = totals.get(customer, 0.0) + amount
        counts[customer] = counts.get(customer, 0) + 1
    summary = []
    for customer, total in totals.items():
        count = counts[customer]
        summary.append({
            "customer": customer,
            "total": round(total, 2),
            "orders": count,
            "average": round(total / count, 2),
        })
    summary.sort(key=lambda row: row["total"], reverse=True)
    return summary
'''
EDITS = (
    "Rename the variable `totals` to `sums` everywhere.",
    "Add type hints to the function signature.",
    "Change the default currency to USD.",
    "Rename `summary` to `rows` everywhere.",
    "Round to 1 decimal place instead of 2.",
)


def report_sequence(seed: int, length: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(length):
        rows = "\n".join(
            f"| {r} | {rng.randint(10, 99)},{rng.randint(100, 999)} | {rng.choice('+-')}{rng.randint(1, 30)}% "
            f"| {rng.randint(50, 900)} |"
            for r in rng.sample(REGIONS, 5)
        )
        out.append(REPORT_TEMPLATE.format(rows=rows))
    return out


def edit_sequence(length: int) -> list[str]:
    return [
        f"{EDITS[i % len(EDITS)]} Change nothing else and reply with the complete function only.\n\n"
        f"```python\n{EDIT_FILE}```"
        for i in range(length)
    ]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stream_one(client: httpx.Client, prompt: str, max_tokens: int, drafts: bool, key: str = "") -> dict[str, Any]:
    """One streaming chat request; returns TTFT, ITL and the server's statistics."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "lookahead": {"enabled": drafts},
    }
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    t0 = time.perf_counter()
    first = last = None
    usage: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage, stats = chunk["usage"], chunk.get("lookahead", {})
                continue
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
    n = int(usage.get("completion_tokens", 0))
    ttft = (first or time.perf_counter()) - t0
    itl = (last - first) / (n - 1) if first is not None and last is not None and n > 1 else float("nan")
    return {"ttft": ttft, "itl": itl, "tokens": n, "drafts": drafts, **{f"srv_{k}": v for k, v in stats.items()}}


def latency(
    server: Running, prompts: list[str], clients: int, per_client: int, max_tokens: int
) -> list[dict[str, Any]]:
    """`clients` threads, each sending `per_client` requests, modes alternating."""
    out: list[dict[str, Any]] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=600) as c:
            for j in range(per_client):
                rec = stream_one(c, prompts[(i + j) % len(prompts)], max_tokens, drafts=(i + j) % 2 == 0)
                rec.update(clients=clients, client=i)
                with lock:
                    out.append(rec)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def summarize_latency(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for clients in sorted({r["clients"] for r in records}):
        for drafts in (False, True):
            rs = [r for r in records if r["clients"] == clients and r["drafts"] == drafts]
            ttft = [r["ttft"] for r in rs]
            itl = [r["itl"] for r in rs if r["itl"] == r["itl"]]
            rows.append({
                "clients": clients,
                "mode": "drafting" if drafts else "plain",
                "requests": len(rs),
                "ttft_p50_ms": 1e3 * percentile(ttft, 0.5),
                "ttft_p95_ms": 1e3 * percentile(ttft, 0.95),
                "itl_p50_ms": 1e3 * percentile(itl, 0.5),
                "itl_p95_ms": 1e3 * percentile(itl, 0.95),
            })
    return rows


def memory_runs(
    on: Running, off: Running, sequences: dict[str, list[list[str]]], max_tokens: int
) -> list[dict[str, Any]]:
    out = []
    for kind, seqs in sequences.items():
        for rep, seq in enumerate(seqs):
            key = f"bench-{kind}-{rep}"  # a fresh partition: the memory starts empty
            for label, server in (("memory on", on), ("memory off", off)):
                with httpx.Client(base_url=server.url, timeout=600) as c:
                    for pos, prompt in enumerate(seq):
                        rec = stream_one(c, prompt, max_tokens, drafts=True, key=key)
                        if server.service.memory is not None:
                            server.service.memory.wait_built(60)
                        rec.update(kind=kind, repeat=rep, position=pos + 1, mode=label)
                        out.append(rec)
    return out


def summarize_memory(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for kind in sorted({r["kind"] for r in records}):
        for pos in sorted({r["position"] for r in records if r["kind"] == kind}):
            row: dict[str, Any] = {"kind": kind, "position": pos}
            for mode in ("memory on", "memory off"):
                rs = [r for r in records if r["kind"] == kind and r["position"] == pos and r["mode"] == mode]
                tps = [r["tokens"] / r["srv_decode_s"] for r in rs if r.get("srv_decode_s")]
                row[mode] = statistics.median(tps) if tps else float("nan")
                row[mode + " alpha"] = statistics.median(r.get("srv_alpha", 0) for r in rs) if rs else float("nan")
            row["ratio"] = row["memory on"] / row["memory off"]
            rows.append(row)
    return rows


def markdown(info: dict[str, Any], lat: list[dict[str, Any]], mem: list[dict[str, Any]]) -> str:
    lines = [
        f"# lookahead serve: {info['model']}",
        "",
        f"Machine: {info['cpu']}, {info['threads']} threads; commit {info['commit']}; command `{info['command']}`.",
        "Greedy chat requests over HTTP (streaming), max_tokens "
        f"{info['max_tokens']}; one generation at a time in the server.",
        "",
        "## Latency (p50 / p95 over requests)",
        "",
        "| clients | mode | requests | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in lat:
        lines.append(
            f"| {r['clients']} | {r['mode']} | {r['requests']} | {r['ttft_p50_ms']:.0f} ms | "
            f"{r['ttft_p95_ms']:.0f} ms | {r['itl_p50_ms']:.1f} ms | {r['itl_p95_ms']:.1f} ms |"
        )
    lines += [
        "",
        "## Shared index over a sequence of similar requests (decode tokens/s, median over repeats)",
        "",
        "| sequence | request # | memory on | memory off | on / off | α on | α off |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in mem:
        lines.append(
            f"| {r['kind']} | {r['position']} | {r['memory on']:.1f} | {r['memory off']:.1f} | "
            f"{r['ratio']:.2f}x | {r['memory on alpha']:.2f} | {r['memory off alpha']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="fewer requests and repeats")
    args = ap.parse_args(argv)
    per_client = {1: 6, 4: 3} if args.quick else {1: 12, 4: 6}
    repeats, length = (1, 4) if args.quick else (2, 5)
    path = models.resolve_model(args.model, models.default_cache_dir())
    backend = BackendConfig(n_ctx=4096, n_threads=args.threads)
    tasks = [t for t in load_tasks(["code_edit", "report", "prose"]) if t.chat]
    prompts = [t.prompt for t in tasks]
    sequences = {
        "report, new data each time": [report_sequence(seed, length) for seed in range(repeats)],
        "edits of one file": [edit_sequence(length) for _ in range(repeats)],
    }
    keys = tuple(f"bench-{k}-{r}" for k in sequences for r in range(repeats))
    # no keys: the memory across requests is asked for, as the figures were measured with it
    cfg = ServeConfig(model_id=args.model, max_queue=64, index_scope="key")
    with serving(cfg, lambda: load(path, backend=backend)) as server:
        model = server.service.model
        with httpx.Client(base_url=server.url, timeout=600) as c:  # burn-in
            stream_one(c, "Write a Python function that returns the square of x.", 32, True)
        lat_records: list[dict[str, Any]] = []
        for clients in (1, 4):
            lat_records += latency(server, prompts, clients, per_client[clients], args.max_tokens)
        t1 = model.drafting.cost.seconds(1)
    mem_on = ServeConfig(model_id=args.model, api_keys=keys, shared_index=True)
    mem_off = ServeConfig(model_id=args.model, api_keys=keys, shared_index=False)
    with serving(mem_on, lambda: load(path, backend=backend)) as on, serving(
        mem_off, lambda: load(path, backend=backend)
    ) as off:
        mem_records = memory_runs(on, off, sequences, args.max_tokens)
    info = {
        **run_info(args.model, args.threads or "all"),
        "max_tokens": args.max_tokens,
        "t1_ms": 1e3 * t1,
        "command": "python -m bench.serve" + (" --quick" if args.quick else "") + f" --model {args.model}",
    }
    lat, mem = summarize_latency(lat_records), summarize_memory(mem_records)
    RESULTS.mkdir(exist_ok=True)
    # the model name has dots ("qwen2.5-coder-0.5b"): build each name whole, no with_suffix
    stem = f"serve-{Path(args.model).stem if args.model.endswith('.gguf') else args.model}"
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"info": info, "latency": lat_records, "memory": mem_records}, indent=1)
    )
    text = markdown(info, lat, mem)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

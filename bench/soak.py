"""A soak run of the service: many clients for a bounded time, hostile and ordinary requests
mixed, on loopback only. Not a test: a script that reports figures.

    python -m bench.soak --model smollm2-135m --minutes 10 --parallel 1,4
    python -m bench.soak --model smollm2-135m --minutes 1 --parallel 1     # a quick check

For each `--parallel` value, one server (127.0.0.1, a free port, an API key) and `--clients`
clients, each looping until the time is up over a random mix of:
greedy completions of fixed prompts (each compared with the same prompt's output when sent
alone at the start: on a batch-invariant model such as SmolLM2 they must be equal), streamed
chats (every SSE payload parsed, an error payload counted), streams left after a few chunks,
Predicted Outputs up to the context (a 400 past it is the right answer), bodies over the
limit (413 expected), and wrong keys (401 expected). Meanwhile a probe asks /health every
quarter second. Reported: requests by outcome, 5xx (should be 0), unexpected statuses,
outputs that differ from their solo output, /health latency (p50, p99, max), this process's
RSS growth after warm-up (the server runs in it), and the KV cells in use after the run
(should be 0). `--out FILE.md` writes the report; say there on what machine it ran and
whether the machine was shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from lookahead.api import load
from lookahead.backend import probe
from lookahead.backend.llama import BackendConfig
from lookahead.models import catalog as models
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving

KEY = "soak-key"
PROMPTS = ("def fibonacci(n):", "The history of Rome", "1, 2, 3, 4,", "SELECT name FROM users WHERE",
           "Dear team,", "import numpy as np\n")
CHATS = ("Name three colours.", "Write a haiku about the sea.", "What is 17 * 3?", "Explain recursion briefly.")
ACTIONS = ("greedy", "greedy", "stream", "disconnect", "predict", "oversized", "badkey")
MAX_TOKENS = 32


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Soak:
    """One server under `clients` clients until `deadline`; the tallies of what came back."""

    def __init__(self, server: Running, clients: int, seconds: float, slot_ctx: int) -> None:
        self.server = server
        self.clients = clients
        self.seconds = seconds
        self.slot_ctx = slot_ctx
        self.outcomes: Counter[str] = Counter()
        self.problems: list[str] = []
        self.health_s: list[float] = []
        self.solo: dict[str, str] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def client(self, key: str = KEY, timeout: float = 300) -> httpx.Client:
        # as bytes: a key with non-ASCII characters is sent as its UTF-8, as curl would
        auth = b"Bearer " + key.encode("utf-8")
        return httpx.Client(base_url=self.server.url, headers={b"authorization": auth}, timeout=timeout)

    def tally(self, action: str, status: int, expected: tuple[int, ...], detail: str = "") -> None:
        with self.lock:
            self.outcomes[f"{action} {status}"] += 1
            if status >= 500 or status not in expected:
                self.problems.append(f"{action}: {status} {detail[:200]}")

    # ---- the actions --------------------------------------------------------------------
    def greedy(self, c: httpx.Client, rng: random.Random) -> None:
        prompt = rng.choice(PROMPTS)
        r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
        self.tally("greedy", r.status_code, (200, 429), r.text)
        if r.status_code == 200 and r.json()["choices"][0]["text"] != self.solo[prompt]:
            with self.lock:
                self.outcomes["greedy differs from solo"] += 1
                self.problems.append(f"greedy output differs from its solo output for {prompt!r}")

    def stream(self, c: httpx.Client, rng: random.Random, leave_after: int | None = None) -> None:
        body = {"messages": [{"role": "user", "content": rng.choice(CHATS)}], "max_tokens": MAX_TOKENS,
                "temperature": 0.7, "seed": rng.randrange(1000), "stream": True}
        action = "disconnect" if leave_after else "stream"
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                self.tally(action, r.status_code, (429,), r.text)
                return
            seen, errors, done = 0, 0, False
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                seen += 1
                if data == "[DONE]":
                    done = True
                elif "error" in json.loads(data):
                    errors += 1
                if leave_after is not None and seen >= leave_after:
                    break
        ok = errors == 0 and (done or leave_after is not None)
        if not ok:
            with self.lock:
                self.outcomes[f"{action} error in stream"] += 1
                self.problems.append(f"{action}: {errors} error payloads, [DONE] seen: {done}")
            return
        self.tally(action, 200, (200,))

    def predict(self, c: httpx.Client, rng: random.Random) -> None:
        words = rng.randrange(self.slot_ctx // 4, self.slot_ctx + 64)  # up to (and past) the context
        text = " ".join(rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(words))
        body = {"prompt": "Repeat: " + text[:200], "max_tokens": MAX_TOKENS, "temperature": 0,
                "prediction": {"type": "content", "content": text}}
        r = c.post("/v1/completions", json=body)
        self.tally("predict", r.status_code, (200, 400, 429), r.text)

    def oversized(self, c: httpx.Client, rng: random.Random) -> None:
        r = c.post("/v1/completions", content=b'{"prompt": "' + b"x" * (9 << 20) + b'"}',
                   headers={"content-type": "application/json"})
        self.tally("oversized", r.status_code, (413,), r.text)

    def badkey(self, c: httpx.Client, rng: random.Random) -> None:
        with self.client(key=rng.choice(("wrong", "soak-key-2", "é"))) as bad:
            r = bad.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        self.tally("badkey", r.status_code, (401,), r.text)

    # ---- the run ------------------------------------------------------------------------
    def loop(self, i: int) -> None:
        rng = random.Random(i)
        deadline = time.monotonic() + self.seconds
        with self.client() as c:
            while time.monotonic() < deadline:
                action = rng.choice(ACTIONS)
                try:
                    if action == "disconnect":
                        self.stream(c, rng, leave_after=rng.randint(1, 3))
                    else:
                        getattr(self, action)(c, rng)
                except (httpx.HTTPError, ValueError) as exc:  # no answer at all (or not JSON)
                    with self.lock:
                        self.outcomes[f"{action} no answer"] += 1
                        self.problems.append(f"{action}: no answer: {exc!r}"[:200])

    def probe(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=30) as c:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                try:
                    c.get("/health")
                    waited = time.perf_counter() - t0
                except httpx.HTTPError:
                    waited = float("inf")
                with self.lock:
                    self.health_s.append(waited)
                self.stop.wait(0.25)

    def run(self) -> dict[str, Any]:
        with self.client() as c:  # each prompt alone first: the reference outputs
            for prompt in PROMPTS:
                body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
                self.solo[prompt] = c.post("/v1/completions", json=body).json()["choices"][0]["text"]
        prober = threading.Thread(target=self.probe, daemon=True)
        prober.start()
        warm = threading.Thread(target=self.loop, args=(-1,))  # a short warm-up, then RSS is taken
        seconds, self.seconds = self.seconds, min(10.0, self.seconds)
        warm.start()
        warm.join()
        self.seconds = seconds
        rss0 = rss_mb()
        threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(self.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        rss1 = rss_mb()
        service = self.server.service
        deadline = time.monotonic() + 60
        while service.worker.busy and time.monotonic() < deadline:
            time.sleep(0.1)
        self.stop.set()
        prober.join()
        slots = getattr(service.worker, "slots", None)
        cells = slots.n_used if slots is not None else service.model.backend.n_used
        five = sum(n for k, n in self.outcomes.items() if k.split()[-1].isdigit() and int(k.split()[-1]) >= 500)
        return {
            "wall_s": round(wall, 1),
            "requests": sum(n for k, n in self.outcomes.items() if k.split()[-1].isdigit()),
            "outcomes": dict(sorted(self.outcomes.items())),
            "5xx": five,
            "problems": self.problems[:20],
            "health_p50_ms": round(1000 * pct(self.health_s, 0.5), 1),
            "health_p99_ms": round(1000 * pct(self.health_s, 0.99), 1),
            "health_max_ms": round(1000 * max(self.health_s, default=0.0), 1),
            "rss_growth_mb": round(rss1 - rss0, 1),
            "kv_cells_after": cells,
        }


def markdown(model: str, minutes: float, clients: int, results: dict[int, dict[str, Any]], note: str) -> str:
    lines = [
        f"# Soak: {model}, {clients} clients, {minutes:g} min per server",
        "",
        f"Machine: {platform.machine()}, {probe.cpu_model()}, {os.cpu_count()} CPUs. {note}",
        "",
        "| --parallel | requests | 5xx | unexpected | differs from solo | /health p50 / p99 / max (ms) "
        "| RSS growth (MB) | KV cells after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, r in results.items():
        lines.append(
            f"| {n} | {r['requests']} | {r['5xx']} | {len(r['problems'])} | "
            f"{r['outcomes'].get('greedy differs from solo', 0)} | {r['health_p50_ms']} / {r['health_p99_ms']} / "
            f"{r['health_max_ms']} | {r['rss_growth_mb']} | {r['kv_cells_after']} |"
        )
    for n, r in results.items():
        lines += ["", f"`--parallel {n}` outcomes: " + ", ".join(f"{k}: {v}" for k, v in r["outcomes"].items())]
        lines += [f"- {p}" for p in r["problems"]]
    return "\n".join(lines) + "\n"


def loader(path: Path, backend: BackendConfig) -> Any:
    return lambda: load(path, backend=backend)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--minutes", type=float, default=10.0, help="per server")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", default="1,4", help="comma-separated --parallel values, one server each")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the report (markdown) here")
    ap.add_argument("--note", default="", help="a line for the report: the machine, whether it was shared")
    args = ap.parse_args(argv)
    path = models.resolve_model(args.model, models.default_cache_dir())
    results: dict[int, dict[str, Any]] = {}
    for n in (int(x) for x in args.parallel.split(",")):
        config = ServeConfig(model_id=args.model, api_keys=(KEY,), parallel=n, max_queue=32)
        backend = BackendConfig(n_ctx=args.n_ctx, n_threads=args.threads)
        with serving(config, loader(path, backend)) as server:
            print(f"--parallel {n}: {args.clients} clients for {args.minutes:g} min ...", flush=True)
            soak = Soak(server, args.clients, args.minutes * 60, server.service.worker.n_ctx)
            results[n] = soak.run()
        print(json.dumps(results[n], indent=1), flush=True)
    report = markdown(args.model, args.minutes, args.clients, results, args.note)
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()

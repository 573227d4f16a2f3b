"""A soak run of the service: many clients for a bounded time, hostile and ordinary requests
mixed, on loopback only. Not a test: a script that reports figures.

    python -m bench.soak                         # smollm2-135m, 8 clients, 10 min at --parallel 1, then 4
    python -m bench.soak --minutes 1 --no-save   # a quick check

For each `--parallel` value in turn, one `lookahead serve` process (127.0.0.1, a free port,
an API key; with --parallel > 1 also `--kv-per-request` where serve has it, one KV stream per
request, so that a request's output does not depend on its neighbours) and `--clients`
clients, each looping until the time is up over a random mix of: greedy completions and
greedy streamed chats of fixed prompts (each output compared with the same request's output
when sent alone before the load: on a batch-invariant model such as SmolLM2 they must be
equal), sampled streamed chats (every SSE payload parsed, an error
payload counted), streams left after a few chunks, greedy Predicted Outputs from 1/4 of the
context to past it (a 400 past it is the right answer; a 200 must equal the solo output),
bodies over the 8 MB limit with a Content-Length and chunked (413 expected), wrong keys
(401 expected), and hostile bodies: grammars that hang or crash llama.cpp's parser (left
recursion: 400; thousands of nested groups: served or 400), JSON schemas with large bounds
(served or 400), fields over the published limits (400), llama.cpp's routes with several
prompts or a long `/infill` suffix, `/tokenize` of a lone surrogate (400) or of a long text
with pieces. Meanwhile a probe asks /health every quarter second and samples the server
process's RSS.

Reported per run: requests by outcome; 5xx seen by the clients and counted in the server's
/metrics (both must be 0); other unexpected answers; greedy outputs that differ from their
solo output; /health latency p50 / p99 / max (p99 must stay under 1 s); the server's RSS
after a warm-up, at the end and at its peak; the KV cells in use once the server is idle
(/metrics: they must be the prompt cache's, the committed tokens each slot keeps for the
next prompt; the one-at-a-time worker keeps its last request's parked cells with them); its
exit status on SIGTERM. Written to
bench/results/soak-<commit>.json and .md (the table for the README's reliability section);
say with --note on what machine it ran and whether the machine was shared. The exit status
is 1 if any run failed a promise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.provenance import git_commit
from bench.run import machine_info
from bench.soak_report import markdown, metric, pct, verdict
from lookahead.models import catalog as models
from lookahead.server.spawn import CHECKOUT, ServeProcess

KEY = "soak-key"
PROMPTS = ("def fibonacci(n):", "The history of Rome", "1, 2, 3, 4,", "SELECT name FROM users WHERE",
           "Dear team,", "import numpy as np\n")
CHATS = ("Name three colours.", "Write a haiku about the sea.", "What is 17 * 3?", "Explain recursion briefly.")
ACTIONS = ("greedy", "greedy", "greedy_chat", "stream", "disconnect", "predict", "oversized", "oversized_chunked",
           "badkey", "hostile_grammar", "big_schema", "over_limit", "native", "tokenize")
MAX_TOKENS = 32
BODY_LIMIT = 8 << 20  # the service's request body limit
WARMUP_S = 10.0
PER_REQUEST_KV = "--kv-per-request"  # serve's flag for one KV stream per request, where it has one


class Soak:
    """One server under `clients` clients for `seconds`; the tallies of what came back."""

    def __init__(self, server: ServeProcess, clients: int, seconds: float, slot_ctx: int) -> None:
        self.server = server
        self.clients = clients
        self.seconds = seconds
        self.slot_ctx = slot_ctx
        self.outcomes: Counter[str] = Counter()
        self.problems: list[str] = []
        self.compared = 0
        self.differs = 0
        self.health_s: list[float] = []
        self.rss_mb: list[float] = []
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

    def compare(self, action: str, ref: str, text: str) -> None:
        """A greedy output against the same request's solo output."""
        with self.lock:
            self.compared += 1
            if text != self.solo[ref]:
                self.differs += 1
                self.problems.append(f"{action}: output differs from its solo output for {ref!r}: {text[:80]!r}")

    # ---- the requests -------------------------------------------------------------------
    @staticmethod
    def completion(prompt: str, **more: Any) -> dict[str, Any]:
        return {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, **more}

    @staticmethod
    def chat(content: str, **more: Any) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS, "temperature": 0,
                "stream": True, **more}

    def read_stream(self, c: httpx.Client, action: str, body: dict[str, Any], leave_after: int | None = None) -> str:
        """POST a chat stream; every payload parsed. The text, or "" when it failed or was left."""
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                self.tally(action, r.status_code, (429,), r.text)
                return ""
            seen, errors, done, parts = 0, 0, False, []
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                seen += 1
                if data == "[DONE]":
                    done = True
                    continue
                payload = json.loads(data)
                if "error" in payload:
                    errors += 1
                for choice in payload.get("choices", []):
                    parts.append(choice.get("delta", {}).get("content") or "")
                if leave_after is not None and seen >= leave_after:
                    break
        if errors or not (done or leave_after is not None):
            with self.lock:
                self.outcomes[f"{action} error in stream"] += 1
                self.problems.append(f"{action}: {errors} error payloads, [DONE] seen: {done}")
            return ""
        self.tally(action, 200, (200,))
        return "".join(parts) if leave_after is None else ""

    # ---- the actions --------------------------------------------------------------------
    def greedy(self, c: httpx.Client, rng: random.Random) -> None:
        prompt = rng.choice(PROMPTS)
        r = c.post("/v1/completions", json=self.completion(prompt))
        self.tally("greedy", r.status_code, (200, 429), r.text)
        if r.status_code == 200:
            self.compare("greedy", prompt, r.json()["choices"][0]["text"])

    def greedy_chat(self, c: httpx.Client, rng: random.Random) -> None:
        content = rng.choice(CHATS)
        text = self.read_stream(c, "greedy_chat", self.chat(content))
        if text:
            self.compare("greedy_chat", content, text)

    def stream(self, c: httpx.Client, rng: random.Random) -> None:
        self.read_stream(c, "stream", self.chat(rng.choice(CHATS), temperature=0.7, seed=rng.randrange(1000)))

    def disconnect(self, c: httpx.Client, rng: random.Random) -> None:
        body = self.chat(rng.choice(CHATS), temperature=0.7, seed=rng.randrange(1000))
        self.read_stream(c, "disconnect", body, leave_after=rng.randint(1, 3))

    def predict(self, c: httpx.Client, rng: random.Random) -> None:
        words = rng.randrange(self.slot_ctx // 4, self.slot_ctx + 64)  # up to (and past) the context
        text = " ".join(rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(words))
        prompt = rng.choice(PROMPTS)
        r = c.post("/v1/completions", json=self.completion(prompt, prediction={"type": "content", "content": text}))
        self.tally("predict", r.status_code, (200, 400, 429), r.text)
        if r.status_code == 200:  # a prediction only drafts: greedy output is the solo output
            self.compare("predict", prompt, r.json()["choices"][0]["text"])

    def oversized(self, c: httpx.Client, rng: random.Random) -> None:
        body = b'{"prompt": "' + b"x" * (BODY_LIMIT + (1 << 20)) + b'"}'
        r = c.post("/v1/completions", content=body, headers={"content-type": "application/json"})
        self.tally("oversized", r.status_code, (413,), r.text)

    def oversized_chunked(self, c: httpx.Client, rng: random.Random) -> None:
        def chunks() -> Iterator[bytes]:  # no Content-Length: the server finds out while reading
            yield b'{"prompt": "'
            for _ in range(BODY_LIMIT // (1 << 20) + 1):
                yield b"x" * (1 << 20)
            yield b'"}'

        r = c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
        self.tally("oversized_chunked", r.status_code, (413,), r.text)

    def badkey(self, c: httpx.Client, rng: random.Random) -> None:
        with self.client(key=rng.choice(("wrong", KEY + "-2", "é", "\ufeff" + KEY))) as bad:
            r = bad.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        self.tally("badkey", r.status_code, (401,), r.text)

    # ---- hostile bodies (each a 400, or served) ---------------------------------------------
    def hostile_grammar(self, c: httpx.Client, rng: random.Random) -> None:
        """Grammars that hung or crashed llama.cpp's parser: a left-recursion check that is
        exponential in the depth of `a ::= b | b` rules, and thousands of nested groups."""
        if rng.random() < 0.5:  # never parses in time: a 400
            n = rng.randint(40, 80)
            rules = "".join(f"a{i} ::= a{i + 1} | a{i + 1}\n" for i in range(n))
            grammar, action, expected = f"root ::= a0\n{rules}a{n} ::= \"x\"\n", "left_recursion", (400,)
        else:  # served where the parser copes, a 400 where it would crash
            depth = rng.randint(5_000, 30_000)
            grammar = "root ::= " + "(" * depth + '"x"' + ")" * depth + "\n"
            action, expected = "deep_nesting", (200, 400)
        r = c.post("/completion", json={"prompt": "hi", "n_predict": 1, "grammar": grammar})
        self.tally(action, r.status_code, (*expected, 429, 503), r.text)

    def big_schema(self, c: httpx.Client, rng: random.Random) -> None:
        """A legitimate schema with a large bound (llama-server accepts it; it once crashed this)."""
        bound = rng.choice((5_000, 100_000, 1_000_000))
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": bound}}}
        body = self.chat("Name a colour as JSON.", stream=False, max_tokens=8,
                         response_format={"type": "json_schema", "json_schema": {"schema": schema}})  # fmt: skip
        r = c.post("/v1/chat/completions", json=body)
        self.tally("big_schema", r.status_code, (200, 400, 429, 503), r.text)

    def over_limit(self, c: httpx.Client, rng: random.Random) -> None:
        """A field over its published limit: n_probs, logit_bias, stop, prompts, input_extra."""
        over = rng.choice((
            {"n_probs": 200_000},
            {"logit_bias": [[i, -1] for i in range(100_000)]},
            {"stop": [f"s{i}" for i in range(100)]},
            {"prompt": ["hi"] * 100},
            {"n_cmpl": 50},
        ))  # fmt: skip
        r = c.post("/completion", json={"prompt": "hi", "n_predict": 4, **over})
        self.tally("over_limit", r.status_code, (400,), r.text)

    def native(self, c: httpx.Client, rng: random.Random) -> None:
        """llama.cpp's /completion, plain or with several prompts, or /infill with a long
        suffix (this model has no FIM tokens: a 400 after the size checks)."""
        if rng.random() < 0.5:
            r = c.post("/completion", json={"prompt": rng.sample(PROMPTS, 2), "n_predict": 8, "temperature": 0})
            self.tally("native", r.status_code, (200, 429), r.text)
        else:
            body = {"input_prefix": "def f():\n", "input_suffix": "x = 1\n" * 250_000, "n_predict": 4}
            r = c.post("/infill", json=body)
            self.tally("native_infill", r.status_code, (400, 429), r.text)

    def tokenize(self, c: httpx.Client, rng: random.Random) -> None:
        """A lone surrogate (a 400) or a long text with pieces (off the event loop)."""
        if rng.random() < 0.5:
            r = c.post("/tokenize", content=b'{"content": "a\\ud800b"}', headers={"content-type": "application/json"})
            self.tally("tokenize_surrogate", r.status_code, (400,), r.text)
        else:
            r = c.post("/tokenize", json={"content": "word " * 200_000, "with_pieces": True})
            self.tally("tokenize", r.status_code, (200,), r.text)

    # ---- the run ------------------------------------------------------------------------
    def loop(self, i: int, seconds: float) -> None:
        rng = random.Random(i)
        deadline = time.monotonic() + seconds
        with self.client() as c:
            while time.monotonic() < deadline:
                action = rng.choice(ACTIONS)
                try:
                    getattr(self, action)(c, rng)
                except (httpx.HTTPError, ValueError) as exc:  # no answer at all (or not JSON)
                    with self.lock:
                        self.outcomes[f"{action} no answer"] += 1
                        self.problems.append(f"{action}: no answer: {exc!r}"[:200])

    def watch(self) -> None:
        """/health's latency and the server's RSS, every quarter second until `stop`."""
        with httpx.Client(base_url=self.server.url, timeout=30) as c:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                try:
                    c.get("/health")
                    waited = time.perf_counter() - t0
                except httpx.HTTPError:
                    waited = float("inf")
                rss = self.server.rss_mb()
                with self.lock:
                    self.health_s.append(waited)
                    self.rss_mb.append(rss)
                self.stop.wait(0.25)

    def solo_outputs(self) -> None:
        """Each greedy request alone, before any load: the reference outputs."""
        with self.client() as c:
            for prompt in PROMPTS:
                r = c.post("/v1/completions", json=self.completion(prompt))
                r.raise_for_status()
                self.solo[prompt] = r.json()["choices"][0]["text"]
            for content in CHATS:
                self.solo[content] = self.read_stream(c, "solo", self.chat(content))
        self.outcomes.pop("solo 200", None)

    def metrics(self) -> str:
        with self.client() as c:
            return c.get("/metrics").text

    def run(self) -> dict[str, Any]:
        self.solo_outputs()
        watcher = threading.Thread(target=self.watch, daemon=True)
        watcher.start()
        self.loop(-1, min(WARMUP_S, self.seconds))  # a short warm-up, then RSS is taken
        rss_start = self.server.rss_mb()
        threads = [threading.Thread(target=self.loop, args=(i, self.seconds)) for i in range(self.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        rss_end = self.server.rss_mb()
        text = self.metrics()
        deadline = time.monotonic() + 60  # until the server is idle: nothing running, nothing queued
        while metric(text, "lookahead_requests_running") + metric(text, "lookahead_queue_depth") > 0:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
            text = self.metrics()
        self.stop.set()
        watcher.join()
        by_status = [(k.rsplit(" ", 1)[-1], n) for k, n in self.outcomes.items()]
        return {
            "wall_s": round(wall, 1),
            "requests": sum(n for s, n in by_status if s.isdigit()),
            "outcomes": dict(sorted(self.outcomes.items())),
            "5xx": sum(n for s, n in by_status if s.isdigit() and int(s) >= 500),
            "server_5xx": int(metric(text, "lookahead_requests_total", {"status": "5.."})),
            "server_errors": int(metric(text, "lookahead_errors_total")),
            "unexpected": len(self.problems) - self.differs,
            "compared": self.compared,
            "differs_from_solo": self.differs,
            "problems": self.problems[:20],
            "health_samples": len(self.health_s),
            "health_p50_ms": round(1000 * pct(self.health_s, 0.5), 1),
            "health_p99_ms": round(1000 * pct(self.health_s, 0.99), 1),
            "health_max_ms": round(1000 * max(self.health_s, default=0.0), 1),
            "rss_start_mb": round(rss_start, 1),
            "rss_end_mb": round(rss_end, 1),
            "rss_peak_mb": round(max(self.rss_mb, default=rss_end), 1),
            "kv_cells_after": int(metric(text, "lookahead_kv_cells")),
            "kv_cells_cached_after": int(metric(text, "lookahead_kv_cells_cached")),
        }


def soak_one(args: argparse.Namespace, path: Path, parallel: int, workdir: Path) -> dict[str, Any]:
    """One server at `--parallel N`: started, soaked, stopped with SIGTERM."""
    extra = list(args.batch_arg) if parallel > 1 else []
    serve_args = ["--model", str(path), "--api-key", KEY, "--parallel", str(parallel), "--ctx-size",
                  str(args.ctx_size), "--threads", str(args.threads), "--queue", "32", "--log-level", "warning",
                  *extra]  # fmt: skip
    server = ServeProcess(serve_args, workdir / f"serve-{parallel}.log")
    with server:
        server.wait_healthy(600)
        props = httpx.get(server.url + "/props", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
        slot_ctx = int(props["default_generation_settings"]["n_ctx"])
        print(f"--parallel {parallel}: {args.clients} clients for {args.minutes:g} min ...", flush=True)
        run = Soak(server, args.clients, args.minutes * 60, slot_ctx).run()
        run["exit_code"] = server.stop(60)
    log = server.output()
    run.update(parallel=parallel, extra_args=extra, slot_ctx=slot_ctx, traceback="Traceback" in log)
    run["failed"] = verdict(run)
    if run["failed"]:
        run["log_tail"] = log[-3000:].replace(str(Path.home()), "~")  # no home directory in results
    return run


def batch_defaults() -> list[str]:
    """The serve flags a --parallel > 1 run gets unless --batch-arg says otherwise: one KV
    stream per request where this version of `lookahead serve` offers it, so that each
    request's greedy output is its solo output on a batch-invariant model."""
    out = subprocess.run([sys.executable, "-m", "lookahead.cli.main", "serve", "--help"], cwd=CHECKOUT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    return [PER_REQUEST_KV] if PER_REQUEST_KV in out.stdout else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="a batch-invariant model, so outputs can be compared")
    ap.add_argument("--minutes", type=float, default=10.0, help="per --parallel value")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", default="1,4", help="comma-separated --parallel values, one server each, in turn")
    ap.add_argument("--batch-arg", action="append", default=None,
                    help="an extra `lookahead serve` argument for the runs with --parallel > 1 (repeatable; "
                    f"default: {PER_REQUEST_KV} where serve has it; --batch-arg '' for none)")
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=CHECKOUT / "bench" / "results")
    ap.add_argument("--no-save", action="store_true", help="print the report only (a trial run)")
    ap.add_argument("--note", default="", help="a line for the report: the machine, whether it was shared")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.clients < 1:
        ap.error("--minutes must be > 0 and --clients >= 1")
    try:
        settings = [int(x) for x in args.parallel.split(",")]
    except ValueError:
        ap.error(f"--parallel takes comma-separated whole numbers, got {args.parallel!r}")
    if args.batch_arg is None:
        args.batch_arg = batch_defaults()
    args.batch_arg = [a for a in args.batch_arg if a]
    path = models.resolve_model(args.model, models.default_cache_dir())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the servers are stopped too
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        runs = [soak_one(args, path, n, Path(tmp)) for n in settings]
    for run in runs:
        print(json.dumps({k: v for k, v in run.items() if k != "log_tail"}, indent=1), flush=True)
    machine = machine_info(args.threads)
    record = {
        "commit": git_commit() or "unknown",
        "model": args.model,
        "minutes": args.minutes,
        "clients": args.clients,
        "machine": f"{machine['cpu']} ({machine['arch']}), {machine['cpus_usable']} CPUs usable, "
        f"llama-cpp-python {machine['versions']['llama-cpp-python']}",
        "machine_info": machine,
        "note": args.note,
        "runs": runs,
        "passed": not any(run["failed"] for run in runs),
    }
    report = markdown(record)
    print(report)
    if not args.no_save:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        stem = args.out_dir / f"soak-{record['commit']}"
        stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
        stem.with_suffix(".md").write_text(report)
        print(f"written: {stem}.json, {stem}.md")
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

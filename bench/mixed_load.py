"""The batched service against the serial one, end to end, as a user measures it.

    python -m bench.mixed_load                      # default model, ~6 min on a 2-vCPU machine
    python -m bench.mixed_load --repeats 1          # a trial
    python -m bench.mixed_load --model smollm2-135m --max-tokens 16 --repeats 1

Starts `lookahead serve` (a real process on loopback) with `--parallel 1` and with the
default (`--parallel -1`: what the measured cost curve picks), in turn, `--repeats` times
each (interleaved, so a slow spell of the machine hits both). Against each, `--clients`
clients send `--requests` chat requests between them (code edit, report and prose prompts
from bench/tasks.py, mixed; greedy, `--max-tokens` each), each client one request after
another. Measured per run: the aggregate completion tokens per second (every response's
`usage.completion_tokens` over the wall time from the first request sent to the last answer,
prefill included, the model's load and calibration not), and the N the default picked
(`lookahead_parallel_slots` in /metrics). Reported: the medians, and the default's aggregate
over the serial one's (the ratio the default must keep at or above 1). Results:
bench/results/mixed-load-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.provenance import cpu_label, git_commit
from bench.tasks import Task, load_tasks
from lookahead.models import catalog as models
from lookahead.server.background import free_port

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
KINDS = ("code_edit", "report", "prose")
CONFIGS = {"serial": ["--parallel", "1"], "default": []}  # the default: --parallel -1


def mix(requests: int, kinds: tuple[str, ...] = KINDS) -> list[Task]:
    """`requests` prompts, the kinds taken in turn."""
    tasks = load_tasks(kinds)
    by_kind = {k: [t for t in tasks if t.kind == k] for k in kinds}
    out = []
    for i in range(requests):
        pool = by_kind[kinds[i % len(kinds)]]
        out.append(pool[(i // len(kinds)) % len(pool)])
    return out


class Server:
    """`lookahead serve` in a child process on a free loopback port, until `stop`."""

    def __init__(self, model: str, threads: int, extra: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["serve", "--model", model, "--port", str(self.port), "--threads", str(threads), *extra]
        code = "from lookahead.cli.main import app; app()"
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 600.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode} (see {self._log.name})")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError("the server did not become ready")

    def slots(self) -> int:
        text = httpx.get(self.url + "/metrics", timeout=10.0).text
        found = re.search(r"^lookahead_parallel_slots ([0-9.e+-]+)$", text, re.M)
        return int(float(found.group(1))) if found else 1

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def ask(client: httpx.Client, task: Task, max_tokens: int) -> int:
    """One greedy request; its completion tokens."""
    if task.chat:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": task.prompt}]}
        path = "/v1/chat/completions"
    else:
        body, path = {"prompt": task.prompt}, "/v1/completions"
    body.update(max_tokens=max_tokens, temperature=0)
    r = client.post(path, json=body, timeout=600.0)
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def load_run(url: str, tasks: list[Task], clients: int, max_tokens: int) -> dict[str, Any]:
    """`clients` threads, client c sending tasks c, c + clients, ... one after another."""
    tokens = [0] * clients
    errors: list[str] = []

    def client(c: int) -> None:
        with httpx.Client(base_url=url) as http:
            for task in tasks[c::clients]:
                try:
                    tokens[c] += ask(http, task, max_tokens)
                except httpx.HTTPError as exc:
                    errors.append(f"{task.id}: {exc}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"tokens": sum(tokens), "wall_s": wall, "tok_s": sum(tokens) / wall, "errors": errors}




def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=8, help="requests in all, shared by the clients")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=None,
                    help="compare this --parallel with the serial service instead of the default")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file (default: bench/results/...)")
    args = ap.parse_args(argv)
    configs = dict(CONFIGS)
    if args.parallel is not None:
        configs["default"] = ["--parallel", str(args.parallel)]
    tasks = mix(args.requests)
    commit = git_commit() or "unknown"
    logs = Path(tempfile.mkdtemp(prefix="mixed-load-"))  # the servers' logs, if one fails
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    t0 = time.perf_counter()
    for rep in range(args.repeats):
        for name, extra in configs.items():
            server = Server(args.model, args.threads, extra, logs / f"mixed-load-{name}-{rep + 1}.log")
            try:
                server.wait_ready()
                with httpx.Client(base_url=server.url) as http:  # warm: the first request's one-off costs
                    ask(http, Task("warm", "prose", "Say hi."), 4)
                run = load_run(server.url, tasks, args.clients, args.max_tokens)
                run["parallel"] = server.slots()
            finally:
                server.stop()
            runs[name].append(run)
            print(f"repeat {rep + 1} {name} (--parallel {run['parallel']}): {run['tokens']} tokens in "
                  f"{run['wall_s']:.1f} s, {run['tok_s']:.1f} tok/s{', errors' if run['errors'] else ''}")  # fmt: skip
    med = {name: statistics.median(r["tok_s"] for r in rs) for name, rs in runs.items()}
    ratio = med["default"] / med["serial"] if med["serial"] else float("nan")
    record = {
        "model": args.model,
        "machine": f"{cpu_label()}, {os.cpu_count()} CPUs, {args.threads} threads",
        "commit": commit,
        "command": "python -m bench.mixed_load " + " ".join(argv if argv is not None else sys.argv[1:]),
        "clients": args.clients, "requests": args.requests, "max_tokens": args.max_tokens,
        "repeats": args.repeats, "kinds": list(KINDS),
        "median_tok_s": med,
        "default_over_serial": ratio,
        "default_parallel": sorted({r["parallel"] for r in runs["default"]}),
        "seconds": time.perf_counter() - t0,
        "runs": runs,
    }  # fmt: skip
    suffix = "" if args.parallel is None else f"-parallel{args.parallel}"
    out = args.out or RESULTS / f"mixed-load-{commit}{suffix}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"median aggregate tok/s: serial {med['serial']:.1f}, default {med['default']:.1f} "
          f"(--parallel {record['default_parallel']}): {ratio:.2f}x")  # fmt: skip
    print(f"written: {out}")


if __name__ == "__main__":
    main()

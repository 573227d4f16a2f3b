"""An editing session replayed against code-completion servers, as an editor plugin drives them.

    python -m bench.editing --llama-server PATH          # lookahead vs llama-server, ~12 min on 2 cores
    python -m bench.editing --quick --llama-server PATH  # one short session, a few minutes
    python -m bench.editing --servers lookahead          # lookahead serve alone

The session (`bench/editing_session.py`): files of this repository and of Python's standard
library (`stdlib:json/decoder.py`), a cursor moved into a function body, a few lines typed there
character by character, and at each pause the `/infill` request llama.vim sends (its fields and
defaults: two 64-line chunks of neighbouring files as `input_extra`, `n_predict` 128,
`t_max_predict_ms` 1000, `cache_prompt`; 128 lines above the cursor and 16 below, where
llama.vim sends up to 256 and 64, so that the default run fits in 15 minutes on 2 cores:
`--prefix-lines 256 --suffix-lines 64` for its own), after the `n_predict: 0` warm-up llama.vim
sends when the cursor arrives. No pause starts after `--time-limit` seconds (900), the first
excepted: a slower machine measures fewer requests, and says so.

Every server gets the same requests, interleaved request by request (the order rotates, so
none always goes first on a machine that warms up or gets busier),
each server a process of its own on loopback: `lookahead serve` and llama.cpp's
`llama-server` with n-gram drafting off (`server_plain`) and on (`server_ngram_simple`,
`--spec-type ngram-simple`), same model file, same threads, one slot each.

Per request: time to the first token (TTFT, from sending), time to the complete suggestion,
tokens written within the budget (arrived no later than `t_max_predict_ms` after the first
token: what the editor's budget lets the server write), prompt tokens reused from the cache,
drafted and accepted tokens. Results: bench/results/editing-<commit>.{json,md}, naming the
machine. Each repeat uses its own API key on lookahead, so its memory of earlier requests
starts empty for each repeat, as llama-server's n-gram drafts do.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
import numpy as np

from bench.editing_session import BUDGET_MS, N_PREDICT, Session, infill_body, session, warm_up_body
from bench.llama_server import SERVER_METHODS, server_command
from bench.provenance import git_commit
from lookahead.backend.probe import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
# this repository's files and the standard library's, alternating (`stdlib:` names a file of the
# running Python's standard library; its neighbours are the other modules of its package)
FILES = (
    "lookahead/core/engine.py",
    "stdlib:json/decoder.py",
    "lookahead/index/ngram.py",
    "stdlib:asyncio/queues.py",
    "lookahead/server/llamacpp/run.py",
)
STDLIB = "stdlib:"
SERVERS = ("lookahead", "server_plain", "server_ngram_simple")


@dataclass
class Record:
    """One request's outcome on one server."""

    server: str
    repeat: int
    session: str
    pause: int
    ttft_s: float  # sending to the first token (nan: no token came)
    total_s: float  # sending to the complete suggestion
    n_tokens: int
    in_budget: int  # tokens arrived within t_max_predict_ms of the first one
    prompt_n: int  # prompt tokens
    cached: int  # of them, reused from the cache
    drafted: int
    accepted: int
    content: str


# ---- the servers ---------------------------------------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server process on loopback; `key`: the bearer key for a repeat (lookahead only)."""

    def __init__(self, name: str, cmd: list[str], port: int, keys: list[str] | None = None) -> None:
        self.name, self.cmd, self.keys = name, cmd, keys
        self.url = f"http://127.0.0.1:{port}"
        self.log: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        # set to a list to keep each /infill request sent and its answer, with the tokens
        # written (bench/vim_replay.py records a session this way)
        self.answers: list[tuple[dict[str, Any], dict[str, Any]]] | None = None

    def headers(self, repeat: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[repeat]}"} if self.keys else {}

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log.read()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2, headers=self.headers(0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer /health within {timeout:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def start_servers(
    names: list[str],
    model: Path,
    model_name: str,
    llama_server: Path | None,
    threads: int,
    n_ctx: int,
    repeats: int,
    keys_dir: Path,
) -> list[Server]:
    servers = []
    for name in names:
        port = _free_port()
        if name == "lookahead":
            keys = [f"editing-bench-{r}-{os.getpid()}" for r in range(repeats)]
            key_file = keys_dir / "keys.txt"
            key_file.write_text("\n".join(keys) + "\n")
            cmd = [sys.executable, "-m", "lookahead.cli.main", "serve", "--model", model_name, "--port", str(port),
                   "--ctx-size", str(n_ctx), "--threads", str(threads), "--parallel", "1",
                   "--api-key-file", str(key_file)]  # fmt: skip
            servers.append(Server(name, cmd, port, keys))
        else:
            if llama_server is None:
                raise SystemExit(f"{name} needs --llama-server PATH (a llama-server binary)")
            cmd = server_command(llama_server, model, port, threads, n_ctx, SERVER_METHODS[name])
            servers.append(Server(name, cmd, port))
    return servers


# ---- one request -------------------------------------------------------------------------------
def ask(server: Server, body: dict[str, Any], repeat: int, budget_s: float) -> dict[str, Any]:
    """Send one streamed /infill request; its timings as the client saw them and the server's
    statistics from its last event."""
    t0 = time.perf_counter()
    first: float | None = None
    n_tokens = in_budget = 0
    content = ""
    final: dict[str, Any] = {}
    with (
        httpx.Client(timeout=600, headers=server.headers(repeat)) as c,
        c.stream("POST", server.url + "/infill", json=body) as r,
    ):
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"{server.name}: HTTP {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if not data or data == "[DONE]":
                continue
            event = json.loads(data)
            now = time.perf_counter()
            got = len(event.get("tokens") or [])
            if got and first is None:
                first = now
            n_tokens += got
            if got and first is not None and now - first <= budget_s:
                in_budget += got
            content += event.get("content", "")
            if event.get("stop"):
                final = event
    total = time.perf_counter() - t0
    timings = final.get("timings") or {}
    return {
        "ttft_s": (first - t0) if first is not None else float("nan"),
        "total_s": total,
        "n_tokens": n_tokens,
        "in_budget": in_budget,
        "prompt_n": int(final.get("tokens_evaluated") or 0),
        # llama.cpp's `timings.cache_n` is the prompt's reused tokens (its `tokens_cached`
        # counts every cell the slot holds after the request, output included)
        "cached": int(timings.get("cache_n", final.get("tokens_cached")) or 0),
        "drafted": int(timings.get("draft_n") or 0),
        "accepted": int(timings.get("draft_n_accepted") or 0),
        "content": content,
    }


def warm(server: Server, body: dict[str, Any], repeat: int) -> float:
    t0 = time.perf_counter()
    r = httpx.post(server.url + "/infill", json=body, headers=server.headers(repeat), timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"{server.name}: warm-up HTTP {r.status_code}: {r.text[:300]}")
    return time.perf_counter() - t0


# ---- the run -----------------------------------------------------------------------------------
def sessions(files: list[str], args: argparse.Namespace) -> list[Session]:
    out = []
    for f in files:
        root = Path(sysconfig.get_paths()["stdlib"]) if f.startswith(STDLIB) else ROOT
        path = root / f.removeprefix(STDLIB)
        if not path.is_file():
            where = "the standard library" if f.startswith(STDLIB) else "this repository"
            raise SystemExit(f"no such file in {where}: {f.removeprefix(STDLIB)}")
        neighbours = sorted(p for p in path.parent.glob("*.py") if p != path and p.name != "__init__.py")
        label = STDLIB if root != ROOT else ""
        out.append(session(path, root, neighbours, label=label, n_lines=args.lines, n_extra=args.extra,
                           pause_chars=args.pause_chars, n_prefix=args.prefix_lines,
                           n_suffix=args.suffix_lines))  # fmt: skip
    return out


def run(
    servers: list[Server], plan: list[Session], args: argparse.Namespace, log: Any, deadline: float
) -> tuple[list[Record], bool]:
    """Every pause of every session, on every server, `args.repeats` times; (records, whether
    the time limit cut the run short: no pause but the first starts past `deadline`)."""
    records: list[Record] = []
    budget_s = args.budget_ms / 1000
    turn = 0
    for repeat in range(args.repeats):
        for s in plan:
            if records and time.monotonic() > deadline:
                return records, True
            for srv in servers:
                warm(srv, warm_up_body(s), repeat)
            for i, p in enumerate(s.pauses):
                if records and time.monotonic() > deadline:
                    return records, True
                body = infill_body(
                    s, p, n_predict=args.n_predict, budget_ms=args.budget_ms, seed=i, greedy=args.sampling == "greedy"
                )
                order = servers[turn % len(servers) :] + servers[: turn % len(servers)]
                turn += 1
                for srv in order:
                    got = ask(srv, body, repeat, budget_s)
                    records.append(Record(srv.name, repeat, s.name, i, **got))
                    log(
                        f"r{repeat} {s.name} #{i:02d} {srv.name:20s} ttft {got['ttft_s'] * 1e3:7.0f} ms "
                        f"total {got['total_s'] * 1e3:7.0f} ms  {got['n_tokens']:3d} tok "
                        f"({got['in_budget']:3d} in budget)  cached {got['cached']:5d}/{got['prompt_n']:5d}"
                    )
    return records, False


def pct(values: list[float], q: float) -> float:
    vals = [v for v in values if v == v]  # no nan
    return float(np.percentile(vals, q)) if vals else float("nan")


def summarize(records: list[Record], names: list[str], repeats: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in names:
        rs = [r for r in records if r.server == name]
        if not rs:
            continue
        per_repeat = [pct([r.total_s for r in rs if r.repeat == k], 50) for k in range(repeats)]
        drafted = sum(r.drafted for r in rs)
        out[name] = {
            "requests": len(rs),
            "ttft_p50_ms": pct([r.ttft_s * 1e3 for r in rs], 50),
            "ttft_p95_ms": pct([r.ttft_s * 1e3 for r in rs], 95),
            "complete_p50_ms": pct([r.total_s * 1e3 for r in rs], 50),
            "complete_p95_ms": pct([r.total_s * 1e3 for r in rs], 95),
            "complete_p50_ms_per_repeat": per_repeat,  # type: ignore[dict-item]
            "tokens_in_budget_median": pct([float(r.in_budget) for r in rs], 50),
            "tokens_in_budget_mean": float(np.mean([r.in_budget for r in rs])),
            "tokens_median": pct([float(r.n_tokens) for r in rs], 50),
            "prompt_tokens_mean": float(np.mean([r.prompt_n for r in rs])),
            "cached_tokens_mean": float(np.mean([r.cached for r in rs])),
            "cached_share": sum(r.cached for r in rs) / max(1, sum(r.prompt_n for r in rs)),
            "drafted": drafted,
            "accepted": sum(r.accepted for r in rs),
            "acceptance": sum(r.accepted for r in rs) / drafted if drafted else float("nan"),
        }
    return out


def paired(records: list[Record], names: list[str]) -> dict[str, dict[str, float]]:
    """Each server beside the first, request by request: the median over the pauses both
    answered of (this server's time / the first's), for the complete suggestion and the first
    token. A median of ratios of the same request, so a few long suggestions on one side do
    not decide it, as they can decide a comparison of two medians."""
    if not names:
        return {}
    by = {(r.server, r.repeat, r.session, r.pause): r for r in records}
    base, out = names[0], {}
    for name in names[1:]:
        pairs = [(by[(base, *key[1:])], r) for key, r in by.items() if key[0] == name and (base, *key[1:]) in by]
        if not pairs:
            continue
        out[f"{base} / {name}"] = {
            "pairs": len(pairs),
            "complete_ratio_median": float(np.median([a.total_s / b.total_s for a, b in pairs])),
            "ttft_ratio_median": float(np.median([a.ttft_s / b.ttft_s for a, b in pairs])),
            "same_text": sum(a.content == b.content for a, b in pairs),
        }
    return out


def markdown(out: dict[str, Any]) -> str:
    m, a = out["machine"], out["settings"]
    lines = [
        f"# Editing session: {out['model']}, {m['cpu']} ({m['cpus']} usable CPUs, {a['threads']} threads)", "",
        f"{out['date']}, commit {out['commit']}. {out['note']}".rstrip(), "",
        f"{len(out['sessions'])} sessions x {a['repeats']} repeats, {out['requests_per_server']} `/infill` requests "
        f"per server (llama.vim's body: `n_predict` {a['n_predict']}, `t_max_predict_ms` {a['budget_ms']}, "
        f"{a['sampling']} sampling, "
        f"`cache_prompt`, {a['prefix_lines']} lines above the cursor, {a['suffix_lines']} below), "
        "interleaved request by request. Times from sending the request, in ms; "
        "'in budget': tokens that arrived within `t_max_predict_ms` of the first one; "
        "'cached': prompt tokens reused from the server's cache, per request.", "",
        "| server | TTFT p50 | TTFT p95 | complete p50 | complete p95 | tokens per suggestion (median) "
        "| tokens in budget (median / mean) | cached / prompt tokens | drafts accepted |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for name, s in out["summary"].items():
        acc = "-" if s["drafted"] == 0 else f"{s['accepted']}/{s['drafted']} ({s['acceptance']:.0%})"
        lines.append(
            f"| {name} | {s['ttft_p50_ms']:.0f} | {s['ttft_p95_ms']:.0f} | {s['complete_p50_ms']:.0f} | "
            f"{s['complete_p95_ms']:.0f} | {s['tokens_median']:.0f} | "
            f"{s['tokens_in_budget_median']:.0f} / {s['tokens_in_budget_mean']:.1f} | "
            f"{s['cached_tokens_mean']:.0f} / {s['prompt_tokens_mean']:.0f} | {acc} |"
        )
    if out.get("paired"):
        lines += ["", "Request by request (the median over the pauses both servers answered of the ratio "
                      "of their times, below 1: the first server is faster; and how many suggestions "
                      "were the same text):", "",
                  "| servers | pairs | complete-suggestion time ratio (median) | TTFT ratio (median) | same text |",
                  "| --- | --- | --- | --- | --- |"]  # fmt: skip
        for pair, v in out["paired"].items():
            lines.append(f"| {pair} | {v['pairs']} | {v['complete_ratio_median']:.2f} | "
                         f"{v['ttft_ratio_median']:.2f} | {v['same_text']} |")  # fmt: skip
    if out["cut_by_time_limit"]:
        lines += [
            "",
            f"The run reached its time limit ({a['time_limit']:.0f} s) before the last pause: "
            "these are the requests sent until then.",
        ]
    lines += ["", "Sessions: " + ", ".join(f"`{s['name']}` from line {s['start'] + 1} ({s['pauses']} pauses)"
                                         for s in out["sessions"]), ""]  # fmt: skip
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.editing", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a model name of `lookahead models list`")
    p.add_argument("--llama-server", type=Path, default=None, help="llama.cpp's llama-server binary")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"comma list of {', '.join(SERVERS)}")
    p.add_argument(
        "--files",
        default=",".join(FILES),
        help="files to type into, comma list: paths in this repository, stdlib:PATH in Python's standard library",
    )
    p.add_argument("--sessions", type=int, default=4, help="how many of --files to use")
    p.add_argument("--lines", type=int, default=3, help="lines typed per session")
    p.add_argument("--pause-chars", type=int, default=16, help="characters typed between two mid-line pauses")
    p.add_argument("--extra", type=int, default=2, help="input_extra chunks (64 lines of a neighbouring file each)")
    p.add_argument("--prefix-lines", type=int, default=128, help="lines above the cursor sent (llama.vim: 256)")
    p.add_argument("--suffix-lines", type=int, default=16, help="lines below the cursor sent (llama.vim: 64)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=900,
        help="seconds after which no new pause is sent (the run then reports what it measured)",
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--n-predict", type=int, default=N_PREDICT)
    p.add_argument(
        "--sampling",
        choices=("greedy", "llama.vim"),
        default="greedy",
        help="greedy: every server writes the same text; llama.vim: the plugin's own sampling "
        "(top-k 40, top-p 0.9, llama.cpp's infill sampler, which lookahead does not apply)",
    )
    p.add_argument("--budget-ms", type=int, default=BUDGET_MS, help="t_max_predict_ms")
    p.add_argument("--threads", type=int, default=0, help="threads for every server (0: every usable CPU)")
    p.add_argument("--ctx-size", type=int, default=8192)
    p.add_argument("--quick", action="store_true", help="one session, two lines, one repeat")
    p.add_argument("--out", type=Path, default=None, help="results path without suffix")
    p.add_argument("--note", default="", help="a line for the report (e.g. what else ran on the machine)")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.lines, args.repeats = 1, 2, 1
    return args


def main(argv: list[str] | None = None) -> None:
    from lookahead.models import catalog as models

    args = parse(argv)
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    bad = [n for n in names if n not in SERVERS]
    if bad:
        raise SystemExit(f"unknown server {bad[0]!r}; choose from {', '.join(SERVERS)}")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    args.threads = args.threads or cpus
    plan = sessions([f for f in args.files.split(",") if f][: args.sessions], args)
    model = models.resolve_model(args.model, models.default_cache_dir())
    t_start = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t_start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        servers = start_servers(names, model, args.model, args.llama_server, args.threads, args.ctx_size,
                                args.repeats, Path(tmp))  # fmt: skip
        try:
            for srv in servers:
                srv.wait_ready(600)
                # burn-in, not measured: a short first request (lookahead calibrates its cost curve here)
                ask(
                    srv,
                    {
                        "input_prefix": "def add(a, b):\n",
                        "input_suffix": "\n",
                        "prompt": "    ",
                        "n_predict": 8,
                        "temperature": 0.0,
                        "stream": True,
                        "return_tokens": True,
                    },
                    0,
                    1.0,
                )
                log(f"{srv.name} ready")
            records, cut = run(servers, plan, args, log, t_start + args.time_limit)
        finally:
            for srv in servers:
                srv.stop()
    commit = git_commit() or "unknown"
    out = {
        "model": args.model,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "note": args.note,
        "machine": {"cpu": cpu_model(), "cpus": cpus, "platform": platform.platform()},
        "settings": {k: (v.name if isinstance(v, Path) else v) for k, v in vars(args).items()},  # names, not paths
        "sessions": [{"name": s.name, "start": s.start, "pauses": len(s.pauses), "typed": s.typed} for s in plan],
        "requests_per_server": len(records) // max(1, len(names)),
        "cut_by_time_limit": cut,
        "wall_s": round(time.monotonic() - t_start, 1),
        "summary": summarize(records, names, args.repeats),
        "paired": paired(records, names),
        "records": [asdict(r) for r in records],
    }
    path = args.out or RESULTS / f"editing-{commit}"
    path.parent.mkdir(parents=True, exist_ok=True)
    Path(str(path) + ".json").write_text(json.dumps(out, indent=1) + "\n")
    md = markdown(out)
    Path(str(path) + ".md").write_text(md)
    print(md)
    log(f"wrote {path}.json and .md")


if __name__ == "__main__":
    main()

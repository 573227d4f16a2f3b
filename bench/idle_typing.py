"""What `serve --idle-tokens` costs a person who types on instead of pressing Tab.

    python -m bench.idle_typing                  # the stored llama.vim session, ~4 minutes
    python -m bench.idle_typing --idle-tokens 64 --delays 0.1,0.3,0.5,0.8

After an answer that its time budget ended, `serve --idle-tokens N` reads ahead the request
that assumes the suggestion accepted (`lookahead/server/idle.py`). When the person types on
instead, the next request finds that work under way and waits for the piece of it in
progress. This replays the stored llama.vim session (`bench/results/vim-session-requests.json.gz`,
recorded by `bench/vim_replay.py --record`): for each new line, its quick request, then,
`--delays` seconds later (in turn), the next new line's quick request, as if the suggestion
had been ignored; the second one's wall time is measured. Two `lookahead serve` processes,
`--idle-tokens 0` and `--idle-tokens N`, take turns line by line (the order alternates), each
left until it is quiet before the other's turn. Per delay and overall: the median of the
ratios of wall times, request by request, and the median difference in seconds. Results:
bench/results/idle-typing-<commit>.{json,md}, naming the machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

import httpx

from bench.editing import Server, _free_port
from bench.editing_vim import quiet
from bench.provenance import git_commit
from lookahead.backend.probe import cpu_model

SESSION = Path("bench/results/vim-session-requests.json.gz")


def line_pairs(requests: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(this new line's quick request, the next new line's) in one file's session: two quick
    requests with only this line's follow-ups between them."""
    quick = [i for i, r in enumerate(requests) if r["kind"] == "quick"]
    pairs = []
    for a, b in zip(quick, quick[1:], strict=False):
        between = {r["kind"] for r in requests[a + 1 : b]}
        if between <= {"follow-up", "accepted"}:
            pairs.append((requests[a]["body"], requests[b]["body"]))
    return pairs


def infill(server: Server, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    sent = {k: v for k, v in body.items() if k != "response_fields"}  # every timing back
    t0 = time.monotonic()
    answer = httpx.post(server.url + "/infill", json=sent, timeout=300).json()
    return time.monotonic() - t0, answer


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle-tokens", type=int, default=64)
    p.add_argument("--delays", default="0.1,0.3,0.5,0.8", help="seconds from an answer to the next request")
    p.add_argument("--note", default="", help="what the report should say about the machine")
    p.add_argument("--out", default="", help="results path without extension")
    args = p.parse_args(argv)
    try:
        delays = [float(d) for d in args.delays.split(",")]
    except ValueError:
        p.error(f"--delays takes seconds separated by commas (e.g. 0.1,0.5), got {args.delays!r}")
    if args.idle_tokens < 1 or any(d < 0 for d in delays):
        p.error("--idle-tokens must be >= 1 and every delay >= 0")
    stored = json.loads(gzip.decompress(SESSION.read_bytes()))
    requests = stored["requests"]
    cmd = [sys.executable, "-m", "lookahead.cli.main", "serve", "--model", stored["model"]]
    servers: dict[str, Server] = {}
    for name, n in (("off", 0), ("on", args.idle_tokens)):
        port = _free_port()
        servers[name] = Server(name, [*cmd, "--port", str(port), "--idle-tokens", str(n)], port)
        servers[name].wait_ready(900)  # one at a time: a cost curve is not measured beside a busy one
    rows: list[dict[str, Any]] = []
    try:
        for srv in servers.values():
            for r in requests:
                if r["kind"] == "warm-up":
                    infill(srv, r["body"])
                    break
        for j, (first, nxt) in enumerate(line_pairs(requests)):
            delay = delays[j % len(delays)]
            for name in ("off", "on") if j % 2 == 0 else ("on", "off"):
                srv = servers[name]
                quiet(srv)
                infill(srv, first)  # its answer ends at the time budget: idle work begins on "on"
                time.sleep(delay)
                wall, answer = infill(srv, nxt)
                timings = answer.get("timings", {})
                rows.append({"pair": j, "delay": delay, "server": name, "wall_s": wall,
                             "prompt_n": timings.get("prompt_n"), "prompt_ms": timings.get("prompt_ms"),
                             "predicted_n": timings.get("predicted_n"),
                             "predicted_ms": timings.get("predicted_ms")})  # fmt: skip
                print(f"[{j:2d}] delay {delay:.1f} s  {name:3s}  {wall * 1000:6.0f} ms", flush=True)
                quiet(srv)
    finally:
        for srv in servers.values():
            srv.stop()
    summary = summarize(rows, delays)
    commit = git_commit()
    out = {
        "machine": f"{cpu_model()} ({platform.machine()})", "note": args.note, "commit": commit,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "idle_tokens": args.idle_tokens,
        "session": str(SESSION), "rows": rows, "summary": summary,
    }  # fmt: skip
    stem = Path(args.out or f"bench/results/idle-typing-{commit}")
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))


def summarize(rows: list[dict[str, Any]], delays: list[float]) -> dict[str, dict[str, float]]:
    """Per delay and over all: the median on/off ratio of wall times and the median
    difference, request by request."""
    by: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["pair"], {})[r["server"]] = r
    pairs = [v for v in by.values() if len(v) == 2]
    out = {}
    for key, sel in [(f"{d:.1f}", [v for v in pairs if v["on"]["delay"] == d]) for d in delays] + [("all", pairs)]:
        if sel:
            out[key] = {
                "n": len(sel),
                "ratio_p50": median(v["on"]["wall_s"] / v["off"]["wall_s"] for v in sel),
                "extra_s_p50": median(v["on"]["wall_s"] - v["off"]["wall_s"] for v in sel),
                "off_s_p50": median(v["off"]["wall_s"] for v in sel),
            }
    return out


def markdown(out: dict[str, Any]) -> str:
    lines = [
        f"# Typing on while `serve --idle-tokens {out['idle_tokens']}` reads ahead: {out['machine']}", "",
        f"{out['date']}, commit {out['commit']}. {out['note']}", "",
        f"The stored llama.vim session ({out['session']}): each new line's quick request, then, after a "
        "delay, the next new line's quick request (the suggestion ignored); its wall time with idle work "
        "on against off, request by request.", "",
        "| delay (s) | pairs | wall time on / off (median) | extra wait (s, median) | wait with it off (s, median) |",
        "| --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for key, v in out["summary"].items():
        lines.append(f"| {key} | {v['n']} | {v['ratio_p50']:.2f} | {v['extra_s_p50']:+.2f} | {v['off_s_p50']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

"""llama.vim's request pattern replayed against `lookahead serve` and llama.cpp's `llama-server`.

    python -m bench.editing_vim --llama-server PATH          # 4 sessions, 64 requests per server
    python -m bench.editing_vim --quick --llama-server PATH  # one session of 2 lines, a smoke run
    python -m bench.editing_vim --servers lookahead          # lookahead serve alone
    python -m bench.editing_vim --servers lookahead --variant 'k16=--k-max 16'  # two settings, paired
    python -m bench.editing_vim --servers lookahead,llama-server,lookahead-no-idle --llama-server PATH
                                                             # and `serve --idle-tokens 0` beside them

What an editor with llama.vim (default settings, `bench/vim_session.py`) sends while a person
writes new lines into a file of Python's standard library: at each new line, a quick request
(`t_max_predict_ms` 250) and, once its suggestion is shown, the follow-up that assumes it
accepted (`t_max_predict_ms` 1000), both with 256 lines above the cursor and 64 below, the
ring's chunks (the first lines of other files opened before) as `input_extra`, llama.vim's
sampling (`top_k` 40, `top_p` 0.9, samplers `top_k, top_p, infill`; a seed per new line, the
same on every server) and `cache_prompt`; the ring's `n_predict: 0` request as each chunk
enters it. Each file is typed into twice: in a function body before line 256 and in one well
past it, where the 256-line prefix window slides by a line at every new line. Each server's
follow-up is built from its own quick suggestion, as the editor would build it. Then (`--accept
N`, default 1) the person accepts the suggestion with Tab `--gap` seconds after it was shown
(default 1.0): llama.vim shows the follow-up's suggestion from its cache and sends the next
follow-up, which assumes that one accepted too (kind `accepted`); N times. The next new line
is typed into the file as it really is (what was accepted is not kept).

The servers, each a process of its own on loopback, take turns at each new line (the order
rotates): one server's requests of that line, as the editor sends them, then, once that
server is quiet (`lookahead serve` may work while idle: it is waited for, so that work never
runs beside another server's request), the next server's. `lookahead serve` with its default
flags (`--lookahead-args` to add
some) and `llama-server` with the flags llama.vim's documentation recommends (`-ub 1024 -b 1024
--ctx-size 0 --cache-reuse 256`) and the same threads (`--threads`, default every usable CPU).

`--variant NAME=FLAGS` adds one more `lookahead serve` with those flags (a drafting setting to
try): every server is compared with the first one request by request (wall time, prefill,
decode speed). A sampled request's text moves from run to run, and the medians of separate
runs with it; both servers of a pair draw with the same seed, so where they were sent the same
request (most quick requests; a follow-up is built from each server's own suggestion) they
write the same text, up to a batched kernel moving a draw, and the ratio compares the settings
alone.

Per request: its kind, the wall time the editor waits (sending to the answer), prompt tokens
prefilled (`timings.prompt_n`) and reused from the cache (`timings.cache_n`), decode speed
(`timings.predicted_per_second`), drafts. Results: bench/results/editing-vim-<commit>.{json,md},
naming the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.editing import Server, _free_port, pct
from bench.editing_session import body_start
from bench.provenance import git_commit
from bench.vim_session import NewLine, VimSession, bufenter_chunk, ctx_local, fim_body, render, ring_body
from lookahead.backend.probe import cpu_model

RESULTS = Path(__file__).parent / "results"
# file: the other files open before it (their first lines are the ring's chunks)
FILES = {
    "argparse.py": ("optparse.py", "getopt.py"),
    "asyncio/base_events.py": ("asyncio/events.py", "asyncio/selector_events.py"),
}
# lookahead-plain: `serve --no-spec`; lookahead-no-idle: `serve --idle-tokens 0`
SERVERS = ("lookahead", "llama-server", "lookahead-plain", "lookahead-no-idle")
LLAMA_VIM_FLAGS = ["-ub", "1024", "-b", "1024", "--ctx-size", "0", "--cache-reuse", "256"]
BEFORE_LINE, PAST_LINE = 160, 600  # where the two sessions of a file look for a function body
# quick: at a new line; follow-up: sent with its suggestion assumed accepted; accepted: sent
# once the person accepted it (Tab), assuming the follow-up's suggestion accepted too
KINDS = ("quick", "follow-up", "accepted")
QUIET_LIMIT = 30.0  # seconds a server's idle work may take before the next server's request


@dataclass
class Record:
    """One request's outcome on one server."""

    server: str
    session: str
    line: int  # the new line's index in the session
    kind: str  # one of KINDS
    past: bool  # the cursor past line 256 (the prefix window slides)
    wall_s: float
    prefilled: int  # timings.prompt_n
    cached: int  # timings.cache_n
    decode_tps: float  # timings.predicted_per_second
    predicted: int
    drafted: int
    accepted: int
    prev_lines: int  # the follow-up: lines of the suggestion it assumes accepted
    content: str
    body: str = ""  # a digest of the request's body (two servers' follow-ups differ with their suggestions)


def vim_sessions(files: list[str], n_lines: int, n_extra: int) -> list[VimSession]:
    """Two sessions per file of the standard library: one before line 256, one past it."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for f in files:
        path = stdlib / f
        if not path.is_file():
            raise SystemExit(f"no such file in the standard library: {f}")
        lines = path.read_text().splitlines()
        others = [stdlib / n for n in FILES.get(f, ())]
        if not others:
            others = sorted(p for p in path.parent.glob("*.py") if p != path and p.name != "__init__.py")
        extra = [bufenter_chunk(p.read_text().splitlines(), str(p.relative_to(stdlib)), k)
                 for k, p in enumerate(others[:n_extra])]  # fmt: skip
        for where in (BEFORE_LINE, PAST_LINE):
            start = body_start(lines, where)
            if start + n_lines > len(lines):
                raise SystemExit(f"{f} has no function body past line {where}: choose a longer file")
            out.append(VimSession(f, start, n_lines, lines, extra))
    return out


def post(srv: Server, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    if srv.answers is not None:  # recorded: the answer also brings the tokens written
        body = {**body, "return_tokens": True, "response_fields": [*body.get("response_fields", []), "tokens"]}
    t0 = time.perf_counter()
    r = httpx.post(srv.url + "/infill", json=body, timeout=600)
    wall = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"{srv.name}: HTTP {r.status_code}: {r.text[:300]}")
    if srv.answers is not None:
        srv.answers.append((body, r.json()))
    return r.json(), wall


def field(ans: dict[str, Any], path: str) -> Any:
    """A `response_fields` path's value (llama.cpp names picked fields by their path)."""
    if path in ans:
        return ans[path]
    node: Any = ans
    for key in path.split("/"):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def measure(srv: Server, body: dict[str, Any], s: VimSession, line: int, kind: str, prev: int) -> Record:
    ans, wall = post(srv, body)
    return Record(
        server=srv.name, session=f"{s.name}:{s.start + 1}", line=line, kind=kind, past=s.past_window(), wall_s=wall,
        prefilled=int(field(ans, "timings/prompt_n") or 0), cached=int(field(ans, "timings/cache_n") or 0),
        decode_tps=float(field(ans, "timings/predicted_per_second") or 0.0),
        predicted=int(field(ans, "timings/predicted_n") or 0), drafted=int(field(ans, "timings/draft_n") or 0),
        accepted=int(field(ans, "timings/draft_n_accepted") or 0), prev_lines=prev,
        content=str(ans.get("content", "")), body=digest(body),
    )  # fmt: skip


def accept(buf: list[str], y: int, prev: list[str]) -> tuple[list[str], int, int]:
    """The buffer once the suggestion `prev` (shown at the end of line `y`) is accepted with
    Tab, and the cursor after it (llama#fim_accept: the first line joins the cursor line,
    the others are inserted below it)."""
    lines = [buf[y] + prev[0], *prev[1:]]
    out = buf[:y] + lines + buf[y + 1 :]
    y2 = y + len(lines) - 1
    return out, y2, len(out[y2])


def quiet(srv: Server, limit: float = QUIET_LIMIT) -> None:
    """Wait until `srv` does no work while idle (lookahead's `lookahead_idle_work` gauge; a
    server without it is quiet once it answered), so it never runs beside another server's
    request: each server's idle time is its own."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            text = httpx.get(srv.url + "/metrics", timeout=5).text
        except httpx.HTTPError:
            return
        if not idle_working(text):
            return
        time.sleep(0.05)


def idle_working(metrics: str) -> bool:
    """Whether a /metrics text says the server works while idle: the gauge's own line, not
    its HELP line (which also reads "lookahead_idle_work 1 while ...")."""
    for line in metrics.splitlines():
        name, _, value = line.partition(" ")
        if name == "lookahead_idle_work":
            return float(value) != 0
    return False


def new_line(servers: list[Server], s: VimSession, i: int, nl: NewLine, seed: int, accepts: int,
             gap: float) -> list[Record]:  # fmt: skip
    """On each server in the order given, as the editor sends them: the quick request, at
    once its follow-up (built from its own suggestion), then, `accepts` times, after `gap`
    seconds (the person reads the suggestion and accepts it with Tab) the next follow-up,
    which assumes the follow-up's suggestion accepted too. Then the server is left until it
    is quiet (the person types the next line)."""
    quick_ctx = ctx_local(nl.buf, nl.y, nl.x)
    quick = fim_body(quick_ctx, s.extra, quick=True, seed=seed)
    out = []
    for srv in servers:
        first = measure(srv, quick, s, i, "quick", 0)
        prev, ok = render(first.content, nl.buf, nl.y, nl.x)
        ctx = ctx_local(nl.buf, nl.y, nl.x, prev, indent_last=quick_ctx.indent)
        last = measure(srv, fim_body(ctx, s.extra, quick=False, seed=seed), s, i, "follow-up", len(prev))
        out += [first, last]
        buf, y = nl.buf, nl.y
        for _ in range(accepts):
            if not ok:
                break  # nothing to accept
            buf, y, x = accept(buf, y, prev)
            time.sleep(gap)
            prev, ok = render(last.content, buf, y, x)
            ctx = ctx_local(buf, y, x, prev, indent_last=quick_ctx.indent)
            last = measure(srv, fim_body(ctx, s.extra, quick=False, seed=seed), s, i, "accepted", len(prev))
            out.append(last)
        quiet(srv)
    return out


def run(servers: list[Server], plan: list[VimSession], log: Any, deadline: float, accepts: int = 0,
        gap: float = 1.0) -> tuple[list[Record], bool]:  # fmt: skip
    records: list[Record] = []
    turn = 0
    for s in plan:
        for k in range(1, len(s.extra) + 1):  # the ring fills as the other files are opened
            for srv in servers:
                post(srv, ring_body(s.extra[:k]))
                quiet(srv)
        for i, nl in enumerate(s.new_lines()):
            if records and time.monotonic() > deadline:
                return records, True
            order = servers[turn % len(servers) :] + servers[: turn % len(servers)]
            turn += 1
            got = new_line(order, s, i, nl, 1000 * turn + i, accepts, gap)
            records += got
            for r in got:
                log(f"{r.session} #{i} {r.kind:9s} {r.server:12s} {r.wall_s * 1e3:7.0f} ms  prefilled {r.prefilled:5d} "
                    f"cached {r.cached:5d}  {r.predicted:3d} tok at {r.decode_tps:5.1f}/s")  # fmt: skip
    return records, False


def groups(records: list[Record]) -> list[tuple[str, bool]]:
    return [(k, p) for k in KINDS for p in (False, True) if any(
        r.kind == k and r.past == p for r in records)]  # fmt: skip


def summarize(records: list[Record], names: list[str]) -> dict[str, Any]:
    """Per server, kind and cursor position: p50 of each figure; and per request, the ratio
    of the first server's figure to each other's (the median of the ratios)."""
    out: dict[str, Any] = {}
    for kind, past in groups(records):
        key = f"{kind}, {'past' if past else 'before'} line 256"
        row: dict[str, Any] = {}
        for name in names:
            rs = [r for r in records if r.server == name and r.kind == kind and r.past == past]
            if rs:
                row[name] = {
                    "requests": len(rs),
                    "wall_p50_s": pct([r.wall_s for r in rs], 50),
                    "prefilled_p50": pct([float(r.prefilled) for r in rs], 50),
                    "cached_p50": pct([float(r.cached) for r in rs], 50),
                    "decode_tps_p50": pct([r.decode_tps for r in rs if r.predicted > 1], 50),
                    "drafted": sum(r.drafted for r in rs),
                    "accepted": sum(r.accepted for r in rs),
                }
        by = {(r.server, r.session, r.line): r for r in records if r.kind == kind and r.past == past}
        for name in names[1:]:
            pairs = [(by[(names[0], *k[1:])], r) for k, r in by.items() if k[0] == name and (names[0], *k[1:]) in by]
            if pairs:
                row[f"{names[0]} / {name}"] = {
                    "pairs": len(pairs),
                    "same_request": sum(a.body == b.body for a, b in pairs),
                    "wall_ratio_p50": float(np.median([a.wall_s / b.wall_s for a, b in pairs])),
                    "prefilled_ratio_p50": float(np.median([(a.prefilled + 1) / (b.prefilled + 1) for a, b in pairs])),
                    # decode speed, where both wrote 2 tokens or more (above 1: the first is faster)
                    "decode_ratio_p50": pct([a.decode_tps / b.decode_tps for a, b in pairs
                                             if min(a.predicted, b.predicted) > 1 and b.decode_tps > 0], 50),
                }
        out[key] = row
    return out


def markdown(out: dict[str, Any]) -> str:
    m, a = out["machine"], out["settings"]
    lines = [
        f"# llama.vim's requests: {out['model']}, {m['cpu']} ({m['cpus']} usable CPUs)", "",
        f"{out['date']}, commit {out['commit']}. {out['note']}".rstrip(), "",
        f"Servers: {'; '.join(f'`{c}`' for c in out['commands'].values())}. llama-server build: "
        f"{out['llama_server_version'] or '-'}.", "",
        f"{len(out['sessions'])} sessions, {a['lines']} new lines each: at each, llama.vim's quick request "
        "(`t_max_predict_ms` 250) and at once its follow-up (the suggestion assumed accepted, 1000), "
        f"then {a.get('accept', 0)} time(s) the suggestion accepted with Tab {a.get('gap', 0):.1f} s after it "
        "was shown and the next follow-up (`accepted`); 256 lines above the cursor, 64 below, sampled "
        "(`top_k` 40, `top_p` 0.9); the servers take turns at each new line, each left until it is "
        "quiet before the next one's request. Medians per request: wall time the editor waits, prompt "
        "tokens prefilled and reused from the cache, decode speed (tokens/s, requests of 2 tokens or "
        "more).", "",
        "| requests | server | n | wall p50 (s) | prefilled p50 | cached p50 | decode tok/s p50 | drafts accepted |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    ratios = []
    for group, row in out["summary"].items():
        for name, v in row.items():
            if " / " in name:
                ratios.append(f"| {group} | {name} | {v['pairs']} ({v['same_request']} the same) | "
                              f"{v['wall_ratio_p50']:.2f} | {v['prefilled_ratio_p50']:.2f} | "
                              f"{v.get('decode_ratio_p50', float('nan')):.2f} |")  # fmt: skip
                continue
            acc = f"{v['accepted']}/{v['drafted']}" if v["drafted"] else "-"
            lines.append(f"| {group} | {name} | {v['requests']} | {v['wall_p50_s']:.2f} | {v['prefilled_p50']:.0f} | "
                         f"{v['cached_p50']:.0f} | {v['decode_tps_p50']:.1f} | {acc} |")  # fmt: skip
    if ratios:
        lines += ["", "Request by request (median of the ratios; wall time and prefill below 1: the first "
                      "server is faster or prefills less, the prefill ratio counting one token more on each "
                      "side; decode speed above 1: the first server decodes faster):", "",
                  "| requests | servers | pairs | wall time ratio | prefilled ratio | decode speed ratio |",
                  "| --- | --- | --- | --- | --- | --- |", *ratios]  # fmt: skip
    if out["cut_by_time_limit"]:
        lines += [
            "",
            f"The run reached its time limit ({a['time_limit']:.0f} s): these are the requests sent until then.",
        ]
    lines += ["", "Sessions: " + ", ".join(f"`{s['name']}` from line {s['start'] + 1}" for s in out["sessions"]), ""]
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.editing_vim", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a model name of `lookahead models list`")
    p.add_argument("--llama-server", type=Path, default=None, help="llama.cpp's llama-server binary")
    p.add_argument("--servers", default="lookahead,llama-server", help=f"comma list of {', '.join(SERVERS)}")
    p.add_argument("--files", default=",".join(FILES), help="files of Python's standard library, comma list")
    p.add_argument("--lines", type=int, default=8, help="new lines written per session")
    p.add_argument("--accept", type=int, default=1,
                   help="follow-ups accepted with Tab at each new line (each sends the next follow-up)")
    p.add_argument("--gap", type=float, default=1.0, help="seconds between a suggestion shown and Tab")
    p.add_argument("--extra", type=int, default=2, help="ring chunks (other files opened before)")
    p.add_argument("--threads", type=int, default=0, help="llama-server's threads (0: every usable CPU)")
    p.add_argument("--lookahead-args", default="", help="flags added to `lookahead serve` (e.g. '-t 2')")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                   help="one more `lookahead serve` with these flags added, compared request by request with "
                        "the first server (e.g. 'k16=--k-max 16'); repeatable")
    p.add_argument("--llama-server-args", default="",
                   help="flags added to llama-server (e.g. '--no-repack' where its AMX buffers crash)")
    p.add_argument("--time-limit", type=float, default=3600, help="seconds after which no new line is started")
    p.add_argument("--quick", action="store_true", help="one session (the first file, past line 256), 2 lines")
    p.add_argument("--out", type=Path, default=None, help="results path without suffix")
    p.add_argument("--note", default="", help="a line for the report (e.g. what else ran on the machine)")
    return p.parse_args(argv)


def variants(specs: list[str]) -> dict[str, list[str]]:
    """`--variant NAME=FLAGS` options: name -> the flags added to `lookahead serve`."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        name = name.strip()
        if not sep or not name or "," in name or name in SERVERS or name in out:
            raise SystemExit(f"--variant wants NAME=FLAGS with a new name, got {spec!r}")
        out[name] = shlex.split(flags)
    return out


def commands(names: list[str], args: argparse.Namespace, model: Path, threads: int) -> dict[str, list[str]]:
    extra = variants(args.variant)
    out = {}
    for name in names:
        if name.startswith("lookahead") or name in extra:
            own = {"lookahead-plain": ["--no-spec"], "lookahead-no-idle": ["--idle-tokens", "0"]}.get(name, [])
            out[name] = [sys.executable, "-m", "lookahead.cli.main", "serve", "--model", args.model, *own,
                         *shlex.split(args.lookahead_args), *extra.get(name, [])]  # fmt: skip
        elif args.llama_server is None:
            raise SystemExit("llama-server needs --llama-server PATH (a llama-server binary)")
        else:
            out[name] = [str(args.llama_server), "--model", str(model), "--host", "127.0.0.1", "--threads",
                         str(threads), "--threads-batch", str(threads), *LLAMA_VIM_FLAGS,
                         *shlex.split(args.llama_server_args)]  # fmt: skip
    return out


def server_version(binary: Path | None) -> str:
    if binary is None:
        return ""
    try:
        got = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return " ".join((got.stdout + got.stderr).split())[:200]


def main(argv: list[str] | None = None) -> None:
    from lookahead.models import catalog as models

    args = parse(argv)
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    if bad := [n for n in names if n not in SERVERS]:
        raise SystemExit(f"unknown server {bad[0]!r}; choose from {', '.join(SERVERS)}")
    names += list(variants(args.variant))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = args.threads or cpus
    plan = vim_sessions([f for f in args.files.split(",") if f], args.lines, args.extra)
    if args.quick:
        plan, args.lines = [plan[1]], 2
        plan = [VimSession(s.name, s.start, 2, s.lines, s.extra) for s in plan]
    model = models.resolve_model(args.model, models.default_cache_dir())
    cmds = commands(names, args, model, threads)
    t_start = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t_start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    servers = []
    try:
        for name, cmd in cmds.items():
            port = _free_port()
            servers.append(Server(name, [*cmd, "--port", str(port)], port))
        for srv in servers:
            srv.wait_ready(600)
            post(srv, {"input_prefix": "def add(a, b):\n", "input_suffix": "\n", "n_predict": 8})  # burn-in
            log(f"{srv.name} ready")
        records, cut = run(servers, plan, log, t_start + args.time_limit, args.accept, args.gap)
    finally:
        for srv in servers:
            srv.stop()
    commit = git_commit() or "unknown"
    out = {
        "model": args.model,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "note": args.note,
        "machine": {"cpu": cpu_model(), "cpus": cpus, "platform": platform.platform(), "threads": threads},
        "settings": {k: (v.name if isinstance(v, Path) else v) for k, v in vars(args).items()},  # names, not paths
        "commands": {n: " ".join(Path(c).name if os.sep in c else c for c in cmd) for n, cmd in cmds.items()},
        "llama_server_version": server_version(args.llama_server),
        "sessions": [{"name": s.name, "start": s.start, "past_line_256": s.past_window()} for s in plan],
        "cut_by_time_limit": cut,
        "wall_s": round(time.monotonic() - t_start, 1),
        "summary": summarize(records, names),
        "records": [asdict(r) for r in records],
    }
    path = args.out or RESULTS / f"editing-vim-{commit}"
    path.parent.mkdir(parents=True, exist_ok=True)
    Path(str(path) + ".json").write_text(json.dumps(out, indent=1) + "\n")
    md = markdown(out)
    Path(str(path) + ".md").write_text(md)
    print(md)
    log(f"wrote {path}.json and .md")


if __name__ == "__main__":
    main()

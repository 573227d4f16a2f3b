"""llama.vim's requests replayed through the drafter and controller, in seconds.

    python -m bench.vim_replay --record        # record a session from `serve --no-spec` (minutes)
    python -m bench.vim_replay                 # replay it (seconds)
    python -m bench.vim_replay --config min_gain=1.25
    python -m bench.vim_replay --extend        # decode a stored session's answers past their end

`--record` runs `bench/editing_vim.py`'s sessions (llama.vim's quick requests, follow-ups and
requests after Tab, its samplers, seeds per new line) against one `lookahead serve --no-spec`
and keeps every /infill request sent, in order, with the tokens each answer wrote, and this
machine's calibrated cost curve: `bench/results/vim-session-requests.json.gz`. Then each
answer is decoded again in process past its end (`extend`, same sampling and seed; `--extend`
does only this, on a stored session): the tokens the model would have gone on with.

The replay rebuilds each prompt and its draft sources as the server does (`prepare`, with
the cache holding the last request's prompt, where the FIM prefix window may stay put, and
the request's drafting settings, `lookahead.server.llamacpp.drafting`) and runs the engine
over it with one controller learning across the session, as a server's: a drafted token is
accepted when it is the token the model wrote (with the same seed, the draw does not depend
on the drafts: `lookahead.core.sampling`). As in the service, the engine does not know
where llama.vim's time budget will end the answer: it drafts on past the end into the
tokens the model would have written, and the answer ends at the step that reaches its last
token (that step's time counted, its tokens past the end dropped). Time is modeled with the
stored curve at the cells in use, so a replay is the same on every machine and every run.
Per kind of request: the geomean of plain decoding's modeled time over the drafted one's,
and the ratio of the kind's total times.

Where `bench/fim_replay.py` repeats the same cursor places with several seeds, this follows
an editing session: a new line's quick request meets drafts offered by what the last
requests left, as the service meets them. On the stored session (2-vCPU AMD EPYC), drafting
as at 557745f replays at 0.85x plain decoding on new lines and 0.99x on follow-ups, where
`bench/editing_vim.py` measured that server's decode speed at 0.80-0.86x and 0.86-1.01x
llama-server's (whose plain decoding `serve --no-spec` matched). Told where each answer
ends, as an earlier version of this replay was, the same drafting replayed at 0.95x and
1.10x: drafts verified past the end were the difference. The clock leaves out the Python
side of a step (about 0.5-1 ms there) and the prefill; measure what an editor waits for
with `bench/editing_vim.py`. Checked against the real model in process on the same kind of
machine (each request of the stored session generated with drafting, as the server does):
the verify steps' measured median times were 1-5% above the clock's, at 1, 4, 8 and 16
tokens.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.editing import Server, _free_port
from bench.editing_vim import FILES, run, vim_sessions
from bench.provenance import git_commit
from bench.replay import _config, modeled_clock, replay_request
from lookahead.api import Model, load
from lookahead.backend.probe import cpu_model
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done
from lookahead.server.llamacpp.drafting import request_drafting
from lookahead.server.llamacpp.prepare import Prepared, prepare, sampling_of
from lookahead.server.llamacpp.schemas import InfillRequest

RECORDED = Path(__file__).parent / "results" / "vim-session-requests.json.gz"
FIM_BATCH = 1024  # `serve`'s default -b, the FIM part of a prompt
AFTER_END = 32  # tokens decoded past each answer's end (`extend`)


def kind_of(body: dict[str, Any], recorded: str) -> str:
    """A request's kind: `warm-up` (the ring's n_predict 0), else the kind the session gave."""
    return "warm-up" if body.get("n_predict") == 0 else recorded


def record(model_name: str, lines: int, out: Path) -> None:
    port = _free_port()
    cmd = [sys.executable, "-m", "lookahead.cli.main", "serve", "--model", model_name, "--no-spec", "--port", str(port)]
    srv = Server("lookahead-plain", cmd, port)
    srv.answers = []
    t0 = time.monotonic()
    try:
        srv.wait_ready(600)
        n_ctx = httpx.get(srv.url + "/props", timeout=10).json()["default_generation_settings"]["n_ctx"]
        records, _ = run([srv], vim_sessions(list(FILES), lines, 2), lambda m: print(m, flush=True), t0 + 7200, 1)
    finally:
        srv.stop()
    kinds = iter(r.kind for r in records)
    requests = []
    for body, ans in srv.answers:
        kind = kind_of(body, "" if body.get("n_predict") == 0 else next(kinds))
        timings = ans.get("timings", {})
        requests.append({"kind": kind, "body": body, "tokens": ans.get("tokens", []),
                         "prompt_n": timings.get("prompt_n"), "cache_n": timings.get("cache_n")})  # fmt: skip
    model = load(model_name)
    extend(model, requests, n_ctx)
    calibration = model.tuning.calibrate()
    data = {
        "model": model_name, "machine": cpu_model(), "commit": git_commit(), "n_ctx": n_ctx,
        "calibration": calibration, "slope": model.tuning.cost_slope, "requests": requests,
    }  # fmt: skip
    out.write_bytes(gzip.compress(json.dumps(data).encode()))
    print(f"{len(requests)} requests -> {out}")


def prepared_requests(
    model: Model, requests: list[dict[str, Any]], n_ctx: int
) -> Iterator[tuple[dict[str, Any], InfillRequest, Prepared]]:
    """Each recorded request with its body and its prompt and draft sources rebuilt as the
    server builds them, the cache holding the request before's prompt (where the FIM
    prefix window may stay put)."""
    cached: list[list[int]] = []
    for req in requests:
        body = InfillRequest.model_validate(req["body"])
        prepared = prepare(model, body, n_ctx, None, FIM_BATCH, cached)
        cached = [prepared.tokens]
        yield req, body, prepared


def extend(model: Model, requests: list[dict[str, Any]], n_ctx: int, n: int = AFTER_END) -> int:
    """Each answer decoded again in this process past its end, `n` tokens more, with its
    request's sampling and seed, plainly: kept as the request's `after` (the answer's tokens
    must come out the same first; else `after` is None and the replay knows where that
    answer ends). Returns how many came out the same."""
    same = 0
    for req, body, prepared in prepared_requests(model, requests, n_ctx):
        prompt = prepared.tokens
        out, req["after"] = req["tokens"], None
        if req["kind"] == "warm-up" or len(out) < 2:
            continue
        sampling = sampling_of(model, body, None)
        plain = DraftConfig(enabled=False)
        events = model.stream("", tokens=prompt, max_tokens=len(out) + n, sampling=sampling, draft=plain)
        tokens = next(e for e in events if isinstance(e, Done)).result.tokens
        if tokens[: len(out)] == out:
            req["after"], same = tokens[len(out) :], same + 1
    return same


def replay(model: Model, data: dict[str, Any], config: DraftConfig, verbose: bool = False) -> dict[str, list[float]]:
    """Per kind, plain decoding's modeled time over the drafted one's, request by request
    (and under "time <kind>", the two totals)."""
    calibration = {int(k): v for k, v in data["calibration"].items()}
    slope = {int(k): v for k, v in data["slope"].items()}
    cost = modeled_clock(calibration, slope)
    state = model.drafting
    state.controllers.clear()
    state.cost = CostModel(calibration, slope=slope)
    ratios: dict[str, list[float]] = defaultdict(list)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for req, body, prepared in prepared_requests(model, data["requests"], data["n_ctx"]):
        prompt, sources = prepared.tokens, prepared.sources
        if req["prompt_n"] is not None and req["prompt_n"] + req["cache_n"] != len(prompt):
            ratios["prompts rebuilt otherwise"].append(1.0)  # the server's prompt had another length
        out = req["tokens"]
        if len(out) < 2:
            continue
        kind_config = request_drafting(config, body)  # as the server drafts this request
        after = req.get("after")  # the model's tokens past the end: the end is not known
        if after is None:
            ratios["replayed knowing where the answer ends"].append(1.0)
        n_predict = body.n_predict if body.n_predict > 0 else None
        result, plain_s, _ = replay_request(model, prompt, out, kind_config, cost, sources, after, n_predict)
        kind = req["kind"]
        ratios[kind].append(plain_s / result.stats.decode_s)
        totals[kind][0] += plain_s
        totals[kind][1] += result.stats.decode_s
        if verbose:
            print(f"{kind:10s} {len(out):4d} tokens {ratios[kind][-1]:5.2f}x  drafted {result.stats.drafted}")
    for kind, (plain_s, drafted_s) in totals.items():
        ratios[f"time {kind}"] = [plain_s / drafted_s]
    return dict(ratios)


def main() -> None:
    examples = __doc__.split("\n\n")[1]  # the usage lines at the top of this file
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--record", action="store_true", help="record a session from `serve --no-spec` first")
    ap.add_argument("--lines", type=int, default=6, help="new lines typed per session (--record)")
    ap.add_argument("--file", type=Path, default=RECORDED)
    ap.add_argument("--config", action="append", default=[], help="DraftConfig field=value")
    ap.add_argument("--extend", action="store_true", help="decode each recorded answer past its end first (minutes)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.lines < 1:
        ap.error("--lines must be >= 1")
    if args.record:
        record(args.model, args.lines, args.file)
    if not args.file.is_file():
        raise SystemExit(f"no recorded session at {args.file}: run with --record first")
    try:
        data = json.loads(gzip.decompress(args.file.read_bytes()))
        missing = {"model", "n_ctx", "calibration", "slope", "requests"} - set(data)
        if missing:
            raise KeyError(", ".join(sorted(missing)))
    except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:  # not gzip, not JSON, not a session
        raise SystemExit(f"{args.file} is not a session recorded by --record ({type(exc).__name__}: {exc})") from None
    config = _config(args.config)
    model = load(data["model"])
    if args.extend and not args.record:  # a recording is extended already
        same = extend(model, data["requests"], data["n_ctx"])
        args.file.write_bytes(gzip.compress(json.dumps(data).encode()))
        print(f"{same} answers decoded again the same, extended past their end -> {args.file}")
    ratios = replay(model, data, config, args.verbose)
    other = len(ratios.pop("prompts rebuilt otherwise", []))
    ends_known = len(ratios.pop("replayed knowing where the answer ends", []))
    every = [r for k, rs in ratios.items() if not k.startswith("time ") for r in rs]
    parts = [f"{k} {statistics.geometric_mean(v):.3f} (time {ratios['time ' + k][0]:.3f}, {len(v)})"
             for k, v in sorted(ratios.items()) if not k.startswith("time ")]  # fmt: skip
    print(f"geomean {statistics.geometric_mean(every):.3f} over {len(every)} requests | " + " | ".join(parts))
    print(f"recorded on {data['machine']} at {data['commit']}; {other} prompts rebuilt to another length; "
          f"{ends_known} answers replayed knowing where they end")  # fmt: skip


if __name__ == "__main__":
    main()

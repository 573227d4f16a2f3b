"""The Python side of a decode step that does not draft: plain decoding against drafting on.

    python -m bench.drafting_upkeep                # 10 recorded requests, 24 tokens each
    python -m bench.drafting_upkeep --requests 20

llama.vim's recorded quick requests and follow-ups (`bench/results/vim-session-requests.json.gz`,
their prompts and draft sources rebuilt as the server builds them, `bench/vim_replay.py`)
are generated in this process with the real model, each twice, interleaved: plainly, then
with the server's drafting for that request. For every step that verified no draft, its
wall time less its verify time is the Python of the step (sampling, and with drafting on:
proposing, the controller's choice and what it learns, the indexes taking the new token).
The difference between the two medians is what keeping drafts ready costs a step that
does not use one. Results: bench/results/drafting-upkeep-<commit>.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path

from bench.provenance import git_commit
from bench.vim_replay import RECORDED, prepared_requests
from lookahead.api import load
from lookahead.backend.probe import cpu_model
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Step
from lookahead.server.llamacpp.drafting import request_drafting
from lookahead.server.llamacpp.prepare import sampling_of

RESULTS = Path(__file__).parent / "results"


def measure(model_name: str, n_requests: int, max_tokens: int) -> dict[str, list[float]]:
    data = json.loads(gzip.decompress(RECORDED.read_bytes()))
    model = load(model_name)
    out: dict[str, list[float]] = {"plain": [], "drafting": []}
    done = 0
    for req, body, prepared in prepared_requests(model, data["requests"], data["n_ctx"]):
        if req["kind"] not in ("quick", "follow-up") or len(req["tokens"]) < 8:
            continue
        done += 1
        if done > n_requests:
            break
        sampling = sampling_of(model, body, None)
        configs = {"plain": DraftConfig(enabled=False), "drafting": request_drafting(DraftConfig(), body)}
        for name, config in configs.items():
            events = model.stream("", tokens=prepared.tokens, max_tokens=max_tokens, sampling=sampling,
                                  draft=config, sources=prepared.sources, cache_prompt=True)  # fmt: skip
            last = None
            for event in events:
                now = time.perf_counter()
                if isinstance(event, Step):
                    if last is not None and event.drafted == 0:  # the first step holds the prompt's work
                        out[name].append((now - last - event.verify_s) * 1e3)
                    last = time.perf_counter()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=24)
    args = ap.parse_args()
    res = measure(args.model, args.requests, args.max_tokens)
    flags = " ".join(f for f in ("avx2", "avx512f", "amx_tile") if f in Path("/proc/cpuinfo").read_text().split())
    commit, machine = git_commit() or "unknown", f"{cpu_model()}, {os.cpu_count()} CPUs, {flags or 'flags unknown'}"
    med = {k: statistics.median(v) for k, v in res.items()}
    lines = [
        f"# Python per step without a draft: {args.model}, {machine}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}. "
        f"`python -m bench.drafting_upkeep --requests {args.requests} --max-tokens {args.max_tokens}`",
        "",
        "| decoding | steps | median ms | mean ms |",
        "| --- | --- | --- | --- |",
        *(f"| {k} | {len(v)} | {med[k]:.3f} | {statistics.mean(v):.3f} |" for k, v in res.items()),
        "",
        f"Drafting on costs a step that verifies no draft {med['drafting'] - med['plain']:.2f} ms more.",
    ]
    out = RESULTS / f"drafting-upkeep-{commit}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {out}")


if __name__ == "__main__":
    main()

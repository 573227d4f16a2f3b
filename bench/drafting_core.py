"""Cost of the drafting core per decoding step, with no model: observe one token, propose a tree.

Replays a token stream: the first C tokens are the context (prompt + output so far), then
each step proposes a 16-node tree from all sources (via Proposer) and observes the next
token of the stream, as the engine does after accepting it. It reports, at C = 1k, 8k and
32k tokens, the time per step (median and p99), the bulk observe rate, memory per index
(tracemalloc), and how many drafted tokens the stream itself would have accepted (greedy
walk of the tree along the true continuation), a model-free hint of draft quality.
Times are this thread's CPU time, so other processes sharing the core do not inflate them;
the wall-clock p99 is reported beside them to show what preemption adds.

Streams (both fixed, so runs compare):
- code: Python standard-library sources, split into word / punctuation / whitespace pieces
  (a rough stand-in for BPE), ids by first appearance;
- synthetic: Zipf-distributed ids with 40% of the stream copied from earlier spans with
  small edits, from a fixed seed.

Run from the repository root:  python -m bench.drafting_core
Writes bench/results/drafting_core.json and prints a table. Target: <= 1 ms per step at 32k.
"""

from __future__ import annotations

import json
import os
import platform
import random
import re
import sysconfig
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lookahead.core.draft import Draft
from lookahead.core.propose import Proposer
from lookahead.index.base import DraftSource
from lookahead.index.ngram import NgramIndex
from lookahead.index.suffix import SuffixIndex

CONTEXTS = (1_000, 8_000, 32_000)
STEPS = 400  # decoding steps timed per context
WARMUP = 40  # steps run first and not timed
BUDGET, MAX_DEPTH, BRANCHES = 16, 16, 2
RESULTS = Path(__file__).parent / "results" / "drafting_core.json"

STDLIB_FILES = (
    "argparse.py",
    "dataclasses.py",
    "typing.py",
    "inspect.py",
    "pathlib.py",
    "subprocess.py",
    "functools.py",
    "enum.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "unittest/case.py",
    "email/message.py",
    "http/client.py",
    "tarfile.py",
    "zipfile.py",
)
PIECE = re.compile(r"\n[ \t]*|[ \t]+|\w+|[^\w\s]")


def code_stream(n: int) -> list[int]:
    """Standard-library sources cut into pieces, ids by first appearance."""
    ids: dict[str, int] = {}
    out: list[int] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in STDLIB_FILES:
        text = (stdlib / name).read_text(encoding="utf-8", errors="replace")
        out.extend(ids.setdefault(piece, len(ids)) for piece in PIECE.findall(text))
        if len(out) >= n:
            break
    if len(out) < n:
        raise RuntimeError(f"only {len(out)} tokens of standard-library text, need {n}")
    return out[:n]


def synthetic_stream(n: int, seed: int = 0) -> list[int]:
    """Zipf ids, 40% of them copies of earlier spans (each copy lightly edited)."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    out: list[int] = []
    while len(out) < n:
        if out and rng.random() < 0.4:
            length = rng.randrange(8, 120)
            start = rng.randrange(max(1, len(out) - length))
            span = out[start : start + length]
            for _ in range(rng.randrange(3)):  # a few edits, as when code is adapted
                span[rng.randrange(len(span))] = int(np_rng.zipf(1.3)) % 20_000
            out.extend(span)
        else:
            out.extend(int(x) % 20_000 for x in np_rng.zipf(1.3, size=rng.randrange(5, 60)))
    return out[:n]


def make_sources() -> list[DraftSource]:
    return [SuffixIndex(), NgramIndex()]


def accepted(draft: Draft, truth: list[int]) -> int:
    """Drafted tokens a greedy verifier would accept if the model's output were `truth`."""
    node, n = -1, 0
    for tok in truth:
        child = draft.children(node).get(tok)
        if child is None:
            break
        node, n = child, n + 1
    return n


@dataclass
class Stats:
    """Milliseconds over the timed steps."""

    median_ms: float
    p99_ms: float
    mean_ms: float

    @staticmethod
    def of(ns: list[int]) -> Stats:
        arr = np.array(ns, dtype=np.float64) / 1e6
        return Stats(float(np.median(arr)), float(np.percentile(arr, 99)), float(arr.mean()))


@dataclass
class Row:
    """One stream at one context size. `cpu` times are this thread's CPU time (immune to
    other processes taking the core); `wall` times include any such preemption."""

    stream: str
    context: int
    bulk_observe_us_per_token: float
    observe_one_cpu: Stats
    propose_tree_cpu: Stats
    step_cpu: Stats
    step_wall: Stats
    propose_cpu_by_source: dict[str, Stats]
    mean_nodes: float
    mean_accepted_if_stream_were_the_model: float
    memory_bytes: dict[str, int] = field(default_factory=dict)
    memory_bytes_per_token: dict[str, float] = field(default_factory=dict)


def time_steps(kind: str, stream: list[int], context: int) -> Row:
    """Observe `context` tokens, then time propose + observe(1) for STEPS steps."""
    proposer = Proposer(make_sources())
    t0 = time.perf_counter_ns()
    proposer.observe(stream[:context])
    bulk_ns = time.perf_counter_ns() - t0

    propose_ns: list[int] = []
    observe_ns: list[int] = []
    wall_ns: list[int] = []
    source_ns: dict[str, list[int]] = {type(s).__name__: [] for s in proposer.sources}
    nodes: list[int] = []
    acc: list[int] = []
    pos = context
    for step in range(WARMUP + STEPS):
        w0 = time.perf_counter_ns()
        t0 = time.thread_time_ns()
        draft = proposer.propose(BUDGET, MAX_DEPTH, BRANCHES)
        t1 = time.thread_time_ns()
        proposer.observe(stream[pos : pos + 1])
        t2 = time.thread_time_ns()
        w1 = time.perf_counter_ns()
        if step >= WARMUP:
            propose_ns.append(t1 - t0)
            observe_ns.append(t2 - t1)
            wall_ns.append(w1 - w0)
            nodes.append(len(draft))
            acc.append(accepted(draft, stream[pos : pos + MAX_DEPTH]))
            for source in proposer.sources:  # each source alone, same arguments
                s0 = time.thread_time_ns()
                source.propose(MAX_DEPTH, proposer.candidates)
                source_ns[type(source).__name__].append(time.thread_time_ns() - s0)
        pos += 1
    return Row(
        stream=kind,
        context=context,
        bulk_observe_us_per_token=bulk_ns / context / 1e3,
        observe_one_cpu=Stats.of(observe_ns),
        propose_tree_cpu=Stats.of(propose_ns),
        step_cpu=Stats.of([a + b for a, b in zip(propose_ns, observe_ns, strict=True)]),
        step_wall=Stats.of(wall_ns),
        propose_cpu_by_source={name: Stats.of(v) for name, v in source_ns.items()},
        mean_nodes=float(np.mean(nodes)),
        mean_accepted_if_stream_were_the_model=float(np.mean(acc)),
    )


def memory(stream: list[int], context: int, make: Callable[[], DraftSource]) -> int:
    """Bytes held by one index after observing `context` tokens (tracemalloc)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = make()
    index.observe(stream[:context])
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del index
    return used


def print_table(rows: list[Row]) -> None:
    print(
        f"CPU ms per step, median (budget {BUDGET}, depth {MAX_DEPTH}, branches {BRANCHES});"
        " wall p99 includes preemption; memory in bytes per token"
    )
    print(
        f"{'stream':<10}{'context':>8}{'observe':>9}{'propose':>9}{'step':>8}{'p99':>7}"
        f"{'wall p99':>9}{'suffix':>8}{'ngram':>8}{'nodes':>7}{'acc':>6}"
        f"{'mem sfx':>9}{'mem ngr':>9}"
    )
    for r in rows:
        by_src = r.propose_cpu_by_source
        mem = r.memory_bytes_per_token
        print(
            f"{r.stream:<10}{r.context:>8}{r.observe_one_cpu.median_ms:>9.3f}"
            f"{r.propose_tree_cpu.median_ms:>9.3f}{r.step_cpu.median_ms:>8.3f}"
            f"{r.step_cpu.p99_ms:>7.3f}{r.step_wall.p99_ms:>9.3f}"
            f"{by_src['SuffixIndex'].median_ms:>8.3f}{by_src['NgramIndex'].median_ms:>8.3f}"
            f"{r.mean_nodes:>7.1f}{r.mean_accepted_if_stream_were_the_model:>6.2f}"
            f"{mem['SuffixIndex']:>9.0f}{mem['NgramIndex']:>9.0f}"
        )


def main() -> None:
    need = max(CONTEXTS) + WARMUP + STEPS + MAX_DEPTH
    streams = {"code": code_stream(need), "synthetic": synthetic_stream(need)}
    indexes: dict[str, Callable[[], DraftSource]] = {
        "SuffixIndex": SuffixIndex,
        "NgramIndex": NgramIndex,
    }
    rows: list[Row] = []
    for kind, stream in streams.items():
        for context in CONTEXTS:
            row = time_steps(kind, stream, context)
            row.memory_bytes = {
                name: memory(stream, context, make) for name, make in indexes.items()
            }
            row.memory_bytes_per_token = {k: v / context for k, v in row.memory_bytes.items()}
            rows.append(row)

    results = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "settings": {
            "budget": BUDGET,
            "max_depth": MAX_DEPTH,
            "branches": BRANCHES,
            "steps": STEPS,
            "warmup": WARMUP,
            "sources": list(indexes),
        },
        "rows": [asdict(r) for r in rows],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print_table(rows)
    print(f"wrote {RESULTS.name} in {RESULTS.parent}")


if __name__ == "__main__":
    main()

"""Offline replay: the real drafter and controller against stored plain outputs, in seconds.

Greedy decoding accepts a drafted token exactly when it equals the model's own next token,
so once a prompt's plain (greedy) output is known, any drafting configuration can be run
against it without the model: a verifier answers each step with one-hot logits of that
output, and time is modeled, each step costing t(n + 1) from this machine's calibrated cost
curve. Two configurations then compare deterministically, free of timing noise, on a whole
prompt set in a few seconds. It is a tool for tuning the drafting core: the speed it reports
is a model (it leaves out the Python side, 2-3% of a step), so claims come from compare.py.

`--oracle` adds a bound: the same drafts, but each step verifies the prefix that is best
knowing which of its tokens are right (what a perfect controller would make of them).

    python -m bench.replay                          # bench prompts, outputs from compare's JSON
    python -m bench.replay --set tune --record      # the tune set's plain outputs, generated once
    python -m bench.replay --set tune --config branches=1 --config min_gain=1.25 --oracle
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import time
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

import lookahead
from bench.oracle import best_prefix
from bench.run import RUNS_FILE, read_runs
from bench.tasks import KINDS, PROMPT_SETS, Task, load_tasks
from lookahead.backend.llama import BackendConfig
from lookahead.core.control import Controller, CostModel
from lookahead.core.draft import Draft
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, GenerationConfig, generate
from lookahead.core.policy import Policy
from lookahead.core.request import Drafter, Result, Stats, Step
from lookahead.errors import UserError
from lookahead.index.base import DraftSource

RESULTS = Path(__file__).parent / "results"


class TruthVerifier:
    """A Verifier whose model writes `truth`: one-hot logits, a clock moved by t(n + 1)."""

    def __init__(self, truth: list[int], n_vocab: int, cost: Any, token_bytes: Any) -> None:
        self.truth, self.n_vocab, self.cost = truth, n_vocab, cost
        self.token_bytes = token_bytes
        self.n_ctx, self.n_batch, self.max_branches = 1 << 20, 1 << 20, 16
        self.n_past = 0
        self.done = 0  # output tokens committed (the root of the next step is truth[done - 1])
        self.now = 0.0

    @property
    def n_used(self) -> int:
        return self.n_past

    def reset(self) -> None:
        self.n_past = self.done = 0

    def prefill(self, tokens: Any) -> None:
        self.n_past += len(tokens)

    def verify(self, root: int, draft: Draft) -> _Rows:
        self.now += self.cost(len(draft) + 1, self.n_used + len(draft) + 1)
        return _Rows(self, draft)

    def commit(self, draft: Draft, accepted: list[int]) -> None:
        self.n_past += 1 + len(accepted)
        self.done += 1 + len(accepted)

    def truncate(self, n_past: int) -> None:
        self.done = max(0, self.done - (self.n_past - n_past))
        self.n_past = n_past

    def is_eog(self, token: int) -> bool:
        return False

    def next_token(self, offset: int) -> int:
        i = self.done + offset
        return self.truth[i] if i < len(self.truth) else 0


class _Rows:
    """Row 0 predicts the next output token; a node's row, the token after its path if the
    path is the output's, else anything (token 0)."""

    def __init__(self, v: TruthVerifier, draft: Draft) -> None:
        self.v, self.draft = v, draft

    def __getitem__(self, row: int) -> np.ndarray:
        out = np.zeros(self.v.n_vocab, np.float32)
        depth = 0
        if row > 0:
            path = self.draft.path_to(row - 1)
            if any(int(self.draft.tokens[j]) != self.v.next_token(k) for k, j in enumerate(path)):
                out[0] = 1.0
                return out
            depth = len(path)
        out[self.v.next_token(depth)] = 1.0
        return out


def oracle_choice(controller: Controller, v: TruthVerifier, cost: Any) -> Any:
    """A choose() that verifies the prefix best for this step, knowing the right tokens
    (set it as the controller's choose; it still calls the original, whose state observe()
    reads)."""
    inner = controller.choose

    def choose(draft: Draft) -> int:
        inner(draft)
        return best_prefix(draft, controller.limit(draft), v.next_token, cost)

    return choose


def load_truth(path: Path) -> dict[str, list[int]]:
    """Plain outputs by task id: the first plain run of a bench output folder (its runs.jsonl),
    of an older compare.py JSON, or of --record's file."""
    runs = read_runs(path / RUNS_FILE) if path.is_dir() else json.loads(path.read_text())["runs"]
    out: dict[str, list[int]] = {}
    for run in sorted(runs, key=lambda r: r.get("repeat", 0)):
        if run["method"] == "plain":
            out.setdefault(run["task"], run["tokens"])
    return out


def record(model: lookahead.Model, tasks: list[Task], max_tokens: int, path: Path) -> None:
    """Plain outputs of `tasks`, added to (or replacing those of the same tasks in) `path`."""
    ids = {t.id for t in tasks}
    old = json.loads(path.read_text()).get("runs", []) if path.exists() else []
    runs = [r for r in old if r["task"] not in ids]
    for task in tasks:
        r = model.generate(
            task.prompt, chat=task.chat, max_tokens=max_tokens, draft=DraftConfig(enabled=False), cache_prompt=False
        )
        runs.append({"task": task.id, "kind": task.kind, "method": "plain", "repeat": 0, "tokens": r.tokens})
        print(f"recorded {task.id}: {len(r.tokens)} tokens", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"max_tokens": max_tokens, "runs": runs}))


def _config(pairs: list[str]) -> DraftConfig:
    """DraftConfig with `--config field=value` pairs (Python literals); a pair that names no
    field or gives no valid value ends the command with a message saying which."""
    known = {f.name for f in fields(DraftConfig)}
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        key = key.strip()
        if not eq or key not in known:
            names = ", ".join(sorted(known))
            raise SystemExit(f"--config wants FIELD=VALUE with a DraftConfig field ({names}), got {pair!r}")
        try:
            values[key] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise SystemExit(f"--config {pair!r}: the value is not a Python literal (e.g. 1.25, 2, True)") from None
    try:
        config = replace(DraftConfig(), **values)
        config.control()  # the controller's own checks, now rather than mid-replay
    except (TypeError, ValueError, UserError) as exc:
        raise SystemExit(f"--config: {exc}") from None
    return config


def modeled_clock(calibration: dict[int, float], slope: dict[int, float]) -> Any:
    """cost(n, cells): modeled seconds of a batch of n with `cells` in the cache, from the
    calibrated curve and its context slope."""
    sizes = sorted(calibration)
    seconds = [calibration[k] for k in sizes]
    base = CostModel(calibration, slope=slope)

    def cost(n: int, cells: int = 0) -> float:
        return float(np.interp(n, sizes, seconds)) * base.factor_at(n, cells)

    return cost


def drafting_for(
    model: lookahead.Model, config: DraftConfig, v: TruthVerifier, sources: Sequence[DraftSource] = ()
) -> tuple[Drafter | None, Policy | None]:
    """The drafter and policy `model.drafting` gives `config` for one replayed request, as a
    server builds them (a controller learned so far carries over), its cost model pricing the
    cells of this request's verifier `v`; (None, None) for plain decoding. The controller is
    cached across requests, so its cost model is pointed at each request's verifier here:
    left as first built, it would price every later request at the first one's cells."""
    if not config.enabled:
        return None, None
    drafter, policy = model.drafting.drafter(config, extra=sources), model.drafting.policy(config)
    if isinstance(policy, Controller):
        policy.cost.cells = lambda: v.n_used
    return drafter, policy


def replay_request(
    model: lookahead.Model, prompt: Sequence[int], out: list[int], config: DraftConfig, cost: Any,
    sources: Sequence[DraftSource] = (), after: Sequence[int] | None = None, max_tokens: int | None = None,
) -> tuple[Result, float, list[Step]]:
    """One request replayed: the engine over `prompt`, accepting exactly the tokens `out`
    (`TruthVerifier`), time modeled by `cost(n, cells)`. Returns the Result, plain decoding's
    modeled seconds for the same tokens (one per step, the cache one cell deeper each), and
    the steps.

    By default the engine is told the answer ends after `out` (max_tokens), so no draft runs
    past its end. A service does not know where a stop of the client's (a time budget) will
    end the answer: with `after`, the tokens the model writes past the end, the engine runs
    to `max_tokens` over out + after, drafts past the end are verified as a service verifies
    them, and the answer ends at the step that reaches the end of `out`, as the service's
    stop ends it (that step's tokens past the end are dropped, its time is counted)."""
    truth = list(out) if after is None else [*out, *after]
    v = TruthVerifier(truth, model.backend.n_vocab, cost, model.backend.token_bytes)
    drafter, policy = drafting_for(model, config, v, sources)
    limit = len(out) if after is None else max(max_tokens or len(truth), len(out))
    result, steps, written = None, [], []
    for event in generate(v, prompt, GenerationConfig(max_tokens=limit), drafter, policy, clock=lambda: v.now):
        if isinstance(event, Done):
            result = event.result
        elif isinstance(event, Step):
            steps.append(event)
            written += event.tokens
            if after is not None and len(written) >= len(out):  # the client's stop ends the answer here
                stats = Stats(
                    n_tokens=len(out), steps=len(steps), drafted=sum(s.drafted for s in steps),
                    accepted=sum(s.accepted for s in steps), decode_s=v.now,
                )  # fmt: skip
                result = Result("", written[: len(out)], stats, "stop")
                break
    assert result is not None and result.tokens == out, "the replay left the output"
    return result, sum(cost(1, len(prompt) + i) for i in range(len(out))), steps


def replay(
    model: lookahead.Model, tasks: list[Task], truth: dict[str, list[int]], config: DraftConfig,
    *, oracle: bool, shared: bool, verbose: bool, curve: dict[int, float] | None = None,
    context: bool = True,
) -> dict[str, list[float]]:
    calibration = model.tuning.calibrate()
    if curve:  # another machine's shape t(n)/t(1), at this machine's t(1)
        calibration = {n: calibration[1] * r for n, r in {1: 1.0, **curve}.items()}
    slope = model.tuning.cost_slope if context else {}
    cost = modeled_clock(calibration, slope)

    speedups: dict[str, list[float]] = {}
    for task in tasks:
        if task.id not in truth:
            print(f"{task.id}: no stored plain output (run with --record)")
            continue
        out = truth[task.id]
        state = model.drafting
        v = TruthVerifier(out, model.backend.n_vocab, cost, model.backend.token_bytes)
        # the modeled clock follows it exactly
        state.cost = CostModel(calibration, slope=slope, cells=lambda v=v: v.n_used)
        if not shared:
            state.controllers.clear()
        drafter, policy = drafting_for(model, config, v)
        if oracle and isinstance(policy, Controller):
            policy.choose = oracle_choice(  # type: ignore[method-assign]
                policy, v, lambda n, v=v: cost(n, v.n_used + n)
            )
        prompt = model.prompt_tokens(task.prompt, task.chat)
        steps: list[str] = []
        result = None
        for event in generate(
            v, prompt, GenerationConfig(max_tokens=len(out)), drafter, policy, clock=lambda v=v: v.now
        ):
            if isinstance(event, Done):
                result = event.result
            elif verbose:
                text = b"".join(model.backend.token_bytes(t) for t in event.tokens).decode("utf-8", "replace")
                steps.append((f"[{event.drafted}/{event.accepted}]" if event.drafted else "") + repr(text)[1:-1])
        assert result is not None and result.tokens == out, f"{task.id}: the replay left the output"
        s = result.stats
        # plain decoding's modeled time: one token per step, the cache one cell deeper each
        plain_s = sum(cost(1, len(prompt) + i) for i in range(len(out)))
        x = plain_s / s.decode_s
        speedups.setdefault(task.kind, []).append(x)
        drafting = sum(1 for k in s.k_trace if k) / max(s.steps, 1)
        print(f"{task.id:28s} {x:5.2f}x  steps {s.steps:4d}  accepted {s.accepted:4d}  "
              f"drafted {s.drafted:5d}  drafting {drafting:4.0%}")
        if verbose:
            print("   " + " ".join(steps))
    return speedups


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="model name or .gguf path")
    p.add_argument("--set", dest="prompt_set", choices=PROMPT_SETS, default="bench")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma list of {','.join(KINDS)}")
    p.add_argument("--truth", type=Path, default=None,
                   help="plain outputs: a bench output folder or a JSON file "
                   "(default: --record's file for the set, else compare.py's)")
    p.add_argument("--record", action="store_true", help="generate the set's plain outputs first")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per plain output (--record)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="DraftConfig field to change (repeatable), e.g. branches=1")
    p.add_argument("--oracle", action="store_true", help="also replay with a perfect controller")
    p.add_argument("--shared", action="store_true", help="one controller across prompts, as a server")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--curve", default=None, metavar="N=RATIO,...",
                   help="model another machine: its t(n)/t(1), e.g. 2=1.33,4=1.71,8=2.88,16=4.59,32=8.47,64=15.9")
    p.add_argument("--no-context", action="store_true",
                   help="model every verify on an empty cache (no context slope), as before v3 costs")
    p.add_argument("-v", "--verbose", action="store_true", help="print every step")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    name = Path(args.model).name.removesuffix(".gguf")
    recorded = RESULTS / f"plain-{name}-{args.prompt_set}.json"
    path = args.truth or (recorded if recorded.exists() or args.record or args.prompt_set != "bench"
                          else RESULTS / f"compare-{name}.json")
    # bad arguments end with a usage message, before the model is loaded
    try:
        tasks = load_tasks(kinds, prompt_set=args.prompt_set)
    except ValueError as e:
        p.error(str(e))
    try:
        config = _config(args.config)
    except (ValueError, TypeError, SyntaxError) as e:
        p.error(f"{e} (--config takes DraftConfig fields as KEY=VALUE, VALUE a Python literal)")
    try:
        curve = {int(k): float(v) for k, v in (x.split("=") for x in args.curve.split(","))} if args.curve else None
    except ValueError:
        p.error("--curve takes N=RATIO pairs, e.g. 2=1.33,4=1.71")
    if not args.record and not path.exists():
        p.error(f"no plain outputs at {path}: run with --record, or bench.compare first")
    model = lookahead.load(args.model, backend=BackendConfig(n_threads=args.threads))
    if args.record:
        record(model, tasks, args.max_tokens, path)
    try:
        truth = load_truth(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error(f"{path} is not a file of plain outputs ({type(e).__name__}: {e})")
    t0 = time.process_time()
    runs = [("controller", False)] + ([("oracle", True)] if args.oracle else [])
    for label, oracle in runs:
        print(f"== {label}: {config}")
        speedups = replay(
            model, tasks, truth, config, oracle=oracle, shared=args.shared, verbose=args.verbose, curve=curve,
            context=not args.no_context,
        )
        every = [x for xs in speedups.values() for x in xs]
        medians = "  ".join(f"{k} {float(np.median(xs)):.3f}" for k, xs in speedups.items())
        geomean = math.exp(sum(math.log(x) for x in every) / len(every)) if every else float("nan")
        print(f"modeled speedup, median per kind: {medians}  geomean {geomean:.3f}")
    print(f"({time.process_time() - t0:.1f} s of CPU)")


if __name__ == "__main__":
    main()

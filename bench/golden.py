"""Behaviour check for refactors: replay figures and greedy outputs, recorded once, compared later.

A refactor of the decoding core must not change what it decides or what it writes. This
script records two things to a JSON file, and with `--check` compares a later run against it:

- `bench.replay` on every prompt set (the real drafter and controller against stored plain
  outputs, modeled clock): every per-prompt line and every speedup, to the last digit. The
  cost curve is pinned (stored in the JSON and fed to the model's cost cache), so the
  figures depend on the code alone, not on how busy the machine is.
- greedy token ids of the bench prompts on a batch-invariant model (SmolLM2-135M Q4_1),
  plain, with default drafting, with exact mode, and batched (`generate_many`), a bounded
  number of tokens each. Its cost curve is pinned the same way.

    python -m bench.golden --record /tmp/golden-before.json   # on the code before the change
    python -m bench.golden --check /tmp/golden-before.json    # on the code after: exit 1 if any differ

It takes a few minutes on 2 cores. Only the public API (`lookahead.load`, `DraftConfig`),
`bench.replay` and `bench.tasks` are used, so it runs unchanged on older layouts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lookahead
from bench import replay as replay_mod
from bench.tasks import PROMPT_SETS, load_tasks
from lookahead.backend.llama import BackendConfig, LlamaBackend

REPLAY_MODEL = "qwen2.5-coder-0.5b"
OUTPUT_MODEL = "smollm2-135m"
THREADS = 2
RESULTS = Path(__file__).parent / "results"


def _truth_path(prompt_set: str) -> Path:
    """The stored plain outputs `bench.replay` reads by default for a set (fresh: its run)."""
    recorded = RESULTS / f"plain-{REPLAY_MODEL}-{prompt_set}.json"
    if recorded.exists():
        return recorded
    return RESULTS / (f"compare-{REPLAY_MODEL}.json" if prompt_set == "bench" else prompt_set)


def _model_path(name: str) -> Path:
    """The GGUF file of a named model, assembled on first use (the normal cache)."""
    model = lookahead.load(name, backend=BackendConfig(n_threads=THREADS, n_ctx=512), probe_backend=False)
    try:
        return Path(model.backend.path)
    finally:
        model.close()


def _load(path: Path, cache: Path) -> Any:
    """A model whose cost cache is `cache` (seeded with the pinned curves)."""
    return lookahead.load(
        path, cache_dir=cache / "models", backend=BackendConfig(n_threads=THREADS), probe_backend=False
    )


def run_replay(model: Any) -> dict[str, Any]:
    """Every prompt set replayed with the default DraftConfig: printed lines and speedups."""
    out: dict[str, Any] = {}
    for prompt_set in PROMPT_SETS:
        tasks = load_tasks(prompt_set=prompt_set)
        truth = replay_mod.load_truth(_truth_path(prompt_set))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            speedups = replay_mod.replay(
                model, tasks, truth, lookahead.DraftConfig(), oracle=False, shared=False, verbose=False
            )
        out[prompt_set] = {"lines": buf.getvalue().splitlines(), "speedups": speedups}
        print(f"replay {prompt_set}: {len(buf.getvalue().splitlines())} prompts", flush=True)
    return out


def run_outputs(model: Any, max_tokens: int) -> dict[str, dict[str, list[int]]]:
    """Greedy token ids of the bench prompts per mode."""
    tasks = load_tasks(prompt_set="bench")
    modes = {
        "plain": lookahead.DraftConfig(enabled=False),
        "default": lookahead.DraftConfig(),
        "exact": lookahead.DraftConfig(exact=True),
    }
    out: dict[str, dict[str, list[int]]] = {}
    for mode, draft in modes.items():
        t0 = time.perf_counter()
        out[mode] = {
            t.id: list(model.generate(t.prompt, chat=t.chat, max_tokens=max_tokens, draft=draft).tokens)
            for t in tasks
        }
        print(f"outputs {mode}: {time.perf_counter() - t0:.0f} s", flush=True)
    # batched: chat and raw prompts apart, as generate_many takes one chat flag
    batched: dict[str, list[int]] = {}
    for chat in (True, False):
        group = [t for t in tasks if t.chat == chat]
        if group:
            results = model.generate_many([t.prompt for t in group], parallel=3, chat=chat, max_tokens=max_tokens)
            batched.update({t.id: list(r.tokens) for t, r in zip(group, results, strict=True)})
    out["batched"] = batched
    return out


def _tuning(model: Any) -> Any:
    """What calibrates: the model's tuning object, or the model itself in older layouts."""
    return getattr(model, "tuning", model)


def _keep_any_curve() -> None:
    """Cache the cost curve even if measured under load (so --check can pin it)."""
    import importlib

    for name in ("lookahead.tuning.calibrate", "lookahead.api"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "plausible"):
            module.plausible = lambda costs: True
            return


def _no_measuring(*args: object, **kwargs: object) -> Any:
    raise RuntimeError("the cost curve was measured instead of read from the pinned cache: its key changed?")


def collect(pinned: dict[str, Any] | None, max_tokens: int) -> dict[str, Any]:
    """One full run; with `pinned` (a cost cache's content) nothing is measured."""
    qwen, smol = _model_path(REPLAY_MODEL), _model_path(OUTPUT_MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        (cache / "models").mkdir()
        if pinned is not None:
            (cache / "costs.json").write_text(json.dumps(pinned))
            LlamaBackend.measure_cost = _no_measuring  # type: ignore[method-assign]
        else:  # recording: keep whatever a busy machine measures
            _keep_any_curve()
        result: dict[str, Any] = {"max_tokens": max_tokens}
        model = _load(qwen, cache)
        try:
            _tuning(model).calibrate()
            result["replay"] = run_replay(model)
        finally:
            model.close()
        model = _load(smol, cache)
        try:
            _tuning(model).calibrate()
            result["outputs"] = run_outputs(model, max_tokens)
        finally:
            model.close()
        result["costs"] = json.loads((cache / "costs.json").read_text())
    return result


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Human-readable differences (empty: identical)."""
    diffs: list[str] = []
    for prompt_set, old in before["replay"].items():
        new = after["replay"].get(prompt_set)
        if new is None:
            diffs.append(f"replay {prompt_set}: missing")
            continue
        for a, b in zip(old["lines"], new["lines"], strict=False):
            if a != b:
                diffs.append(f"replay {prompt_set}:\n  before {a}\n  after  {b}")
        if len(old["lines"]) != len(new["lines"]) or old["speedups"] != new["speedups"]:
            diffs.append(f"replay {prompt_set}: speedups differ")
    for mode, old_outs in before["outputs"].items():
        new_outs = after["outputs"].get(mode, {})
        for task, tokens in old_outs.items():
            if new_outs.get(task) != tokens:
                diffs.append(f"output {mode} {task}: differs")
    return diffs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.golden", description=__doc__.split("\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path, metavar="JSON", help="run and write the figures here")
    mode.add_argument("--check", type=Path, metavar="JSON", help="run and compare with a recorded file")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per output (--record)")
    args = p.parse_args(argv)
    if args.record:
        result = collect(None, args.max_tokens)
        args.record.write_text(json.dumps(result))
        print(f"recorded {args.record}")
        return 0
    before = json.loads(args.check.read_text())
    after = collect(before["costs"], before["max_tokens"])
    diffs = compare(before, after)
    for line in diffs:
        print(line)
    print("identical" if not diffs else f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())

"""The CLI's workflows side by side: code completion (with and without the repository as
draft context) and templated reports, against plain decoding on the same prompts.

    python -m bench.workflows                       # default model, 2 interleaved repeats
    python -m bench.workflows --model smollm2-135m --repeats 1

Completion: functions of this repository (`lookahead/**/*.py`, a fixed spread), each with
its body taken out and the cursor where the body starts; the rest of the file is the code
after the cursor. The same library calls as `lookahead complete` (fill-in-the-middle when
the model has the tokens, the code-aware stop), three ways: plain decoding, drafts without
context, drafts with the repository as context (the file being completed left out, as
`complete` does with the file it completes). Reports: the shipped example (`examples/sales`, the same prompt as
`lookahead report`) and the bench set's report prompts (`--tune`: the tune set's too),
plain vs drafts.

Each prompt runs every method once per repeat, in a rotated order (interleaved). Reported:
decode speed relative to plain (median over repeats), α, and whether the text equals plain
decoding's. Results: bench/results/workflows-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.provenance import run_info
from bench.tasks import load_tasks
from bench.tasks_tune import tasks_of as tune_tasks_of
from lookahead.api import Model, load
from lookahead.apps.codestop import language_of
from lookahead.apps.complete import Cursor, Split, completion_prompt, stream_completion
from lookahead.apps.report import build_report
from lookahead.backend.llama import BackendConfig
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Result
from lookahead.core.sampling import SamplingConfig
from lookahead.index.corpus import CorpusIndex
from lookahead.index.ignore import GitIgnore
from lookahead.models import catalog as models

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
PLAIN = DraftConfig(enabled=False)
DRAFTS = DraftConfig()


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # "complete" or "report"
    methods: tuple[str, ...]


def completion_cases(count: int) -> list[tuple[str, Path, Split]]:
    """`count` functions spread over the repository's library files, bodies taken out."""
    found: list[tuple[str, Path, Split]] = []
    for path in sorted((ROOT / "lookahead").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef) or not node.body or node.end_lineno is None:
                continue
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            if not body or node.end_lineno - body[0].lineno < 5:
                continue  # a one- or two-liner says little
            start = body[0].lineno - 1  # 0-based first line of the body
            prefix = "\n".join(lines[:start]) + "\n"
            suffix = "\n" + "\n".join(lines[node.end_lineno :])
            rel = path.relative_to(ROOT)
            found.append((f"{rel}:{node.name}", path, Split(prefix, suffix, Cursor(start + 1, 1))))
    if count <= 0:
        return []
    step = max(1, len(found) // count)
    return found[::step][:count]


def run_completion(
    model: Model, path: Path, split: Split, draft: DraftConfig, context: CorpusIndex | None, max_tokens: int
) -> Result:
    room = model.backend.n_ctx - max_tokens - 1
    prompt = completion_prompt(model.backend, split, room=room)
    events = stream_completion(
        model, prompt, split, language=language_of(path), max_tokens=max_tokens,
        sampling=SamplingConfig(), draft=draft, context=context,
    )  # fmt: skip
    return _result(events)


def _result(events: Any) -> Result:
    for event in events:
        if isinstance(event, Done):
            return event.result
    raise AssertionError("no Done event")


def measure(result: Result) -> dict[str, Any]:
    s = result.stats
    return {
        "text": result.text,
        "tokens": s.n_tokens,
        "decode_s": s.decode_s,
        "tps": s.n_tokens / s.decode_s if s.decode_s > 0 else 0.0,
        "alpha": s.alpha,
        "steps": s.steps,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=models.DEFAULT_MODEL)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--functions", type=int, default=8, help="completion cases")
    ap.add_argument("--max-tokens", type=int, default=128, help="for completions")
    ap.add_argument("--report-tokens", type=int, default=320, help="for reports")
    ap.add_argument("--tune", action="store_true", help="also the tune set's report prompts")
    ap.add_argument("--suffix", default="", help="added to the result files' names")
    args = ap.parse_args(argv)

    path = models.resolve_model(args.model, models.default_cache_dir())
    model = load(path, backend=BackendConfig(n_ctx=8192, n_threads=args.threads))
    model.tuning.calibrate()
    model.generate("Write a Python function that returns the square of x.", chat=True, max_tokens=16)  # warm
    completions = completion_cases(args.functions)
    # The repository as context, less every file a case completes in (`complete` leaves out
    # the file being completed; one index for all cases instead of one per file).
    t0 = time.perf_counter()
    d = model.drafting
    context: CorpusIndex | None = None
    if completions:
        ignore = GitIgnore(ROOT, exclude=[fpath for _, fpath, _ in completions])
        context = CorpusIndex.load_or_build([ROOT], d.tokenize, d.tokenizer_id, d.corpus_cache, ignore=ignore)
    context_s = time.perf_counter() - t0

    example = build_report(ROOT / "examples/sales/weekly.md", ROOT / "examples/sales/sales.csv")
    reports: list[tuple[str, str]] = [("examples/sales", example.prompt)]
    reports += [(f"bench/{t.id}", t.prompt) for t in load_tasks(["report"])]
    if args.tune:
        reports += [(f"tune/{t.id}", t.prompt) for t in tune_tasks_of("report")]

    records: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for i, (cid, fpath, split) in enumerate(completions):
            methods = [("plain", PLAIN, None), ("drafts", DRAFTS, None), ("drafts + context", DRAFTS, context)]
            k = (rep + i) % len(methods)
            for name, draft, ctx in methods[k:] + methods[:k]:
                res = run_completion(model, fpath, split, draft, ctx, args.max_tokens)
                records.append({"kind": "complete", "id": cid, "method": name, "repeat": rep, **measure(res)})
        for i, (rid, prompt) in enumerate(reports):
            methods2 = [("plain", PLAIN), ("drafts", DRAFTS)]
            k = (rep + i) % 2
            for name, draft in methods2[k:] + methods2[:k]:
                res = model.generate(prompt, chat=True, max_tokens=args.report_tokens, draft=draft, cache_prompt=False)
                records.append({"kind": "report", "id": rid, "method": name, "repeat": rep, **measure(res)})
        print(f"repeat {rep + 1}/{args.repeats} done", flush=True)

    rows = summarize(records)
    info = {
        **run_info(args.model, args.threads),
        "repeats": args.repeats,
        "context_files": len(context.files) if context else 0,
        "context_tokens": context.n_tokens if context else 0,
        "context_build_s": round(context_s, 2),
        "command": "python -m bench.workflows " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    RESULTS.mkdir(exist_ok=True)
    # the model name has dots ("qwen2.5-coder-0.5b"): build each name whole, no with_suffix
    stem = f"workflows-{Path(args.model).stem if args.model.endswith('.gguf') else args.model}{args.suffix}"
    (RESULTS / f"{stem}.json").write_text(json.dumps({"info": info, "runs": records}, indent=1))
    text = markdown(info, rows)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for kind in ("complete", "report"):
        ids = sorted({r["id"] for r in records if r["kind"] == kind})
        for cid in ids:
            mine = [r for r in records if r["id"] == cid]
            plain = [r for r in mine if r["method"] == "plain"]
            plain_tps = statistics.median(r["tps"] for r in plain)
            plain_text = plain[0]["text"]
            for method in dict.fromkeys(r["method"] for r in mine):
                rs = [r for r in mine if r["method"] == method]
                rows.append({
                    "kind": kind,
                    "id": cid,
                    "method": method,
                    "speedup": statistics.median(r["tps"] for r in rs) / plain_tps,
                    "alpha": statistics.median(r["alpha"] for r in rs),
                    "tokens": statistics.median(r["tokens"] for r in rs),
                    "equal": sum(r["text"] == plain_text for r in rs),
                    "runs": len(rs),
                })
    return rows


def markdown(info: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    out = [
        f"# Workflows: {info['model']}",
        "",
        f"Machine: {info['cpu']}, {info['threads']} threads; commit {info['commit']}; "
        f"{info['repeats']} interleaved repeat(s); `{info['command'].strip()}`. Greedy decoding. Decode speed "
        "relative to plain decoding of the same prompt (median over repeats); α = accepted draft "
        "tokens per verify step; 'equal' = runs whose text equals plain decoding's.",
        f"Context for completions: this repository, {info['context_files']} files, "
        f"{info['context_tokens']} tokens, indexed in {info['context_build_s']} s (cached after).",
        "",
    ]
    for kind, title in (("complete", "Code completion at function starts"), ("report", "Templated reports")):
        methods = list(dict.fromkeys(r["method"] for r in rows if r["kind"] == kind and r["method"] != "plain"))
        if not methods:
            continue
        out += [f"## {title}", "", "| prompt | " + " | ".join(f"{m} (α, equal)" for m in methods) + " |",
                "| --- |" + " --- |" * len(methods)]
        for cid in dict.fromkeys(r["id"] for r in rows if r["kind"] == kind):
            cells = []
            for m in methods:
                r = next(x for x in rows if x["id"] == cid and x["method"] == m)
                cells.append(f"{r['speedup']:.2f}x ({r['alpha']:.2f}, {r['equal']}/{r['runs']})")
            out.append(f"| {cid} | " + " | ".join(cells) + " |")
        med = []
        for m in methods:
            sp = [r["speedup"] for r in rows if r["kind"] == kind and r["method"] == m]
            med.append(f"**{statistics.median(sp):.2f}x**")
        out += ["| median | " + " | ".join(med) + " |", ""]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()

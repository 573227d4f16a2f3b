"""The README's headline table: one run, at one commit, on one named machine.

    python -m bench.headline --machine "2-vCPU AMD EPYC cloud machine" --llama-server PATH
    python -m bench.headline --from bench/results/fresh --machine "..."   # table only, no model

The first form runs `lookahead bench` once (every kind, the held-out prompt set by default,
the methods plain, adaptive, server_plain and server_ngram_simple, interleaved), then writes
the table. The second writes it from a folder such a run left. Either way the folder gets
`headline.json` (the machine's name, the peer's command line and version) and
`headline.md` (the table), and the README's block between its opening line and the
"## Quick start" heading is replaced by the table, so the README quotes one run and says
which. tests/test_docs.py renders the table again from the folder and compares.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.llama_server import server_command
from bench.provenance import git_commit
from bench.run import META_FILE, BenchConfig, BenchError, run
from bench.tasks import KINDS, PROMPT_SETS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
INFO_FILE = "headline.json"
TABLE_FILE = "headline.md"
SUMMARY_FILE = "summary.json"
METHODS = ["plain", "adaptive", "server_plain", "server_ngram_simple"]
OPENING = "Measured speed, one run on one machine"  # the README block's first words
END = "\n## Quick start"
LABELS = {
    "code_edit": "code edit: rewrite a given function",
    "report": "templated report from data rows",
    "completion": "code completion, HumanEval",
    "summarize": "summarize a given document",
    "prose": "open prose",
}


def peer_version(binary: Path) -> str:
    """`llama-server --version`'s text (it names the llama.cpp build), or why there is none."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    text = (proc.stdout + proc.stderr).strip().splitlines()
    return "; ".join(line.strip() for line in text if "version" in line or "built" in line) or "unknown"


def peer_command(meta: dict[str, Any]) -> str:
    """The llama-server command line the run used for ngram-simple (model and port as placeholders)."""
    threads = int(meta["config"]["threads"])
    cmd = server_command(Path("llama-server"), Path("MODEL.gguf"), 0, threads, 4096, "ngram-simple")
    cmd[cmd.index("--port") + 1] = "PORT"
    return shlex.join(cmd)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _tok(entry: dict[str, Any] | None) -> str:
    return "-" if not entry else f"{entry['tok_s']:.1f}"


def render(folder: Path) -> str:
    """The headline block for the README, from a bench folder (meta, summary, headline.json)."""
    meta = json.loads((folder / META_FILE).read_text())
    summary = json.loads((folder / SUMMARY_FILE).read_text())["summary"]
    info = json.loads((folder / INFO_FILE).read_text())
    machine = meta["machine"]
    cost = meta["verify_cost"]
    rel16 = float(cost["relative"]["16"])
    rows = []
    for kind in (k for k in KINDS if k in summary):
        by = summary[kind]
        ours, peer = by.get("adaptive"), by.get("server_ngram_simple")
        lo, hi = ours["speedup_vs_plain_range"]
        rows.append(
            f"| {LABELS.get(kind, kind)} ({ours['prompts']}) | {_tok(by.get('plain'))} | {_tok(ours)} "
            f"| **{_x(ours['speedup_vs_plain'])}** ({lo:.2f}-{hi:.2f}) | {_tok(by.get('server_plain'))} "
            f"| {_tok(peer)} | {_x(peer.get('speedup_vs_server_plain') if peer else None)} |"
        )
    rel = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
    return "\n".join([
        f"{OPENING}: decode-phase tokens/s of lookahead and of llama.cpp's own n-gram drafting "
        "(`llama-server --spec-type ngram-simple`), each beside its own plain decoding. "
        f"{info['machine']} ({machine['cpu']}, {machine['arch']}, {', '.join(machine.get('key_flags') or [])}), "
        f"{meta['config']['model_file']}, {meta['config']['threads']} threads, greedy, "
        f"{meta['config']['max_tokens']} tokens, median over prompts of the median over "
        f"{meta['config']['repeats']} repeats; the {meta['config']['prompt_set']} prompt set:",
        "",
        "| kind of task (prompts) | plain decoding, tok/s | lookahead, tok/s "
        "| lookahead over plain (range over prompts) | llama-server, tok/s "
        "| llama-server ngram-simple, tok/s | ngram-simple over llama-server |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Source: `{rel}/` (commit {meta['commit']}; `report.md` beside it has every figure and its noise). "
        f"llama.cpp: {build_label(machine['llama_cpp_build'])}. The peer: `{peer_command(meta)}`, its other "
        f"settings (`--draft-max`, `--draft-min`) at llama-server's defaults; its version: {info['peer_version']}. "
        f"How much is possible depends on the CPU: on this one, verifying 16 tokens cost {rel16:.1f} "
        f"one-token steps, so even a guesser that is always right tops out near {cost['ceiling']:.2f}x; "
        "`lookahead doctor` measures yours. Regenerate with `python -m bench.headline` "
        "([benchmarks.md](docs/benchmarks.md) has every other table, each with its command and file).",
        "",
        "",
    ])


def build_label(text: str) -> str:
    """llama.cpp's system info, short: "llama-cpp-python 0.3.36; CPU : AVX = 1 | AVX2 = 1 |" ->
    "llama-cpp-python 0.3.36 (CPU: AVX, AVX2)"."""
    head, _, features = text.partition(";")
    on = [f.split("=")[0].strip() for f in features.replace("CPU :", "").split("|") if f.strip().endswith("= 1")]
    return f"{head.strip()} (CPU: {', '.join(on)})" if on else text.strip()


def readme_block(text: str) -> str:
    """The README's headline block as it stands (from its opening words to the quick start)."""
    start = text.index(OPENING)
    return text[start : text.index(END, start) + 1]


def update_readme(block: str, readme: Path = README) -> None:
    text = readme.read_text(encoding="utf-8")
    start = text.index(OPENING)
    end = text.index(END, start) + 1
    readme.write_text(text[:start] + block + text[end:], encoding="utf-8")


def write(folder: Path, machine: str, version: str, readme: Path | None = README) -> str:
    """headline.json and headline.md in `folder`; the README's block replaced (unless None)."""
    (folder / INFO_FILE).write_text(json.dumps({"machine": machine, "peer_version": version}, indent=1) + "\n")
    block = render(folder)
    (folder / TABLE_FILE).write_text(block)
    if readme is not None:
        update_readme(block, readme)
    return block


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.headline", description=__doc__.split("\n")[0])
    p.add_argument("--machine", required=True, help="the machine's name, e.g. '2-vCPU AMD EPYC cloud machine'")
    p.add_argument("--from", dest="source", type=Path, help="write the table from this bench folder (no run)")
    p.add_argument("--llama-server", type=Path, help="llama-server binary built from the same llama.cpp")
    p.add_argument("--model", default=BenchConfig.model)
    p.add_argument("--set", dest="prompt_set", choices=PROMPT_SETS, default="fresh")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma list of kinds (a smoke test: one)")
    p.add_argument("--per-kind", type=int)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--out", type=Path, help="the bench folder (default: bench/results/headline-<date>-<cpu>)")
    p.add_argument("--no-readme", action="store_true", help="write the folder's table only")
    p.add_argument("--peer-version", help="with --from and no --llama-server: how the peer was built")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    readme = None if args.no_readme else README
    try:
        if args.source is not None:
            folder = args.source
            info = folder / INFO_FILE
            old = json.loads(info.read_text()) if info.exists() else {}
            version = (
                peer_version(args.llama_server) if args.llama_server
                else args.peer_version or old.get("peer_version", "not recorded")
            )
        else:
            if args.llama_server is None:
                raise BenchError("the headline compares with llama-server: --llama-server PATH")
            out = args.out or ROOT / "bench" / "results" / f"headline-{git_commit() or 'unknown'}-{args.prompt_set}"
            config = BenchConfig(
                model=args.model, kinds=[k for k in args.kinds.split(",") if k], methods=METHODS,
                repeats=args.repeats, max_tokens=args.max_tokens, per_kind=args.per_kind,
                prompt_set=args.prompt_set, out=out, llama_server=args.llama_server,
                command=shlex.join(["python", "-m", "bench.headline", *(sys.argv[1:] if argv is None else argv)]),
            )  # fmt: skip
            folder = run(config, log=lambda line: print(line, file=sys.stderr, flush=True)).out
            version = peer_version(args.llama_server)
        block = write(folder, args.machine, version, readme)
    except (BenchError, OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())

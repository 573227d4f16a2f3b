"""Decoding methods side by side on the benchmark prompts: `lookahead bench`, as a script.

The same code path (bench/run.py) and the same flags as `lookahead bench`, for a checkout
without the console script on PATH; plain log lines instead of a progress bar. Run from the
repository root:

    python -m bench.compare --quick
    python -m bench.compare --model smollm2-135m --kinds code_edit,prose --repeats 1

See bench/README.md for the flags, the protocol and how to read the report.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bench.run import BenchConfig, BenchError, run
from bench.tasks import PROMPT_SETS


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv: list[str]) -> BenchConfig:
    """A BenchConfig from `lookahead bench`'s flags."""
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=BenchConfig.model, help="model name or .gguf path")
    p.add_argument("--kinds", type=_names, help="comma list of prompt kinds")
    p.add_argument("--methods", type=_names, help="comma list of methods (see bench/README.md)")
    p.add_argument("--repeats", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--per-kind", type=int)
    p.add_argument("--set", dest="prompt_set", choices=PROMPT_SETS, default="bench")
    p.add_argument("--threads", type=int, default=0, help="0 = every usable CPU")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--llama-server", type=Path)
    args = p.parse_args(argv)
    command = shlex.join(["python", "-m", "bench.compare", *argv])
    return BenchConfig(**vars(args), command=command)


def main(argv: list[str] | None = None) -> int:
    config = parse(sys.argv[1:] if argv is None else argv)
    try:
        config.resolved()  # bad names fail here, before the model loads
        outcome = run(config, log=lambda line: print(line, file=sys.stderr, flush=True))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(outcome.markdown)
    print(f"{outcome.measured} runs measured; wrote {outcome.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

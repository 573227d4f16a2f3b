"""Decoding methods side by side on the benchmark prompts: `lookahead bench`, as a script.

The same command and code path (bench/run.py), for a checkout without the console script
on PATH. Run from the repository root:

    python -m bench.compare --quick
    python -m bench.compare --model smollm2-135m --kinds code_edit,prose --repeats 1

See bench/README.md for the flags, the protocol and how to read the report.
"""

from __future__ import annotations

import sys

from lookahead.cli.main import app


def main(argv: list[str] | None = None) -> None:
    app(["bench", *(sys.argv[1:] if argv is None else argv)], prog_name="python -m bench.compare")


if __name__ == "__main__":
    main()

"""`lookahead bench`: the benchmark suite of a source checkout (bench/), with a live progress bar.

The suite's code, prompts and results live in the repository's bench/ folder, beside the
package (see bench/README.md): this command runs it from the checkout the CLI is installed
from (`pip install -e '.[bench]'`), and says so when there is none.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

import lookahead.cli as cli
from lookahead.cli.errors import fail
from lookahead.cli.models_cmd import _RichProgress

CHECKOUT_HINT = (
    "`lookahead bench` runs the benchmark suite in the bench/ folder of a lookahead source "
    "checkout (its prompts, texts and results live there): clone the repository and "
    "`pip install -e '.[bench]'` in it"
)


def checkout_root() -> Path | None:
    """The source checkout this CLI runs from (an editable install: cli/ in it), if it has bench/."""
    root = Path(cli.__file__).resolve().parent.parent
    return root if (root / "bench" / "run.py").is_file() else None


def import_bench() -> ModuleType:
    """bench.run from the checkout; a clear error if there is none or matplotlib is missing."""
    root = checkout_root()
    if root is None:
        fail(f"no bench/ beside this installation: {CHECKOUT_HINT}")
    try:
        import matplotlib  # noqa: F401  (the charts)
    except ImportError:
        fail(f"the bench's charts need matplotlib: pip install -e '.[bench]' in {root}")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("bench.run")


class RunBar:
    """One rich bar over the warm-ups and runs, with the elapsed time and the ETA."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self.task = self.bar.add_task("bench", total=None)

    def __enter__(self) -> RunBar:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, description: str, done: int, total: int | None) -> None:
        self.bar.update(self.task, description=description, completed=done, total=total)

    def log(self, line: str) -> None:
        if not self.console.is_terminal:  # a log file gets one line per run instead of the bar
            self.console.print(line, highlight=False, markup=False)


def command_line(options: dict[str, Any]) -> str:
    """The command as given (options left at their defaults omitted), for the report."""
    args = ["lookahead", "bench"]
    for key, value in options.items():
        flag = "--" + ("set" if key == "prompt_set" else key.replace("_", "-"))
        if value is None or value is False or (key, value) in (("prompt_set", "bench"), ("threads", 0)):
            continue
        if value is True:
            args.append(flag)
        else:
            args += [flag, ",".join(value) if isinstance(value, list) else str(value)]
    return shlex.join(args)


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def run_bench(options: dict[str, Any]) -> None:
    """The bench, its options as `lookahead bench` takes them (kinds and methods as comma lists)."""
    options = {**options, "kinds": _csv(options["kinds"]), "methods": _csv(options["methods"])}
    run = import_bench()
    config = run.BenchConfig(**options, command=command_line(options))
    config.resolved()  # bad names fail here, before the model loads
    err = Console(stderr=True)
    with _RichProgress(err) as loading, RunBar(err) as bar:
        outcome = run.run(config, progress=bar, log=bar.log, load_progress=loading)
    sys.stdout.write(outcome.markdown)
    skipped = f", {outcome.skipped} already recorded" if outcome.skipped else ""
    err.print(f"[dim]{outcome.measured} runs measured{skipped}; wrote {outcome.out}[/dim]", highlight=False)

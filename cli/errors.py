"""One place that turns expected failures into one line on stderr and exit code 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@contextmanager
def handled() -> Iterator[None]:
    """Bad input and load failures become `error: ...` (never a traceback)."""
    from lookahead.errors import USER_ERRORS

    try:
        yield
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("", err=True)
        raise typer.Exit(130) from None

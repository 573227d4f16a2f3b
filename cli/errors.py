"""One place that turns failures into what a person should see.

Expected failures (bad input, a model that cannot load: `lookahead.errors`) are one
`error: ...` line and exit 1. Anything else is a bug in lookahead: its traceback is shown,
with a line asking for a report, and the exit code is 2, so it is never passed off as the
user's mistake.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

BUG_EXIT = 2
REPORT_HINT = (
    "This is a bug in lookahead, not in your input. Please report it with the traceback above "
    "and the output of `lookahead doctor --json`."
)


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@contextmanager
def handled() -> Iterator[None]:
    """Expected errors become `error: ...`; bugs a traceback and a request for a report."""
    from lookahead.errors import EXPECTED_ERRORS

    try:
        yield
    except typer.Exit:
        raise
    except EXPECTED_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("", err=True)
        raise typer.Exit(130) from None
    except BrokenPipeError:
        # the reader went away (`... | head`): nothing more to say, and nobody to say it to
        sys.stderr.close()
        raise typer.Exit(1) from None
    except Exception:
        traceback.print_exc()
        typer.echo(f"\n{REPORT_HINT}", err=True)
        raise typer.Exit(BUG_EXIT) from None

"""The optional parts of an installation: what a command needs that `pip install
lookahead-decoding` alone does not bring, and the one line that says how to get it."""

from __future__ import annotations

import importlib.util

from lookahead.cli.errors import fail

DIST = "lookahead-decoding"  # the distribution's name on PyPI (the import name is `lookahead`)

# extra -> the modules it installs (import names)
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "pydantic", "uvicorn", "sse_starlette", "prometheus_client"),
}


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    gone = []
    for name in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, a broken one
            found = False
        if not found:
            gone.append(name)
    return gone


def require(extra: str, command: str) -> None:
    """Exit with one line naming the install command if `extra` is not installed."""
    gone = missing(extra)
    if gone:
        names = ", ".join(gone)
        fail(f"`lookahead {command}` needs the {extra} extra ({names} missing): pip install '{DIST}[{extra}]'")


def print_version(value: bool) -> None:
    """`lookahead --version`: this distribution's version and llama-cpp-python's."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    import typer

    try:
        mine = version(DIST)
    except PackageNotFoundError:  # run from a checkout that was never installed
        mine = "unknown (not installed)"
    try:
        binding = version("llama-cpp-python")
    except PackageNotFoundError:
        binding = "not installed"
    typer.echo(f"lookahead {mine} (llama-cpp-python {binding})")
    raise typer.Exit()

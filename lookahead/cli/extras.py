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

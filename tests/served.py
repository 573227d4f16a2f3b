"""Helpers shared by the tests of the batched service on the small model: its loader and a
strict reader of one /metrics sample."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def loader(path: Path, n_ctx: int) -> Any:
    """The model at `path` with an `n_ctx` context, one thread (the machine may be busy)."""
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    return lambda: load(path, backend=BackendConfig(n_ctx=n_ctx, n_threads=1))


def metric(text: str, sample: str) -> float:
    """The value of `sample` (a name, with its labels if it has any) in Prometheus text;
    fails the test when it is missing."""
    found = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", text, re.M)
    assert found, sample
    return float(found.group(1))

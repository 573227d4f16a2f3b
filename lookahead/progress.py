"""The progress callback every long step reports through (model assembly, corpus indexing).

Its own module so that any layer can name it: it imports nothing.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Progress callback: `total` is None when unknown; `done`/`total` are bytes or items."""

    def __call__(self, description: str, done: int, total: int | None) -> None: ...

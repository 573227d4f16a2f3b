"""Every exception the library raises for bad input or a bad model, for the edges to catch."""

from __future__ import annotations

from lookahead.backend.llama import BackendError
from lookahead.engine import GenerationError
from lookahead.index.corpus import CorpusError
from lookahead.models import ModelError

USER_ERRORS: tuple[type[Exception], ...] = (
    ModelError,
    BackendError,
    GenerationError,
    CorpusError,
    ValueError,
    OSError,
)

"""The contract every draft source keeps, so the proposer can merge any of them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from lookahead.core.draft import Candidate


class DraftSource(Protocol):
    """An index that proposes continuations of the token stream it has observed.

    Contract: the stream can only be appended to. `observe` costs O(1) amortized per
    token (never a rescan of what came before), and `propose` looks only at the current
    end of the stream, so a step costs the same at 1k or 32k tokens of context.
    """

    source: int  # tag from lookahead.core.draft (SOURCE_NGRAM, ...)

    def observe(self, tokens: Iterable[int]) -> None:
        """Append `tokens` (prompt or accepted output) to the stream."""
        ...

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        """Up to `max_candidates` continuations of the stream, each at most `max_depth` long,
        best first, with per-token conditional estimates in (0, 1]."""
        ...

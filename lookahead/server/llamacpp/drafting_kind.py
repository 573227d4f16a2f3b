"""The kind of a llama.cpp-API request, as drafting learns it (`DraftConfig.request_kind`).

An editor tells its kinds of request apart by the time it gives each to write
(`t_max_predict_ms`): llama.vim sends the quick request at a new line with 250 ms and the
follow-ups that assume a suggestion accepted with 1000 ms. What a copy of the code earns
differs between them: at a new line the model writes a line that is not in the file yet,
while a follow-up goes on with code the suggestion began, so each budget gets its own
controller. A client that sends one budget for everything (llama.vscode), or none, keeps
one controller for all of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lookahead.core.draft_state import DraftConfig


def with_kind(draft: DraftConfig, body: Any) -> DraftConfig:
    """`draft` with the kind of request `body` (a native request: `/infill`, `/completion`)."""
    budget = getattr(body, "t_max_predict_ms", -1)
    if budget is None or budget <= 0:
        return draft
    return replace(draft, request_kind=f"t_max_predict_ms={budget}")

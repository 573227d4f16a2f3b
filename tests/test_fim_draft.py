"""Fill-in-the-middle requests draft without the copy-through-edits source (a completion's
middle is new code, not the prompt copied back); other requests keep it."""

from __future__ import annotations

import asyncio

from lookahead.core.draft_state import DraftConfig
from lookahead.server.native_prepare import Prepared, make_job
from lookahead.server.native_schemas import CompletionRequest, InfillRequest


def test_infill_drafts_without_the_edit_source_and_completion_keeps_it() -> None:
    loop = asyncio.new_event_loop()
    try:
        prepared = Prepared([1, 2, 3], 8, False, [])
        base = DraftConfig()
        infill = make_job(prepared, InfillRequest(input_prefix="def f(", input_suffix=")\n"), base, loop)
        plain = make_job(prepared, CompletionRequest(prompt="def f("), base, loop)
    finally:
        loop.close()
    assert base.edits and plain.draft.edits
    assert not infill.draft.edits
    assert infill.draft == DraftConfig(edits=False)  # nothing else changed

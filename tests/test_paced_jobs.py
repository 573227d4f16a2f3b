"""Which of llama.cpp's requests are paced (the worker waits for the route's word on each
step, so an editor's stop comes before another step starts): those with a stop of the
route's own (`n_indent`, `t_max_predict_ms`), and never a stream, whose route reads a step
only once its client took the last one. No model: the job settings alone."""

from __future__ import annotations

import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.server.llamacpp.prepare import Prepared, generation_of
from lookahead.server.llamacpp.schemas import InfillRequest


@pytest.mark.parametrize(
    ("fields", "paced"),
    [
        ({}, False),
        ({"t_max_predict_ms": 250}, True),
        ({"n_indent": 4}, True),
        ({"t_max_predict_ms": 250, "stream": True}, False),  # a slow reader must not hold the worker
    ],
)
def test_paced_only_with_a_stop_of_the_routes_own_and_no_stream(fields: dict[str, object], paced: bool) -> None:
    body = InfillRequest.model_validate({"input_prefix": "def f(", "input_suffix": "", **fields})
    g = generation_of(Prepared([1, 2, 3], 8, False, []), body, SamplingConfig(), DraftConfig())
    assert g.paced is paced

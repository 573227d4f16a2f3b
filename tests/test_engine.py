"""The decoding loop on the fake backend: requests it refuses, and where it must stop."""

from __future__ import annotations

import pytest

from lookahead.engine import GenerationConfig, GenerationError, generate
from tests.fake_backend import FakeModel


def test_an_empty_prompt_is_refused_when_generate_is_called() -> None:
    """Before any event is asked for: a caller that sets up a stream and reads it later
    (a server answering 400 vs 200) must learn of the error at once."""
    with pytest.raises(GenerationError, match="prompt is empty"):
        generate(FakeModel(), [], GenerationConfig(4))


def test_a_prompt_longer_than_the_context_is_refused_when_generate_is_called() -> None:
    model = FakeModel(n_ctx=8)
    with pytest.raises(GenerationError, match="the prompt has 8 tokens"):
        generate(model, [1] * 8, GenerationConfig(4))
    assert model.verified == []  # nothing was decoded

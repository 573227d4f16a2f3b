"""Exact mode's self-test on the fake backend: the largest batch whose logits equal
one-token decoding bit for bit."""

from __future__ import annotations

import pytest

from lookahead.core.exactness import exact_batch_limit
from lookahead.errors import BackendError
from tests.fake_backend import FakeModel

TOKENS = [1, 2, 3, 0, 2, 1, 3, 3, 0, 1] * 4


def test_a_batch_invariant_model_gets_the_largest_size_asked() -> None:
    assert exact_batch_limit(FakeModel(), TOKENS, max_size=16) == 16


def test_the_limit_is_the_last_size_before_logits_first_differ() -> None:
    model = FakeModel(batch_variant=lambda n, used: n >= 5)
    assert exact_batch_limit(model, TOKENS, max_size=16) == 4


def test_the_first_mismatch_ends_the_search() -> None:
    """Sizes past a mismatch are not trusted even where they happen to match again."""
    model = FakeModel(batch_variant=lambda n, used: n == 3)
    assert exact_batch_limit(model, TOKENS, max_size=16) == 2


def test_the_limit_depends_on_the_cells_in_use() -> None:
    model = FakeModel(batch_variant=lambda n, used: used > 256)
    assert exact_batch_limit(model, TOKENS, max_size=8) == 8
    assert exact_batch_limit(model, TOKENS, max_size=8, context=272) == 1


def test_the_limit_never_exceeds_the_batch_the_tokens_or_the_context() -> None:
    assert exact_batch_limit(FakeModel(n_batch=6), TOKENS, max_size=16) == 6
    assert exact_batch_limit(FakeModel(), TOKENS[:5], max_size=16) == 4
    assert exact_batch_limit(FakeModel(n_ctx=40), TOKENS, max_size=16, context=30) == 8


def test_the_self_test_leaves_the_cache_empty() -> None:
    model = FakeModel()
    model.prefill([1, 2, 3])
    exact_batch_limit(model, TOKENS, max_size=8, context=20)
    assert model.n_past == 0


def test_the_self_test_needs_two_tokens() -> None:
    with pytest.raises(BackendError, match="at least 2 tokens"):
        exact_batch_limit(FakeModel(), [1])

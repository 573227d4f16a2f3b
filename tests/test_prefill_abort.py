"""A prefill chunk stopped part way (`LlamaBackend.abort`, llama.cpp's abort callback), on
the small model (SmolLM2, batch-invariant): the decode ends with Interrupted before its end,
the cells of that chunk are dropped and those before it kept, and the next generation from
the cache writes what a cold start writes, drafting included (every branch id consistent)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.errors import Interrupted
from tests.test_prompt_cache import PLAIN, TEXT, gen

pytestmark = pytest.mark.model


class After:
    """A check that says stop from its n-th call on, counting the calls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def test_a_stopped_chunk_is_dropped_and_the_cache_still_serves(smol_model: Any) -> None:
    b = smol_model.backend
    tokens = b.tokenize(TEXT)
    head, tail = tokens[:40], tokens[40:-1]
    b.reset()
    b.prefill(np.asarray(head, dtype=np.int32))
    stop = After(5)
    b.abort = stop
    before = b.n_decoded
    try:
        with pytest.raises(Interrupted):
            b.prefill(np.asarray(tail, dtype=np.int32))
    finally:
        b.abort = None
    assert stop.calls == 5  # asked within the decode, which ended at the first yes
    assert b.n_decoded == before  # not counted as decoded
    assert b.n_past == len(head) and b.cache_tokens == head
    assert b._kv.seq_pos_max(int(b._slot.ids[0])) == len(head) - 1  # llama.cpp dropped the chunk
    warm = gen(smol_model, tokens, PLAIN, cache=True)
    assert warm.stats.tokens_cached == len(head)
    assert warm.tokens == gen(smol_model, tokens, PLAIN, cache=False).tokens  # the callback is gone too
    # drafting verifies trees on every branch id: none may see a cell of the dropped chunk
    b.reset()
    b.prefill(np.asarray(head, dtype=np.int32))
    b.abort = After(3)
    try:
        with pytest.raises(Interrupted):
            b.prefill(np.asarray(tail, dtype=np.int32))
    finally:
        b.abort = None
    tree = DraftConfig(adaptive=False, k=6)
    drafted = gen(smol_model, tokens, tree, cache=True, n=24)
    assert drafted.tokens == gen(smol_model, tokens, PLAIN, cache=False, n=24).tokens


def test_a_check_that_never_stops_changes_nothing(smol_model: Any) -> None:
    b = smol_model.backend
    tokens = b.tokenize(TEXT)
    b.reset()
    never = After(10**9)
    b.abort = never
    try:
        b.prefill(np.asarray(tokens[:-1], dtype=np.int32))
    finally:
        b.abort = None
    assert never.calls > 0 and b.n_past == len(tokens) - 1
    warm = gen(smol_model, tokens, PLAIN, cache=True)
    assert warm.stats.tokens_cached == len(tokens) - 1
    assert warm.tokens == gen(smol_model, tokens, PLAIN, cache=False).tokens

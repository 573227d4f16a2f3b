"""Cached cells copied out and put back (`kv_snapshot.py`), on the small model (SmolLM2,
batch-invariant): after another prompt replaced them, the cells put back serve a prompt that
shares them as if they had never gone (only its new tail decoded, the same tokens as a cold
start), drafting included (every branch id holds them again)."""

from __future__ import annotations

from typing import Any

import pytest

from lookahead.core.draft_state import DraftConfig
from tests.test_prompt_cache import PLAIN, TEXT, gen

pytestmark = pytest.mark.model


def test_cells_put_back_serve_the_prompt_they_held(smol_model: Any) -> None:
    b = smol_model.backend
    first = b.tokenize(TEXT)
    gen(smol_model, first, PLAIN, cache=True)
    snap = b.snapshot()
    assert snap is not None and snap.tokens == b.cache_tokens and len(snap.tokens) >= len(first) - 1
    other = b.tokenize("import json\n\n\ndef load(path):\n    with open(path) as f:\n")
    gen(smol_model, other, PLAIN, cache=True)  # the guess: replaces nearly every cell
    assert b.cache_tokens[:5] != snap.tokens[:5]
    b.restore(snap)
    assert b.cache_tokens == snap.tokens and b.n_past == len(snap.tokens)
    nxt = first + b.tokenize("    return sum((v - m) ** 2 for v in values)\n", add_special=False)
    before = b.n_decoded
    warm = gen(smol_model, nxt, PLAIN, cache=True)
    assert warm.stats.tokens_cached >= len(first) - 1
    assert b.n_decoded - before == (len(nxt) - 1 - warm.stats.tokens_cached) + warm.stats.steps
    cold = gen(smol_model, nxt, PLAIN, cache=False)
    assert warm.tokens == cold.tokens
    # drafting verifies trees on every branch id: each must see the cells put back
    gen(smol_model, first, PLAIN, cache=True)
    snap = b.snapshot()
    gen(smol_model, other, PLAIN, cache=True)
    b.restore(snap)
    tree = DraftConfig(adaptive=False, k=6)
    drafted = gen(smol_model, nxt, tree, cache=True, n=24)
    assert drafted.tokens == gen(smol_model, nxt, PLAIN, cache=False, n=24).tokens


def test_nothing_cached_is_nothing_to_copy(smol_model: Any) -> None:
    b = smol_model.backend
    b.reset()
    assert b.snapshot() is None

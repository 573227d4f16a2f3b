"""The prompt cache on the small model (SmolLM2, batch-invariant): a request that shares most
of its prompt with the cache decodes only the rest, and writes what a cold start writes,
token for token, in exact mode too; a prompt sharing nothing evicts the cache; two editing
sessions on two slots each find their own slot."""

from __future__ import annotations

from typing import Any

import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Result

pytestmark = pytest.mark.model

TEXT = (
    "def mean(values):\n    total = 0.0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n\n\nclass Point:\n    def __init__(self, x, y):\n"
    "        self.x = x\n        self.y = y\n\n    def norm(self):\n"
    "        return (self.x ** 2 + self.y ** 2) ** 0.5\n\n\ndef median(values):\n"
    "    ordered = sorted(values)\n    n = len(ordered)\n    mid = n // 2\n"
    "    if n % 2:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2\n\n\n"
    "def variance(values):\n    m = mean(values)\n"
)
PLAIN = DraftConfig(enabled=False)
EXACT = DraftConfig(exact=True, adaptive=False, k=4)


def gen(model: Any, tokens: list[int], draft: DraftConfig, cache: bool, n: int = 16) -> Result:
    return model.generate("", tokens=tokens, max_tokens=n, draft=draft, cache_prompt=cache)  # type: ignore[no-any-return]


def test_a_prompt_sharing_90_percent_prefills_only_the_rest(smol_model: Any) -> None:
    b = smol_model.backend
    first = b.tokenize(TEXT)
    shared = len(first) * 9 // 10
    second = first[:shared] + b.tokenize("    return sum((v - m) ** 2 for v in values)\n", add_special=False)
    gen(smol_model, first, PLAIN, cache=True)
    before = b.n_decoded
    warm = gen(smol_model, second, PLAIN, cache=True)
    decoded = b.n_decoded - before
    assert warm.stats.tokens_cached == shared
    # the prompt's new tail, then one token per plain step (the first one is the last prompt token)
    assert decoded == (len(second) - 1 - shared) + warm.stats.steps
    cold = gen(smol_model, second, PLAIN, cache=False)
    assert cold.stats.tokens_cached == 0
    assert warm.tokens == cold.tokens


def test_a_whole_cached_prompt_still_decodes_its_last_token(smol_model: Any) -> None:
    b = smol_model.backend
    prompt = b.tokenize(TEXT)
    first = gen(smol_model, prompt, PLAIN, cache=True)
    before = b.n_decoded
    again = gen(smol_model, prompt, PLAIN, cache=True)
    assert again.stats.tokens_cached == len(prompt) - 1
    assert b.n_decoded - before == again.stats.steps
    assert again.tokens == first.tokens


def test_exact_mode_with_the_cache_equals_a_cold_start_token_for_token(smol_model: Any) -> None:
    """A chat's next turn: the prompt is the last prompt, its output and a new line. Its
    cached cells were decoded in other batches than a cold prefill would use, which moves
    logits even on SmolLM2 (a cell's K/V depends on its batch), so exact mode starts cold."""
    b = smol_model.backend
    turn1 = b.tokenize(TEXT)
    out1 = gen(smol_model, turn1, EXACT, cache=True, n=24)
    assert out1.stats.drafted > 0
    turn2 = turn1 + out1.tokens + b.tokenize("\n\ndef stdev(values):\n", add_special=False)
    warm = gen(smol_model, turn2, EXACT, cache=True, n=24)
    assert warm.stats.tokens_cached == 0
    cold = gen(smol_model, turn2, EXACT, cache=False, n=24)
    assert warm.tokens == cold.tokens
    assert warm.text == cold.text


def test_a_cell_depends_on_the_batch_it_was_decoded_in(smol_model: Any) -> None:
    """Why exact mode starts cold: the same prompt prefilled in two chunks instead of one
    gives other logits for the next token (if llama.cpp ever makes its kernels batch-
    invariant, this fails, and exact mode may use the cache)."""
    import numpy as np

    from lookahead.core.draft import Draft

    b = smol_model.backend
    toks = b.tokenize(TEXT)
    b.reset()
    b.prefill(np.asarray(toks[:-1], dtype=np.int32))
    one = np.array(b.verify(toks[-1], Draft.empty())[0])
    b.reset()
    b.prefill(np.asarray(toks[:50], dtype=np.int32))
    b.prefill(np.asarray(toks[50:-1], dtype=np.int32))
    two = np.array(b.verify(toks[-1], Draft.empty())[0])
    b.reset()
    assert not np.array_equal(one, two)


def test_a_prompt_sharing_nothing_evicts_the_cache(smol_model: Any) -> None:
    b = smol_model.backend
    gen(smol_model, b.tokenize(TEXT), PLAIN, cache=True)
    other = b.tokenize("Once upon a time, in a small village by the sea, there lived", add_special=False)
    assert other[0] != b.tokenize(TEXT)[0]
    warm = gen(smol_model, other, PLAIN, cache=True)
    assert warm.stats.tokens_cached == 0
    assert b.cache_tokens[: len(other)] == other  # the old cells are gone: the cache is this prompt's
    assert warm.tokens == gen(smol_model, other, PLAIN, cache=False).tokens


@pytest.mark.parametrize("separate", [False, True], ids=["kv-unified", "kv-per-request"])
def test_two_interleaved_sessions_on_two_slots_each_hit_their_own_slot(smol_model: Any, separate: bool) -> None:
    from lookahead.backend.slots import LlamaSlots
    from lookahead.core.multi import Batch

    b = smol_model.backend
    sessions = {
        "code": b.tokenize(TEXT),
        "prose": b.tokenize("The history of the city begins with a small harbour where fishermen"),
    }
    slots = LlamaSlots(b, 2, separate=separate)
    try:
        batch = Batch(slots, budget=8, chunk=64)
        home: dict[str, int] = {}
        for turn in range(3):
            order = sorted(sessions, reverse=bool(turn % 2))  # arrivals in either order
            reqs = {name: smol_model.add_to(batch, sessions[name], max_tokens=8, draft=PLAIN) for name in order}
            results: dict[int, Result] = {}
            while not batch.idle:
                for req, event in batch.step():
                    if isinstance(event, Done):
                        results[req.id] = event.result
            for name in order:
                req, res = reqs[name], results[reqs[name].id]
                if turn == 0:
                    home[name] = req.slot
                    assert res.stats.tokens_cached == 0
                else:
                    assert req.slot == home[name], (turn, name)
                    assert res.stats.tokens_cached >= len(sessions[name]) - 3
                sessions[name] = sessions[name] + res.tokens + b.tokenize(" and", add_special=False)
        assert home["code"] != home["prose"]
        assert slots.cache_hits == 4 and slots.tokens_cached > 0
    finally:
        slots.close()

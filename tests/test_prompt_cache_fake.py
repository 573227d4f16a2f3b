"""The prompt cache in the loops, on the fake backends (no model): a request keeps the cells
of what it shares with the cache, prefills only the rest, and writes what a cold start
writes; in a batch, a request goes to the slot holding its prefix."""

from __future__ import annotations

import numpy as np

from lookahead.core.control import FixedPolicy
from lookahead.core.engine import Done, GenerationConfig, Result, generate
from lookahead.core.multi import Batch, BatchRequest
from tests.fake_backend import FakeModel, FakeMultiModel, TreeDrafter

VOCAB = 6


def run(model: FakeModel, prompt: list[int], cache: bool) -> Result:
    events = generate(
        model, prompt, GenerationConfig(max_tokens=24), TreeDrafter(VOCAB), FixedPolicy(3, budget=6, branches=2),
        cache_prompt=cache,
    )
    *_, done = events
    assert isinstance(done, Done)
    return done.result


def test_a_cached_prefix_is_not_prefilled_again_and_changes_no_output() -> None:
    rng = np.random.default_rng(0)
    warm = FakeModel(n_vocab=VOCAB, seed=2)
    history: list[int] = rng.integers(0, VOCAB, 40).tolist()
    prev_len = 0
    for turn in range(6):
        cold = run(FakeModel(n_vocab=VOCAB, seed=2), history, cache=False)
        before = warm.prefilled
        got = run(warm, history, cache=True)
        assert got.tokens == cold.tokens and got.text == cold.text
        assert warm.prefilled - before == len(history) - 1 - got.stats.tokens_cached
        if turn:
            assert got.stats.tokens_cached >= prev_len - 1  # the whole previous prompt at least
        else:
            assert got.stats.tokens_cached == 0
        prev_len = len(history)
        # the next turn: this one's prompt and output, then new tokens (a chat's next turn)
        history = history + got.tokens + rng.integers(0, VOCAB, 5).tolist()


def test_without_the_cache_every_prompt_token_is_prefilled() -> None:
    model = FakeModel(n_vocab=VOCAB, seed=2)
    prompt = list(range(VOCAB)) * 4
    run(model, prompt, cache=True)
    before = model.prefilled
    assert run(model, prompt, cache=False).stats.tokens_cached == 0
    assert model.prefilled - before == len(prompt) - 1


def test_a_prompt_sharing_nothing_starts_cold() -> None:
    model = FakeModel(n_vocab=VOCAB, seed=2)
    run(model, [1, 2, 3, 4, 5] * 4, cache=True)
    other = [0, 5, 4, 3] * 4
    got = run(model, other, cache=True)
    assert got.stats.tokens_cached == 0
    assert got.tokens == run(FakeModel(n_vocab=VOCAB, seed=2), other, cache=False).tokens


def test_interleaved_sessions_each_find_their_own_slot() -> None:
    """Two editing sessions on two slots, their requests arriving in either order: each
    goes to the slot holding its prefix, whichever slot is free first."""
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1)
    batch = Batch(model, budget=8)
    sessions = {"a": [1, 2, 3, 4, 5, 0, 1, 2] * 3, "b": [5, 4, 3, 2, 1, 0, 5, 4] * 3}
    home: dict[str, int] = {}
    for turn in range(4):
        names = sorted(sessions, reverse=bool(turn % 2))
        reqs: dict[str, BatchRequest] = {}
        for name in names:
            reqs[name] = batch.add(sessions[name], GenerationConfig(max_tokens=6), cache_prompt=True)
        results: dict[int, Result] = {}
        while not batch.idle:
            for req, event in batch.step():
                if isinstance(event, Done):
                    results[req.id] = event.result
        for name in names:
            req = reqs[name]
            if turn == 0:
                home[name] = req.slot
            else:
                assert req.slot == home[name], (turn, name)
                assert results[req.id].stats.tokens_cached >= len(sessions[name]) - 7
            sessions[name] = sessions[name] + results[req.id].tokens + [turn % VOCAB]
    assert home["a"] != home["b"]


def test_a_warm_up_prefills_the_prompt_and_the_next_request_reuses_it() -> None:
    from lookahead.core.engine import warm

    model = FakeModel(n_vocab=VOCAB, seed=2)
    prompt = [1, 2, 3, 4, 5, 0] * 5
    before = model.prefilled
    done = warm(model, prompt)
    assert done.tokens == [] and done.text == "" and done.stats.tokens_cached == 0
    assert model.prefilled - before == len(prompt) - 1  # all but the last, as a generation leaves it
    before = model.prefilled
    got = run(model, prompt + [2, 3], cache=True)
    assert got.stats.tokens_cached == len(prompt) - 1
    assert model.prefilled - before == 2
    assert got.tokens == run(FakeModel(n_vocab=VOCAB, seed=2), prompt + [2, 3], cache=False).tokens


def test_a_batched_warm_up_ends_after_its_prefill_and_leaves_its_slot_cached() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1)
    batch = Batch(model, budget=8, chunk=8)
    prompt = [1, 2, 3, 4, 5, 0, 1, 2] * 3
    req = batch.add(prompt, GenerationConfig(max_tokens=1), warm_up=True)
    events = []
    steps = 0
    while not batch.idle:
        events += batch.step()
        steps += 1
    assert steps == 1  # 23 prompt tokens in one batch (no request writes: nobody waits), no verify
    [(who, done)] = events
    assert who is req and isinstance(done, Done) and done.result.tokens == []
    nxt = batch.add(prompt + [3], GenerationConfig(max_tokens=4), cache_prompt=True)
    results = [e for _, e in _drain(batch) if isinstance(e, Done)]
    assert nxt.slot == req.slot
    assert results[0].result.stats.tokens_cached == len(prompt) - 1


def _drain(batch: Batch) -> list[tuple[BatchRequest, object]]:
    out: list[tuple[BatchRequest, object]] = []
    while not batch.idle:
        out += batch.step()
    return out

"""The llama.cpp backend against a real model: tree batches, KV commits, self-tests."""

from __future__ import annotations

import numpy as np
import pytest

from lookahead.backend.llama import LlamaBackend
from lookahead.core.draft import Draft
from lookahead.core.exactness import exact_batch_limit
from tests.safe_backend import safe_config
from tests.trees import random_tree

pytestmark = pytest.mark.model

TEXT = "def quicksort(arr):\n    if len(arr) <= 1:\n        return arr\n"


@pytest.fixture(scope="module")
def backend(smol_path):
    b = LlamaBackend(smol_path, safe_config(smol_path, n_ctx=1024, max_branches=4, n_threads=1))
    yield b
    b.close()


@pytest.fixture(scope="module")
def reference(smol_path):
    b = LlamaBackend(smol_path, safe_config(smol_path, n_ctx=1024, max_branches=1, n_threads=1))
    yield b
    b.close()


def fresh_logits(ref: LlamaBackend, tokens: list[int]) -> np.ndarray:
    """Logits after `tokens`, decoded by a fresh context one token at a time."""
    ref.reset()
    ref.prefill(np.asarray(tokens[:1], dtype=np.int32))
    row = None
    for t in tokens[1:]:
        row = ref.verify(t, Draft.empty())[0].copy()
        ref.commit(Draft.empty(), [])
    assert row is not None
    return row


def test_tree_rows_and_later_steps_equal_fresh_decoding(backend, reference) -> None:
    """Every node's logits equal one-by-one decoding of its path, and after each commit
    (random accepted paths, so rejected cells get freed or parked) the cache behaves as if
    only the accepted tokens had ever been decoded."""
    rng = np.random.default_rng(0)
    hist = backend.tokenize(TEXT)
    backend.reset()
    backend.prefill(np.asarray(hist[:1], dtype=np.int32))
    for t in hist[1:-1]:  # one by one, like the reference
        backend.verify(t, Draft.empty())
        backend.commit(Draft.empty(), [])
    root = hist[-1]
    parked_seen = False
    for _ in range(10):
        draft = random_tree(rng, 2000, branches=4, p_root=0.5)
        rows = backend.verify(root, draft)
        assert np.array_equal(rows[0], fresh_logits(reference, hist))
        for i in range(len(draft)):
            path = [int(draft.tokens[j]) for j in draft.path_to(i)]
            assert np.array_equal(rows[i + 1], fresh_logits(reference, hist + path)), f"node {i}"
        node = int(rng.integers(-1, len(draft)))
        accepted = draft.path_to(node) if node >= 0 else []
        backend.commit(draft, accepted)
        parked_seen |= backend.parked > 0
        hist += [int(draft.tokens[j]) for j in accepted]
        root = int(rng.integers(0, 2000))
        hist.append(root)
        assert backend.n_past == len(hist) - 1
    assert parked_seen, "the test should exercise parked cells"


def test_smollm2_is_batch_invariant(backend) -> None:
    assert exact_batch_limit(backend, backend.tokenize(TEXT * 3), max_size=24) == 24


def test_measure_cost_leaves_cache_empty(backend) -> None:
    backend.reset()
    costs = backend.measure_cost((1, 2, 4), repeats=1)
    assert set(costs) == {1, 2, 4} and all(t > 0 for t in costs.values())
    assert backend.n_past == 0


def test_measure_cost_keeps_the_fastest_round(backend, monkeypatch) -> None:
    """Other processes only add time: a round slowed by them must not raise the estimate.
    A scripted clock makes each decode take 10, 30 or 20 ms by round (the first round only
    warms up, at 90 ms); the result is the 10 ms round, for every size."""
    from lookahead.backend import decode_cost

    round_ms = iter([90, 90, 10, 10, 30, 30, 20, 20])  # 2 sizes per round
    now = [0.0]
    started: list[bool] = []

    def clock() -> float:
        if started:  # the second call of a pair: the decode's end
            started.pop()
            now[0] += next(round_ms) / 1000
        else:
            started.append(True)
        return now[0]

    monkeypatch.setattr(backend, "_decode", lambda n: None)
    monkeypatch.setattr(decode_cost.time, "perf_counter", clock)
    backend.reset()
    costs = backend.measure_cost((1, 2), repeats=3)
    assert costs == {1: pytest.approx(0.010), 2: pytest.approx(0.010)}


def test_chat_template_and_detokenization(backend) -> None:
    toks = backend.chat_prompt([{"role": "user", "content": "héllo ✓"}])
    text = b"".join(backend.token_bytes(t) for t in toks).decode("utf-8")
    assert "héllo ✓" in text
    assert backend.tokenize("héllo ✓", add_special=False)


def test_a_small_n_batch_caps_the_branches_instead_of_aborting(smol_path) -> None:
    """llama.cpp aborts the whole process when n_batch < n_seq_max (branches + the parking
    id); a draft that fits n_batch with its root has at most n_batch - 1 leaves anyway."""
    b = LlamaBackend(smol_path, safe_config(smol_path, n_ctx=256, n_batch=8, n_threads=1))
    try:
        assert b.max_branches == 7
        hist = b.tokenize(TEXT)
        b.prefill(np.asarray(hist[:-1], dtype=np.int32))
        n = 7  # the root and seven leaves: a full batch
        ones = np.ones(n, np.float32)
        fan = Draft(np.arange(100, 100 + n, dtype=np.int32), np.full(n, -1, np.int32), np.zeros(n, np.int8), ones, ones)
        b.verify(hist[-1], fan)
        b.commit(fan, [3])
        assert b.n_past == len(hist) + 1 and b.parked == 3
    finally:
        b.close()

"""Sampling filters against brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lookahead.core.sampling import Sampler, SamplingConfig, penalize


def reference_support(logits: np.ndarray, cfg: SamplingConfig) -> set[int]:
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    if cfg.top_k:
        order = order[: cfg.top_k]
    z = np.array([logits[i] for i in order], dtype=np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    keep = len(order)
    if cfg.top_p < 1:
        keep = next(i + 1 for i in range(len(p)) if p[: i + 1].sum() >= cfg.top_p - 1e-12)
    if cfg.min_p > 0:
        keep = min(keep, int((p >= cfg.min_p * p[0]).sum()))
    return set(order[:keep])


@pytest.mark.parametrize(
    "cfg",
    [
        SamplingConfig(temperature=1.0, top_k=5),
        SamplingConfig(temperature=0.7, top_k=0, top_p=0.5),
        SamplingConfig(temperature=1.3, top_k=20, min_p=0.2),
        SamplingConfig(temperature=1.0, top_k=0, top_p=0.9, min_p=0.05),
    ],
)
def test_samples_stay_in_the_reference_support(cfg: SamplingConfig) -> None:
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(50).astype(np.float32) * 2
    support = reference_support(logits, cfg)
    seen = {Sampler(SamplingConfig(**{**cfg.__dict__, "seed": s})).pick(logits, []) for s in range(400)}
    assert seen <= support
    assert len(seen) == len(support) or len(support) > 10


def test_temperature_sampling_matches_softmax() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    sampler = Sampler(SamplingConfig(temperature=0.5, top_k=0, seed=0))
    counts = np.bincount([sampler.pick(logits, []) for _ in range(20000)], minlength=4)
    p = np.exp(logits / 0.5)
    p /= p.sum()
    assert np.allclose(counts / 20000, p, atol=0.015)


def test_greedy_is_argmax_and_penalty_follows_llama_cpp() -> None:
    logits = np.array([1.0, 3.0, -2.0, 2.9], dtype=np.float32)
    assert Sampler(SamplingConfig()).pick(logits, []) == 1
    pen = penalize(logits, [1, 2], 2.0)
    assert np.allclose(pen, [1.0, 1.5, -4.0, 2.9])
    assert Sampler(SamplingConfig(repeat_penalty=2.0)).pick(logits, [1]) == 3


@pytest.mark.parametrize(
    "kwargs",
    [{"temperature": -1}, {"top_p": 0}, {"top_p": 1.5}, {"top_k": -1}, {"min_p": 2}, {"repeat_penalty": 0}],
)
def test_bad_values_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def test_logit_bias_comes_first_and_can_ban_a_token() -> None:
    logits = np.array([0.0, 5.0, 1.0, 4.0], dtype=np.float32)
    banned = Sampler(SamplingConfig(temperature=0.0, logit_bias=((1, -math.inf),)))
    assert banned.pick(logits, []) == 3
    pushed = Sampler(SamplingConfig(temperature=0.0, logit_bias=((2, 2.0), (2, 2.5))))  # listed twice: both
    assert pushed.pick(logits, []) == 2
    sampled = Sampler(SamplingConfig(temperature=1.0, seed=1, top_k=0, logit_bias=((1, -math.inf), (3, -math.inf))))
    assert {sampled.pick(logits, []) for _ in range(200)} <= {0, 2}
    assert logits[1] == 5.0  # the caller's row is not changed


def test_n_probs_records_each_picks_logprobs_most_likely_first() -> None:
    logits = np.array([0.0, 3.0, 1.0, 2.0], dtype=np.float32)
    sampler = Sampler(SamplingConfig(temperature=0.0, n_probs=2))
    assert sampler.pick(logits, []) == 1 and sampler.pick(logits, []) == 1
    first, second = sampler.take_probs()
    assert sampler.take_probs() == [] and first == second
    ref = logits - np.log(np.exp(logits.astype(np.float64)).sum())
    assert first.token == 1 and first.value == pytest.approx(ref[1])
    assert [t for t, _ in first.top] == [1, 3] and first.top[1][1] == pytest.approx(ref[3])
    quiet = Sampler(SamplingConfig(temperature=0.0))
    quiet.pick(logits, [])
    assert quiet.take_probs() == []


def test_post_sampling_probs_are_the_drawn_distribution() -> None:
    logits = np.array([0.0, 3.0, 1.0, 2.0], dtype=np.float32)
    sampler = Sampler(SamplingConfig(temperature=1.0, top_k=2, seed=3, n_probs=4, post_sampling_probs=True))
    token = sampler.pick(logits, [])
    (rec,) = sampler.take_probs()
    e = np.exp([3.0, 2.0])
    assert rec.post and [t for t, _ in rec.top] == [1, 3]  # top-k 2 keeps two candidates
    assert [p for _, p in rec.top] == pytest.approx(list(e / e.sum()))
    assert rec.token == token and rec.value == pytest.approx(dict(rec.top)[token])
    greedy = Sampler(SamplingConfig(temperature=0.0, n_probs=3, post_sampling_probs=True))
    greedy.pick(logits, [])
    assert greedy.take_probs()[0].top == ((1, 1.0),)


@pytest.mark.parametrize("scale", [0.05, 0.5, 3.0, 12.0])  # flat (every token near the best) to peaked
def test_top_k_is_the_full_sorts_first_k_ties_by_id(scale: float) -> None:
    from lookahead.core.sampling import top_k_ids

    rng = np.random.default_rng(int(scale * 100))
    n = 30_000
    for _ in range(5):
        row = (rng.standard_normal(n) * scale).astype(np.float32)
        row[rng.integers(0, n, 300)] = -np.inf  # banned tokens
        for k in (1, 2, 40, 500):
            edge = np.sort(row)[-k]
            row2 = row.copy()
            row2[rng.integers(0, n, 30)] = edge  # ties at the k-th value
            want = np.lexsort((np.arange(n), -row2.astype(np.float64)))[:k]
            assert top_k_ids(row2, k).tolist() == want.tolist()
    few = np.full(100, -np.inf, dtype=np.float32)
    few[[3, 7]] = [0.0, -100.0]  # fewer than k tokens near the best: the whole row
    assert top_k_ids(few, 4).tolist() == [3, 7, 0, 1]


def test_top_k_sampling_keeps_the_lower_ids_of_a_tie_at_its_edge() -> None:
    n = 5000
    row = np.full(n, -5.0, dtype=np.float32)
    row[0] = 1.5
    row[n // 2 :] = 1.0  # 2,500 tokens tied for second place, only one of them kept by top_k 2
    got = {Sampler(SamplingConfig(temperature=1.0, top_k=2, seed=s)).pick(row, []) for s in range(400)}
    assert got == {0, n // 2}

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

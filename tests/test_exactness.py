"""The acceptance rule is exact: drafting never changes what comes out (fake model)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lookahead.core.control import FixedPolicy
from lookahead.core.engine import Done, GenerationConfig, generate
from lookahead.core.sampling import SamplingConfig
from tests.fake_backend import FakeModel, OracleDrafter, TreeDrafter

PROMPT = [1, 2]
LENGTH = 3


def run(model: FakeModel, seed: int | None, spec: bool, temperature: float = 1.0) -> list[int]:
    cfg = GenerationConfig(LENGTH, sampling=SamplingConfig(temperature=temperature, top_k=0, seed=seed))
    drafter = TreeDrafter(model.n_vocab) if spec else None
    policy = FixedPolicy(3, budget=8, branches=2) if spec else None
    *_, done = generate(model, PROMPT, cfg, drafter, policy)
    assert isinstance(done, Done)
    return done.result.tokens


def exact_distribution(model: FakeModel) -> dict[tuple[int, ...], float]:
    out = {}
    for seq in itertools.product(range(model.n_vocab), repeat=LENGTH):
        p, ctx = 1.0, list(PROMPT)
        for t in seq:
            p *= model.probs(ctx)[t]
            ctx.append(t)
        out[seq] = p
    return out


def chi_square(counts: dict[tuple[int, ...], int], probs: dict[tuple[int, ...], float], n: int) -> float:
    return sum((counts.get(k, 0) - n * p) ** 2 / (n * p) for k, p in probs.items())


# chi-square critical value for 63 degrees of freedom at p = 0.001
CRITICAL_63 = 103.4
N_SAMPLES = 24000


def test_same_seed_same_tokens_with_and_without_drafts() -> None:
    model = FakeModel()
    for seed in range(200):
        assert run(model, seed, spec=True) == run(model, seed, spec=False)


def test_greedy_equal_with_and_without_drafts() -> None:
    model = FakeModel(seed=3)
    assert run(model, None, True, temperature=0.0) == run(model, None, False, temperature=0.0)


def test_greedy_with_many_drafts_accepted_per_step_equals_plain() -> None:
    """Drafts of the plain output itself: about eight tokens accepted per step, so a bonus
    token taken from the wrong row of logits would show in the output."""
    model = FakeModel(n_vocab=16, seed=3)
    cfg = GenerationConfig(60, sampling=SamplingConfig(temperature=0.0))
    *_, plain = generate(model, PROMPT, cfg)
    *_, spec = generate(model, PROMPT, cfg, OracleDrafter(PROMPT + model.greedy(PROMPT, 60)), FixedPolicy(8))
    assert isinstance(plain, Done) and isinstance(spec, Done)
    assert spec.result.tokens == plain.result.tokens
    assert spec.result.stats.accepted >= 0.8 * spec.result.stats.n_tokens  # not vacuous


@pytest.mark.parametrize("seed", [None, 1, 2, 3], ids=lambda s: "greedy" if s is None else f"seed{s}")
def test_repeat_penalty_gives_the_same_tokens_with_and_without_drafts(seed: int | None) -> None:
    """The penalty reads every token before the one picked, drafted ones included."""
    model = FakeModel(n_vocab=8, seed=5)
    sampling = SamplingConfig(
        temperature=0.0 if seed is None else 1.0, top_k=0, seed=seed, repeat_penalty=2.0, repeat_last_n=4
    )
    cfg = GenerationConfig(48, sampling=sampling)
    *_, plain = generate(model, PROMPT, cfg)
    assert isinstance(plain, Done)
    drafters = [
        (TreeDrafter(8), FixedPolicy(3, budget=8, branches=2)),
        (OracleDrafter(PROMPT + plain.result.tokens), FixedPolicy(8)),
    ]
    for drafter, policy in drafters:
        *_, spec = generate(model, PROMPT, cfg, drafter, policy)
        assert isinstance(spec, Done)
        assert spec.result.tokens == plain.result.tokens, type(drafter).__name__
        assert spec.result.stats.accepted > 0  # not vacuous


def test_drafts_are_verified_and_accepted() -> None:
    """Guard against a vacuous pass: the tree path must really run."""
    model = FakeModel()
    cfg = GenerationConfig(40, sampling=SamplingConfig(temperature=1.0, top_k=0, seed=1))
    *_, done = generate(model, PROMPT, cfg, TreeDrafter(4), FixedPolicy(3, budget=8, branches=2))
    assert isinstance(done, Done)
    assert done.result.stats.drafted > 0
    assert done.result.stats.accepted > 0
    assert max(model.verified) > 1


@pytest.mark.parametrize("spec", [False, True])
def test_sampled_sequences_follow_the_model(spec: bool) -> None:
    """Distribution of 3-token outputs equals the exact one (64 outcomes)."""
    model = FakeModel()
    probs = exact_distribution(model)
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(N_SAMPLES):
        key = tuple(run(model, seed, spec))
        counts[key] = counts.get(key, 0) + 1
    assert chi_square(counts, probs, N_SAMPLES) < CRITICAL_63


def test_chi_square_catches_a_two_percent_shift() -> None:
    """The test above has power: moving 2% of the mass between two outcomes fails it."""
    model = FakeModel()
    probs = exact_distribution(model)
    keys = sorted(probs, key=probs.get, reverse=True)
    shifted = dict(probs)
    shifted[keys[0]] += 0.02
    shifted[keys[1]] -= 0.02
    rng = np.random.default_rng(0)
    fails = 0
    for _ in range(20):
        draws = rng.choice(len(keys), size=N_SAMPLES, p=[shifted[k] for k in keys])
        counts = {keys[i]: int(c) for i, c in zip(*np.unique(draws, return_counts=True), strict=False)}
        fails += chi_square(counts, probs, N_SAMPLES) >= CRITICAL_63
    assert fails >= 18  # power >= 90%

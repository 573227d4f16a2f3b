"""Constrained sampling in the core, on fake rules and the fake model (no llama.cpp): the
target is the model's distribution masked to what the rule allows, drafts are verified
against that masked distribution, and the rule's state moves only with tokens kept."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from lookahead.core.constraint import NoTokenAllowed, restrict
from lookahead.core.control import FixedPolicy
from lookahead.core.engine import Done, GenerationConfig, Result, generate
from lookahead.core.multi import run_batch
from lookahead.core.sampling import Sampler, SamplingConfig
from tests.fake_backend import FakeModel, FakeMultiModel, OracleDrafter, TreeDrafter

PROMPT = [1, 2]


class Allow:
    """A stateless rule: only the tokens in `ids` (counts the tokens it is asked about)."""

    def __init__(self, ids: npt.ArrayLike) -> None:
        self.ids = np.asarray(ids)
        self.asked = 0
        self.kept: list[int] = []

    def allowed(self, tokens: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
        self.asked += len(tokens)
        return np.isin(tokens, self.ids)

    def accept(self, token: int) -> None:
        assert np.isin(token, self.ids), f"token {token} accepted but not allowed"
        self.kept.append(token)


class Alternate:
    """A rule with state: each token's parity differs from the last kept token's (the first
    from the prompt's last, even). Rejected drafts moving the state would break it."""

    def __init__(self) -> None:
        self.last = 0
        self.kept: list[int] = []

    def allowed(self, tokens: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
        return np.asarray(tokens) % 2 != self.last % 2

    def accept(self, token: int) -> None:
        assert token % 2 != self.last % 2, f"token {token} accepted but not allowed"
        self.last = token
        self.kept.append(token)


def masked_greedy(model: FakeModel, prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding under `Alternate`, by brute force."""
    out = list(prompt)
    for _ in range(n):
        row = model.logits(out).copy()
        last = out[-1] if len(out) > len(prompt) else 0
        row[np.arange(len(row)) % 2 == last % 2] = -np.inf
        out.append(int(np.argmax(row)))
    return out[len(prompt) :]


def reference_top(logits: npt.NDArray[np.float32], ok: npt.NDArray[np.bool_], k: int) -> dict[int, float]:
    """The k best allowed tokens of the fully masked row (ties to the lower id)."""
    ids = np.flatnonzero(ok & np.isfinite(logits))
    ids = ids[np.lexsort((ids, -logits[ids]))]
    if k > 0:
        ids = ids[:k]
    return {int(i): float(logits[i]) for i in ids}


@pytest.mark.parametrize("k", [1, 3, 40, 0])
@pytest.mark.parametrize("share", [0.5, 0.01, 0.0005])
def test_restrict_keeps_the_k_best_allowed_tokens_of_the_fully_masked_row(k: int, share: float) -> None:
    rng = np.random.default_rng(int(share * 1e4) + k)
    for _ in range(20):
        # coarse values: many ties, also across the chunk edges
        logits = np.round(rng.standard_normal(5000) * 3).astype(np.float32)
        logits[rng.random(5000) < 0.05] = -np.inf  # banned by a bias
        ok = rng.random(5000) < share
        ok[rng.integers(0, 5000)] = True
        if not (ok & np.isfinite(logits)).any():
            continue
        out = restrict(logits, Allow(np.flatnonzero(ok)), k)
        kept = {int(i): float(out[i]) for i in np.flatnonzero(np.isfinite(out))}
        assert kept == reference_top(logits, ok, k)


def test_restrict_asks_about_few_tokens_when_the_best_are_allowed() -> None:
    logits = np.random.default_rng(0).standard_normal(150_000).astype(np.float32)
    rule = Allow(np.arange(150_000))
    out = restrict(logits, rule, 1)
    assert int(np.argmax(out)) == int(np.argmax(logits))
    assert rule.asked <= 64  # the first chunk, not the vocabulary


def test_restrict_refuses_when_no_token_is_left() -> None:
    logits = np.zeros(10, dtype=np.float32)
    logits[3] = -np.inf
    for k in (1, 0):
        with pytest.raises(NoTokenAllowed):
            restrict(logits, Allow([3]), k)  # the one allowed token is banned by a bias


def test_the_sampler_masks_then_advances_the_rule_with_each_pick() -> None:
    rule = Alternate()
    sampler = Sampler(SamplingConfig(constraint=lambda: rule))
    row = np.array([0.0, 5.0, 1.0, 4.0], dtype=np.float32)
    picks = [sampler.pick(row, []) for _ in range(4)]
    assert picks == [1, 2, 1, 2]  # odd, even, odd...: the best token of the allowed parity
    assert rule.kept == picks


def test_each_sampler_gets_its_own_rule_state() -> None:
    config = SamplingConfig(constraint=Alternate)
    a, b = Sampler(config), Sampler(config)
    row = np.array([0.0, 5.0, 1.0, 4.0], dtype=np.float32)
    a.pick(row, [])
    assert b.pick(row, []) == 1  # b still starts from the beginning


def run(model: FakeModel, config: GenerationConfig, drafter=None, policy=None) -> Result:  # type: ignore[no-untyped-def]
    *_, done = generate(model, PROMPT, config, drafter, policy)
    assert isinstance(done, Done)
    return done.result


def test_drafts_are_verified_against_the_masked_distribution() -> None:
    """The drafts are the model's unmasked greedy continuation, which breaks the rule: a
    verifier comparing them with unmasked picks would accept them and write it."""
    model = FakeModel(n_vocab=8, seed=3)
    n = 30
    unmasked = model.greedy(PROMPT, n)
    want = masked_greedy(model, PROMPT, n)
    assert unmasked[:8] != want[:8]  # the drafts do propose what the rule forbids
    rule = Alternate()
    config = GenerationConfig(n, sampling=SamplingConfig(constraint=lambda: rule))
    spec = run(model, config, OracleDrafter(PROMPT + unmasked), FixedPolicy(8))
    assert spec.tokens == want
    assert rule.kept == want
    assert spec.stats.drafted > 0


def test_greedy_with_a_rule_equals_plain_whatever_is_drafted() -> None:
    model = FakeModel(n_vocab=8, seed=5)
    want = masked_greedy(model, PROMPT, 40)
    plain = run(model, GenerationConfig(40, sampling=SamplingConfig(constraint=Alternate)))
    assert plain.tokens == want
    rule = Alternate()
    config = GenerationConfig(40, sampling=SamplingConfig(constraint=lambda: rule))
    oracle = run(model, config, OracleDrafter(PROMPT + want), FixedPolicy(8))
    assert oracle.tokens == want and oracle.stats.accepted > 20  # right drafts are taken
    rule = Alternate()
    config = GenerationConfig(40, sampling=SamplingConfig(constraint=lambda: rule))
    trees = run(model, config, TreeDrafter(8), FixedPolicy(3, budget=8, branches=2))
    assert trees.tokens == want  # rejected branches never moved the rule's state
    assert rule.kept == want
    assert trees.stats.drafted > trees.stats.accepted > 0


def test_seeded_sampling_with_a_rule_is_the_same_with_and_without_drafts() -> None:
    model = FakeModel(n_vocab=8, seed=2)
    for seed in range(10):
        sampling = SamplingConfig(temperature=1.0, top_k=3, seed=seed, constraint=Alternate)
        plain = run(model, GenerationConfig(30, sampling=sampling))
        spec = run(model, GenerationConfig(30, sampling=sampling), TreeDrafter(8), FixedPolicy(3, budget=8, branches=2))
        assert spec.tokens == plain.tokens
        assert all(a % 2 != b % 2 for a, b in itertools.pairwise([0, *plain.tokens]))


def test_sampled_outputs_follow_the_masked_distribution() -> None:
    """3-token outputs under `Alternate` (8 outcomes) against the renormalized masked
    model, drafts on: a chi-square at p = 0.001."""
    model = FakeModel()  # 4 tokens
    probs: dict[tuple[int, ...], float] = {}
    for seq in itertools.product(range(4), repeat=3):
        p, ctx, last = 1.0, list(PROMPT), 0
        for t in seq:
            row = model.probs(ctx) * (np.arange(4) % 2 != last % 2)
            p *= row[t] / row.sum()
            ctx.append(t)
            last = t
        if p > 0:
            probs[seq] = p
    assert len(probs) == 8
    n = 4000
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(n):
        sampling = SamplingConfig(temperature=1.0, top_k=0, seed=seed, constraint=Alternate)
        out = run(model, GenerationConfig(3, sampling=sampling), TreeDrafter(4), FixedPolicy(3, budget=8, branches=2))
        key = tuple(out.tokens)
        assert key in probs
        counts[key] = counts.get(key, 0) + 1
    chi2 = sum((counts.get(k, 0) - n * p) ** 2 / (n * p) for k, p in probs.items())
    assert chi2 < 24.32  # 7 degrees of freedom


def test_batched_requests_each_follow_their_own_rule_state() -> None:
    model = FakeMultiModel(slots=3, n_vocab=8, seed=5)
    solo = FakeModel(n_vocab=8, seed=5)
    want = masked_greedy(solo, PROMPT, 25)
    jobs = [
        (PROMPT, GenerationConfig(25, sampling=SamplingConfig(constraint=Alternate)), TreeDrafter(8),
         FixedPolicy(3, budget=6, branches=2))
        for _ in range(3)
    ]
    results = {i: e.result for i, e in run_batch(model, jobs) if isinstance(e, Done)}
    assert [results[i].tokens for i in range(3)] == [want] * 3


def test_in_a_batch_a_rule_that_leaves_no_token_fails_its_request_alone() -> None:
    from lookahead.core.multi import Batch

    model = FakeMultiModel(slots=2, n_vocab=8, seed=5)
    batch = Batch(model)
    batch.isolate = True
    want = masked_greedy(FakeModel(n_vocab=8, seed=5), PROMPT, 20)
    good = batch.add(PROMPT, GenerationConfig(20, sampling=SamplingConfig(constraint=Alternate)),
                     TreeDrafter(8), FixedPolicy(3, budget=6, branches=2))
    bad = batch.add(PROMPT, GenerationConfig(20, sampling=SamplingConfig(constraint=lambda: Allow([]))))
    results: dict[int, Result] = {}
    while not batch.idle:
        for req, event in batch.step():
            if isinstance(event, Done):
                results[req.id] = event.result
    assert results[good.id].tokens == want
    assert bad.id not in results
    assert [(r.id, type(e)) for r, e in batch.failed] == [(bad.id, NoTokenAllowed)]
    assert model.n_used == 0  # the failed request's cells are freed

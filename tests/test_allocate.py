"""One node budget for a batched step: ranked across requests, never a loss, fair."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.core.allocate import Offer, allocate, check_slack, fair_shares
from lookahead.core.control import CostModel
from lookahead.errors import ConfigError

# t(n) / t(1) on a 2-vCPU CPU: a batch of 4 costs 2.4 one-token steps
COST = CostModel({1: 1.0, 2: 1.8, 4: 2.4, 8: 4.0, 16: 6.0, 32: 10.5, 64: 19.0})


# each request's per-node acceptance chances (made into path probabilities by the tests)
GAINS = st.lists(st.lists(st.floats(0.0, 1.0), max_size=20), min_size=1, max_size=5)


def rate(offers: list[Offer], counts: list[int]) -> float:
    gain = sum(float(np.sum(o.gains[:c])) for o, c in zip(offers, counts, strict=True))
    return (len(offers) + gain) / COST.seconds(len(offers) + sum(counts))


def test_prose_gets_nothing_and_a_copyable_request_gets_a_long_draft() -> None:
    prose = Offer(np.full(16, 0.05))
    copy = Offer(np.full(16, 0.97) ** np.arange(1, 17))
    counts = allocate([prose, copy], COST, budget=32)
    assert counts[0] == 0
    assert counts[1] >= 8


def test_poor_drafts_everywhere_means_plain_decoding() -> None:
    counts = allocate([Offer(np.full(8, 0.1)) for _ in range(3)], COST, budget=32, min_gain=1.0)
    assert counts == [0, 0, 0]


def test_forced_nodes_are_kept() -> None:
    counts = allocate([Offer(np.ones(3), forced=3), Offer(np.full(4, 0.01))], COST, budget=16)
    assert counts == [3, 0]


def test_fair_shares_split_equally_and_hand_on_what_is_not_wanted() -> None:
    assert fair_shares([100, 100], 64) == [32, 32]
    assert fair_shares([4, 100], 64) == [4, 60]
    assert fair_shares([0, 0], 64) == [0, 0]
    assert sum(fair_shares([7, 9, 30], 20)) == 20


@settings(max_examples=100, deadline=None)
@given(GAINS, st.integers(0, 48))
def test_the_step_is_never_slower_per_token_than_its_roots_alone(gains, budget) -> None:  # type: ignore[no-untyped-def]
    offers = [Offer(np.cumprod(np.array(g, dtype=np.float64))) for g in gains]
    counts = allocate(offers, COST, budget)
    assert sum(counts) <= budget
    shares = fair_shares([o.want for o in offers], budget)
    assert all(0 <= c <= min(s, len(o.gains)) for c, s, o in zip(counts, shares, offers, strict=True))
    assert rate(offers, counts) >= rate(offers, [0] * len(offers)) - 1e-12


def pace(offers: list[Offer], counts: list[int], k: int) -> float:
    """Request k's expected tokens per second in a step of these counts."""
    return (1.0 + float(np.sum(offers[k].gains[: counts[k]]))) / COST.seconds(len(offers) + sum(counts))


def test_strict_fairness_drafts_nothing_beside_a_request_with_nothing_to_draft() -> None:
    prose = Offer(np.full(16, 0.05))
    copy = Offer(np.full(16, 0.97) ** np.arange(1, 17))
    assert allocate([prose, copy], COST, budget=32, slack=0.0) == [0, 0]
    both = allocate([copy, copy], COST, budget=32, slack=0.0)  # both gain: both draft
    assert min(both) >= 4


@settings(max_examples=100, deadline=None)
@given(GAINS, st.integers(0, 48))
def test_strict_fairness_never_lowers_a_requests_expected_pace(gains, budget) -> None:  # type: ignore[no-untyped-def]
    offers = [Offer(np.cumprod(np.array(g, dtype=np.float64))) for g in gains]
    counts = allocate(offers, COST, budget, slack=0.0)
    none = [0] * len(offers)
    for k in range(len(offers)):
        assert pace(offers, counts, k) >= pace(offers, none, k) - 1e-12
    assert rate(offers, counts) >= rate(offers, none) - 1e-12


# the three promises on one fixed batch: a prose request (nothing worth drafting) beside a
# copyable one (each node ~0.97 likely), on the 2-vCPU curve above
PROSE = Offer(np.full(16, 0.05))
COPY = Offer(np.full(16, 0.97) ** np.arange(1, 17))


# a flatter curve (a batch of 8 costs 2 one-token steps), where the three promises part
FLAT = CostModel({1: 1.0, 2: 1.2, 4: 1.4, 8: 2.0, 16: 3.5, 32: 6.5})


def test_each_mode_on_a_fixed_batch_of_prose_beside_a_copyable_request() -> None:
    """batch-total drafts the copy long and the prose request pays for it; fair drafts
    nothing; the default slack of 0.1 lets the copy draft while the prose request keeps 90%
    of its pace: t(3) = 1.31 <= t(2) / 0.9 = 1.33, but t(4) = 1.4 is past it, so one node."""
    total = allocate([PROSE, COPY], FLAT, budget=32, slack=None)
    fair = allocate([PROSE, COPY], FLAT, budget=32, slack=0.0)
    default = allocate([PROSE, COPY], FLAT, budget=32, slack=0.1)
    assert total[0] == 0 and total[1] >= 8
    assert fair == [0, 0]
    assert default == [0, 1]
    t = FLAT.table(34)
    assert 1.0 / t[2 + sum(default)] >= 0.9 / t[2]  # the promise kept
    assert 1.0 / t[2 + sum(total)] < 0.5 / t[2]  # batch-total halves the prose request's pace


def test_a_looser_promise_never_takes_fewer_nodes() -> None:
    for cost in (COST, FLAT):
        counts = [allocate([PROSE, COPY], cost, budget=32, slack=s)[1] for s in (0.0, 0.1, 0.2, 0.3, None)]
        assert counts == sorted(counts)
    # on the steeper curve a step of 3 costs 2.1 one-token steps: 0.1 buys nothing, 0.2 one node
    assert allocate([PROSE, COPY], COST, budget=32, slack=0.1) == [0, 0]
    assert allocate([PROSE, COPY], COST, budget=32, slack=0.2) == [0, 1]


@settings(max_examples=100, deadline=None)
@given(GAINS, st.integers(0, 48), st.sampled_from([0.05, 0.1, 0.25, 0.5]))
def test_the_slack_bounds_every_requests_drop_in_expected_pace(gains, budget, slack) -> None:  # type: ignore[no-untyped-def]
    offers = [Offer(np.cumprod(np.array(g, dtype=np.float64))) for g in gains]
    counts = allocate(offers, COST, budget, slack=slack)
    none = [0] * len(offers)
    for k in range(len(offers)):
        assert pace(offers, counts, k) >= (1.0 - slack) * pace(offers, none, k) - 1e-12
    assert rate(offers, counts) >= rate(offers, none) - 1e-12


def test_a_slack_outside_0_to_1_is_refused() -> None:
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ConfigError):
            check_slack(bad)
    assert check_slack(None) is None and check_slack(0.0) == 0.0


# t(n) / t(1) measured on a 2-vCPU AVX2 EPYC: a sawtooth, odd batches above 2 dearer than
# the next even one (matmul kernels work on pairs of columns)
SAWTOOTH = CostModel(
    {1: 1.0, 2: 1.82, 3: 2.62, 4: 2.50, 5: 3.62, 6: 3.40, 7: 4.22, 8: 4.66, 9: 5.16, 10: 5.08,
     11: 6.16, 12: 5.81, 13: 6.72, 14: 6.75, 15: 7.42, 16: 7.12, 17: 8.35, 18: 8.15}
)


@settings(max_examples=100, deadline=None)
@given(GAINS, st.integers(0, 16))
def test_a_batch_dearer_than_a_bigger_one_on_offer_is_never_chosen(gains, budget) -> None:  # type: ignore[no-untyped-def]
    """The sawtooth is kept as measured (no running maximum), and the step's size is the
    argmax of expected tokens over t: a size that costs more than a bigger one the ranking
    could reach is never the answer, since the bigger one yields at least as many tokens."""
    offers = [Offer(np.cumprod(np.array(g, dtype=np.float64))) for g in gains]
    counts = allocate(offers, SAWTOOTH, budget, min_gain=1.0)
    shares = fair_shares([o.want for o in offers], budget)
    size = len(offers) + sum(counts)
    reachable = len(offers) + sum(min(s, len(o.gains)) for s, o in zip(shares, offers, strict=True))
    if sum(counts):
        t = SAWTOOTH.table(reachable)
        assert all(t[size] <= t[bigger] for bigger in range(size + 1, reachable + 1))


def test_sure_nodes_fill_an_even_batch_and_skip_a_dear_odd_one() -> None:
    """Two requests, each with two sure nodes: 2 roots + 3 nodes is a batch of 5 (3.62),
    dearer than 6 (3.40), so all four nodes go in. With three sure nodes on offer, the batch
    of 5 yields 5 tokens in 3.62 and the batch of 4 yields 4 in 2.50: a sure node is left
    out rather than pay for the odd size."""
    sure = Offer(np.ones(2))
    assert allocate([sure, sure], SAWTOOTH, budget=16, min_gain=1.0) == [2, 2]
    one = Offer(np.ones(1))
    assert sum(allocate([sure, one], SAWTOOTH, budget=16, min_gain=1.0)) == 2


def test_one_dear_size_does_not_make_the_bigger_ones_look_dear() -> None:
    """A batch of 3 that costs 4 one-token steps (one slow kernel, or an estimate that
    drifted) must not price the batch of 4 at 4 too: three sure nodes still go in (4 tokens
    in 2.4 steps), where a running maximum of the curve would take one (2 tokens in 1.5)."""
    spike = CostModel({1: 1.0, 2: 1.5, 3: 4.0, 4: 2.4, 8: 4.0})
    assert allocate([Offer(np.ones(3))], spike, budget=8, min_gain=1.0) == [3]

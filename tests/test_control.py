"""The adaptive-K controller on synthetic traces: no model, seeded, fast.

A trace step is a chain draft whose nodes carry a raw estimate q, and the true path the
model would accept: each node in turn with probability p_true. Costs come from a curve.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from lookahead.core.control import (
    DEFAULT_SHAPE,
    N_BINS,
    Q_EDGES,
    AcceptanceStats,
    ControlConfig,
    Controller,
    CostModel,
    FixedPolicy,
    ShadowScorer,
    path_probs,
    simulate,
)
from lookahead.core.control.acceptance import (
    CELLS_PER_SOURCE,
    CHANGE_KEEP,
    CHANGE_NATS,
    CHANGE_SHIFT,
    N_DEPTHS,
    PRIOR_CAP,
)
from lookahead.core.control.shadow import _Cursor
from lookahead.core.draft import SOURCE_NGRAM, SOURCE_SUFFIX, Draft
from lookahead.core.draft_state import MAX_BUDGET, DraftConfig
from lookahead.core.engine import Policy
from lookahead.errors import ConfigError

T1 = 0.02  # seconds of a one-token decode in these traces
SIZES = (1, 2, 4, 8, 16, 32, 64)


def flat(size: int) -> float:
    """The measured default-model curve: long batches keep getting cheaper per token."""
    ks = sorted(DEFAULT_SHAPE)
    return T1 * float(np.interp(size, ks, [DEFAULT_SHAPE[k] for k in ks]))


def knee(size: int) -> float:
    """Cheap up to 9 tokens (8 drafted), then every token costs a whole step."""
    return T1 * (1 + 0.15 * (size - 1) if size <= 9 else 2.2 + 1.0 * (size - 9))


def chains(
    seed: int, p_true: Sequence[float], length: int = 64, q: float = 0.8
) -> Iterator[tuple[Draft, list[int]]]:
    rng = np.random.default_rng(seed)
    draft = Draft.chain(list(range(1, length + 1)), SOURCE_NGRAM, q)
    for p in p_true:
        m = 0
        while m < length and rng.random() < p:
            m += 1
        yield draft, list(range(m))


# The controller on these traces: the neutral margin and probes on (production drafts
# only at 1.15 and does not probe; the traces test the mechanisms, not those settings).
NEUTRAL: dict[str, object] = {"min_gain": 1.05, "probe_every": 8}


def controller(curve: Callable[[int], float] = flat, **config: object) -> Controller:
    calibration = {s: curve(s) for s in SIZES}
    return Controller(ControlConfig(**{**NEUTRAL, **config}), CostModel(calibration))  # type: ignore[arg-type]


def best_fixed(p: float, curve: Callable[[int], float], length: int = 64) -> float:
    """Tokens/s of the best fixed n on a chain with true acceptance p: an upper bound."""
    rates = [(1 - p ** (n + 1)) / (1 - p) / curve(n + 1) for n in range(length + 1)]
    return max(rates)


def replay(
    ctl: Controller, trace: Iterator[tuple[Draft, list[int]]], curve=flat, bonus: bool = True
) -> tuple[np.ndarray, np.ndarray, float]:
    """Like `simulate`, also recording the drafting flag: (chosen n, drafting, tokens/s)."""
    chosen, drafting = [], []
    tokens, seconds = 0, 0.0
    for draft, path in trace:
        n = ctl.choose(draft)
        m = sum(1 for i in path if i < n)
        token = int(draft.tokens[path[m]]) if m < len(path) else -1
        ctl.observe(draft.prefix(n), path[:m], curve(n + 1), token if bonus else None)
        ctl.shadow.forget()  # synthetic entries are independent drafts, not one stream
        chosen.append(n)
        drafting.append(ctl.last.drafting)
        tokens += m + 1
        seconds += curve(n + 1)
    return np.array(chosen), np.array(drafting), tokens / seconds


# --- cost model -----------------------------------------------------------------------


def test_cost_without_calibration_is_the_prior_scaled_to_t1() -> None:
    cost = CostModel()
    assert cost.seconds(8) / cost.seconds(1) == pytest.approx(4.0)
    cost.observe(1, 0.03)
    for size, rel in DEFAULT_SHAPE.items():
        assert cost.seconds(size) == pytest.approx(0.03 * rel)
    assert cost.seconds(3) == pytest.approx(0.03 * 2.1)  # halfway between t(2) and t(4)


def test_cost_interpolates_between_measured_sizes() -> None:
    # measured exactly on the prior shape: piecewise linear between the points
    cost = CostModel({1: 0.01, 2: 0.018, 4: 0.024, 8: 0.04})
    assert cost.seconds(3) == pytest.approx(0.021)
    assert cost.seconds(6) == pytest.approx(0.032)
    # off the shape: the ratio to the prior is linear between measured sizes, constant past
    cost = CostModel({1: 0.01, 8: 0.08})
    assert cost.seconds(8) == pytest.approx(0.08)
    assert cost.seconds(4) == pytest.approx(0.01 * 2.4 * (1 + 3 / 7))
    assert cost.seconds(16) == pytest.approx(0.01 * 6.0 * 2)


def test_cost_follows_a_sawtooth_and_extends_past_calibration() -> None:
    """CPU kernels make t(n) a sawtooth at small n (an odd batch can cost more than the next
    even one): the table keeps what was measured, and no neighbour is raised to a dear
    size's cost."""
    cost = CostModel({1: 0.01, 2: 0.022, 3: 0.032, 4: 0.025, 5: 0.037, 6: 0.034, 8: 0.044})
    table = cost.table(300)
    assert table[0] == 0.0
    assert cost.seconds(3) == pytest.approx(0.032) and cost.seconds(4) == pytest.approx(0.025)
    assert cost.seconds(5) == pytest.approx(0.037) and cost.seconds(6) == pytest.approx(0.034)
    shaped = CostModel({s: 0.01 * DEFAULT_SHAPE[s] for s in SIZES})
    assert shaped.seconds(128) == pytest.approx(0.01 * 39.6)
    assert shaped.seconds(200) > shaped.seconds(128)
    assert np.all(np.diff(shaped.table(300)) >= 0)  # a smooth calibration stays smooth


def test_the_controller_skips_batch_sizes_dearer_than_a_bigger_one() -> None:
    """On a sawtooth curve a confident chain is verified at a size no bigger size undercuts:
    the odd sizes that cost more than the next even one are never chosen."""
    saw = {1: 1.0, 2: 2.2, 3: 3.2, 4: 2.5, 5: 3.7, 6: 3.4, 7: 4.3, 8: 4.4, 9: 5.5, 10: 5.1}
    saw |= {11: 6.7, 12: 5.9, 13: 6.9, 14: 6.8, 15: 8.0, 16: 7.2, 24: 10.4, 32: 15.4, 64: 25.5}
    cost = CostModel({n: 0.03 * r for n, r in saw.items()})
    table = cost.table(65)
    chosen = set()
    for q in (0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99):
        for length in range(2, 20):
            ctl = Controller(ControlConfig(**NEUTRAL), cost)  # type: ignore[arg-type]
            n = ctl.choose(Draft.chain(list(range(1, length + 1)), SOURCE_NGRAM, q))
            if n:
                chosen.add(n + 1)
                assert not np.any(table[n + 2 : length + 2] <= table[n + 1])
    assert chosen and chosen.isdisjoint({3, 5, 9, 11, 15})


def test_a_machine_faster_than_its_calibration_moves_every_size() -> None:
    """Calibrated in a noisy moment: one-token steps run 20% faster than the table says.
    Sizes not seen since are predicted 20% faster too (their cost relative to t(1) is what
    was measured), and one outlier does not move the scale."""
    cal = {s: 0.01 * DEFAULT_SHAPE[s] for s in SIZES}
    cost = CostModel(cal)
    for _ in range(8):
        cost.observe(1, 0.008)
    assert cost.scale == pytest.approx(0.8)
    # (the first two steps, before the scale is trusted, went to t(1)'s own estimate)
    assert cost.seconds(1) == pytest.approx(0.008, rel=0.05)
    assert cost.seconds(32) == pytest.approx(0.8 * cal[32], rel=0.02)
    cost.observe(16, 1.0)  # a stall
    assert cost.scale == pytest.approx(0.8)
    assert cost.seconds(32) / cost.seconds(1) == pytest.approx(DEFAULT_SHAPE[32], rel=0.05)


def test_cost_prices_the_cells_in_use() -> None:
    """Deep in a long prompt, t(n) = t0(n) * (1 + slope(n) * cells): observations are
    stored for an empty cache, and the table follows the cells in use."""
    cells = [0]
    slope = {1: 0.0, 8: 1e-4, 64: 5e-4}
    cost = CostModel({1: 0.01, 8: 0.04, 64: 0.2}, slope=slope, cells=lambda: cells[0])
    assert cost.seconds(64) == pytest.approx(0.2)
    cells[0] = 1000
    assert cost.seconds(1) == pytest.approx(0.01)
    assert cost.seconds(8) == pytest.approx(0.04 * 1.1)
    assert cost.seconds(64) == pytest.approx(0.2 * 1.5)
    assert cost.seconds(36) == pytest.approx(cost.table(64)[36])
    assert np.all(np.diff(cost.table(100)) >= 0)
    sizes = np.arange(1, 300)  # the per-size lookup (grown past the table) is the interpolation
    assert [cost.factor_at(int(n), 1000) for n in sizes] == pytest.approx(cost.factor(sizes, 1000).tolist())
    cost.observe(8, 0.044)  # what the cells predicted: t0(8) unchanged
    assert cost.measured[8] == pytest.approx(0.04)
    cells[0] = 0
    assert cost.seconds(64) == pytest.approx(0.2)
    assert cost.spawn({1: 0.02}, context=False).slope == {}
    twin = cost.spawn({1: 0.02, 64: 0.4})
    cells[0] = 1000
    assert twin.seconds(64) == pytest.approx(0.4 * 1.5)


def test_a_deep_cache_shortens_the_draft() -> None:
    """The same draft, priced at 2000 cells where big batches cost 2x more: the controller
    verifies fewer nodes than on an empty cache."""
    cells = [0]
    cal = {s: 0.01 * DEFAULT_SHAPE[s] for s in SIZES}
    ctl = Controller(ControlConfig(**NEUTRAL), CostModel(cal, slope={1: 0.0, 64: 5e-4}, cells=lambda: cells[0]))  # type: ignore[arg-type]
    draft = Draft.chain(list(range(1, 65)), SOURCE_NGRAM, 0.97)
    shallow = ctl.choose(draft)
    cells[0] = 2000
    deep = ctl.choose(draft)
    assert 0 < deep < shallow


def test_batches_that_run_over_the_curve_raise_every_batch_size() -> None:
    """Deep in a long prompt batches ran 20% over the calibrated curve while one-token steps
    ran as calibrated: after a few such steps every batch size is priced higher, sizes never
    verified as well (each size alone is seen too rarely to catch up); t(1) stays."""
    cal = {s: 0.01 * DEFAULT_SHAPE[s] for s in SIZES}
    base = CostModel(cal)
    cost = CostModel(cal)
    for size in (2, 8, 4, 16, 8, 2, 4, 16):
        cost.observe(1, 0.01)
        cost.observe(size, 1.2 * base.seconds(size))
    assert cost.seconds(1) == pytest.approx(0.01)
    assert cost.batch == pytest.approx(1.2)
    for size in (24, 32, 64):  # never verified
        assert cost.seconds(size) == pytest.approx(1.2 * base.seconds(size), rel=0.02)
    for size in (2, 16):  # verified: within a few percent, not 1.2 twice over
        assert cost.seconds(size) == pytest.approx(1.2 * base.seconds(size), rel=0.06)
    assert cost.measured[16] == pytest.approx(cost.seconds(16))
    for _ in range(16):  # batches back on the curve: the factor follows
        cost.observe(1, 0.01)
        cost.observe(8, base.seconds(8))
    assert cost.batch == pytest.approx(1.0, rel=1e-3)
    assert cost.seconds(64) == pytest.approx(base.seconds(64), rel=0.02)


def test_cost_learns_robustly() -> None:
    cost = CostModel({1: 0.01, 8: 0.04})
    cost.observe(1, 1.0)  # a stall: moves the estimate, but at most halfway to 2x
    assert cost.seconds(1) <= 0.01 * 1.2 + 1e-12
    for bad in (float("nan"), -1.0, 0.0, float("inf")):
        cost.observe(1, bad)
    before = cost.seconds(1)
    assert cost.measured[1] == before
    for _ in range(80):  # the machine got slower for good: followed
        cost.observe(1, 0.02)
    assert cost.seconds(1) == pytest.approx(0.02, rel=0.02)
    assert cost.seconds(8) == pytest.approx(0.08, rel=0.02)  # the whole curve slowed with it
    cost.observe(12, 0.1)  # a new size is taken as measured
    assert cost.seconds(12) == pytest.approx(0.1, rel=0.02)
    assert cost.seconds(8) < cost.seconds(10) < cost.seconds(12) < cost.seconds(14)
    with pytest.raises(ValueError):
        cost.observe(0, 0.01)


# --- path probabilities and calibration -------------------------------------------------


def random_tree(rng: np.random.Generator, n: int) -> Draft:
    parents = np.array([rng.integers(-1, i) for i in range(n)], dtype=np.int32)
    q = rng.uniform(0.05, 1.0, n).astype(np.float32)
    return Draft(
        np.arange(n, dtype=np.int32), parents, rng.integers(0, 3, n).astype(np.int8), q, q.copy()
    )


def test_path_probs_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 17, 64):
        tree = random_tree(rng, n)
        q = tree.q.astype(np.float64)
        want = [np.prod(q[tree.path_to(i)]) for i in range(n)]
        np.testing.assert_allclose(path_probs(q, tree.parents), want, rtol=1e-12)
        np.testing.assert_allclose(path_probs(q, tree.parents, tree.depth), want, rtol=1e-12)
    chain = Draft.chain([3, 4, 5, 6], q=0.5)
    probs = path_probs(chain.q.astype(np.float64), chain.parents, chain.depth)
    np.testing.assert_allclose(probs, [0.5, 0.25, 0.125, 0.0625])


def test_expected_tokens_sum_path_probabilities() -> None:
    ctl = Controller()
    tree = random_tree(np.random.default_rng(1), 20)
    q = tree.q.astype(np.float64)
    want = 1 + np.concatenate([[0.0], np.cumsum([np.prod(q[tree.path_to(i)]) for i in range(20)])])
    np.testing.assert_allclose(ctl.expected_tokens(tree), want, rtol=1e-6)


def trial(stats: AcceptanceStats, q: float, source: int, hit: bool) -> None:
    stats.record_step(int(hit))
    stats.record_trials(
        np.array([q], np.float32), np.array([source], np.int8), np.array([1]), np.array([hit])
    )


def calibrated(stats: AcceptanceStats, q: float, source: int) -> float:
    first = np.ones(1, np.int32)  # a draft's first node
    return float(stats.calibrated(np.array([q], np.float32), np.array([source], np.int8), first)[0])


def test_calibration_starts_at_raw_q_and_learns_per_source() -> None:
    stats = AcceptanceStats(ControlConfig())
    qs = np.array([0.05, 0.5, 0.9, 0.99], np.float32)
    np.testing.assert_allclose(stats.calibrated(qs, np.zeros(4, np.int8), np.ones(4, np.int32)), qs, rtol=1e-6)
    for _ in range(40):
        trial(stats, 0.9, SOURCE_NGRAM, False)
    assert calibrated(stats, 0.9, SOURCE_NGRAM) < 0.1
    assert calibrated(stats, 0.9, SOURCE_SUFFIX) == pytest.approx(0.9)  # other source
    # another q bin of the same source has no trials of its own, but the source broke its
    # promises: its prior is scaled down too
    assert calibrated(stats, 0.5, SOURCE_NGRAM) < 0.25
    assert stats.source_rate == {"ngram": 0.0}
    # unused evidence fades: the source's own q is trusted again after a while
    for _ in range(300):
        stats.record_step(0)
    assert calibrated(stats, 0.9, SOURCE_NGRAM) > 0.8


def test_a_source_never_tried_is_taken_at_its_word() -> None:
    stats = AcceptanceStats(ControlConfig())
    for _ in range(10):
        trial(stats, 0.9, SOURCE_NGRAM, False)
    qs = np.array([0.3, 0.9, 1.0], np.float32)
    unseen = np.full(3, 100, np.int8)  # a source id past any the stats have room for
    np.testing.assert_allclose(stats.calibrated(qs, unseen, np.ones(3, np.int32)), [0.3, 0.9, PRIOR_CAP], rtol=1e-6)
    assert stats.source_rate == {"ngram": 0.0}
    for _ in range(10):  # recording its trials makes room for it
        trial(stats, 0.9, 100, False)
    assert calibrated(stats, 0.9, 100) < 0.3
    assert stats.source_rate == {"ngram": 0.0, "source100": 0.0}


def test_calibration_tracks_the_true_rate() -> None:
    rng = np.random.default_rng(2)
    stats = AcceptanceStats(ControlConfig())
    estimates = []
    for step in range(400):
        trial(stats, 0.95, SOURCE_SUFFIX, bool(rng.random() < 0.6))
        if step >= 200:
            estimates.append(calibrated(stats, 0.95, SOURCE_SUFFIX))
    assert np.mean(estimates) == pytest.approx(0.6, abs=0.06)


def test_first_nodes_are_calibrated_apart_from_deeper_ones() -> None:
    """A copy the model takes up half the time, and then follows: its first node is right at
    0.5, the nodes past it at ~1. Pooled in one cell, the deep hits made the first node look
    sure, and every long chain looked worth a batch it then wasted at its root."""
    stats = AcceptanceStats(ControlConfig())
    q = np.full(8, 0.95, np.float32)
    sources = np.full(8, SOURCE_SUFFIX, np.int8)
    depth = np.arange(1, 9, dtype=np.int32)
    for step in range(200):
        taken = step % 2 == 0
        stats.record_step(8 if taken else 0)
        reached = 8 if taken else 1  # a missed root ends the walk there
        stats.record_trials(q[:reached], sources[:reached], depth[:reached], np.full(reached, taken))
    first, second, deep = stats.calibrated(q[[0, 1, 5]], sources[:3], depth[[0, 1, 5]])
    assert first == pytest.approx(0.5, abs=0.15)
    assert second > 0.85 and deep > 0.85


def test_calibration_reacts_to_a_change_of_regime() -> None:
    stats = AcceptanceStats(ControlConfig())
    for _ in range(60):
        trial(stats, 0.8, SOURCE_NGRAM, False)
    trial(stats, 0.8, SOURCE_NGRAM, True)
    trial(stats, 0.8, SOURCE_NGRAM, True)  # two hits in a row on a cell near 0: a copy began
    assert calibrated(stats, 0.8, SOURCE_NGRAM) > 0.6
    for _ in range(60):
        trial(stats, 0.8, SOURCE_NGRAM, True)
    trial(stats, 0.8, SOURCE_NGRAM, False)
    trial(stats, 0.8, SOURCE_NGRAM, False)  # and ended: one miss at ~0.97 is enough
    assert calibrated(stats, 0.8, SOURCE_NGRAM) < 0.6


class ArrayStats(AcceptanceStats):
    """`record_trials` as numpy arrays wrote it (bincount per cell and depth, np.add.at per
    source): the reference the plain-Python version must match to the bit."""

    resets = 0  # change tests that fired

    def record_trials(
        self,
        q: npt.NDArray[np.float32],
        sources: npt.NDArray[np.int8],
        depth: npt.NDArray[np.int32],
        hit: npt.NDArray[np.bool_],
    ) -> None:
        if len(q) == 0:
            return
        more = int(sources.max()) + 1 - len(self._src_hits)
        if more > 0:
            for name in ("_hits", "_trials", "_cusum_rise", "_cusum_fall"):
                setattr(self, name, np.concatenate([getattr(self, name), np.zeros(more * CELLS_PER_SOURCE)]))
            self._src_hits = np.concatenate([self._src_hits, np.zeros(more)])
            self._src_promised = np.concatenate([self._src_promised, np.zeros(more)])
        bucket = np.minimum(depth.astype(np.intp), N_DEPTHS) - 1
        qbin = np.searchsorted(Q_EDGES, q, side="right")
        cells = (sources.astype(np.intp) * N_DEPTHS + bucket) * N_BINS + qbin
        tried = np.bincount(cells, minlength=len(self._hits))
        won = np.bincount(cells, weights=hit, minlength=len(self._hits))
        idx = np.flatnonzero(tried)
        eps = 1e-6
        for i, k, w in zip(idx.tolist(), tried[idx].tolist(), won[idx].tolist(), strict=True):
            h, t = float(self._hits[i]), float(self._trials[i])
            est = min(max((h + 0.5) / (t + 1.0), eps), 1 - eps)
            keep = self._keep_trial**k
            hi, lo = est + CHANGE_SHIFT * (1 - est), est * (1 - CHANGE_SHIFT)
            miss = k - w
            rise = self._cusum_rise[i] + w * math.log(hi / est) + miss * math.log((1 - hi) / (1 - est))
            fall = self._cusum_fall[i] + w * math.log(lo / est) + miss * math.log((1 - lo) / (1 - est))
            if rise > CHANGE_NATS or fall > CHANGE_NATS:
                self.resets += 1
                keep *= CHANGE_KEEP
                rise = fall = 0.0
                s = i // CELLS_PER_SOURCE
                self._src_hits[s] = self._src_promised[s] = 0.0
            self._cusum_rise[i], self._cusum_fall[i] = max(rise, 0.0), max(fall, 0.0)
            self._hits[i] = h * keep + w
            self._trials[i] = t * keep + k
        np.add.at(self._src_hits, sources.astype(np.intp), hit.astype(np.float64))
        np.add.at(self._src_promised, sources.astype(np.intp), q.astype(np.float64))
        cap = self.config.k_max + 1
        d = np.minimum(depth, cap)
        old = len(self._depth_trials)
        if int(d.max()) >= old:
            more = min(max(int(d.max()) + 1, 2 * old), cap + 1) - old
            self._depth_hits = np.concatenate([self._depth_hits, np.zeros(more)])
            self._depth_trials = np.concatenate([self._depth_trials, np.zeros(more)])
        self._depth_trials += np.bincount(d, minlength=len(self._depth_trials))
        self._depth_hits += np.bincount(d, weights=hit, minlength=len(self._depth_hits))


STATE = (
    "_hits",
    "_trials",
    "_cusum_rise",
    "_cusum_fall",
    "_src_hits",
    "_src_promised",
    "_depth_hits",
    "_depth_trials",
)


@pytest.mark.parametrize("k_max", [6, 64])
def test_recorded_trials_match_the_array_version_to_the_bit(k_max: int) -> None:
    """The decisions are made from these floats: plain Python must form every sum in the
    order numpy did (a cell's or a depth's trials counted first and added once, a source's
    one at a time), or a replay drifts."""
    rng = np.random.default_rng(7)
    config = ControlConfig(k_max=k_max)
    stats, ref = AcceptanceStats(config), ArrayStats(config)
    # q on and next to the bin edges as well as anywhere
    edges = np.concatenate([Q_EDGES, np.nextafter(Q_EDGES.astype(np.float32), 0), [0.0, 1.0]])
    rate = 0.5
    for call in range(3000):
        if call % 200 == 0:
            rate = float(rng.choice([0.02, 0.5, 0.98]))  # regimes: the change test fires
        # steps: everything decays (far at times, so sums cross powers of two often)
        for _ in range(int(rng.choice([0, 0, 1, 1, 2, 40]))):
            accepted = int(rng.integers(0, 4))
            stats.record_step(accepted)
            ref.record_step(accepted)
        n = int(rng.choice([0, 1, 1, 2, 3, 5, 12, 64]))
        q = np.where(rng.random(n) < 0.2, rng.choice(edges, n), rng.random(n)).astype(np.float32)
        top = 9 if call > 1500 else 4  # later calls bring sources never seen: the arrays grow
        sources = rng.integers(0, top + 1, n).astype(np.int8)
        # many trials at one depth as well as a spread: a depth's count is added once
        depth = rng.integers(1, rng.choice([2, 3, k_max + 6]), n).astype(np.int32)
        hit = rng.random(n) < rate
        stats.record_trials(q, sources, depth, hit)
        ref.record_trials(q, sources, depth, hit)
        for name in STATE:
            mine, want = getattr(stats, name), getattr(ref, name)
            assert mine.shape == want.shape and np.array_equal(mine, want), (call, name)
    assert ref.resets > 10  # the change test was exercised


# --- the controller ---------------------------------------------------------------------


def test_fixed_k_verifies_what_was_drafted() -> None:
    fixed = FixedPolicy(4, budget=8, branches=2)
    policy: Policy = fixed  # checked by mypy
    assert (policy.budget, policy.max_depth, policy.branches) == (8, 4, 2)
    long, short = Draft.chain(list(range(20)), q=0.01), Draft.chain([1, 2, 3], q=0.01)
    for _ in range(30):  # however badly it goes
        assert policy.choose(long) == 8
        policy.observe(long.prefix(8), [], 0.05)
    assert policy.choose(short) == 3
    assert policy.choose(Draft.empty()) == 0
    policy.observe(short, [0, 1], 0.05)
    assert policy.alpha == pytest.approx(2 / 31)
    assert FixedPolicy(0).choose(long) == 0  # K = 0: plain decoding


def test_depth_limit_cuts_the_prefix() -> None:
    ctl = controller(k_max=3, min_gain=1.0)
    assert ctl.choose(Draft.chain(list(range(10)), q=1.0)) == 3
    assert ctl.last.depth == 3
    # node 3 is at depth 4: the prefix stops before it, even though node 4 is shallow
    tree = Draft(
        np.arange(5, dtype=np.int32),
        np.array([-1, 0, 1, 2, -1], np.int32),
        np.zeros(5, np.int8),
        np.ones(5, np.float32),
        np.ones(5, np.float32),
    )
    assert ctl.limit(tree) == 3


def test_min_gain_is_a_margin_over_plain_decoding() -> None:
    one = Draft.chain([7], q=0.86)  # expected (1 + 0.86) / t(2) = 1.033 of plain decoding
    tight, loose = controller(min_gain=1.05), controller(min_gain=1.02)
    assert tight.choose(one) == 0 and not tight.last.drafting
    assert loose.choose(one) == 1 and loose.last.drafting
    assert loose.last.expected_gain == pytest.approx(1.86 / 1.8, rel=1e-5)


def test_turns_drafting_off_when_acceptance_is_tiny() -> None:
    chosen, drafting, speed = replay(controller(), chains(3, [0.02] * 300))
    assert not drafting[20:].any()
    assert not chosen[20:].any()  # the bonus token shows the drafts are wrong: no probes
    assert speed >= 0.97 / flat(1)


def test_without_bonus_it_probes_now_and_then() -> None:
    ctl = controller()
    chosen, drafting, speed = replay(ctl, chains(4, [0.02] * 300), bonus=False)
    late = chosen[40:]
    assert not drafting[40:].any()
    assert 0 < np.count_nonzero(late) <= len(late) / ctl.config.probe_every + 2
    assert late.max() <= ctl.config.probe_nodes
    assert speed >= 0.85 / flat(1)


def test_probes_double_while_they_succeed() -> None:
    # calibration made too stiff to move: only the probes themselves can find the copy
    ctl = controller(prior_trials=1000.0, source_prior_trials=1e9, probe_every=5, probe_nodes=2)
    chosen, drafting, _ = replay(ctl, chains(8, [0.0] * 20 + [1.0] * 20, q=0.3), bonus=False)
    assert not drafting.any()
    first = 20 + int(np.argmax(chosen[20:] > 0))
    assert first < 26
    assert chosen[first : first + 5].tolist() == [2, 4, 8, 16, 32]


@pytest.mark.parametrize("p", [0.8, 0.95, 0.99])
def test_near_the_best_fixed_k(p: float) -> None:
    _, _, speed = replay(controller(), chains(5, [p] * 300))
    assert speed >= 0.9 * best_fixed(p, flat)


def test_grows_long_drafts_on_high_acceptance() -> None:
    high = controller()
    chosen_high, drafting, _ = replay(high, chains(6, [0.99] * 200))
    chosen_mid, _, _ = replay(controller(), chains(6, [0.8] * 200))
    assert drafting[10:].all()
    assert np.median(chosen_high[50:]) >= 16
    assert chosen_high[50:].max() >= 28
    assert np.median(chosen_mid[50:]) <= 8
    assert high.alpha > 10 and high.stats.alpha_ema > 10
    assert high.stats.depth_rate[1] > 0.9


def test_respects_a_cost_knee() -> None:
    chosen, _, speed = replay(controller(knee), chains(7, [0.995] * 200), knee)
    assert chosen[50:].max() <= 8, "past the knee: one extra token costs a whole step"
    assert np.median(chosen[50:]) >= 6
    assert speed >= 0.9 * best_fixed(0.995, knee)
    # not calibrated at load: it learns the cost of the sizes it tries, and stays under the
    # knee, but the sizes it never tries stay at the prior's guess (here too expensive)
    # (a size past the knee it has not tried yet is tried now and then: its first nodes'
    # cells are near 1 here, and an untried size costs the prior's guess)
    ctl = Controller(ControlConfig(**NEUTRAL), CostModel())  # type: ignore[arg-type]
    chosen, _, speed = replay(ctl, chains(7, [0.995] * 200), knee)
    assert np.mean(chosen[50:] > 8) < 0.1 and np.median(chosen[50:]) <= 8
    assert speed >= 0.6 * best_fixed(0.995, knee)
    # the same acceptance on the flat curve drafts far longer
    chosen, _, _ = replay(controller(flat), chains(7, [0.995] * 200))
    assert np.median(chosen[50:]) >= 20  # (a miss near the root restarts its ramp at ~15)


@pytest.mark.parametrize("bonus", [True, False])
def test_follows_text_from_prose_to_copy_and_back(bonus: bool) -> None:
    phases = [0.02] * 80 + [0.97] * 60 + [0.02] * 40
    for seed in range(8):
        ctl = controller()
        chosen, drafting, _ = replay(ctl, chains(seed, phases), bonus=bonus)
        assert not drafting[60:80].any()
        started = 80 + int(np.argmax(drafting[80:]))
        # with the bonus token: a few steps; without: one probe period plus the ramp
        assert started - 80 <= (8 if bonus else ctl.config.probe_every + 6 + 8)
        assert drafting[started + 5 : 140].mean() > 0.9
        assert np.median(chosen[started + 10 : 140]) >= 8
        stopped = 140 + int(np.argmin(drafting[140:]))
        assert stopped - 140 <= 4
        # at most one more try: the first nodes' cells saw the copy end, the deeper ones
        # (calibrated apart) still hold its record until the next first node fails
        assert drafting[stopped + 2 :].sum() <= 1


def test_overconfident_sources_are_doubted_in_every_bin() -> None:
    # Each draft comes from one of three sources with its own confidence, 0.8-0.99, so any
    # one calibration cell sees few trials; all of them are right only 30% of the time.
    # On a steep cost curve (every drafted token ~0.6 of a step) drafting cannot pay here.
    def steep(size: int) -> float:
        return T1 * float(np.interp(size, SIZES, (1, 1.72, 2.8, 5.0, 8.5, 16, 31)))

    def hopping(seed: int) -> Iterator[tuple[Draft, list[int]]]:
        rng = np.random.default_rng(seed)
        for _ in range(300):
            draft = Draft.chain(list(range(1, 17)), int(rng.integers(0, 3)), float(rng.uniform(0.8, 0.99)))
            m = 0
            while m < 16 and rng.random() < 0.3:
                m += 1
            yield draft, list(range(m))

    for seed in range(4):
        _, drafting, speed = replay(controller(steep, probe_every=0), hopping(seed), steep)
        assert drafting[50:].mean() < 0.05
        assert speed >= 0.95 / steep(1)


def test_trees_use_calibration_per_source() -> None:
    # two branches with the same raw q: suffix (always right) and ngram (always wrong)
    ctl = controller()
    tree = Draft(
        np.array([1, 2, 3, 9, 8, 7], np.int32),
        np.array([-1, 0, 1, -1, 3, 4], np.int32),
        np.array([1, 1, 1, 0, 0, 0], np.int8),
        np.full(6, 0.7, np.float32),
        np.full(6, 0.5, np.float32),
    )
    chosen = []
    for _ in range(30):
        n = ctl.choose(tree)
        ctl.observe(tree.prefix(n), [i for i in (0, 1, 2) if i < n], flat(n + 1), bonus=-1)
        chosen.append(n)
    assert chosen[0] > 3  # both branches look alike at first
    assert chosen[5:] == [3] * 25  # then only the suffix branch is worth verifying
    q = ctl.stats.calibrated(tree.q, tree.sources, tree.depth)
    assert q[:3].min() > 0.9 and q[3:].max() < 0.7
    assert ctl.stats.source_rate["suffix"] > 0.9 and ctl.stats.source_rate["ngram"] < 0.1


def test_observe_bookkeeping_and_shadow_evidence() -> None:
    ctl = controller(window=4)
    draft = Draft.chain([5, 6, 7, 8], q=0.9)
    ctl.choose(draft)
    ctl.observe(draft.prefix(0), [], 0.02, bonus=5)  # plain step: node 0 would have passed
    ctl.choose(draft)
    ctl.observe(draft.prefix(0), [], 0.02, bonus=4)  # ... and then would not have
    assert ctl.stats.depth_rate[1] == pytest.approx(0.5, abs=0.02)
    for m in (1, 2, 3, 4, 4):
        ctl.choose(draft)
        ctl.observe(draft.prefix(4), list(range(m)), 0.06)
    assert ctl.alpha == pytest.approx((2 + 3 + 4 + 4) / 4)
    assert 0 < ctl.stats.alpha_ema < 4
    assert ctl.choose(Draft.empty()) == 0


def test_simulate_is_deterministic() -> None:
    phases = [0.5] * 50 + [0.95] * 50
    a = simulate(controller(), chains(9, phases), flat)
    b = simulate(controller(), chains(9, phases), flat)
    assert a.chosen == b.chosen and a.tokens == b.tokens
    assert a.tokens_per_second == pytest.approx(a.tokens / a.seconds)
    assert a.tokens >= len(phases)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        ControlConfig(k_max=0)
    with pytest.raises(ValueError):
        ControlConfig(min_gain=0)
    with pytest.raises(ValueError):
        ControlConfig(probe_every=-1)


def test_draft_config_passes_the_controller_its_own_defaults() -> None:
    assert DraftConfig().control() == ControlConfig()
    knobs = DraftConfig(k_max=12, budget=20, branches=3, probe_every=4, min_gain=1.3).control()
    assert knobs == ControlConfig(k_max=12, budget=20, branches=3, probe_every=4, min_gain=1.3)


@pytest.mark.parametrize("knob", ["k", "k_max", "budget"])
def test_draft_config_bounds_depth_and_size_by_the_largest_batch(knob: str) -> None:
    DraftConfig(**{knob: MAX_BUDGET})  # type: ignore[arg-type]
    for too_big in (MAX_BUDGET + 1, 10**9):
        with pytest.raises(ConfigError, match=f"{knob} must be <= {MAX_BUDGET}"):
            DraftConfig(**{knob: too_big})  # type: ignore[arg-type]


def test_per_depth_state_grows_with_the_depths_seen_not_k_max() -> None:
    ctl = controller(k_max=10**7, budget=64)  # 10**7 would be 160 MB sized by k_max
    assert len(ctl.stats.depth_rate) <= 64  # nothing sized by k_max
    deep = Draft.chain(list(range(1, 41)), q=0.99)
    assert ctl.limit(deep) == 40
    ctl.choose(deep)
    ctl.observe(deep, list(range(40)), flat(41), bonus=-1)  # all 40 verified and accepted
    assert len(ctl.stats.depth_rate) <= 2 * 41
    assert ctl.stats.depth_rate[40] == pytest.approx(1.0)
    shallow = controller(k_max=3)  # anything deeper than k_max is counted at k_max + 1
    shallow.observe(deep, list(range(40)), flat(41))
    assert len(shallow.stats.depth_rate) == 5 and shallow.stats.depth_rate[4] == 1.0


def test_controller_is_an_engine_policy() -> None:
    ctl = Controller(ControlConfig(budget=32, k_max=16, branches=2))
    policy: Policy = ctl  # checked by mypy
    assert (policy.budget, policy.max_depth, policy.branches) == (32, 16, 2)
    draft = Draft.chain([1, 2, 3], q=0.99)
    policy.observe(draft.prefix(policy.choose(draft)), [], 0.02)
    assert policy.alpha == 0.0


def test_unverified_drafts_are_scored_as_the_model_writes() -> None:
    """A declined chain is checked against the tokens of the following steps, at every
    depth: a copy the controller did not dare verify still raises its calibration."""
    ctl = controller()
    stream = list(range(100, 140))
    draft = Draft.chain(stream[1:9], q=0.3)  # a low-confidence guess of the next 8 tokens
    before = ctl.stats.calibrated(draft.q[:1], draft.sources[:1], draft.depth[:1])[0]
    assert ctl.choose(draft) == 0  # q = 0.3 does not pay
    ctl.observe(Draft.empty(), [], 0.02, bonus=stream[1])
    for tok in stream[2:9]:  # plain steps, each writing the next token of the guessed copy
        ctl.choose(Draft.empty())
        ctl.observe(Draft.empty(), [], 0.02, bonus=tok)
    after = ctl.stats.calibrated(draft.q[:1], draft.sources[:1], draft.depth[:1])[0]
    deeper = ctl.stats.calibrated(draft.q[4:5], draft.sources[4:5], draft.depth[4:5])[0]
    assert after > before + 0.15  # one hit for the first node's cell
    assert deeper > before + 0.3  # seven for the deeper nodes'
    assert ctl.stats.depth_rate[8] > 0.5  # the deepest node was scored too


def test_shadow_scorer_turns_a_declined_draft_into_trials_until_a_miss() -> None:
    shadow = ShadowScorer()
    draft = Draft.chain([5, 6, 7, 8], q=0.5)
    shadow.offer(draft)
    older, fresh = shadow.score(Draft.empty(), [], bonus=5)  # declined; the model wrote 5
    assert older == [] and fresh is not None
    assert fresh.nodes.tolist() == [0] and fresh.hit.tolist() == [True]
    shadow.offer(Draft.empty())
    older, fresh = shadow.score(Draft.empty(), [], bonus=6)  # next step: node 1 hits too
    assert fresh is None and [(t.nodes.tolist(), t.hit.tolist()) for t in older] == [([1], [True])]
    older, _ = shadow.score(Draft.empty(), [], bonus=9)  # a miss ends the walk
    assert [(t.nodes.tolist(), t.hit.tolist()) for t in older] == [([2], [False])]
    assert shadow.score(Draft.empty(), [], bonus=8) == ([], None)
    assert shadow.score(Draft.empty(), [], bonus=None) == ([], None)  # no token, no trials


def test_a_cursor_steps_through_a_tree_as_a_scan_of_its_parents_would() -> None:
    """The cursor finds a node's unverified children in the draft's child table; a scan of
    the parents (nodes >= start whose parent is the cursor's node) is the reference."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        parents = np.array([rng.integers(-1, i) for i in range(n)], dtype=np.int32)
        tokens = np.zeros(n, dtype=np.int32)
        for i in range(n):  # siblings carry distinct tokens, cousins may share them
            taken = set(tokens[:i][parents[:i] == parents[i]].tolist())
            tokens[i] = rng.choice([t for t in range(len(taken) + 3) if t not in taken])
        q = np.full(n, 0.5, np.float32)
        draft = Draft(tokens, parents, np.zeros(n, np.int8), q, q.copy())
        draft.check()
        start = int(rng.integers(0, n + 1))
        node = int(rng.integers(-1, start)) if start else -1
        cursor = _Cursor(draft, start, node)
        for _ in range(6):
            kids = np.flatnonzero(parents[start:] == node) + start
            # mostly one of the children's tokens (the walk goes on), else any
            go_on = len(kids) > 0 and rng.random() < 0.7
            token = int(rng.choice(tokens[kids])) if go_on else int(rng.integers(0, 4))
            found = cursor.feed(token)
            if len(kids) == 0:
                assert found is None
                break
            assert found is not None and found.nodes.dtype == np.intp
            assert found.nodes.tolist() == kids.tolist()
            assert found.hit.tolist() == (tokens[kids] == token).tolist()
            if found.hit.any():
                node = int(kids[found.hit][0])
            assert cursor.node == node


def test_a_wrong_guess_scored_later_lowers_calibration() -> None:
    ctl = controller()
    draft = Draft.chain([1, 2, 3, 4], q=0.5)
    before = ctl.stats.calibrated(draft.q[:1], draft.sources[:1], draft.depth[:1])[0]
    ctl.choose(draft)
    for tok in (1, 9, 9, 9):
        ctl.observe(Draft.empty(), [], 0.02, bonus=tok)
        ctl.choose(Draft.empty())
    after = ctl.stats.calibrated(draft.q[1:2], draft.sources[1:2], draft.depth[1:2])[0]
    assert after < before

"""Adaptive K: how many draft nodes to verify each step, from measured cost and acceptance.

A step verifies the root plus the first n nodes of the best-first draft in one batch of
n + 1 tokens, costing t(n + 1) seconds, and yields the accepted path plus one bonus token.
A node is accepted only if its whole path is, so with calibrated conditional estimates q'
its acceptance probability is P'(i) = product of q' from the root down to i, and the
expected tokens of the step are 1 + sum_{i<n} P'(i) (expectation is additive over nodes,
so this holds for trees as well as chains). The controller picks

    n* = argmax_n (1 + sum_{i<n} P'(i)) / t(n + 1),      n = 0 being plain decoding,

and drafts only when that beats plain decoding, 1 / t(1), by `min_gain`.

Three pieces: `CostModel` learns t(size) on this machine, `AcceptanceStats` learns how far
the sources' own q can be trusted, `Controller` combines them once per step; its
`ShadowScorer` turns the drafts it declined into trials as the model writes. `FixedPolicy`
is the non-adaptive alternative (verify whatever was drafted, a fixed K). `simulate`
replays a recorded trace with no model, for tests and tuning.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from lookahead.core.draft import SOURCE_NAMES, Draft
from lookahead.errors import ConfigError

Floats = npt.NDArray[np.float64]

# t(size) / t(1) for one decode of `size` tokens, measured for the default model on a
# 2-vCPU machine: the shape assumed until this machine's own costs are measured.
_SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
_RELATIVE = (1.0, 1.8, 2.4, 4.0, 6.0, 10.5, 15.3, 19.0, 30.3, 39.6)
DEFAULT_SHAPE: dict[int, float] = dict(zip(_SIZES, _RELATIVE, strict=True))
# Seconds for t(1) before anything is measured. Only ratios of costs decide n, so this
# scale matters for reporting, never for the choice.
DEFAULT_T1 = 0.02


class CostModel:
    """Verify time t(size) of one batch of `size` tokens, seeded by calibration, then learned.

    The curve is `scale` x shape. `scale` is how fast the machine runs now against the
    calibration: the median of the last 16 observations' ratios to the calibrated curve
    (each clipped to within 2x of the current scale; from the third on). A machine whose
    speed has moved since it was calibrated (another load, frequency, a noisy calibration)
    moves every size alike at once, though a step observes one size at a time: if one-token
    steps run 20% faster than calibrated, so do the batch sizes not seen yet, and their cost
    relative to t(1) stays what was measured. The shape is learned per size: each observed
    size keeps an EMA of its seconds over the scale of the moment (the mean of the first
    few, then a fixed rate), each clipped to within 2x of the current estimate first, so
    one stall (a page fault, another process) cannot wreck it.
    Between measured sizes the ratio measured / prior-shape is interpolated piecewise
    linearly, and held constant beyond them: with only t(1) measured the curve is the prior
    shape scaled to t(1); with dense measurements it follows them.

    The table is not made non-decreasing. On CPUs t(n) is a sawtooth at small n (matmul
    kernels work on blocks of columns: an odd batch can cost more than the next even one),
    and every consumer picks a size by the argmax of expected tokens over t, where the
    expected tokens never fall as nodes are added: a size that costs more than a bigger one
    is then never picked, which is right. Raising the dear size's neighbours to its cost, as
    a running maximum did, made a dozen sizes look dear because one was (or one estimate
    had drifted), and pushed the choice past them to long, unlikely drafts.

    Context: a batch attends to every cell in the KV cache, so on a small model a verify
    deep in a long prompt costs more than on an empty cache, and more so for big batches
    (attention grows with size x cells, the weights' matmuls far slower than size). With
    `slope` (size -> extra fraction per cell, from calibrating at two depths) and `cells`
    (the cells in use now), t(size) = t0(size) * (1 + slope(size) * cells): the estimates
    are kept for an empty cache (t0), each observation divided by its factor first.
    """

    def __init__(
        self,
        calibration: Mapping[int, float] | None = None,
        *,
        prior: Mapping[int, float] | None = None,
        rate: float = 0.1,
        seed_weight: float = 4.0,
        slope: Mapping[int, float] | None = None,
        cells: Callable[[], int] | None = None,
    ) -> None:
        # rate: EMA weight of a new observation once a size has been seen 1 / rate times.
        # seed_weight: how many observations one calibration value counts for.
        self._shape = dict(DEFAULT_SHAPE if prior is None else prior)
        shape = self._shape
        self.slope = {int(k): max(0.0, float(v)) for k, v in (slope or {}).items() if k >= 1}
        ks = sorted(self.slope)
        self._slope_sizes = np.array(ks, dtype=np.float64)
        self._slope_values = np.array([self.slope[k] for k in ks], dtype=np.float64)
        # slope(size) for size 0..: every step prices at new cells, so this is kept, not
        # interpolated again per step (grown with the other per-size arrays)
        self._slope_table = np.zeros(0)
        self._slope_list: list[float] = []
        self.cells = cells
        self._context_table: tuple[int, Floats] | None = None  # (cells, table) last built
        if not shape or min(shape) < 1 or min(shape.values()) <= 0:
            raise ValueError("prior needs positive costs at sizes >= 1")
        self._prior_sizes = np.array(sorted(shape), dtype=np.float64)
        self._prior_costs = np.array([shape[k] for k in sorted(shape)], dtype=np.float64)
        self.rate = rate
        # indexed by batch size, 0..128 to start with (grown on demand)
        self._est = np.zeros(129, dtype=np.float64)  # seconds (valid where counted)
        self._count = np.zeros(129, dtype=np.float64)  # observations (0 = unmeasured)
        self._table: Floats | None = None
        self._prior_table = self._prior(np.maximum(np.arange(len(self._est), dtype=np.float64), 1))
        for size, seconds in (calibration or {}).items():
            if size >= 1 and math.isfinite(seconds) and seconds > 0:
                self._grow(size)
                self._est[size] = seconds
                self._count[size] = seed_weight
        self.scale = 1.0
        self._ratios: deque[float] = deque(maxlen=16)
        # the calibrated curve, fixed: what `scale` is measured against
        self._reference = self._build(len(self._est) - 1, scale=1.0)

    def _grow(self, size: int) -> None:
        old = len(self._est)
        if size >= old:
            cap = max(size + 1, 2 * old)
            self._est = np.concatenate([self._est, np.zeros(cap - old)])
            self._count = np.concatenate([self._count, np.zeros(cap - old)])
            self._prior_table = self._prior(np.maximum(np.arange(cap, dtype=np.float64), 1))
            self._table = None
            self._slope_table = np.zeros(0)  # rebuilt for the new length on first use
            if hasattr(self, "_reference"):  # past the calibrated sizes: the same extrapolation
                ref = self._reference
                extra = self._prior_table[len(ref) :] * (ref[-1] / self._prior_table[len(ref) - 1])
                self._reference = np.concatenate([ref, extra])

    def observe(self, size: int, seconds: float) -> None:
        """Record that one verify batch of `size` tokens took `seconds`."""
        if size < 1:
            raise ValueError("batch size must be >= 1")
        if not (math.isfinite(seconds) and seconds > 0):
            return
        self._grow(size)
        seconds /= self.factor_at(size, self.context)
        ratio = seconds / self._reference[size]
        self._ratios.append(min(max(ratio, 0.5 * self.scale), 2.0 * self.scale))
        if len(self._ratios) >= 3:  # the median, by hand: np.median costs ~0.1 ms a step
            r = sorted(self._ratios)
            mid = len(r) // 2
            self.scale = r[mid] if len(r) % 2 else 0.5 * (r[mid - 1] + r[mid])
        seconds /= self.scale  # the shape's part
        count = self._count[size]
        if count == 0:
            self._est[size] = seconds
        else:
            cur = self._est[size]
            x = min(max(seconds, 0.5 * cur), 2.0 * cur)
            # mean of the first 1/rate observations, then an EMA with weight `rate`
            self._est[size] = cur + max(self.rate, 1.0 / (count + 1.0)) * (x - cur)
        self._count[size] = count + 1.0
        self._table = None

    def table(self, max_size: int) -> Floats:
        """t[size] in seconds for size 0..max_size at least (t[0] = 0), at the cells in use
        now."""
        if self._table is None or len(self._table) <= max_size:
            self._grow(max_size)
            self._table = self._build(len(self._est) - 1)
            self._context_table = None
        cells = self.context
        if cells <= 0 or not self.slope:
            return self._table
        last = self._context_table
        if last is None or last[0] != cells:
            t = self._table * (1.0 + self._slopes()[: len(self._table)] * cells)
            t.flags.writeable = False
            last = self._context_table = (cells, t)
        return last[1]

    @property
    def context(self) -> int:
        """KV cells in use now (0 without a `cells` source)."""
        return int(self.cells()) if self.cells is not None else 0

    def factor(self, sizes: npt.NDArray[np.int_], cells: int) -> Floats:
        """t(size) at `cells` cells over t(size) on an empty cache: 1 + slope(size) * cells,
        the slope interpolated between calibrated sizes and held beyond them."""
        if cells <= 0 or not self.slope:
            return np.ones(len(sizes))
        return 1.0 + np.interp(sizes, self._slope_sizes, self._slope_values) * cells

    def factor_at(self, size: int, cells: int) -> float:
        """`factor` for one batch size (plain floats: called every step)."""
        if cells <= 0 or not self.slope:
            return 1.0
        if size >= len(self._slope_list):
            self._grow(size)
            self._slopes()
        return 1.0 + self._slope_list[size] * cells

    def _slopes(self) -> Floats:
        """slope(size) for size 0..len(est) - 1, built once per length."""
        if len(self._slope_table) != len(self._est):
            sizes = np.arange(len(self._est), dtype=np.float64)
            if self.slope:
                self._slope_table = np.interp(sizes, self._slope_sizes, self._slope_values)
            else:
                self._slope_table = np.zeros(len(sizes))
            self._slope_list = self._slope_table.tolist()
        return self._slope_table

    def spawn(self, calibration: Mapping[int, float] | None = None, *, context: bool = True) -> CostModel:
        """A new model with this one's prior, context slope and cells source (unless not
        `context`: costs on an empty cache), seeded with `calibration`."""
        if not context:
            return CostModel(calibration, prior=self._shape, rate=self.rate)
        return CostModel(calibration, prior=self._shape, rate=self.rate, slope=self.slope, cells=self.cells)

    def seconds(self, size: int) -> float:
        """Estimated seconds to verify a batch of `size` tokens."""
        return float(self.table(size)[size])

    @property
    def measured(self) -> dict[int, float]:
        """Sizes with observations (or calibration) and their current estimates, for an
        empty cache."""
        return {int(k): float(self._est[k] * self.scale) for k in np.flatnonzero(self._count > 0)}

    def _prior(self, sizes: Floats) -> Floats:
        """The prior shape at `sizes`, relative to t(1), extrapolated linearly past its end."""
        ks, vs = self._prior_sizes, self._prior_costs
        out = np.interp(sizes, ks, vs)
        if len(ks) > 1:
            slope = max((vs[-1] - vs[-2]) / (ks[-1] - ks[-2]), 0.0)
            out = np.where(sizes > ks[-1], vs[-1] + slope * (sizes - ks[-1]), out)
        return out / float(np.interp(1.0, ks, vs))

    def _build(self, max_size: int, scale: float | None = None) -> Floats:
        prior = self._prior_table[: max_size + 1]
        known = np.flatnonzero(self._count[: max_size + 1] > 0)
        if len(known) == 0:
            t = prior * DEFAULT_T1
        else:
            # t(n) = prior(n) * r(n), r piecewise linear through measured / prior
            ratio = self._est[known] / prior[known]
            t = prior * np.interp(np.arange(max_size + 1), known, ratio)
        t *= self.scale if scale is None else scale
        t[0] = 0.0
        t.flags.writeable = False  # shared with callers until the next observation
        return t


@dataclass(frozen=True)
class ControlConfig:
    """Knobs of the adaptive-K controller, with the defaults production runs. Built once at
    the edge (CLI, server, bench), through `DraftConfig.control()`."""

    # Deepest node a verified prefix may contain (the longest chain, K).
    k_max: int = 64
    # Most draft nodes verified in one step; the batch is budget + 1 tokens.
    budget: int = 64
    # Most children per node the proposer may build (1 = a single chain). Passed through
    # to the drafter; choose() takes whatever tree it gets.
    branches: int = 2
    # Draft only when a step's expected tokens/s beats plain decoding by this factor. Covers
    # what t(n) leaves out (building the tree and the batch, KV bookkeeping: a few % of a
    # ~20 ms step), the optimism of taking the best of many noisy estimates, and that early
    # in a request the acceptance estimates are still the indexes' own (optimistic) ones,
    # while a failed draft costs 2.4+ one-token steps on a 2-core CPU. Measured
    # (bench/compare, Qwen-0.5B, 18 prompts): 1.15 was ahead of 1.05 on every kind but code
    # completion, where both were equal.
    min_gain: float = 1.15
    # While not drafting, verify a small probe after this many declined steps that taught
    # nothing (no bonus token given to observe); 0 = never probe. Off by default: every
    # declined draft is scored for free against the tokens the model then writes, which
    # teaches as much as a probe, and on a CPU where a batch of 2 costs ~2.4 one-token
    # steps a failed probe is expensive. Worth it for a caller that passes no bonus token.
    probe_every: int = 0
    # Nodes in a probe; doubled (up to `budget`) after a probe accepted in full, so a turn
    # to copyable text is confirmed in a few steps.
    probe_nodes: int = 2
    # Steps in the rolling alpha; its EMA uses the matching rate 2 / (window + 1).
    window: int = 32
    # Trials: each (source, q bin) calibration cell weighs its own trials with an
    # exponential window about this long. Longer is steadier; a change test (see
    # `AcceptanceStats.record_trials`) drops the history when the text changes regime.
    calib_window: float = 30.0
    # Steps: all acceptance evidence halves in this time, so a cell that stops being
    # tried drifts back to trusting the source's own q.
    half_life: float = 32.0
    # Strength, in trials, of the Beta prior centred on each node's raw q: with no evidence
    # q' = q, and evidence takes over after a few trials.
    prior_trials: float = 2.0
    # Strength, in trials kept at their promise, of the source-level trust's prior of 1
    # (see `AcceptanceStats.calibrated`).
    source_prior_trials: float = 4.0

    def __post_init__(self) -> None:
        if min(self.k_max, self.branches, self.window, self.probe_nodes) < 1 or self.budget < 0:
            raise ConfigError("k_max, branches, window, probe_nodes must be >= 1, budget >= 0")
        if self.min_gain <= 0 or self.calib_window < 1 or self.half_life <= 0:
            raise ConfigError("min_gain and half_life must be > 0, calib_window >= 1")
        if self.probe_every < 0 or self.prior_trials <= 0:
            raise ConfigError("probe_every must be >= 0, prior_trials > 0")


def _lookup(values: Floats, index: npt.NDArray[np.intp]) -> Floats:
    """values[index], 0 where index is past the end (nothing recorded there yet)."""
    if len(index) == 0 or int(index.max()) < len(values):
        return values[index]
    inside = index < len(values)
    return np.where(inside, values[np.where(inside, index, 0)], 0.0)


# Upper edges of the q bins of the calibration: finer near 1, where long chains live and
# a few percent of q change the best n a lot.
Q_EDGES = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98])
N_BINS = len(Q_EDGES) + 1
_Q_EDGES_LIST: list[float] = Q_EDGES.tolist()  # for bisect on plain floats (record_trials)
# The change test of a calibration cell (see `record_trials`): it weighs the rate p of the
# cell's history against rates moved this share of the way to 1 and to 0 ...
CHANGE_SHIFT = 0.8
# ... fires when the evidence for one of them reaches this many nats (20:1; two hits in a
# row on a cell at p = 0.1, or one miss at p = 0.97) ...
CHANGE_NATS = 3.0
# ... and then the cell keeps only this share of its older evidence.
CHANGE_KEEP = 0.1
# A cell's prior, the raw q scaled by its source's trust, stays below this.
PRIOR_CAP = 0.995


class AcceptanceStats:
    """What verification taught: rolling alpha, acceptance by depth and by source, and a
    calibration of the sources' own estimates q.

    A node is a trial when it was "reached" (its parent was accepted, or it hangs below the
    root); it succeeds when it is accepted. Trials are binned by (source, q bin); a cell's
    decayed counts (hits h, trials n) give q' = (h + c q) / (n + c), the mean of a Beta
    posterior whose prior, worth c trials, is centred on the node's raw q.
    """

    def __init__(self, config: ControlConfig) -> None:
        self.config = config
        # decayed hits and trials per cell, flat: cell = source * N_BINS + q bin
        self._hits = np.zeros(max(len(SOURCE_NAMES), 8) * N_BINS)
        self._trials = np.zeros_like(self._hits)
        # per cell: the two CUSUM statistics of the change test (see `record_trials`), in
        # nats: evidence that the rate rose (a copy began) and that it fell (it ended)
        self._cusum_rise = np.zeros_like(self._hits)
        self._cusum_fall = np.zeros_like(self._hits)
        # per source: decayed hits and the sum of the raw q of the same trials (the hits the
        # source promised); their ratio scales the prior of every cell of that source
        self._src_hits = np.zeros(len(self._hits) // N_BINS)
        self._src_promised = np.zeros_like(self._src_hits)
        # per depth (index 0 unused, k_max + 1 also holds anything deeper): decayed hits and
        # trials, as deep as the depths tried so far (grown on demand, never sized by k_max)
        self._depth_hits = np.zeros(min(config.k_max, 16) + 2)
        self._depth_trials = np.zeros_like(self._depth_hits)
        # per-trial forgetting inside a cell, and per-step forgetting of everything
        self._keep_trial = 1.0 - 1.0 / config.calib_window
        self._keep_step = 0.5 ** (1.0 / config.half_life)
        self._window: deque[int] = deque(maxlen=config.window)
        self._window_sum = 0
        self.alpha_ema = 0.0
        self._ema_rate = 2.0 / (config.window + 1.0)
        self.steps = 0  # steps observed

    def cells(
        self, q: npt.NDArray[np.float32], sources: npt.NDArray[np.int8]
    ) -> npt.NDArray[np.intp]:
        """Flat calibration cell of each node (maybe past the arrays: a source never tried)."""
        return sources.astype(np.intp) * N_BINS + np.searchsorted(Q_EDGES, q, side="right")

    def _grow(self, top_source: int) -> None:
        """Room for the cells of sources up to `top_source` (one past those seen so far)."""
        more = top_source + 1 - len(self._src_hits)
        if more > 0:
            grow = more * N_BINS
            self._hits = np.concatenate([self._hits, np.zeros(grow)])
            self._trials = np.concatenate([self._trials, np.zeros(grow)])
            self._cusum_rise = np.concatenate([self._cusum_rise, np.zeros(grow)])
            self._cusum_fall = np.concatenate([self._cusum_fall, np.zeros(grow)])
            self._src_hits = np.concatenate([self._src_hits, np.zeros(more)])
            self._src_promised = np.concatenate([self._src_promised, np.zeros(more)])

    def calibrated(self, q: npt.NDArray[np.float32], sources: npt.NDArray[np.int8]) -> Floats:
        """q' of each node: its source's recent record at its level of confidence.

        Two levels: a cell (source, q bin) with trials follows its own hit rate; its prior,
        worth `prior_trials` trials, is the raw q scaled by how well the source as a whole
        kept its promises lately (hits / sum of q over its recent trials, all bins pooled).
        A source that claims 0.9 and is right a third of the time is then doubted in every
        bin at once, not bin by bin. The trust is at most 1 (a cell learns on its own that
        its source is too modest), fades back to 1 with the rest of the evidence, and
        returns to 1 at once when a cell of its source changes regime. A source never tried
        has no evidence: q' is its own q (capped below 1 like every prior).
        """
        src = sources.astype(np.intp)
        cells = self.cells(q, sources)
        src_hits, promised = _lookup(self._src_hits, src), _lookup(self._src_promised, src)
        hits, trials = _lookup(self._hits, cells), _lookup(self._trials, cells)
        k = self.config.source_prior_trials
        # at most 1: never more sure than the source itself (cells learn underconfidence)
        trust = np.minimum((src_hits + k) / (promised + k), 1.0)
        prior = np.minimum(q * trust, PRIOR_CAP)
        c = self.config.prior_trials
        # Beta posterior mean, prior Beta(c prior, c (1 - prior))
        return (hits + c * prior) / (trials + c)

    def record_step(self, accepted: int) -> None:
        """One verify step accepted `accepted` drafted nodes (0 for plain decoding)."""
        if len(self._window) == self._window.maxlen:
            self._window_sum -= self._window[0]
        self._window.append(accepted)
        self._window_sum += accepted
        self.alpha_ema += self._ema_rate * (accepted - self.alpha_ema)
        self.steps += 1
        # everything learned fades with time
        self._hits *= self._keep_step
        self._trials *= self._keep_step
        self._depth_hits *= self._keep_step
        self._depth_trials *= self._keep_step
        self._src_hits *= self._keep_step
        self._src_promised *= self._keep_step

    def record_trials(
        self,
        q: npt.NDArray[np.float32],
        sources: npt.NDArray[np.int8],
        depth: npt.NDArray[np.int32],
        hit: npt.NDArray[np.bool_],
    ) -> None:
        """One step's reached nodes (q, source, depth of each) and whether each was accepted.

        A call holds a few trials (1-5 usually, about a budget's worth at most) and comes
        about a dozen times a step on edits (once per older draft scored per token): plain
        Python over lists is several times cheaper here than numpy calls on arrays this
        small. Every sum is formed as the array version (bincount, np.add.at) formed it: per
        cell and per depth the counts first, added once; per source one trial at a time, in
        order. So the floats, and the decisions made from them, are the same to the bit.
        """
        if len(q) == 0:
            return
        qs: list[float] = q.tolist()
        srcs: list[int] = sources.tolist()
        won: list[bool] = hit.tolist()
        self._grow(max(srcs))
        # trials and hits per calibration cell and per depth (anything deeper than k_max
        # counts at k_max + 1)
        cap = self.config.k_max + 1
        per_cell: dict[int, list[int]] = {}
        per_depth: dict[int, list[int]] = {}
        for x, s, d, ok in zip(qs, srcs, depth.tolist(), won, strict=True):
            counts = per_cell.setdefault(s * N_BINS + bisect_right(_Q_EDGES_LIST, x), [0, 0])
            counts[0] += 1
            counts[1] += ok
            counts = per_depth.setdefault(min(d, cap), [0, 0])
            counts[0] += 1
            counts[1] += ok
        eps = 1e-6
        hits, trials = self._hits, self._trials
        cusum_rise, cusum_fall = self._cusum_rise, self._cusum_fall
        for i in sorted(per_cell):  # ascending, as the array version went
            k, cell_hits = per_cell[i]
            w = float(cell_hits)
            h, t = hits.item(i), trials.item(i)  # plain floats: the same arithmetic, cheaper
            # the cell's history alone (not the raw-q prior), half a hit of smoothing
            est = min(max((h + 0.5) / (t + 1.0), eps), 1 - eps)
            keep = self._keep_trial**k  # a cell tried k times keeps keep_trial**k of its past
            # Change test, CUSUM both ways: the log-likelihood ratio of recent trials under a
            # rate moved most of the way to 1 (a copy began) or to 0 (it ended) against the
            # estimate, summed while it grows, floored at 0. Past CHANGE_NATS the text has
            # changed regime, and most of the cell's history is dropped.
            hi, lo = est + CHANGE_SHIFT * (1 - est), est * (1 - CHANGE_SHIFT)
            miss = k - w
            rise = cusum_rise.item(i) + w * math.log(hi / est) + miss * math.log((1 - hi) / (1 - est))
            fall = cusum_fall.item(i) + w * math.log(lo / est) + miss * math.log((1 - lo) / (1 - est))
            if rise > CHANGE_NATS or fall > CHANGE_NATS:
                keep *= CHANGE_KEEP
                rise = fall = 0.0
                s = i // N_BINS  # the source's record is from the old regime: drop it
                self._src_hits[s] = self._src_promised[s] = 0.0
            cusum_rise[i], cusum_fall[i] = max(rise, 0.0), max(fall, 0.0)
            hits[i] = h * keep + w
            trials[i] = t * keep + k
        # per source, hits and promised q: running sums one trial at a time, in order
        src_hits, promised = self._src_hits, self._src_promised
        for x, s, ok in zip(qs, srcs, won, strict=True):
            src_hits[s] = src_hits.item(s) + (1.0 if ok else 0.0)
            promised[s] = promised.item(s) + x
        self._depth_room(max(per_depth))
        depth_trials, depth_hits = self._depth_trials, self._depth_hits
        for d, (tried, depth_won) in per_depth.items():
            depth_trials[d] = depth_trials.item(d) + tried
            depth_hits[d] = depth_hits.item(d) + depth_won

    def _depth_room(self, deepest: int) -> None:
        """Grow the per-depth arrays to hold index `deepest` (at most k_max + 1)."""
        old = len(self._depth_trials)
        if deepest >= old:
            more = min(max(deepest + 1, 2 * old), self.config.k_max + 2) - old
            self._depth_hits = np.concatenate([self._depth_hits, np.zeros(more)])
            self._depth_trials = np.concatenate([self._depth_trials, np.zeros(more)])

    @property
    def alpha(self) -> float:
        """Accepted drafted tokens per step over the last `window` steps (plain steps count 0)."""
        return self._window_sum / len(self._window) if self._window else 0.0

    @property
    def depth_rate(self) -> Floats:
        """P(accepted | reached) by depth, up to the deepest tried so far (index 0 unused;
        k_max + 1 also holds anything deeper); NaN where nothing was tried lately."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(
                self._depth_trials > 1e-9, self._depth_hits / self._depth_trials, np.nan
            )

    @property
    def source_rate(self) -> dict[str, float]:
        """P(accepted | reached) per source that has recent trials."""
        hits = self._hits.reshape(-1, N_BINS).sum(axis=1)
        trials = self._trials.reshape(-1, N_BINS).sum(axis=1)
        out = {}
        for s in np.flatnonzero(trials > 1e-9):
            name = SOURCE_NAMES[s] if s < len(SOURCE_NAMES) else f"source{s}"
            out[name] = float(hits[s] / trials[s])
        return out


def path_probs(
    q: Floats, parents: npt.NDArray[np.int32], depth: npt.NDArray[np.int32] | None = None
) -> Floats:
    """P(i) = product of q along the path from the root to node i.

    One pass: parents precede children, so P[parent] is final before node i reads it.
    A chain (the common case; with `depth`, recognised as depth[-1] == len, since
    depth[i] <= i + 1 with equality only along 0, 1, ..., i) is one cumulative product.
    """
    n = len(q)
    if n == 0:
        return q
    if (depth[n - 1] == n) if depth is not None else bool(np.all(parents == np.arange(-1, n - 1))):
        return np.asarray(np.cumprod(q), dtype=np.float64)
    out = q.tolist()
    for i, par in enumerate(parents.tolist()):
        if par >= 0:
            out[i] *= out[par]
    return np.array(out)


@dataclass(frozen=True)
class Choice:
    """One step's decision, as events and displays see it."""

    n: int = 0  # draft nodes verified (0 = plain decoding)
    depth: int = 0  # deepest of them
    drafting: bool = False  # verified because it pays
    probing: bool = False  # a probe: verified to learn, not because it pays
    expected_gain: float = 1.0  # expected tokens/s over plain decoding


class Trials(NamedTuple):
    """Nodes of a draft that were tried (reached, verified or scored for free) and which hit."""

    draft: Draft
    nodes: npt.NDArray[np.intp]
    hit: npt.NDArray[np.bool_]


class ShadowScorer:
    """Scores, for free, draft nodes that were not verified, as the model's own tokens
    arrive: the bonus token of the step, then the next steps' tokens.

    Below the last accepted node, each level's nodes are trials and the one whose token the
    model emitted is the hit; the walk goes on below it and ends at a miss. A declined draft
    is thus checked at every depth, and a copy the controller did not dare verify still
    raises its calibration. Up to MAX_PENDING drafts are followed at once (newest kept).
    """

    def __init__(self) -> None:
        self._offered: Draft | None = None  # the whole draft given to the last choose()
        self._pending: list[_Cursor] = []  # unverified drafts still being scored

    def offer(self, draft: Draft) -> None:
        """The whole draft this step's choice was made from."""
        self._offered = draft

    def score(
        self, verified: Draft, accepted: Sequence[int], bonus: int | None
    ) -> tuple[list[Trials], Trials | None]:
        """The trials this step's tokens decide: those of older drafts (one entry per draft
        and token), and those of the offered draft's first unverified level, which extends
        `verified` (same node indices) or is None. Nothing without `bonus`."""
        if bonus is None:
            return [], None
        emitted = [int(verified.tokens[i]) for i in accepted] + [bonus]
        older: list[Trials] = []
        alive = []
        for cursor in self._pending:  # older drafts: feed them this step's tokens
            for tok in emitted:
                found = cursor.feed(tok)
                if found is not None:
                    older.append(found)
                if found is None or not found.hit.any():
                    break
            else:
                alive.append(cursor)
        fresh = None
        draft = self._offered
        n = len(verified)
        if draft is not None and len(draft) > n and (
            n == 0 or np.array_equal(draft.tokens[:n], verified.tokens)
        ):
            cursor = _Cursor(draft, n, accepted[-1] if len(accepted) else -1)
            fresh = cursor.feed(bonus)
            if fresh is not None and fresh.hit.any():
                alive.append(cursor)
        self._pending = alive[-MAX_PENDING:]
        return older, fresh

    def forget(self) -> None:
        """Stop scoring earlier drafts (a new request, or a replay of unrelated drafts)."""
        self._pending = []
        self._offered = None


# Pending unverified drafts scored as the model's tokens arrive (newest kept).
MAX_PENDING = 4

# A step that reached no node (still recorded: a call per step, empty or not).
_NO_TRIALS = Trials(Draft.empty(), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=bool))


@dataclass
class _Cursor:
    draft: Draft  # the draft given to choose()
    start: int  # nodes before this were verified (scored already)
    node: int  # the deepest node known to match the model's tokens (-1 = the root)

    def feed(self, token: int) -> Trials | None:
        """One model token: the nodes it decides (the unverified children of the cursor's
        node) and which matched; the cursor moves to the match. None when the draft has
        nothing more there."""
        # the draft's child table (built once per draft) instead of a scan of its parents
        # per token: the table lists children in index order, and the children of a node
        # carry distinct tokens, so at most one of them is the match
        children = self.draft.children(self.node)
        kids = [i for i in children.values() if i >= self.start]
        if not kids:
            return None
        match = children.get(token, -1)
        if match >= self.start:
            self.node = match
        return Trials(
            self.draft, np.array(kids, dtype=np.intp), np.array([i == match for i in kids])
        )


class Controller:
    """Picks how many draft nodes to verify each step and learns from what was accepted.

    Use: `n = choose(draft)`, verify `draft.prefix(n)`, then `observe(prefix, accepted,
    seconds, bonus)`. When no prefix pays, it decodes plainly and waits for evidence that
    drafting pays again: free shadow checks of the draft against the model's tokens every
    step (`shadow`), and, when those are not available, a small probe every `probe_every`
    steps. What it learned is in `stats`, its last decision in `last`.
    """

    def __init__(self, config: ControlConfig | None = None, cost: CostModel | None = None) -> None:
        self.config = config or ControlConfig()
        self.cost = cost or CostModel()
        self.stats = AcceptanceStats(self.config)
        self.shadow = ShadowScorer()
        self.last = Choice()  # the last decision
        self._declined = 0  # declined steps since the last probe or draft that taught nothing
        self._probe_size = self.config.probe_nodes
        self._escalate = False  # the last probe was accepted in full: probe bigger next step

    # the engine's Policy protocol: what to ask the drafter for, and the rolling alpha
    @property
    def budget(self) -> int:
        return self.config.budget

    @property
    def max_depth(self) -> int:
        return self.config.k_max

    @property
    def branches(self) -> int:
        return self.config.branches

    @property
    def alpha(self) -> float:
        return self.stats.alpha

    def begin(self) -> None:
        """A new request on the same text stream's model: what was learned carries over, but
        drafts offered for the last request are not scored against this one's tokens (the
        last request's unverified copy, fed the new request's first tokens, would count as
        misses of its source and make it doubt a source that was right)."""
        self.shadow.forget()

    def limit(self, draft: Draft) -> int:
        """Longest prefix allowed: at most `budget` nodes, none deeper than `k_max`."""
        n = min(len(draft), self.config.budget)
        if n <= self.config.k_max:
            return n  # depth[i] <= i + 1, so no node of the prefix is too deep
        too_deep = np.flatnonzero(draft.depth[:n] > self.config.k_max)
        return int(too_deep[0]) if len(too_deep) else n

    def expected_tokens(self, draft: Draft, n: int | None = None) -> Floats:
        """E[tokens of a step] verifying the first k nodes, for k = 0..n: 1 + sum of P'."""
        n = len(draft) if n is None else min(n, len(draft))
        q = self.stats.calibrated(draft.q[:n], draft.sources[:n])
        out = np.empty(n + 1)
        out[0] = 1.0
        np.cumsum(path_probs(q, draft.parents[:n], draft.depth[:n]), out=out[1:])
        out[1:] += 1.0
        return out

    def could_pay(self, nodes: int) -> bool:
        """Whether verifying at most `nodes` draft nodes could be chosen on the current cost
        curve: a draft every node of which is accepted for sure beats plain decoding by
        `min_gain` at some size (at the cells in use now), or probes are on. The engine
        stops drafting for good on a no, so a curve learned later is not asked again (the
        scale moves every size alike, so only sizes never verified would differ)."""
        if self.config.probe_every > 0:
            return True
        n = min(nodes, self.config.budget)
        if n <= 0:
            return False
        t = self.cost.table(n + 1)
        sizes = np.arange(2, n + 2)
        return bool(np.max(sizes / t[2 : n + 2]) * t[1] >= self.config.min_gain)

    def choose(self, draft: Draft) -> int:
        """Number of leading draft nodes to verify this step (0 = plain decoding)."""
        limit = self.limit(draft)
        self.shadow.offer(draft)
        if limit == 0:  # nothing to weigh: keep the drafting state as it was
            return self._record_choice(draft, 0, drafting=self.last.drafting, gain=1.0)
        expected = self.expected_tokens(draft, limit)
        t = self.cost.table(limit + 1)[1 : limit + 2]
        # gain[n]: expected tokens/s verifying n nodes, over plain decoding's 1 / t(1)
        gain = expected / t * t[0]
        best = int(np.argmax(gain[1:])) + 1
        if gain[best] >= self.config.min_gain:
            self._declined = 0
            self._escalate = False
            self._probe_size = self.config.probe_nodes
            return self._record_choice(draft, best, drafting=True, gain=float(gain[best]))
        every = self.config.probe_every
        if self._escalate or (every > 0 and self._declined >= every):
            n = min(self._probe_size, limit)
            self._declined = 0
            return self._record_choice(draft, n, drafting=False, gain=float(gain[n]), probe=True)
        return self._record_choice(draft, 0, drafting=False, gain=1.0)

    def _record_choice(
        self, draft: Draft, n: int, *, drafting: bool, gain: float, probe: bool = False
    ) -> int:
        depth = int(draft.depth[:n].max()) if n else 0
        self.last = Choice(n, depth, drafting, probe, gain)
        return n

    def observe(
        self,
        verified: Draft,
        accepted: Sequence[int],
        seconds: float,
        bonus: int | None = None,
    ) -> None:
        """Learn from one step.

        `verified`: the prefix that was verified (len n, maybe 0); `accepted`: the accepted
        node indices, root to leaf; `seconds`: the verify time of the n + 1 tokens; `bonus`:
        the token the model produced after the accepted path. With `bonus`, nodes of the
        draft last passed to choose() that were not verified but hang right below the
        accepted path are scored for free (see `ShadowScorer`): they would have been
        accepted exactly when their token equals the bonus token (the model's own choice).
        """
        n = len(verified)
        self.cost.observe(n + 1, seconds)
        self.stats.record_step(len(accepted))
        older, fresh = self.shadow.score(verified, accepted, bonus)
        if n == 0:  # plain decoding: no verified node was reached, no numpy work
            step = fresh if fresh is not None else _NO_TRIALS
        else:
            # on[j + 1]: node j accepted; on[0]: the root, always accepted
            on = np.zeros(n + 1, dtype=bool)
            on[0] = True
            on[np.asarray(accepted, dtype=np.intp) + 1] = True
            reached = np.flatnonzero(on[verified.parents.astype(np.intp) + 1])
            step = Trials(verified, reached, on[reached + 1])
            if fresh is not None:  # the offered draft extends the verified prefix: one batch
                step = Trials(
                    fresh.draft,
                    np.concatenate([step.nodes, fresh.nodes]),
                    np.concatenate([step.hit, fresh.hit]),
                )
        # older drafts' trials first, then this step's in one call (the change test weighs
        # a call's evidence together)
        for trials in [*older, step]:
            d, nodes = trials.draft, trials.nodes
            self.stats.record_trials(d.q[nodes], d.sources[nodes], d.depth[nodes], trials.hit)
        taught = bool(older) or fresh is not None
        if self.last.probing:
            # a probe accepted down to its deepest node: confirm with a bigger one next step
            full = n > 0 and len(accepted) == verified.max_depth
            self._escalate = full
            self._probe_size = (
                min(2 * self._probe_size, self.config.budget) if full else self.config.probe_nodes
            )
        elif not self.last.drafting and not taught:
            self._declined += 1  # a declined step that taught nothing: counts toward a probe


class FixedPolicy:
    """Verify every drafted node: fixed K (depth), budget and branching; or no drafts."""

    def __init__(self, k: int, budget: int | None = None, branches: int = 1) -> None:
        self._k = max(0, k)
        self._budget = self._k if budget is None else max(0, budget)
        self._branches = max(1, branches)
        self._steps = 0
        self._accepted = 0

    budget = property(lambda self: self._budget)
    max_depth = property(lambda self: self._k)
    branches = property(lambda self: self._branches)

    @property
    def alpha(self) -> float:
        return self._accepted / self._steps if self._steps else 0.0

    def choose(self, draft: Draft) -> int:
        return min(len(draft), self._budget)

    def observe(self, verified: Draft, accepted: list[int], seconds: float, bonus: int | None = None) -> None:
        self._steps += 1
        self._accepted += len(accepted)


@dataclass
class SimResult:
    """What a replay produced: totals and the n chosen at each step."""

    tokens: int = 0
    seconds: float = 0.0
    chosen: list[int] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def simulate(
    controller: Controller,
    trace: Iterable[tuple[Draft, Sequence[int]]],
    cost: Callable[[int], float],
    *,
    bonus: bool = True,
) -> SimResult:
    """Replay a trace with no model: each entry is a draft and the path of its nodes the
    model would accept if all were verified (recordable from real runs by verifying whole
    drafts). `cost(size)` gives the seconds of a batch; `bonus=False` hides the bonus
    token from the controller, as an engine that does not pass it would.
    """
    result = SimResult()
    for draft, path in trace:
        n = controller.choose(draft)
        # path indices increase (parents precede children): the accepted part is the
        # part of the true path that was verified
        m = 0
        while m < len(path) and path[m] < n:
            m += 1
        # the model's next token: the true path's next node, or a token no node has
        token = int(draft.tokens[path[m]]) if m < len(path) else -1
        seconds = cost(n + 1)
        controller.observe(draft.prefix(n), list(path[:m]), seconds, token if bonus else None)
        # trace entries are independent drafts, not one token stream: later entries' tokens
        # say nothing about this draft, so nothing stays pending past its own bonus token
        controller.shadow.forget()
        result.tokens += m + 1
        result.seconds += seconds
        result.chosen.append(n)
    return result

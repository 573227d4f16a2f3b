"""`AcceptanceStats`: what verification taught about the draft sources (rolling alpha,
acceptance by depth and by source, and the calibration of each source's own q)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque

import numpy as np
import numpy.typing as npt

from lookahead.core.control.config import ControlConfig
from lookahead.core.draft import SOURCE_NAMES

Floats = npt.NDArray[np.float64]


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
# Depths a cell tells apart: a draft's first node, and the nodes past it. Under sampling the
# first node is where a copy is taken up or not (accepted at about the model's probability
# of that token); a node past it follows a copy the model already went along with. Pooled,
# the deep nodes' hits made first nodes look surer than they were, and a long chain is only
# as good as its first link. Traced on llama.vim's requests (16 new lines, 2-vCPU AMD
# EPYC): pooled, first nodes were accepted at 0.82 of their q' and the third and deeper at
# 0.91-0.98; split, first nodes at 0.93, and the drafting steps ran at 1.27x plain decoding's
# speed (1.19x pooled). The offline replays of code edits, reports and an editor's sampled
# requests drafted as well or better. A third bucket (the second node alone) replayed a
# little worse: thinner evidence per cell.
N_DEPTHS = 2
CELLS_PER_SOURCE = N_DEPTHS * N_BINS
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
    root); it succeeds when it is accepted. Trials are binned by (source, depth, q bin) (the
    depth bucket: a draft's first node, or a node past it: `N_DEPTHS`); a cell's
    decayed counts (hits h, trials n) give q' = (h + c q) / (n + c), the mean of a Beta
    posterior whose prior, worth c trials, is centred on the node's raw q.
    """

    def __init__(self, config: ControlConfig) -> None:
        self.config = config
        # decayed hits and trials per cell, flat: cell = (source * N_DEPTHS + depth bucket)
        # * N_BINS + q bin
        self._hits = np.zeros(max(len(SOURCE_NAMES), 8) * CELLS_PER_SOURCE)
        self._trials = np.zeros_like(self._hits)
        # per cell: the two CUSUM statistics of the change test (see `record_trials`), in
        # nats: evidence that the rate rose (a copy began) and that it fell (it ended)
        self._cusum_rise = np.zeros_like(self._hits)
        self._cusum_fall = np.zeros_like(self._hits)
        # per source: decayed hits and the sum of the raw q of the same trials (the hits the
        # source promised); their ratio scales the prior of every cell of that source
        self._src_hits = np.zeros(len(self._hits) // CELLS_PER_SOURCE)
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
        self,
        q: npt.NDArray[np.float32],
        sources: npt.NDArray[np.int8],
        depth: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.intp]:
        """Flat calibration cell of each node (maybe past the arrays: a source never tried)."""
        bucket = np.minimum(depth.astype(np.intp), N_DEPTHS) - 1
        return (sources.astype(np.intp) * N_DEPTHS + bucket) * N_BINS + np.searchsorted(
            Q_EDGES, q, side="right"
        )

    def _grow(self, top_source: int) -> None:
        """Room for the cells of sources up to `top_source` (one past those seen so far)."""
        more = top_source + 1 - len(self._src_hits)
        if more > 0:
            grow = more * CELLS_PER_SOURCE
            self._hits = np.concatenate([self._hits, np.zeros(grow)])
            self._trials = np.concatenate([self._trials, np.zeros(grow)])
            self._cusum_rise = np.concatenate([self._cusum_rise, np.zeros(grow)])
            self._cusum_fall = np.concatenate([self._cusum_fall, np.zeros(grow)])
            self._src_hits = np.concatenate([self._src_hits, np.zeros(more)])
            self._src_promised = np.concatenate([self._src_promised, np.zeros(more)])

    def calibrated(
        self,
        q: npt.NDArray[np.float32],
        sources: npt.NDArray[np.int8],
        depth: npt.NDArray[np.int32],
    ) -> Floats:
        """q' of each node: its source's recent record at its level of confidence and depth.

        Two levels: a cell (source, depth bucket, q bin) with trials follows its own hit
        rate; its prior, worth `prior_trials` trials, is the raw q scaled by how well the
        source as a whole kept its promises lately (hits / sum of q over its recent trials,
        all bins pooled). A source that claims 0.9 and is right a third of the time is then
        doubted in every bin at once, not bin by bin. The trust is at most 1 (a cell learns
        on its own that its source is too modest), fades back to 1 with the rest of the
        evidence, and returns to 1 at once when a cell of its source changes regime. A source never tried
        has no evidence: q' is its own q (capped below 1 like every prior).
        """
        src = sources.astype(np.intp)
        cells = self.cells(q, sources, depth)
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
            cell = (s * N_DEPTHS + min(d, N_DEPTHS) - 1) * N_BINS + bisect_right(_Q_EDGES_LIST, x)
            counts = per_cell.setdefault(cell, [0, 0])
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
                s = i // CELLS_PER_SOURCE  # the source's record is from the old regime: drop it
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
        hits = self._hits.reshape(-1, CELLS_PER_SOURCE).sum(axis=1)
        trials = self._trials.reshape(-1, CELLS_PER_SOURCE).sum(axis=1)
        out = {}
        for s in np.flatnonzero(trials > 1e-9):
            name = SOURCE_NAMES[s] if s < len(SOURCE_NAMES) else f"source{s}"
            out[name] = float(hits[s] / trials[s])
        return out

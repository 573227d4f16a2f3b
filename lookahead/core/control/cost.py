"""The verify cost t(size) of one batch on this machine: seeded by calibration, then learned
from every step's measured time (its only job: measuring, never deciding)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]

# t(size) / t(1) for one decode of `size` tokens, measured for the default model on a
# 2-vCPU machine: the shape assumed until this machine's own costs are measured.
_SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
_RELATIVE = (1.0, 1.8, 2.4, 4.0, 6.0, 10.5, 15.3, 19.0, 30.3, 39.6)
DEFAULT_SHAPE: dict[int, float] = dict(zip(_SIZES, _RELATIVE, strict=True))
# Seconds for t(1) before anything is measured. Only ratios of costs decide n, so this
# scale matters for reporting, never for the choice.
DEFAULT_T1 = 0.02


def _median(values: deque[float]) -> float:
    """The median, by hand: np.median costs ~0.1 ms, and this runs every step."""
    r = sorted(values)
    mid = len(r) // 2
    return r[mid] if len(r) % 2 else 0.5 * (r[mid - 1] + r[mid])


class PriorShape:
    """The assumed shape t(size) / t(1) where nothing is measured: interpolated between its
    sizes, extrapolated linearly past the last one."""

    def __init__(self, shape: Mapping[int, float]) -> None:
        if not shape or min(shape) < 1 or min(shape.values()) <= 0:
            raise ValueError("prior needs positive costs at sizes >= 1")
        self.shape = dict(shape)
        self.sizes = np.array(sorted(shape), dtype=np.float64)
        self.costs = np.array([shape[k] for k in sorted(shape)], dtype=np.float64)

    def relative(self, sizes: Floats) -> Floats:
        """The shape at `sizes`, relative to t(1)."""
        ks, vs = self.sizes, self.costs
        out = np.interp(sizes, ks, vs)
        if len(ks) > 1:
            slope = max((vs[-1] - vs[-2]) / (ks[-1] - ks[-2]), 0.0)
            out = np.where(sizes > ks[-1], vs[-1] + slope * (sizes - ks[-1]), out)
        return out / float(np.interp(1.0, ks, vs))

    def table(self, length: int) -> Floats:
        """`relative` at sizes 0..length - 1 (size 0 priced as size 1)."""
        return self.relative(np.maximum(np.arange(length, dtype=np.float64), 1))


class ContextSlope:
    """Extra fraction of t(size) per KV cell in use, per size: measured at a few sizes,
    interpolated between them and held beyond. t(size) at `cells` cells is
    t(size) on an empty cache x (1 + slope(size) x cells)."""

    def __init__(self, slope: Mapping[int, float] | None) -> None:
        self.by_size = {int(k): max(0.0, float(v)) for k, v in (slope or {}).items() if k >= 1}
        ks = sorted(self.by_size)
        self._sizes = np.array(ks, dtype=np.float64)
        self._values = np.array([self.by_size[k] for k in ks], dtype=np.float64)
        # slope(size) for size 0..len - 1, as an array and as plain floats (priced every
        # step, so interpolated once per length, not per step)
        self._table = np.zeros(0)
        self._list: list[float] = []

    def __bool__(self) -> bool:
        return bool(self.by_size)

    def table(self, length: int) -> Floats:
        """slope(size) for size 0..length - 1 at least."""
        if len(self._table) < length:
            sizes = np.arange(max(length, 2 * len(self._table)), dtype=np.float64)
            self._table = np.interp(sizes, self._sizes, self._values) if self.by_size else np.zeros(len(sizes))
            self._list = self._table.tolist()
        return self._table

    def factor(self, sizes: npt.NDArray[np.int_], cells: int) -> Floats:
        """1 + slope(size) x cells for each of `sizes`."""
        if cells <= 0 or not self.by_size:
            return np.ones(len(sizes))
        return 1.0 + np.interp(sizes, self._sizes, self._values) * cells

    def factor_at(self, size: int, cells: int) -> float:
        """`factor` for one batch size (plain floats: called every step)."""
        if cells <= 0 or not self.by_size:
            return 1.0
        if size >= len(self._list):
            self.table(size + 1)
        return 1.0 + self._list[size] * cells


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
        self.prior = PriorShape(DEFAULT_SHAPE if prior is None else prior)
        self.context_slope = ContextSlope(slope)
        self.slope = self.context_slope.by_size  # size -> extra fraction per cell
        self.cells = cells  # KV cells in use now (None: always priced on an empty cache)
        self.rate = rate
        # What is learned, per batch size (index = size, 0..128 to start with, grown on
        # demand): seconds on an empty cache over `scale` (valid where counted), and how
        # many observations (0 = unmeasured).
        self._est = np.zeros(129, dtype=np.float64)
        self._count = np.zeros(129, dtype=np.float64)
        self._prior_table = self.prior.table(len(self._est))  # the prior shape, same indexing
        # The calibrated curve, fixed: what `scale` is measured against. Empty until the
        # calibration below is seeded (growing before then has nothing to extend).
        self._reference = np.zeros(0)
        for size, seconds in (calibration or {}).items():
            if size >= 1 and math.isfinite(seconds) and seconds > 0:
                self._grow(size)
                self._est[size] = seconds
                self._count[size] = seed_weight
        self.scale = 1.0
        self._ratios: deque[float] = deque(maxlen=16)
        # Batches of 2 or more tokens against the curve at `scale`, learned the same way from
        # their own last 16 ratios: calibration prices them at an empty cache and one more
        # depth, and deep in a long prompt they ran 11% over it while one-token steps did not
        # (an editor's 1,500-2,000-token requests on a 2-vCPU EPYC). Each size is seen too
        # rarely for its own estimate to catch up within a request; one factor for all does.
        self.batch = 1.0
        self._batch_ratios: deque[float] = deque(maxlen=16)
        self._reference = self._build(len(self._est) - 1, scale=1.0)
        # Derived tables, rebuilt when stale: t on an empty cache (None: an observation
        # since), and the last table priced at a number of cells, with that number.
        self._table: Floats | None = None
        self._context_table: tuple[int, Floats] | None = None

    def _grow(self, size: int) -> None:
        """Room for batch `size` in the per-size arrays (doubling)."""
        old = len(self._est)
        if size >= old:
            cap = max(size + 1, 2 * old)
            self._est = np.concatenate([self._est, np.zeros(cap - old)])
            self._count = np.concatenate([self._count, np.zeros(cap - old)])
            self._prior_table = self.prior.table(cap)
            self._table = None
            ref = self._reference
            if len(ref):  # past the calibrated sizes: the same extrapolation
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
        if size >= 2:
            self._batch_ratios.append(min(max(ratio / self.scale, 0.5 * self.batch), 2.0 * self.batch))
            if len(self._batch_ratios) >= 3:
                self.batch = _median(self._batch_ratios)
            ratio /= self.batch
            seconds /= self.batch
        self._ratios.append(min(max(ratio, 0.5 * self.scale), 2.0 * self.scale))
        if len(self._ratios) >= 3:
            self.scale = _median(self._ratios)
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
            t = self._table * (1.0 + self.context_slope.table(len(self._table))[: len(self._table)] * cells)
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
        return self.context_slope.factor(sizes, cells)

    def factor_at(self, size: int, cells: int) -> float:
        """`factor` for one batch size (plain floats: called every step)."""
        return self.context_slope.factor_at(size, cells)

    def spawn(self, calibration: Mapping[int, float] | None = None, *, context: bool = True) -> CostModel:
        """A new model with this one's prior, context slope and cells source (unless not
        `context`: costs on an empty cache), seeded with `calibration`."""
        if not context:
            return CostModel(calibration, prior=self.prior.shape, rate=self.rate)
        return CostModel(calibration, prior=self.prior.shape, rate=self.rate, slope=self.slope, cells=self.cells)

    def seconds(self, size: int) -> float:
        """Estimated seconds to verify a batch of `size` tokens."""
        return float(self.table(size)[size])

    @property
    def measured(self) -> dict[int, float]:
        """Sizes with observations (or calibration) and their current estimates, for an
        empty cache."""
        return {
            int(k): float(self._est[k] * self.scale * (self.batch if k >= 2 else 1.0))
            for k in np.flatnonzero(self._count > 0)
        }

    def _build(self, max_size: int, scale: float | None = None) -> Floats:
        """t on an empty cache for sizes 0..max_size: the prior shape through the measured
        ratios, times `scale` (default: the current one, and `batch` for sizes of 2 or more)."""
        prior = self._prior_table[: max_size + 1]
        known = np.flatnonzero(self._count[: max_size + 1] > 0)
        if len(known) == 0:
            t = prior * DEFAULT_T1
        else:
            # t(n) = prior(n) * r(n), r piecewise linear through measured / prior
            ratio = self._est[known] / prior[known]
            t = prior * np.interp(np.arange(max_size + 1), known, ratio)
        t *= self.scale if scale is None else scale
        if scale is None:
            t[2:] *= self.batch
        t[0] = 0.0
        t.flags.writeable = False  # shared with callers until the next observation
        return t

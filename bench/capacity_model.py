"""How many replicas serve N developers at a p95 time-to-suggestion target: the formula.

One replica (`serve --parallel 1`) answers one request at a time, so it is a single-server
queue. A request of kind c takes S_c = P_c / r + D_c * t(1) / g_c seconds: its P_c prompt
tokens at the prefill rate r, then D_c tokens at t(1) seconds each, sped up g_c times by
drafts. Time to suggestion T = W (queueing) + S.

With developers sending requests independently (Poisson arrivals, rate lam per replica) and
a mix of kinds (shares q_c), the queue is M/G/1:

    rho    = lam * E[S]                                   (must stay below 1)
    E[W]   = lam * E[S^2] / (2 * (1 - rho))               (Pollaczek-Khinchine)
    P(W>t) ~ rho * exp(-t * rho / E[W])                   (exact for exponential service)
    W95    = E[W] / rho * ln(rho / 0.05)   (0 when rho <= 0.05)
    T95    ~ W95 + S95                                    (S95: the mix's 95th percentile)

A consistent hash gives each replica its tenants, not an equal share of requests: the
busiest replica carries h times the mean (h >= 1, measured on HAProxy's ring), so with N
developers sending lam_dev requests/s each over R replicas, lam = h * N * lam_dev / R.
The fewest replicas: the smallest R with T95 <= target. When S95 alone exceeds the target,
no count of replicas helps: a faster replica (more cores) or shorter prompts must.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

P = 0.95


@dataclass(frozen=True)
class Kind:
    """One kind of request in the mix: its share and its measured service seconds."""

    name: str
    share: float
    seconds: float


def moments(mix: Sequence[Kind]) -> tuple[float, float]:
    """E[S] and E[S^2] of the mix (shares normalised to 1)."""
    total = sum(k.share for k in mix)
    if total <= 0 or any(k.share < 0 or k.seconds <= 0 for k in mix):
        raise ValueError("a mix needs positive shares and positive service times")
    mean = sum(k.share * k.seconds for k in mix) / total
    square = sum(k.share * k.seconds**2 for k in mix) / total
    return mean, square


def service_quantile(mix: Sequence[Kind], p: float = P) -> float:
    """The p-quantile of S over the mix (kinds sorted by their seconds)."""
    total = sum(k.share for k in mix)
    seen = 0.0
    for kind in sorted(mix, key=lambda k: k.seconds):
        seen += kind.share / total
        if seen >= p - 1e-12:
            return kind.seconds
    return max(k.seconds for k in mix)


def wait_quantile(lam: float, mix: Sequence[Kind], p: float = P) -> float:
    """The p-quantile of the queueing delay at arrival rate `lam` (inf when saturated)."""
    mean, square = moments(mix)
    rho = lam * mean
    if rho >= 1:
        return math.inf
    if rho <= 1 - p:
        return 0.0
    mean_wait = lam * square / (2 * (1 - rho))
    return mean_wait / rho * math.log(rho / (1 - p))


def time_to_suggestion(lam: float, mix: Sequence[Kind], p: float = P) -> float:
    """T_p ~ W_p + S_p at arrival rate `lam` on one replica."""
    return wait_quantile(lam, mix, p) + service_quantile(mix, p)


def replicas_needed(
    developers: int, rate_per_dev: float, mix: Sequence[Kind], target: float, imbalance: float = 1.0,
    p: float = P, most: int = 10_000,
) -> int | None:
    """The fewest replicas keeping the busiest one's T_p within `target` seconds; None when
    one request alone takes longer than the target (more replicas cannot help)."""
    if developers < 0 or rate_per_dev < 0 or imbalance < 1 or target <= 0:
        raise ValueError("developers and rate must be >= 0, imbalance >= 1, target > 0")
    if service_quantile(mix, p) > target:
        return None
    for r in range(1, most + 1):
        lam = imbalance * developers * rate_per_dev / r
        if time_to_suggestion(lam, mix, p) <= target:
            return r
    return None

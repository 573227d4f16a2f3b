"""One node budget for a whole batched step: which requests' draft nodes to verify.

With several requests in one decode, the step costs t(B + N) for B roots and N draft nodes
and yields B + sum of P'(i) expected tokens (P'(i): a node's calibrated probability of
being accepted, see `lookahead.core.control`). Draft nodes of every request compete for the same
batch, so they are ranked together: a greedy merge takes, at each turn, the best next node
of any request (nodes of one request are taken in its draft's order, so each request
verifies a prefix of its draft: a valid tree). Along that ranking the step's expected
tokens per second is computed for every count, and the best count is kept only if it beats
verifying the roots alone by `min_gain`. So a prose request with poor acceptance gets no
nodes, a copyable one gets a long draft, and adding a request never makes a step slower
per token than decoding its roots alone would be.

Fair share: each request may take at most its share of the node budget (an equal split,
with what the others do not want handed on), so one long copyable request cannot starve
the rest of their drafts.

The promise to each request (`slack`): with a slack s, the count must leave every request
at least (1 - s) of its expected pace without drafts, (1 + E_k) / t(B + N) >=
(1 - s) / t(B) for each request k, E_k its own expected accepted tokens. Three modes:

- `slack=0.1` (the service's default): no request's expected pace drops more than 10%
  below its pace without drafts, so a prose request pays at most a tenth of its speed for
  its neighbours' copyable drafts, and they still get short ones beside it.
- `slack=0` (`--fair`): no request's pace drops at all. Where a batch of n tokens costs
  much more than one token (on a 2-vCPU EPYC, t(8) is 1.8x t(4)), that means no drafts at
  all while any request of the batch has none worth verifying.
- `slack=None` (`--batch-total`): the batch's total tokens/s, whoever pays for it; a request
  with nothing to draft waits for its neighbours' draft nodes and still gets one token.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from lookahead.core.control import CostModel
from lookahead.core.policy import Offer
from lookahead.errors import ConfigError

Floats = npt.NDArray[np.float64]


def fair_shares(wants: Sequence[int], budget: int) -> list[int]:
    """Water-filling: nobody gets more than they want, the rest is split equally."""
    shares = [0] * len(wants)
    left = max(0, budget)
    open_ = [i for i, w in enumerate(wants) if w > 0]
    while left > 0 and open_:
        each = max(1, left // len(open_))
        nxt = []
        for i in open_:
            take = min(each, wants[i] - shares[i], left)
            shares[i] += take
            left -= take
            if shares[i] < wants[i]:
                nxt.append(i)
            if left == 0:
                break
        open_ = nxt
    return shares


# the service's default promise: no request's expected pace more than 10% below its pace
# without drafts (see the module's docstring)
DEFAULT_SLACK = 0.1


def check_slack(slack: float | None) -> float | None:
    """`slack` if it is a promise allocate can keep (None, or 0 <= slack < 1); else ConfigError."""
    if slack is not None and not 0.0 <= slack < 1.0:
        raise ConfigError(f"the fairness slack must be in [0, 1), got {slack}")
    return slack


def allocate(
    offers: Sequence[Offer], cost: CostModel, budget: int, min_gain: float = 1.0, slack: float | None = None
) -> list[int]:
    """Nodes to verify per offer (a prefix count each), for one batch of len(offers) roots.

    `budget`: most draft nodes in the whole batch. The result never holds more than an
    offer's share (see `fair_shares`). With `slack` s, no request's expected pace falls
    below (1 - s) of what it would be without the ranked nodes; None: the batch's total
    tokens/s alone (see the module's docstring).
    """
    roots = len(offers)
    if roots == 0:
        return []
    shares = fair_shares([o.want for o in offers], budget)
    counts = [min(o.forced, s) for o, s in zip(offers, shares, strict=True)]
    forced_gain = sum(float(np.sum(o.gains[:c])) for o, c in zip(offers, counts, strict=True))
    base_nodes = sum(counts)
    # the ranking: a heap of each offer's next node by gain (ties: earlier offer first)
    heap: list[tuple[float, int]] = []
    for k, o in enumerate(offers):
        if counts[k] < min(len(o.gains), shares[k]):
            heapq.heappush(heap, (-float(o.gains[counts[k]]), k))
    order: list[int] = []
    gains: list[float] = []
    taken = list(counts)
    while heap:
        g, k = heapq.heappop(heap)
        order.append(k)
        gains.append(-g)
        taken[k] += 1
        if taken[k] < min(len(offers[k].gains), shares[k]):
            heapq.heappush(heap, (-float(offers[k].gains[taken[k]]), k))
    if not order:
        return counts
    t = cost.table(roots + base_nodes + len(order))
    n = np.arange(len(order) + 1)
    expected = roots + forced_gain + np.concatenate([[0.0], np.cumsum(gains)])
    rate = expected / t[roots + base_nodes + n]
    if slack is not None:
        kept = _paces_kept(offers, counts, order, gains, t[roots + base_nodes + n], slack)
        rate = np.where(kept, rate, -1.0)
    best = int(np.argmax(rate))
    if best == 0 or rate[best] < min_gain * rate[0]:
        return counts
    for k in order[:best]:
        counts[k] += 1
    return counts


def _paces_kept(
    offers: Sequence[Offer], counts: list[int], order: list[int], gains: list[float], t: Floats, slack: float
) -> npt.NDArray[np.bool_]:
    """For each count n of ranked nodes taken (0..len(order)): whether every request's
    expected tokens per second, (1 + its gains) / t[n], is at least (1 - slack) of its pace
    at n = 0 (n = 0 itself always is)."""
    own = np.array([1.0 + float(np.sum(o.gains[:c])) for o, c in zip(offers, counts, strict=True)])
    # row n: each request's expected tokens with the first n ranked nodes taken
    added = np.zeros((len(order) + 1, len(offers)))
    added[np.arange(1, len(order) + 1), order] = gains
    tokens = own + np.cumsum(added, axis=0)
    kept = np.all(tokens / t[:, None] >= (1.0 - slack) * own / t[0], axis=1)
    kept[0] = True
    return kept

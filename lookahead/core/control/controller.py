"""`Controller`: decides, once per step, how many draft nodes to verify (adaptive K).

It keeps no measurements of its own: the cost curve is a `CostModel`, what was accepted an
`AcceptanceStats`, the declined drafts' free trials a `ShadowScorer`; this module weighs
them (the formula is in the package docstring) and feeds each step's outcome back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lookahead.core.control.acceptance import AcceptanceStats
from lookahead.core.control.config import ControlConfig
from lookahead.core.control.cost import CostModel
from lookahead.core.control.shadow import ShadowScorer, Trials
from lookahead.core.draft import Draft
from lookahead.core.policy import Offer

Floats = npt.NDArray[np.float64]

# A step that reached no node (still recorded: a call per step, empty or not).
_NO_TRIALS = Trials(Draft.empty(), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=bool))


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
        q = self.stats.calibrated(draft.q[:n], draft.sources[:n], draft.depth[:n])
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

    def offer(self, draft: Draft) -> Offer:
        """This step's nodes for a batch, each worth its P': `choose` runs too, for its
        shadow scoring and decision state (as when the request runs alone), but the batch
        decides how many are verified."""
        self.choose(draft)
        n = self.limit(draft)
        return Offer(np.diff(self.expected_tokens(draft, n)))

    def for_batch(self) -> Controller:
        """A controller for one request in a batch: the shared acceptance statistics (what
        is learned carries over between requests, as with one request at a time) but its own
        shadow scorer and decision state, and a private cost model: a request's own share of
        a batch says nothing about t(n), which the batch observes once for its whole size."""
        ctl = Controller(self.config, CostModel(self.cost.measured or None))
        ctl.stats = self.stats
        return ctl

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

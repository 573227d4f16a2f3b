"""`FixedPolicy`: the non-adaptive policy (verify whatever was drafted, a fixed K), for
baselines and tests; `ForcedPolicy`, what it shares with any policy that decides each step's
nodes outright (the bench's oracle): no estimate of their worth, no state per request."""

from __future__ import annotations

from typing import Self

import numpy as np

from lookahead.core.draft import Draft
from lookahead.core.policy import Offer


class ForcedPolicy:
    """A policy whose `choose` is final: in a batch its nodes are forced (verified whatever
    the shared budget says they are worth), and `alpha` counts accepted tokens per step.
    Subclasses give `choose`, `budget`, `max_depth` and `branches`."""

    def __init__(self) -> None:
        self._steps = 0
        self._accepted = 0

    @property
    def alpha(self) -> float:
        return self._accepted / self._steps if self._steps else 0.0

    def begin(self) -> None:
        """Nothing per request: the counts behind `alpha` run on."""

    def could_pay(self, nodes: int) -> bool:
        """Always: whatever `choose` takes is verified."""
        return True

    def choose(self, draft: Draft) -> int:
        raise NotImplementedError

    def offer(self, draft: Draft) -> Offer:
        """Every node `choose` takes, forced."""
        n = self.choose(draft)
        return Offer(np.ones(n), forced=n)

    def for_batch(self) -> Self:
        """Itself: it keeps no decision state to separate."""
        return self

    def observe(self, verified: Draft, accepted: list[int], seconds: float, bonus: int | None = None) -> None:
        self._steps += 1
        self._accepted += len(accepted)


class FixedPolicy(ForcedPolicy):
    """Verify every drafted node: fixed K (depth), budget and branching; or no drafts."""

    def __init__(self, k: int, budget: int | None = None, branches: int = 1) -> None:
        super().__init__()
        self._k = max(0, k)
        self._budget = self._k if budget is None else max(0, budget)
        self._branches = max(1, branches)

    budget = property(lambda self: self._budget)
    max_depth = property(lambda self: self._k)
    branches = property(lambda self: self._branches)

    def choose(self, draft: Draft) -> int:
        return min(len(draft), self._budget)

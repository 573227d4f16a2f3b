"""The `Policy` protocol: what the engine and the batch ask of whoever decides how much of
each draft to verify (the adaptive `Controller`, a `FixedPolicy`, the bench's oracle).

Both loops speak to a policy through this protocol alone, never through its class: a new
policy implements these members and works alone and in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lookahead.core.draft import Draft

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Offer:
    """One request's candidate nodes for a batched step.

    `gains[i]`: expected accepted tokens node i adds (its P'), in draft order, already cut
    to what the request may verify (room, depth, branches). `forced`: nodes verified
    whatever they are worth (a fixed-K policy), taken before the ranked ones.
    """

    gains: Floats
    forced: int = 0

    @property
    def want(self) -> int:
        return max(len(self.gains), self.forced)


class Policy(Protocol):
    """Chooses how much of each draft to verify (the adaptive controller, or a fixed K)."""

    @property
    def budget(self) -> int: ...  # nodes to ask the drafter for

    @property
    def max_depth(self) -> int: ...

    @property
    def branches(self) -> int: ...

    @property
    def alpha(self) -> float: ...

    def begin(self) -> None:
        """A new request starts (what was learned may carry over; per-request state not)."""
        ...

    def could_pay(self, nodes: int) -> bool:
        """Whether verifying at most `nodes` (>= 1) draft nodes could ever be chosen; on a no
        the engine stops drafting for the rest of the request."""
        ...

    def choose(self, draft: Draft) -> int:
        """Leading draft nodes to verify this step (0 = plain decoding), one request alone."""
        ...

    def offer(self, draft: Draft) -> Offer:
        """This step's candidate nodes for a batch, which allocates the shared budget."""
        ...

    def for_batch(self) -> Policy:
        """The policy one request of a batch runs with (its own decision state)."""
        ...

    def observe(self, verified: Draft, accepted: list[int], seconds: float, bonus: int | None = None) -> None:
        """Learn from one verified step."""
        ...

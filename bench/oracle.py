"""The ceiling on this machine: drafts that are always right, and a policy that knows.

Greedy decoding accepts a drafted token exactly when it is the model's own next token, so
once a prompt's plain output is known (from the plain run of the same prompt), a drafter
that proposes that output is right at every token: `OracleDrafter`. Verified at a fixed K
it shows what a perfect drafter buys at that K; with `OraclePolicy` (which knows how many
drafted tokens the model will accept and verifies the prefix best for this step on the
calibrated cost curve) it shows the best any drafter and controller could do here.

`OraclePolicy` also works over the real drafter's drafts: it then bounds what a better
controller could make of the same drafts (bench/replay.py's `--oracle`, live).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lookahead.core.control import ForcedPolicy
from lookahead.core.draft import SOURCE_PREDICTION, Draft

NextToken = Callable[[int], int | None]  # the output token `offset` places ahead, or None if unknown


def best_prefix(draft: Draft, limit: int, next_token: NextToken, cost: Callable[[int], float]) -> int:
    """Draft nodes to verify this step (0..limit) for the most tokens per second, knowing
    the right tokens: verifying the first n nodes costs t(n + 1) and yields the deepest
    right node among them, plus the bonus token."""
    ok = np.zeros(limit, dtype=bool)  # node i is on the output's path
    best, best_rate = 0, 1.0 / cost(1)
    deepest = 0  # accepted tokens if the first i + 1 nodes are verified
    for i in range(limit):
        parent = int(draft.parents[i])
        ok[i] = (parent < 0 or bool(ok[parent])) and int(draft.tokens[i]) == next_token(int(draft.depth[i]) - 1)
        if ok[i]:
            deepest = max(deepest, int(draft.depth[i]))
        rate = (deepest + 1) / cost(i + 2)
        if rate > best_rate:
            best, best_rate = i + 1, rate
    return best


class OracleDrafter:
    """Proposes the known output (`truth`, the plain run's tokens) from where generation is.

    The engine's first observe() is the prompt, then each step's new tokens. If the output
    leaves the truth (a batched kernel flipped a near-tie), it proposes nothing from then
    on: the rest is plain decoding, and `left_at` says where.
    """

    def __init__(self, truth: Sequence[int]) -> None:
        self.truth = list(truth)
        self.out: list[int] = []
        self._prompt_seen = False
        self.left_at: int | None = None

    def observe(self, tokens: Sequence[int]) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for tok in tokens:
            i = len(self.out)
            if self.left_at is None and (i >= len(self.truth) or self.truth[i] != int(tok)):
                self.left_at = i
            self.out.append(int(tok))

    def next_token(self, offset: int) -> int | None:
        """The truth `offset` tokens past the output so far (None: unknown or off track)."""
        i = len(self.out) + offset
        return self.truth[i] if self.left_at is None and i < len(self.truth) else None

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        if self.left_at is not None:
            return Draft.empty()
        start = len(self.out)
        return Draft.chain(self.truth[start : start + min(budget, max_depth)], source=SOURCE_PREDICTION)


class OraclePolicy(ForcedPolicy):
    """Verifies, each step, the draft prefix best on the cost curve given the right tokens
    (the engine's Policy protocol). `next_token` is where it learns them; in a batch its
    choice is forced (the oracle knows its worth better than any estimate)."""

    def __init__(
        self, next_token: NextToken, cost: Callable[[int], float], k_max: int = 64, branches: int = 1
    ) -> None:
        super().__init__()
        self.next_token, self.cost = next_token, cost
        self._k_max, self._branches = k_max, branches

    @property
    def budget(self) -> int:
        return self._k_max

    @property
    def max_depth(self) -> int:
        return self._k_max

    @property
    def branches(self) -> int:
        return self._branches

    def choose(self, draft: Draft) -> int:
        return best_prefix(draft, min(len(draft), self._k_max), self.next_token, self.cost)

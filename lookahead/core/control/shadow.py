"""`ShadowScorer`: free trials from the draft nodes that were not verified, scored against
the tokens the model then writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from lookahead.core.draft import Draft


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

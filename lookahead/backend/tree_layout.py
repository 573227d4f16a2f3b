"""Where each draft node goes in a verify batch, and which sequence ids it carries.

Pure numpy: the llama.cpp backend (`lookahead/backend/llama.py`, whose module docstring
draws the layout) fills its batch from it and commits by it; the tests check it on random
trees without a model.

Batch entries follow a depth-first preorder (children best-first, i.e. in draft index
order), and leaves numbered left to right get seq ids 0..L-1, so the leaves below any node
form a range [lo, hi] (a node carries the ids of every branch through it). Cells are taken
in batch order, so preorder is also cache order: for an accepted node x, every rejected
cell before x belongs to a leaf left of x (seq < lo), and every cell after x to a leaf at
or right of lo. That is what lets commit() free only cells that come after the kept ones.
"""

from __future__ import annotations

import numpy as np

from lookahead.core.draft import Draft
from lookahead.errors import BackendError


class TreeLayout:
    """The batch layout of one draft (entry 0 is the root, entry e >= 1 is node order[e - 1])."""

    def __init__(self, draft: Draft, max_leaves: int) -> None:
        n = len(draft)
        kids: list[list[int]] = [[] for _ in range(n + 1)]
        for i in range(n):
            kids[int(draft.parents[i]) + 1].append(i)
        pre = np.zeros(n, dtype=np.int32)  # node -> preorder index
        order: list[int] = []
        stack = list(reversed(kids[0]))
        while stack:
            node = stack.pop()
            pre[node] = len(order)
            order.append(node)
            stack.extend(reversed(kids[node + 1]))
        lo = np.zeros(n, dtype=np.int32)
        hi = np.zeros(n, dtype=np.int32)
        leaf = 0
        for node in order:
            if not kids[node + 1]:
                lo[node] = hi[node] = leaf
                leaf += 1
        for node in reversed(order):  # children before parents
            if kids[node + 1]:
                lo[node] = lo[kids[node + 1][0]]
                hi[node] = hi[kids[node + 1][-1]]
        if leaf > max_leaves:
            raise BackendError(f"a draft with {leaf} leaves exceeds max_branches {max_leaves}")
        self.n_leaves = leaf
        self.order = order  # batch entry - 1 -> node
        self.pre = pre
        self.leaf_range = {i: (int(lo[i]), int(hi[i])) for i in range(n)}  # node -> seq ids [lo, hi]
        self.depth = draft.depth
        self.tokens = draft.tokens
        # row r (0 = root, i + 1 = node i) -> batch entry
        self.rows = np.concatenate([[0], pre + 1]).astype(np.int32)

    def parked_before(self, x: int, m: int) -> int:
        """Rejected cells before x in cache order (x is the m-th node of the kept path)."""
        return int(self.pre[x]) - (m - 1)

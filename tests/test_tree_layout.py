"""The batch layout of a draft tree (lookahead/backend/tree_layout.py) on random trees.

These are the properties the llama.cpp backend's commit relies on (see the module
docstring of lookahead/backend/llama.py); no model is needed to check them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.backend.tree_layout import TreeLayout
from lookahead.core.draft import Draft
from lookahead.errors import BackendError


@st.composite
def trees(draw: st.DrawFn, max_nodes: int = 40) -> Draft:
    """Any tree: node i hangs below the root or any earlier node."""
    n = draw(st.integers(0, max_nodes))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    tokens = np.arange(n, dtype=np.int32)  # distinct, so siblings differ
    ones = np.ones(n, np.float32)
    draft = Draft(tokens, np.array(parents, np.int32), np.zeros(n, np.int8), ones, ones)
    draft.check()
    return draft


def subtree(draft: Draft, node: int) -> set[int]:
    """`node` and every node below it."""
    return {i for i in range(len(draft)) if node in draft.path_to(i)}


def children(draft: Draft, node: int) -> list[int]:
    return [i for i in range(len(draft)) if int(draft.parents[i]) == node]


def layout_of(draft: Draft) -> TreeLayout:
    return TreeLayout(draft, max_leaves=len(draft) + 1)


@settings(max_examples=200, deadline=None)
@given(trees())
def test_order_is_a_preorder_with_children_best_first(draft: Draft) -> None:
    lay = layout_of(draft)
    n = len(draft)
    assert sorted(lay.order) == list(range(n))
    assert all(lay.pre[node] == e for e, node in enumerate(lay.order))
    for i in range(n):
        par = int(draft.parents[i])
        if par >= 0:
            assert lay.pre[par] < lay.pre[i]  # parents before children
        # depth first: a node's subtree is the run of entries that starts at it
        below = subtree(draft, i)
        assert set(lay.order[lay.pre[i] : lay.pre[i] + len(below)]) == below
    for node in [-1, *range(n)]:
        kids = children(draft, node)  # in draft index order: best first
        assert [lay.pre[k] for k in kids] == sorted(lay.pre[k] for k in kids)


@settings(max_examples=200, deadline=None)
@given(trees())
def test_leaves_below_a_node_are_a_nested_range_of_seq_ids(draft: Draft) -> None:
    lay = layout_of(draft)
    leaves = draft.leaves()
    assert lay.n_leaves == len(leaves)
    # leaves are numbered left to right: in batch order
    seq = {leaf: s for s, leaf in enumerate(sorted(leaves, key=lambda x: lay.pre[x]))}
    for leaf, s in seq.items():
        assert lay.leaf_range[leaf] == (s, s)
        # the nodes that carry a leaf's id are exactly its branch, root to leaf
        carriers = [i for i in range(len(draft)) if lay.leaf_range[i][0] <= s <= lay.leaf_range[i][1]]
        assert carriers == sorted(draft.path_to(leaf))
    for i in range(len(draft)):
        lo, hi = lay.leaf_range[i]
        assert {seq[x] for x in subtree(draft, i) if x in seq} == set(range(lo, hi + 1))
        kids = children(draft, i)
        if kids:  # the children split their parent's range, left to right
            ranges = [lay.leaf_range[k] for k in kids]
            assert ranges[0][0] == lo and ranges[-1][1] == hi
            assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


@settings(max_examples=200, deadline=None)
@given(trees(), st.data())
def test_rejected_cells_before_an_accepted_node_are_left_of_it_and_counted(draft: Draft, data: st.DataObject) -> None:
    if not len(draft):
        return
    lay = layout_of(draft)
    x = data.draw(st.integers(0, len(draft) - 1))
    path = draft.path_to(x)
    lo, _ = lay.leaf_range[x]
    before = [i for i in range(len(draft)) if lay.pre[i] < lay.pre[x] and i not in path]
    after = [i for i in range(len(draft)) if lay.pre[i] > lay.pre[x]]
    assert lay.parked_before(x, len(path)) == len(before)
    assert all(lay.leaf_range[i][1] < lo for i in before)  # branches left of x: parked
    assert all(lay.leaf_range[i][1] >= lo for i in after)  # at or right of x: freed


@settings(max_examples=200, deadline=None)
@given(trees())
def test_rows_map_each_logits_row_to_its_batch_entry(draft: Draft) -> None:
    lay = layout_of(draft)
    assert len(lay.rows) == len(draft) + 1
    assert lay.rows[0] == 0  # the root is entry 0
    for i in range(len(draft)):
        assert lay.order[lay.rows[i + 1] - 1] == i


@settings(max_examples=100, deadline=None)
@given(trees(max_nodes=20), st.integers(1, 8))
def test_a_tree_with_more_leaves_than_branches_is_refused(draft: Draft, max_leaves: int) -> None:
    if len(draft.leaves()) > max_leaves:
        with pytest.raises(BackendError, match="max_branches"):
            TreeLayout(draft, max_leaves)
    else:
        assert TreeLayout(draft, max_leaves).n_leaves == len(draft.leaves())

"""build_tree and Proposer: budget, depth, branching, merging, best-first order."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.core.draft import SOURCE_NGRAM, SOURCE_SUFFIX, Candidate, Draft
from lookahead.core.propose import Proposer, build_tree
from lookahead.index.ngram import NgramIndex
from lookahead.index.suffix import SuffixIndex


def cand(tokens: list[int], q: list[float], source: int = SOURCE_NGRAM) -> Candidate:
    return Candidate(np.array(tokens, dtype=np.int32), np.array(q, dtype=np.float32), source)


candidate = st.builds(
    lambda toks, qs, src: cand(toks, qs[: len(toks)], src),
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
    st.lists(st.floats(0.0625, 1.0, width=32), min_size=6, max_size=6),
    st.integers(0, 2),
)


def paths_of(draft: Draft) -> list[tuple[int, ...]]:
    return [tuple(int(draft.tokens[j]) for j in draft.path_to(i)) for i in range(len(draft))]


def trie_of(cands: list[Candidate], max_depth: int) -> dict[tuple[int, ...], tuple[float, int]]:
    """Every candidate prefix -> (max q given to its last token, the source that gave it)."""
    best: dict[tuple[int, ...], tuple[float, int]] = {}
    for c in cands:
        toks = c.tokens.tolist()
        for j in range(min(len(toks), max_depth)):
            key = tuple(toks[: j + 1])
            q = float(c.q[j])
            if key not in best or q > best[key][0]:
                best[key] = (q, c.source)
    # siblings are exclusive: the most confident keeps its q, the others share what is left
    by_parent: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for key in best:  # first-seen order breaks ties, as the trie's node numbers do
        by_parent.setdefault(key[:-1], []).append(key)
    for sibs in by_parent.values():
        left = 1.0
        for _, key in sorted(enumerate(sibs), key=lambda e: (-best[e[1]][0], e[0])):
            q = min(best[key][0], max(left, 0.01))
            best[key] = (q, best[key][1])
            left -= q
    return best


@settings(max_examples=300, deadline=None)
@given(
    cands=st.lists(candidate, max_size=6),
    budget=st.integers(0, 20),
    max_depth=st.integers(1, 6),
    branches=st.integers(1, 3),
)
def test_tree_matches_its_contract(
    cands: list[Candidate], budget: int, max_depth: int, branches: int
) -> None:
    draft = build_tree(cands, budget, max_depth, branches)
    draft.check()  # parents first, tokens unique per parent
    assert len(draft) <= budget
    assert draft.max_depth <= max_depth
    n_children = np.bincount(draft.parents + 1, minlength=len(draft) + 1)
    assert n_children.max(initial=0) <= branches
    if branches == 1:
        assert draft.parents.tolist() == list(range(-1, len(draft) - 1))
    # Every node is a merged candidate prefix with the max q and its source.
    trie = trie_of(cands, max_depth)
    paths = paths_of(draft)
    assert len(set(paths)) == len(paths)
    for i, path in enumerate(paths):
        q, src = trie[path]
        assert math.isclose(float(draft.q[i]), q, rel_tol=1e-6)
        assert int(draft.sources[i]) == src  # ties keep the earlier candidate's source
        parent_p = 1.0 if draft.parents[i] < 0 else float(draft.p[draft.parents[i]])
        assert math.isclose(float(draft.p[i]), parent_p * q, rel_tol=1e-5)
    # Best-first: p never increases along the node list ...
    assert np.all(np.diff(draft.p) <= 1e-6)
    # ... and nothing left out could have been taken: a prefix whose parent is in the tree
    # with room for another child has p no higher than the worst node taken, and there is
    # no such prefix at all when the budget was not used up.
    taken = {path: i for i, path in enumerate(paths)}
    for path, (q, _) in trie.items():
        if path in taken:
            continue
        if len(path) == 1:
            parent_p, room = 1.0, n_children[0] < branches
        elif path[:-1] in taken:
            j = taken[path[:-1]]
            parent_p, room = float(draft.p[j]), n_children[j + 1] < branches
        else:
            continue
        if room:
            assert len(draft) == budget
            assert budget == 0 or parent_p * q <= float(draft.p[-1]) * (1 + 1e-5)


def test_merge_keeps_max_q_and_its_source() -> None:
    cands = [
        cand([1, 2, 3], [0.5, 0.5, 0.5], SOURCE_NGRAM),
        cand([1, 2, 4], [0.9, 0.8, 0.3], SOURCE_SUFFIX),
    ]
    draft = build_tree(cands, budget=10, max_depth=5, branches=2)
    assert draft.tokens.tolist() == [1, 2, 3, 4]
    assert draft.parents.tolist() == [-1, 0, 1, 1]
    assert draft.sources.tolist() == [SOURCE_SUFFIX, SOURCE_SUFFIX, SOURCE_NGRAM, SOURCE_SUFFIX]
    assert np.allclose(draft.p, [0.9, 0.72, 0.36, 0.216])
    chain = build_tree(cands, budget=10, max_depth=5, branches=1)
    assert chain.tokens.tolist() == [1, 2, 3]
    assert build_tree(cands, budget=2, max_depth=5, branches=2).tokens.tolist() == [1, 2]
    assert build_tree(cands, budget=10, max_depth=1, branches=2).tokens.tolist() == [1]
    assert len(build_tree([], budget=10, max_depth=5, branches=2)) == 0


def test_disagreeing_siblings_share_at_most_one() -> None:
    # two sources each 90% sure of a different token: both cannot be right
    cands = [
        cand([5, 6, 7], [0.9, 0.9, 0.9], SOURCE_SUFFIX),
        cand([8, 9], [0.95, 0.9], SOURCE_NGRAM),
    ]
    draft = build_tree(cands, budget=10, max_depth=5, branches=2)
    first = {int(t): float(q) for t, q, par in zip(draft.tokens, draft.q, draft.parents, strict=True) if par < 0}
    assert first == pytest.approx({8: 0.95, 5: 0.05})
    # below the disagreement nothing changes
    assert float(draft.q[draft.tokens.tolist().index(6)]) == pytest.approx(0.9)


def test_proposer_fans_out_and_drafts_the_repeat() -> None:
    proposer = Proposer([NgramIndex(), SuffixIndex()])
    phrase = list(range(100, 140))
    proposer.observe(np.array(phrase + [7, 8, 9] + phrase[:10], dtype=np.int32))
    assert all(len(s) == 53 for s in proposer.sources)  # type: ignore[arg-type]
    tree = proposer.propose(budget=16, max_depth=12, branches=2)
    tree.check()
    assert len(tree) <= 16 and tree.max_depth <= 12
    assert tree.tokens[:12].tolist() == phrase[10:22]  # the repeat, best-first, as a chain
    chain = proposer.propose(budget=8, max_depth=20, branches=1)
    assert chain.tokens.tolist() == phrase[10:18]
    assert chain.parents.tolist() == list(range(-1, 7))
    assert len(Proposer([NgramIndex(), SuffixIndex()]).propose(16, 8, 2)) == 0


def test_prefix_keeps_depths_and_children() -> None:
    from lookahead.core.draft import Draft

    tree = Draft(
        np.array([5, 6, 7, 8], np.int32),
        np.array([-1, 0, -1, 1], np.int32),
        np.zeros(4, np.int8),
        np.ones(4, np.float32),
        np.ones(4, np.float32),
    )
    for n in range(5):
        pre = tree.prefix(n)
        rebuilt = Draft(tree.tokens[:n], tree.parents[:n], tree.sources[:n], tree.q[:n], tree.p[:n])
        assert pre.depth.tolist() == rebuilt.depth.tolist()
        assert [pre.children(i) for i in range(-1, n)] == [rebuilt.children(i) for i in range(-1, n)]
        pre.check()


def test_a_proposer_told_where_lines_end_drafts_to_the_line_end_only() -> None:
    phrase = list(range(100, 140))  # token 110 ends a line
    stream = np.array(phrase + [7, 8, 9] + phrase[:5], dtype=np.int32)
    lines = Proposer([NgramIndex(), SuffixIndex()], ends_line=lambda t: t == 110)
    free = Proposer([NgramIndex(), SuffixIndex()])
    lines.observe(stream)
    free.observe(stream)
    cut = lines.propose(budget=16, max_depth=12, branches=2)
    cut.check()
    assert sorted(paths_of(cut), key=len)[-1] == tuple(phrase[5:11])  # up to and with the line's end
    assert max(map(len, paths_of(free.propose(budget=16, max_depth=12, branches=2)))) == 12

"""Merge the candidates of every draft source into one draft tree within a node budget.

Candidates are paths below the root (the last accepted token). They are first merged into
a trie, where identical token paths become one node: a node keeps the highest q any
candidate gave it, with that candidate's source tag. Max, not noisy-or: the sources read
the same stream, so two of them agreeing is mostly the same evidence seen twice, and
noisy-or would push q towards 1 for nothing.

Siblings are different tokens at one position, so at most one of them is right: their q
may not add up to more than 1. Two sources that disagree can each claim 0.9 (the suffix
index copying the last record's value, the record index the next row's); then the most
confident child keeps its q and the others share what is left, in order, so a confident
disagreement does not buy a second long branch that cannot both be right.

The tree is then chosen best-first by path probability p (product of q from the root):

    heap <- the root's children
    pop the best p; skip it if its parent already has `branches` children; else append it
    and push its children          (stop at `budget` nodes)

q <= 1, so a child never beats its parent: nodes come out by non-increasing p, parents
before children, and every prefix of the node list is a valid tree (the controller truncates
drafts that way). With no branching limit each prefix is the tree of its size with the
largest sum of p, the expected number of accepted tokens when the q are right.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from lookahead.core.draft import Candidate, Draft
from lookahead.core.tokens import TokenArray
from lookahead.index.base import DraftSource
from lookahead.index.walk import int_list


def build_tree(
    candidates: Sequence[Candidate], budget: int, max_depth: int, branches: int
) -> Draft:
    """One draft tree from all candidates: <= budget nodes, depth <= max_depth, at most
    `branches` children per node (1 gives a chain), nodes best-first by p."""
    if budget <= 0 or max_depth <= 0 or branches <= 0:
        return Draft.empty()
    # Trie over the candidates: node 0 is the root; children[i] maps token -> trie node.
    children: list[dict[int, int]] = [{}]
    trie_q: list[float] = [1.0]
    trie_src: list[int] = [-1]
    for cand in candidates:
        node = 0
        for tok, q in zip(
            cand.tokens[:max_depth].tolist(), cand.q[:max_depth].tolist(), strict=True
        ):
            child = children[node].get(tok)
            q = min(q, 1.0)  # a q above 1 would let a child outrank its parent
            if child is None:
                child = len(trie_q)
                children[node][tok] = child
                children.append({})
                trie_q.append(q)
                trie_src.append(cand.source)
            elif q > trie_q[child]:
                trie_q[child] = q
                trie_src[child] = cand.source
            node = child
    for kids in children:
        if len(kids) > 1:
            _share(trie_q, list(kids.values()))

    tokens: list[int] = []
    parents: list[int] = []
    sources: list[int] = []
    qs: list[float] = []
    ps: list[float] = []
    n_children: list[int] = []  # children taken so far, per output node
    # Heap entries: (-p, trie node, output index of the parent, token). The trie node
    # numbers candidates in order, so ties go to the earlier candidate (source order).
    heap: list[tuple[float, int, int, int]] = []
    for tok, child in children[0].items():
        heapq.heappush(heap, (-trie_q[child], child, -1, tok))
    root_children = 0
    while heap and len(tokens) < budget:
        neg_p, node, parent, tok = heapq.heappop(heap)
        if parent < 0:
            if root_children >= branches:
                continue
            root_children += 1
        else:
            if n_children[parent] >= branches:
                continue
            n_children[parent] += 1
        index = len(tokens)
        tokens.append(tok)
        parents.append(parent)
        sources.append(trie_src[node])
        qs.append(trie_q[node])
        ps.append(-neg_p)
        n_children.append(0)
        for t, child in children[node].items():
            heapq.heappush(heap, (neg_p * trie_q[child], child, index, t))
    return Draft(
        np.array(tokens, dtype=np.int32),
        np.array(parents, dtype=np.int32),
        np.array(sources, dtype=np.int8),
        np.array(qs, dtype=np.float32),
        np.array(ps, dtype=np.float32),
    )


def _share(q: list[float], siblings: list[int]) -> None:
    """Cap the siblings' q so they add up to at most 1, the most confident first."""
    left = 1.0
    for node in sorted(siblings, key=lambda i: (-q[i], i)):
        q[node] = min(q[node], max(left, 0.01))  # 0.01: a node never drops to p = 0
        left -= q[node]


def to_line_end(cand: Candidate, ends_line: Callable[[int], bool]) -> Candidate:
    """`cand` up to and with its first token that ends a line."""
    for j, tok in enumerate(cand.tokens.tolist()):
        if ends_line(tok):
            return cand if j + 1 == len(cand.tokens) else Candidate(cand.tokens[: j + 1], cand.q[: j + 1], cand.source)
    return cand


class Proposer:
    """The draft sources of one stream: observe fans out, propose merges into one tree."""

    def __init__(
        self, sources: Sequence[DraftSource], candidates: int = 4, ends_line: Callable[[int], bool] | None = None
    ) -> None:
        """sources: the indexes to draft from, in tie-break order; candidates: continuations
        asked of each source when the tree may branch (one when it may not); ends_line: when
        given, every draft ends at the first token it holds for which this is true (a
        request that ends at a line end, `DraftConfig.to_line_end`)."""
        self.sources = list(sources)
        self.candidates = candidates
        self.ends_line = ends_line

    def observe(self, tokens: Iterable[int] | TokenArray) -> None:
        """Append `tokens` (prompt or accepted output) to every source."""
        toks = int_list(tokens)
        for source in self.sources:
            source.observe(toks)

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        """The best tree of at most `budget` nodes the sources can offer (may be empty)."""
        depth = min(max_depth, budget)
        if depth <= 0:
            return Draft.empty()
        per_source = 1 if branches <= 1 else self.candidates
        candidates: list[Candidate] = []
        for source in self.sources:
            candidates.extend(source.propose(depth, per_source))
        if self.ends_line is not None:
            candidates = [to_line_end(c, self.ends_line) for c in candidates]
        return build_tree(candidates, budget, max_depth, branches)

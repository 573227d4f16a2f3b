"""The draft tree: what the proposer builds, the verifier decodes and the acceptor walks.

A draft hangs below an implicit root, the last accepted token (not yet in the KV cache).
Node `i` has a token, a parent (-1 = the root), a source tag, the estimated conditional
probability `q` that it is the model's next token given its parent was accepted, and the
path probability `p` (product of `q` from the root down to it).

Invariants (see `check()`):
- parents[i] < i: a parent always comes before its children, so any prefix of the node
  list is itself a valid tree (the controller truncates drafts that way);
- the children of one parent carry distinct tokens;
- depth[i] = depth[parent] + 1, with depth 1 for the root's children.
A chain of K tokens is the tree whose parents are -1, 0, 1, ..., K-2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from lookahead.core.tokens import TokenArray

# Source tags: which index proposed a node. A node proposed by several sources keeps the
# tag of the one with the highest estimate.
SOURCE_NGRAM = 0
SOURCE_SUFFIX = 1
SOURCE_CORPUS = 2
SOURCE_RECORD = 3
SOURCE_PREDICTION = 4  # the text a client expects the output to repeat (the server's Predicted Outputs)
SOURCE_SHARED = 5  # earlier requests' prompts and outputs (the server's shared index)
SOURCE_EDIT = 6  # the prompt copied through the substitutions the output made (index/edits.py)
SOURCE_NAMES = ("ngram", "suffix", "corpus", "record", "prediction", "shared", "edit")


@dataclass(frozen=True)
class Candidate:
    """One continuation proposed by one source: tokens after the current end of the stream.

    `q[j]` is the source's estimate that tokens[j] is right given tokens[:j] were.
    """

    tokens: TokenArray
    q: npt.NDArray[np.float32]
    source: int

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.q):
            raise ValueError("tokens and q must have the same length")


@dataclass
class Draft:
    tokens: TokenArray
    parents: npt.NDArray[np.int32]
    sources: npt.NDArray[np.int8]
    q: npt.NDArray[np.float32]
    p: npt.NDArray[np.float32]
    depth: npt.NDArray[np.int32] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        depth = np.zeros(n, dtype=np.int32)
        for i in range(n):
            par = int(self.parents[i])
            depth[i] = 1 if par < 0 else depth[par] + 1
        self.depth = depth
        self._children: list[dict[int, int]] | None = None

    @staticmethod
    def empty() -> Draft:
        z = np.zeros(0, dtype=np.int32)
        return Draft(z, z.copy(), np.zeros(0, np.int8), np.zeros(0, np.float32), np.zeros(0, np.float32))

    @staticmethod
    def chain(tokens: list[int] | TokenArray, source: int = SOURCE_NGRAM, q: float = 1.0) -> Draft:
        """A single branch of `tokens` below the root."""
        k = len(tokens)
        qs = np.full(k, q, dtype=np.float32)
        return Draft(
            np.asarray(tokens, dtype=np.int32),
            np.arange(-1, k - 1, dtype=np.int32),
            np.full(k, source, dtype=np.int8),
            qs,
            np.cumprod(qs).astype(np.float32),
        )

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if len(self.depth) else 0

    def children(self, node: int) -> dict[int, int]:
        """token -> child node index, for `node` (-1 = the root)."""
        if self._children is None:
            table: list[dict[int, int]] = [{} for _ in range(len(self.tokens) + 1)]
            # one conversion to plain ints, not two numpy scalars per node (every step builds
            # the table of the verified prefix, and the shadow scorer those of declined drafts)
            parents, tokens = self.parents.tolist(), self.tokens.tolist()
            for i, (par, tok) in enumerate(zip(parents, tokens, strict=True)):
                table[par + 1][tok] = i
            self._children = table
        return self._children[node + 1]

    def prefix(self, n: int) -> Draft:
        """The first `n` nodes: a valid tree because parents precede children."""
        if n >= len(self.tokens):
            return self
        # built without __init__: a prefix's depths are the first n depths, so the Python
        # loop of __post_init__ (run twice per engine step) is not needed
        out = object.__new__(Draft)
        out.tokens, out.parents, out.sources = self.tokens[:n], self.parents[:n], self.sources[:n]
        out.q, out.p, out.depth = self.q[:n], self.p[:n], self.depth[:n]
        out._children = None
        return out

    def leaves(self) -> list[int]:
        """Nodes with no children, in index order (one per branch)."""
        has_child = np.zeros(len(self.tokens), dtype=bool)
        par = self.parents[self.parents >= 0]
        has_child[par] = True
        return [int(i) for i in np.flatnonzero(~has_child)]

    def path_to(self, node: int) -> list[int]:
        """Node indexes from the root's child down to `node`, inclusive."""
        path = []
        while node >= 0:
            path.append(node)
            node = int(self.parents[node])
        return path[::-1]

    def check(self) -> None:
        """Raise AssertionError if an invariant does not hold (for tests)."""
        n = len(self.tokens)
        assert len(self.parents) == len(self.sources) == len(self.q) == len(self.p) == n
        seen: set[tuple[int, int]] = set()
        for i in range(n):
            par = int(self.parents[i])
            assert -1 <= par < i, f"node {i} has parent {par}"
            key = (par, int(self.tokens[i]))
            assert key not in seen, f"duplicate token {key[1]} under parent {par}"
            seen.add(key)

"""Random draft trees for the KV-cache and backend tests: a few chains, each starting at the
root or at a random earlier node, with no two siblings on the same token (a valid `Draft`)."""

from __future__ import annotations

import numpy as np

from lookahead.core.draft import Draft


def random_tree(rng: np.random.Generator, vocab: int, branches: int, p_root: float) -> Draft:
    """`branches` chains of 1-3 tokens below `vocab`; each starts at the root with
    probability `p_root` (always the first), else below a random earlier node."""
    toks: list[int] = []
    parents: list[int] = []
    for _ in range(branches):
        parent = -1 if not toks or rng.random() < p_root else int(rng.integers(0, len(toks)))
        for _ in range(int(rng.integers(1, 4))):
            tok = int(rng.integers(0, vocab))
            if any(parents[i] == parent and toks[i] == tok for i in range(len(toks))):
                break
            toks.append(tok)
            parents.append(parent)
            parent = len(toks) - 1
    n = len(toks)
    ones = np.ones(n, np.float32)
    draft = Draft(np.array(toks, np.int32), np.array(parents, np.int32), np.zeros(n, np.int8), ones, ones)
    draft.check()
    return draft

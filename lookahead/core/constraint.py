"""Constrained sampling: a rule (a grammar, a JSON schema) that allows only some next tokens.

The target distribution becomes the model's distribution masked to the tokens the rule
allows, renormalized, and everything downstream (top-k, top-p, min-p, temperature, the
draw) works on that masked row, as llama.cpp's sampler does with its grammar applied first
in the chain. Verification of drafts uses the same rule at every node, so output stays
exact: acceptance picks each token with the state the rule has after the tokens kept
before it, and every pick is kept, so one state advanced per pick serves the whole walk.

Asking the rule about all ~150k tokens of a big vocabulary at every token costs a few
milliseconds, so `restrict` asks about the most likely tokens first, in growing chunks,
and stops once it knows the k best allowed ones (k = 1 for greedy, top_k when sampling);
only top_k = 0 sampling needs the full mask. A disallowed token never reaches `accept`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lookahead.errors import UserError

GROWTH = 32  # the first round asks about the k most likely tokens, each next one 32x more


class TokenConstraint(Protocol):
    """The state of a rule over the tokens written so far (one per generation)."""

    def allowed(self, tokens: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
        """Which of `tokens` may come next (end-of-generation tokens only where the rule may end)."""
        ...

    def accept(self, token: int) -> None:
        """Advance past `token`, a token `allowed` allowed, now kept in the output."""
        ...


# A fresh constraint state for each generation, built at the edge (the service compiles a
# grammar once per request; each generation of it, each of `n` choices, gets its own state).
ConstraintFactory = Callable[[], TokenConstraint]


class NoTokenAllowed(UserError):
    """The constraint (with the logit bias) leaves no token to write."""


def restrict(logits: npt.NDArray[np.float32], constraint: TokenConstraint, k: int) -> npt.NDArray[np.float32]:
    """`logits` with -inf everywhere but the `k` most likely tokens `constraint` allows
    (every allowed one when k <= 0 or k covers the row); ties go to the lower token id, as
    argmax and the sampler's top-k order them. Tokens already at -inf (banned by a bias)
    count as not allowed. Raises NoTokenAllowed when none is left."""
    n = len(logits)
    out = np.full(n, -np.inf, dtype=np.float32)
    if k <= 0 or k >= n:
        ids = np.flatnonzero(np.isfinite(logits)).astype(np.int32)
        keep = ids[constraint.allowed(ids)]
        if not len(keep):
            raise NoTokenAllowed("the grammar allows no token here (or the logit bias bans every one it allows)")
        out[keep] = logits[keep]
        return out
    found: list[npt.NDArray[np.int32]] = []
    n_found = 0
    above = np.inf  # tokens with a logit >= above were asked about in an earlier round
    m = k  # the round's share of the row: k, then GROWTH times more each round
    while True:
        last = m >= n
        if last:
            sel = logits < above
        else:
            # every token at or above the m-th largest logit: ties at the edge come in whole
            thr = logits.max() if m == 1 else np.partition(logits, n - m)[n - m]
            sel = logits >= thr
            if above < np.inf:
                sel &= logits < above
            above = thr
        cand = np.flatnonzero(sel)
        asked = cand[np.isfinite(logits[cand])].astype(np.int32)
        ok = asked[constraint.allowed(asked)]
        found.append(ok)
        n_found += len(ok)
        if n_found >= k or last:
            break
        m *= GROWTH
    ids = np.concatenate(found)
    if not len(ids):
        raise NoTokenAllowed("the grammar allows no token here (or the logit bias bans every one it allows)")
    # every token not asked about lies below every one asked about, so the k best of those
    # found are the k best allowed of the whole row
    best = ids[np.lexsort((ids, -logits[ids]))[:k]]
    out[best] = logits[best]
    return out

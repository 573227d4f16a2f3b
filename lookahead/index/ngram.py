"""Incremental multi-order n-gram table over the stream: which token followed each context.

For every context order k = 1..max_order, the table maps the k tokens before a position
to the tokens that followed them there, with a count and the last position seen (the
position of the follower). `observe` touches one table entry per order per token and
never rescans; `propose` only reads the end of the stream.

Estimate (Witten-Bell backoff). At the highest order k whose context was seen, with n
occurrences, d distinct followers and c(t) for follower t:

    q(t) = w · c(t) / (n + d)

where d / (n + d) is the mass Witten-Bell keeps for a follower not seen yet: one sighting
gives 1/2, five identical sightings 5/6, so thin data is shrunk. Followers missing at
order k come from order k-1 with w multiplied by that escape mass d / (n + d). Before the
first order with data, each order whose context was never seen multiplies w by `backoff`
(a context new at length k + 1 says the stream is off the beaten track).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from lookahead.core.draft import SOURCE_NGRAM, Candidate
from lookahead.core.tokens import TokenArray
from lookahead.index.walk import best_paths, int_list

# A follower's statistics packed in one int: (count << 32) | last position. Comparing the
# packed values ranks followers by count, then by recency; a position fits in 32 bits.
_SHIFT = 32
_MASK = (1 << _SHIFT) - 1

# Entry per context: [total, best token, best packed, second token, second packed,
# followers]. `followers` is None while the context has had a single follower (the best),
# which is most contexts at high orders; otherwise a dict token -> packed holding all of
# them. best/second are kept up to date on every update (a packed value only grows), so
# the greedy chain never scans a follower dict.
_TOTAL, _BEST, _BEST_V, _SECOND, _SECOND_V, _FOLLOWERS = range(6)

Ctx = tuple[int, ...]


class NgramIndex:
    """The n-gram draft source: continuations of the last 1..max_order tokens."""

    source = SOURCE_NGRAM

    def __init__(self, max_order: int = 4, backoff: float = 0.5, min_p: float = 0.01) -> None:
        """max_order: longest context; backoff: factor per unseen context order (see the
        module docstring); min_p: drafts stop before their path probability drops below it."""
        if max_order < 1:
            raise ValueError("max_order must be >= 1")
        self.max_order = max_order
        self.backoff = backoff
        self.min_p = min_p
        self._table: dict[Ctx, list[Any]] = {}
        self._tail: Ctx = ()  # the last max_order tokens of the stream
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def observe(self, tokens: Iterable[int] | TokenArray) -> None:
        """Append `tokens`: one table update per order per token."""
        table = self._table
        order = self.max_order
        tail = self._tail
        pos = self._n
        for t in int_list(tokens):
            m = len(tail)
            for k in range(1, m + 1):
                ctx = tail[m - k :]
                e = table.get(ctx)
                if e is None:
                    table[ctx] = [1, t, (1 << _SHIFT) | pos, -1, 0, None]
                    continue
                e[_TOTAL] += 1
                fol = e[_FOLLOWERS]
                if fol is None:
                    if e[_BEST] == t:
                        e[_BEST_V] = (((e[_BEST_V] >> _SHIFT) + 1) << _SHIFT) | pos
                        continue
                    fol = e[_FOLLOWERS] = {e[_BEST]: e[_BEST_V]}
                v = (((fol.get(t, 0) >> _SHIFT) + 1) << _SHIFT) | pos
                fol[t] = v
                if t == e[_BEST]:
                    e[_BEST_V] = v
                elif v > e[_BEST_V]:
                    e[_SECOND], e[_SECOND_V] = e[_BEST], e[_BEST_V]
                    e[_BEST], e[_BEST_V] = t, v
                elif v > e[_SECOND_V]:
                    e[_SECOND], e[_SECOND_V] = t, v
            tail = tail[1:] + (t,) if m == order else tail + (t,)
            pos += 1
        self._tail = tail
        self._n = pos

    def followers(self, context: Sequence[int]) -> list[tuple[int, int, int]]:
        """(token, count, last position) of every token seen right after exactly `context`
        (1..max_order tokens), ranked by count then recency."""
        e = self._table.get(tuple(int(t) for t in context))
        if e is None:
            return []
        fol = e[_FOLLOWERS] or {e[_BEST]: e[_BEST_V]}
        ranked = sorted(fol.items(), key=itemgetter(1), reverse=True)
        return [(t, v >> _SHIFT, v & _MASK) for t, v in ranked]

    def next_tokens(
        self, context: Sequence[int], limit: int | None = None
    ) -> list[tuple[int, float]]:
        """Ranked (token, q) for the token after `context`: the highest order with data
        first (by count, then recency), then tokens only lower orders have seen."""
        ctx = tuple(int(t) for t in context[-self.max_order :])
        opts = self._options(ctx, len(self._table) + 1 if limit is None else limit, 0.0)
        return [(t, q) for t, q, _ in opts]

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        """The greedy chain, then chains through the best alternative tokens."""
        paths = best_paths(self._tail, self._options, max_depth, max_candidates, self.min_p)
        return [
            Candidate(np.array(toks, dtype=np.int32), np.array(qs, dtype=np.float32), SOURCE_NGRAM)
            for toks, qs in paths
        ]

    def _options(self, ctx: Ctx, limit: int, floor: float) -> list[tuple[int, float, Ctx]]:
        """The step function for `best_paths`: ranked (token, q, next context) after `ctx`,
        at most `limit`, stopping once q would fall below `floor`."""
        table = self._table
        out: list[tuple[int, float, Ctx]] = []
        # Tokens a higher order has seen get their q there, even when `limit` or `floor`
        # cut that order's list short: a lower order must not list them again with another
        # q (its estimate can be higher), or q would depend on how many options were asked.
        listed: set[int] = set()  # listed, or the one follower a higher order has seen
        higher: list[dict[int, int]] = []  # the followers of higher orders with several
        full = len(ctx) == self.max_order
        w = 1.0  # the mass left for tokens the higher orders did not list
        for k in range(len(ctx), 0, -1):
            e = table.get(ctx[len(ctx) - k :])
            if e is None:
                w *= self.backoff
            else:
                fol = e[_FOLLOWERS]
                d = 1 if fol is None else len(fol)
                denom = e[_TOTAL] + d
                need = limit + len(out)  # tokens listed above come back here: skip them
                if fol is None or need == 1:
                    ranked = [(e[_BEST], e[_BEST_V])]
                elif need == 2:
                    ranked = [(e[_BEST], e[_BEST_V]), (e[_SECOND], e[_SECOND_V])]
                else:
                    ranked = heapq.nlargest(need, fol.items(), key=itemgetter(1))
                for t, v in ranked:
                    if t in listed or any(t in h for h in higher):
                        continue
                    q = w * (v >> _SHIFT) / denom
                    if q < floor:
                        break  # ranked by count: the rest are no better
                    listed.add(t)
                    out.append((t, q, ctx[1:] + (t,) if full else ctx + (t,)))
                    if len(out) >= limit:
                        return out
                if fol is None:
                    listed.add(e[_BEST])
                else:
                    higher.append(fol)
                w *= d / denom
            if w < floor:
                break
        return out

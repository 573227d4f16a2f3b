"""Longest-suffix matching over the stream with an online suffix automaton.

The automaton has one state per class of substrings that end at the same set of positions
(their endpos set); `link` goes to the class of the longest shorter suffix with a larger
endpos set. Appending a token is the classic online construction (amortized O(1) state and
transition changes, at most 2n states and 3n transitions), plus one walk up the suffix
links from the new state that adds the new end position to every class on the way:

    count[v] = |endpos(v)|      last[v] = max endpos(v)

Every state on that walk gains the same position, so the walk cannot stop early; it is
as long as the number of distinct endpos classes among the stream's suffixes: a handful on
ordinary text, but up to (run length / period) inside a periodic run ("= = = = ..."). It is
capped at `max_walk` states, so observe is O(max_walk) per token in the worst case; past
the cap only the shortest suffixes of such a run (near the root) keep stale counts.

Why the automaton answers the drafting question exactly: for a state v holding the matched
string x, its transitions are exactly the distinct tokens that followed earlier occurrences
of x, and the state u = next[v][c] has endpos = {e + 1 : e in endpos(x), S[e + 1] = c}, so
count[u] is how often x was followed by c and last[u] where that last happened. Following
transitions walks every earlier continuation of the match at once, ranked by counts.

Estimate. At a state matching L tokens, with n = sum of its children's counts, d children
and c for child t:

    q(t) = w · c / (n + d · escape / L)

Witten-Bell keeps d / (n + d) for an unseen continuation; here that mass shrinks as the
match gets longer, because a long exact repeat is rarely broken. A 20-token match seen once
with one continuation gives q = 1 / (1 + 2/20) = 0.91; a 2-token match with 3 different
continuations seen once each gives 1/6 per token. Continuations the state has not seen come
from the shorter match at link[v] (more occurrences, lower L) with w multiplied by the
escape mass (d · escape / L) / (n + d · escape / L); a state with no continuation at all
(the match only ever occurred at the end of the stream) passes w on unchanged.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import numpy as np

from lookahead.core.draft import SOURCE_SUFFIX, Candidate
from lookahead.core.tokens import TokenArray
from lookahead.index.walk import best_paths, int_list

# Matcher state: (automaton state, matched length L), with len[link[v]] < L <= len[v].
Match = tuple[int, int]


class SuffixIndex:
    """The suffix draft source: what followed earlier occurrences of the stream's end."""

    source = SOURCE_SUFFIX

    def __init__(
        self,
        min_match: int = 2,
        escape: float = 2.0,
        max_walk: int = 256,
        min_p: float = 0.01,
    ) -> None:
        """min_match: shortest match that may propose; escape: the pseudo-count in q (see
        the module docstring); max_walk: cap on the per-token suffix-link walk; min_p:
        drafts stop before their path probability drops below it."""
        self.min_match = max(1, min_match)
        self.escape = escape
        self.max_walk = max_walk
        self.min_p = min_p
        # Parallel per-state arrays; state 0 is the root (the empty string).
        self._len: list[int] = [0]
        self._link: list[int] = [-1]
        self._next: list[dict[int, int]] = [{}]
        self._count: list[int] = [0]
        self._last: list[int] = [-1]
        self._end = 0  # the state of the whole stream
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def n_states(self) -> int:
        return len(self._len)

    def observe(self, tokens: Iterable[int] | TokenArray) -> None:
        """Append `tokens`, extending the automaton one token at a time."""
        lens, link, nxt, count, last = self._len, self._link, self._next, self._count, self._last
        max_walk = self.max_walk
        end = self._end
        pos = self._n
        for c in int_list(tokens):
            cur = len(lens)
            lens.append(lens[end] + 1)
            link.append(0)
            nxt.append({})
            count.append(0)
            last.append(pos)
            p = end
            while p != -1 and c not in nxt[p]:
                nxt[p][c] = cur
                p = link[p]
            if p != -1:
                q = nxt[p][c]
                if lens[p] + 1 == lens[q]:
                    link[cur] = q
                else:
                    # Split q: the clone takes its shorter strings, and endpos(q) so far.
                    clone = len(lens)
                    lens.append(lens[p] + 1)
                    link.append(link[q])
                    nxt.append(nxt[q].copy())
                    count.append(count[q])
                    last.append(last[q])
                    while p != -1 and nxt[p].get(c) == q:
                        nxt[p][c] = clone
                        p = link[p]
                    link[q] = clone
                    link[cur] = clone
            end = cur
            # Every suffix class of the stream gains end position `pos`.
            v, steps = cur, 0
            while v > 0 and steps < max_walk:
                count[v] += 1
                last[v] = pos
                v = link[v]
                steps += 1
            pos += 1
        self._end = end
        self._n = pos

    def match_length(self) -> int:
        """Length of the longest suffix of the stream that also ends at an earlier position."""
        return self._len[self._link[self._end]] if self._n else 0

    def followers(self, length: int) -> list[tuple[int, int, int]]:
        """(token, count, last position) of every token that followed an earlier occurrence
        of the stream's last `length` tokens (length >= 1), ranked by count then recency."""
        if not 1 <= length <= self._n:
            return []
        v = self._end
        while self._len[self._link[v]] >= length:
            v = self._link[v]
        return [(t, self._count[u], self._last[u]) for t, u in self._ranked(v, None)]

    def next_tokens(
        self, drafted: Sequence[int] = (), limit: int | None = None
    ) -> list[tuple[int, float]]:
        """Ranked (token, q) for the token after the stream followed by `drafted`."""
        m = self._start()
        for t in drafted:
            m = self._advance(m, int(t))
        opts = self._options(m, self._n + 1 if limit is None else limit, 0.0)
        return [(t, q) for t, q, _ in opts]

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        """Continuations of the longest match, greedy by count, and the best alternatives."""
        if not self._n:
            return []
        paths = best_paths(self._start(), self._options, max_depth, max_candidates, self.min_p)
        return [
            Candidate(np.array(toks, dtype=np.int32), np.array(qs, dtype=np.float32), SOURCE_SUFFIX)
            for toks, qs in paths
        ]

    def _start(self) -> Match:
        return (self._end, self._n)

    def _advance(self, m: Match, t: int) -> Match:
        """The match after appending token t: follow suffix links until t can extend it."""
        v, n_matched = m
        while v != -1 and t not in self._next[v]:
            v = self._link[v]
            n_matched = self._len[v] if v != -1 else 0
        if v == -1:
            return (0, 0)
        return (self._next[v][t], n_matched + 1)

    def _ranked(self, v: int, limit: int | None) -> list[tuple[int, int]]:
        """(token, child state) of v's transitions by count, then recency, best first."""
        count, last = self._count, self._last
        items = self._next[v].items()
        if len(items) == 1:
            return list(items)
        # Pack (count, last position) into one int: positions are < 2**32.
        if limit is None:
            return sorted(items, key=lambda it: (count[it[1]] << 32) | last[it[1]], reverse=True)
        return heapq.nlargest(limit, items, key=lambda it: (count[it[1]] << 32) | last[it[1]])

    def _options(self, m: Match, limit: int, floor: float) -> list[tuple[int, float, Match]]:
        """The step function for `best_paths`: ranked (token, q, next match), at most
        `limit`, stopping once q would fall below `floor`."""
        lens, link, nxt, count = self._len, self._link, self._next, self._count
        v, n_matched = m
        out: list[tuple[int, float, Match]] = []
        listed: set[int] = set()
        w = 1.0  # the mass left for tokens the longer matches did not list
        while v > 0 and n_matched >= self.min_match:
            children = nxt[v]
            if children:
                d = len(children)
                total = sum(count[u] for u in children.values())
                esc = d * self.escape / n_matched
                denom = total + esc
                for t, u in self._ranked(v, limit + len(out)):
                    if t in listed:
                        continue
                    q = w * count[u] / denom
                    if q < floor:
                        break  # ranked by count: the rest are no better
                    listed.add(t)
                    out.append((t, q, (u, n_matched + 1)))
                    if len(out) >= limit:
                        return out
                w *= esc / denom
                if w < floor:
                    break
            v = link[v]
            n_matched = lens[v]
        return out

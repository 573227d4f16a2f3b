"""Which cached tokens a new prompt can keep: the common prefix, and with KV shift
(llama.cpp's `--cache-reuse N`) the cached runs it holds at other places (`shift_plan`),
and which slot a prompt should take (`choose_slot`). Token lists only: `kv_cache.KVSlot`
moves the cells."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    return _match(np.asarray(a[:n], dtype=np.int64), np.asarray(b[:n], dtype=np.int64))


def _match(x: np.ndarray, y: np.ndarray) -> int:
    """Length of the common prefix of two int arrays."""
    n = min(len(x), len(y))
    diff = np.flatnonzero(x[:n] != y[:n])
    return int(diff[0]) if len(diff) else n


def barrier_at(tokens: Sequence[int], token: int | None) -> int:
    """Where the last `token` (a fill-in-the-middle prompt's suffix marker) stands in
    `tokens`; their length when it is not there (no barrier)."""
    if token is None or token < 0:
        return len(tokens)
    hits = np.flatnonzero(np.asarray(tokens, dtype=np.int64) == token)
    return int(hits[-1]) if len(hits) else len(tokens)


def shift_plan(
    cache: Sequence[int],
    tokens: Sequence[int],
    start: int,
    min_run: int,
    gaps: bool = False,
    barrier: int | None = None,
) -> list[tuple[int, int, int]]:
    """llama.cpp's `--cache-reuse` walk: the cached runs that go to new places, past the
    common prefix `start`, as (position in `cache`, position in `tokens`, length).

    From `start` on, the next prompt token must begin a run of at least `min_run` tokens
    that `cache` holds at or after the end of the last run taken (the first such place); the
    walk ends at the first prompt token that begins none. So the runs fill `tokens` from
    `start` without a gap, and every one moves back (cache position >= prompt position):
    a prompt that dropped pieces of the cached one, as a sliding window does. What follows
    the last run is decoded after it as usual. `min_run` <= 0: no runs (off).

    With `gaps`, where no run begins the walk goes on to the next prompt token that begins
    one (further on in `cache`, as before): the prompt tokens between are new, decoded in
    their place before the run is put back after them, so the run may move forward too. An
    editor's window whose cached copy already lost more lines at its top than the new prompt
    did (a longer suggestion moved the last request's window further down) keeps the rest of
    the window this way; llama.cpp's walk stops there and decodes it all again.

    No run is taken that begins at or past `barrier` (a prompt position): there the walk
    ends. A fill-in-the-middle prompt puts it at its suffix marker, so the code after the
    cursor is kept only where nothing before it changed (the common prefix, or a run that
    began earlier and goes on through it). A moved cell keeps the K/V it was decoded with;
    the suffix's cells, decoded before the line just typed existed, told the model that line
    was still to be written, and it wrote it again: measured on llama.vim's requests with
    Qwen2.5-Coder 0.5B (greedy), moving the suffix past a new line cut the prompt tokens
    decoded from ~265 to ~10 but the suggestion's first line matched a cold start's in 4 of
    16 requests, against 11 of 16 without moving it.
    """
    if min_run <= 0:
        return []
    barrier = len(tokens) if barrier is None else barrier
    c = np.asarray(cache, dtype=np.int64)
    p = np.asarray(tokens, dtype=np.int64)
    plan: list[tuple[int, int, int]] = []
    hc = hp = start
    while hc < len(c) and hp < len(p):
        run = _run_at(c, p, hc, hp, min_run)
        if run is None and gaps:
            run = _next_run(c, p, hc, hp + 1, min_run)
        if run is None or run[1] >= barrier:
            break
        plan.append(run)
        s, at, n = run
        hc, hp = s + n, at + n
    return plan


def _run_at(c: np.ndarray, p: np.ndarray, hc: int, hp: int, min_run: int) -> tuple[int, int, int] | None:
    """The first run of at least `min_run` tokens of `p` from `hp` that `c` holds at or
    after `hc`, as (position in c, hp, length)."""
    for s in (hc + np.flatnonzero(c[hc:] == p[hp])).tolist():
        if _match(c[s : s + min_run], p[hp : hp + min_run]) < min_run:
            continue  # too short: most candidates end here, at a cost of min_run tokens
        n = _match(c[s:], p[hp:])
        if n >= min_run:
            return s, hp, n
    return None


_ANCHOR = 8  # tokens hashed to find where a run may begin (`_next_run`)


def _next_run(c: np.ndarray, p: np.ndarray, hc: int, hp: int, min_run: int) -> tuple[int, int, int] | None:
    """`_run_at` at the first prompt position from `hp` on where a run begins: candidates
    found by their first `_ANCHOR` tokens in a table of `c[hc:]`, one pass over each."""
    k = min(_ANCHOR, min_run)
    if len(c) - hc < min_run or len(p) - hp < min_run:
        return None
    cb = c[hc:].astype("<i8").tobytes()
    pb = p.astype("<i8").tobytes()
    starts = {cb[8 * i : 8 * (i + k)] for i in range(len(c) - hc - k + 1)}
    for at in range(hp, len(p) - min_run + 1):
        if pb[8 * at : 8 * (at + k)] in starts:
            run = _run_at(c, p, hc, at, min_run)
            if run is not None:
                return run
    return None


def split_at_gap(
    plan: list[tuple[int, int, int]], start: int
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """`plan`'s runs before its first new prompt token (each begins where the last ended,
    the first at `start`) and the runs from there on."""
    end = start
    for i, (_, p0, n) in enumerate(plan):
        if p0 != end:
            return plan[:i], plan[i:]
        end = p0 + n
    return plan, []


def reusable(
    cache: Sequence[int], tokens: Sequence[int], min_run: int = 0, gaps: bool = False, barrier: int | None = None
) -> int:
    """Prompt tokens a slot holding `cache` would keep: the common prefix, and with
    `min_run` the runs `shift_plan` moves after it."""
    k = common_prefix(cache, tokens)
    return k + sum(n for _, _, n in shift_plan(cache, tokens, k, min_run, gaps, barrier))


def choose_slot(
    caches: Sequence[Sequence[int]],
    free: Sequence[int],
    last_use: Sequence[int],
    tokens: Sequence[int],
    min_run: int = 0,
    gaps: bool = False,
    barrier: int | None = None,
) -> int:
    """The free slot a prompt of `tokens` should take, given each slot's cached tokens.

    The one sharing the longest prefix with `tokens`, provided that prefix is more than half
    of what it holds (taking it then reuses more than it evicts; llama.cpp's
    `--slot-prompt-similarity` has the same purpose): else the slot with nothing cached, or
    the least recently used. Without that rule a new chat sharing only a system prompt with
    another conversation's slot would evict that conversation while an empty slot waits.
    With `min_run` (KV shift on), what a slot shares counts the runs it would move too
    (with `gaps`, those past new tokens as well; none from `barrier` on).
    """
    shared = {k: reusable(caches[k], tokens, min_run, gaps, barrier) for k in free}
    matches = [k for k in free if 2 * shared[k] > len(caches[k])]
    if matches:
        return max(matches, key=lambda k: (shared[k], -last_use[k]))
    return min(free, key=lambda k: (len(caches[k]) > 0, last_use[k]))

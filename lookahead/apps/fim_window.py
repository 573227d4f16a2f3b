"""Where a fill-in-the-middle prompt's prefix window begins, so that it begins where the
cached prompt's did.

llama.cpp keeps the last `3/4 n_batch` tokens of the prefix: an editor that sends 256 lines
above the cursor (llama.vim) gets a window whose top moves with every token typed, and with
every suggestion its follow-up assumed accepted. Where it moves down, the cached cells move
back with it (KV shift, `--cache-reuse`); where it moves up (the new prefix is shorter than
the cached one's: a longer suggestion was assumed, a line deleted), the new prompt begins
with tokens the cache never held, llama.cpp's reuse walk stops at once, and the whole
window is read again (~1,000 tokens, seconds on a CPU, at every such keystroke).

`aligned_start` keeps the window's top where the cached prompt had it, while that leaves
the window within `slack` tokens of its usual length: then the new prompt shares the whole
window with the cache as a common prefix (no cell moved, none read again), and only what
changed near the cursor is decoded. The model sees a few tokens more or fewer of the far
end of the file than llama-server's cut would show it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ANCHOR = 32  # tokens of the cached window's top that must be found in the new prefix


def aligned_start(prefix: Sequence[int], start: int, pre: int, cached: Sequence[Sequence[int]], slack: int) -> int:
    """The index of `prefix` where the window begins: `start` (llama.cpp's cut), or the
    place within `slack` of it where a cached prompt's window began (the `ANCHOR` tokens
    after its first `pre`, the FIM prefix token), the nearest when there are several.
    Only a cut window moves (`start` > 0)."""
    if start <= 0 or slack <= 0 or len(prefix) < ANCHOR:
        return start
    p = np.asarray(prefix, dtype=np.int64)
    lo, hi = max(0, start - slack), min(len(p) - ANCHOR, start + slack)
    found: list[int] = []
    for tokens in cached:
        c = np.asarray(tokens, dtype=np.int64)
        at = np.flatnonzero(c == pre)
        if not len(at) or len(c) < at[0] + 1 + ANCHOR:
            continue
        anchor = c[at[0] + 1 : at[0] + 1 + ANCHOR]
        hits = lo + np.flatnonzero(p[lo : hi + 1] == anchor[0])
        found += [s for s in hits.tolist() if np.array_equal(p[s : s + ANCHOR], anchor)]
    return min(found, key=lambda s: abs(s - start)) if found else start

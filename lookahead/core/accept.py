"""Lossless acceptance on a draft tree.

    node = root
    loop: x = pick(logits[node])            # exactly what plain decoding would emit here
          if some child of node has token x: accept it, node = child, continue
          else: x is the bonus token; stop

Why it is exact: every emitted token is drawn from the target model's own distribution
given everything before it (the logits at `node` are those of the accepted prefix), with the
same random number plain decoding would use at that position. The draft only decides how
many of those rows were computed in advance, never which token comes out. For greedy,
`pick` is argmax, so the output is plain greedy decoding (given equal logits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lookahead.backend.base import LogitRows, Logits
from lookahead.core.draft import Draft

Pick = Callable[[Logits, Sequence[int]], int]


def accept(draft: Draft, rows: LogitRows, pick: Pick, history: list[int]) -> tuple[list[int], int]:
    """Walk `draft` with `pick`; return (accepted node path, bonus token).

    `history` is every token before the root plus the root itself; it is extended in place
    with the accepted tokens as the walk goes (the repeat penalty reads it) and restored.
    """
    node = -1
    path: list[int] = []
    base = len(history)
    try:
        while True:
            tok = pick(rows[node + 1], history)
            child = draft.children(node).get(tok) if len(draft) else None
            if child is None:
                return path, tok
            path.append(child)
            history.append(tok)
            node = child
    finally:
        del history[base:]

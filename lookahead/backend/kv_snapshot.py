"""A slot's cached cells copied out and put back (llama.cpp's per-sequence state copy).

Work begun while idle on a guessed request (`server/idle.py`) replaces the cached cells with
that guess's. When the guess was wrong (someone typed on instead of accepting), the next
request would have to read again what the cells held before: the code after the cursor, a
few hundred tokens at each keystroke. So the cells are copied out first (the K/V of every
committed cell, a few MB per thousand tokens for a small model: milliseconds) and put back
when the next request shares more with them than with the guess.

The copy holds the committed cells of the slot's first branch id (every committed cell
carries every branch id between steps; parked cells carry only the park id and are not
copied). Putting it back frees every cell of the slot, writes the copy to the first branch
id at the same positions, in order, and gives the cells every other branch id, so the
slot's invariant holds as after any request.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp as ll

from lookahead.backend.kv_cache import KVSlot
from lookahead.errors import BackendError


@dataclass(frozen=True)
class Snapshot:
    data: Any  # the K/V of the committed cells, as llama.cpp wrote them (a ctypes byte array)
    tokens: list[int]  # the tokens they hold, in position order


def take(ctx: Any, slot: KVSlot) -> Snapshot | None:
    """The slot's committed cells, copied out (None: there are none)."""
    if slot.n_past == 0:
        return None
    seq = int(slot.ids[0])
    size = int(ll.llama_state_seq_get_size(ctx, seq))
    buf = (ctypes.c_uint8 * size)()
    if int(ll.llama_state_seq_get_data(ctx, buf, size, seq)) != size:
        raise BackendError("could not copy the cached cells out")
    return Snapshot(buf, list(slot.cache_tokens))


def put_back(ctx: Any, slot: KVSlot, snap: Snapshot) -> None:
    """Replace the slot's cells with `snap`'s (on failure the slot is left empty)."""
    slot.clear()
    first = int(slot.ids[0])
    if int(ll.llama_state_seq_set_data(ctx, snap.data, len(snap.data), first)) == 0:
        slot.clear()
        raise BackendError("could not put the cached cells back")
    for seq in slot.ids[1:].tolist():
        slot.kv.seq_cp(first, int(seq), -1, -1)
    slot.n_past = len(snap.tokens)
    slot.cache_tokens = list(snap.tokens)

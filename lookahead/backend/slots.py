"""A llama.cpp context holding several generations at once (the batched loop's backend).

The context has `slots` slots. Slot k owns the sequence ids k*(B+1) .. k*(B+1)+B-1 (its
draft branches, B = branches per slot) and one more, k*(B+1)+B, where it parks rejected
cells; so n_seq_max = slots * (B + 1). Within a slot everything is `LlamaBackend`'s layout
(see `lookahead/backend/llama.py`'s module docstring): the root carries all of the slot's
branch ids, a tree node the ids of the branches through it, a commit parks the rejected
cells that lie before the accepted path and frees the rest. A verify is ONE llama_batch of
every slot's root and tree, each at its own positions; a release frees every cell of the
slot's ids at once, so a finished or cancelled request gives its cells back while the
others go on.

Exactness: with one slot in use this is `LlamaBackend`'s cell order, so `--exact`'s
bit-identity holds as there. With several, the slots' cells interleave in the cache and
flash attention sums them in a different order than a request alone would see: logits may
move by rounding, so bit-identity with a request run alone is only claimed for one request.

The context shares the weights of a loaded `LlamaBackend` (no second copy of the model);
its llama.cpp calls go through `llama.KVContext` (only llama.py imports llama_cpp).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lookahead.backend.base import LogitRows
from lookahead.backend.llama import KVContext, LlamaBackend, _Batch
from lookahead.backend.tree_layout import TreeLayout
from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray
from lookahead.errors import BackendError, ConfigError

# llama.cpp refuses more sequence ids than this in one context (LLAMA_MAX_SEQ in older
# builds; newer ones allow more, this is the safe bound).
MAX_SEQ = 64


class _Slot:
    def __init__(self, index: int, branches: int) -> None:
        self.index = index
        self.base = index * (branches + 1)  # first branch id
        self.park = self.base + branches
        self.ids = np.arange(self.base, self.base + branches, dtype=np.int32)
        self.n_past = 0
        self.parked = 0
        self.layout: TreeLayout | None = None
        self.busy = False


class LlamaSlots:
    """`slots` generations in one llama.cpp context on `backend`'s weights."""

    def __init__(self, backend: LlamaBackend, slots: int) -> None:
        if not 1 <= slots <= MAX_SEQ // 2:
            raise ConfigError(f"slots must be in 1..{MAX_SEQ // 2}, got {slots}")
        config = backend.config
        self.vocab = backend
        self.slots = slots
        self.max_branches = max(1, min(config.max_branches, config.n_batch - 1, MAX_SEQ // slots - 1))
        n_seq = slots * (self.max_branches + 1)
        self._kv = KVContext(backend, n_seq)
        self.n_vocab = backend.n_vocab
        self.n_ctx = self._kv.n_ctx
        self.slot_ctx = self.n_ctx // slots
        self.n_batch = config.n_batch
        self._batch = _Batch(self.n_batch, self.max_branches)
        self._slots = [_Slot(k, self.max_branches) for k in range(slots)]

    def close(self) -> None:
        self._kv.close()

    @property
    def n_threads(self) -> int:
        return self._kv.n_threads

    def set_threads(self, threads: int) -> None:
        """Decode with `threads` threads from the next decode on (the thread governor)."""
        self._kv.set_threads(threads)

    # ---- the vocabulary is the backend's --------------------------------------------------
    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)

    def token_bytes(self, token: int) -> bytes:
        return self.vocab.token_bytes(token)

    # ---- slots ------------------------------------------------------------------------------
    @property
    def n_used(self) -> int:
        """KV cells in use by every slot (committed and parked)."""
        return sum(s.n_past + s.parked for s in self._slots if s.busy)

    def held(self, slot: int) -> bool:
        """Whether llama.cpp still holds a cell of any of the slot's ids (tests: no leaks)."""
        s = self._slots[slot]
        return any(self._kv.seq_pos_max(int(q)) >= 0 for q in [*s.ids.tolist(), s.park])

    def acquire(self) -> int:
        for s in self._slots:
            if not s.busy:
                s.busy = True
                s.n_past = s.parked = 0
                s.layout = None
                return s.index
        raise BackendError("every slot is in use")

    def release(self, slot: int) -> None:
        s = self._slots[slot]
        for seq in [*s.ids.tolist(), s.park]:
            self._kv.seq_rm(int(seq), -1, -1)
        s.busy = False
        s.n_past = s.parked = 0
        s.layout = None

    def reset(self) -> None:
        self._kv.clear()
        for s in self._slots:
            s.busy = False
            s.n_past = s.parked = 0
            s.layout = None

    def slot_past(self, slot: int) -> int:
        return self._slots[slot].n_past

    def slot_used(self, slot: int) -> int:
        s = self._slots[slot]
        return s.n_past + s.parked

    # ---- decoding -----------------------------------------------------------------------
    def prefill(self, slot: int, tokens: TokenArray) -> None:
        s = self._slots[slot]
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(tokens)
        if n > self.n_batch:
            raise BackendError(f"a prefill chunk of {n} tokens exceeds n_batch {self.n_batch}")
        if s.n_past + s.parked + n + 1 > self.slot_ctx:
            raise BackendError(f"{s.n_past + n} tokens do not fit a slot of {self.slot_ctx}")
        if n == 0:
            return
        b = self._batch
        b.token[:n] = tokens
        b.pos[:n] = np.arange(s.n_past, s.n_past + n, dtype=np.int32)
        b.n_seq_id[:n] = 1
        b.seq[:n, 0] = s.base
        b.logits[:n] = 0
        self._kv.decode(b, n)
        for seq in s.ids[1:].tolist():  # every branch id shares the committed prefix
            self._kv.seq_cp(s.base, int(seq), s.n_past, -1)
        s.n_past += n

    def verify(self, items: Sequence[tuple[int, int, Draft]]) -> list[LogitRows]:
        total = sum(len(d) + 1 for _, _, d in items)
        if total > self.n_batch:
            raise BackendError(f"a step of {total} tokens exceeds n_batch {self.n_batch}")
        if self.n_used + total > self.n_ctx:
            raise BackendError("the step does not fit in the context")
        b = self._batch
        b.logits[:total] = 1
        orders: list[np.ndarray] = []
        e = 0
        for slot, root, draft in items:
            s = self._slots[slot]
            if not s.busy:
                raise BackendError(f"slot {slot} is not in use")
            if s.n_past + s.parked + len(draft) + 1 > self.slot_ctx:
                raise BackendError("the draft does not fit in its slot")
            b.token[e] = root
            b.pos[e] = s.n_past
            b.n_seq_id[e] = self.max_branches
            b.seq[e, : self.max_branches] = s.ids
            if len(draft):
                layout = s.layout = TreeLayout(draft, self.max_branches)
                for i, node in enumerate(layout.order, start=e + 1):
                    lo, hi = layout.leaf_range[node]
                    b.token[i] = layout.tokens[node]
                    b.pos[i] = s.n_past + layout.depth[node]
                    b.n_seq_id[i] = hi - lo + 1
                    b.seq[i, : hi - lo + 1] = np.arange(s.base + lo, s.base + hi + 1, dtype=np.int32)
                orders.append(layout.rows + e)
            else:
                s.layout = None
                orders.append(np.array([e], dtype=np.int32))
            e += len(draft) + 1
        self._kv.decode(b, total)
        return [self._kv.rows(len(order), order) for order in orders]

    def commit(self, slot: int, draft: Draft, accepted: list[int]) -> None:
        """`LlamaBackend.commit` within the slot's ids (see its module docstring)."""
        s = self._slots[slot]
        kv = self._kv
        base = s.n_past  # the root's position
        m = len(accepted)
        layout = s.layout
        if layout is None:
            pass
        elif m == 0:
            for leaf in range(layout.n_leaves):
                kv.seq_rm(s.base + leaf, base + 1, -1)
        else:
            x = accepted[-1]
            lo, _ = layout.leaf_range[x]
            keep = s.base + lo
            for leaf in range(layout.n_leaves):
                seq = s.base + leaf
                if leaf < lo:
                    kv.seq_cp(seq, s.park, base + 1, -1)
                if seq != keep:
                    kv.seq_rm(seq, base + 1, -1)
            kv.seq_rm(keep, base + m + 1, -1)
            for seq in s.ids.tolist():
                if seq != keep:
                    kv.seq_cp(keep, int(seq), base + 1, base + m + 1)
            s.parked += layout.parked_before(x, m)
        s.layout = None
        s.n_past = base + m + 1

"""A llama.cpp context holding several generations at once (the batched loop's backend).

The context has `slots` slots, each a `KVSlot` (`lookahead/backend/kv_cache.py`, the same
manager `LlamaBackend` runs as its one slot): slot k owns the sequence ids
k*(B+1) .. k*(B+1)+B-1 (its draft branches, B = branches per slot) and one more,
k*(B+1)+B, where it parks rejected cells; so n_seq_max = slots * (B + 1). A verify is ONE
llama_batch of every slot's root and tree, each at its own positions; a release frees every
cell of the slot's ids at once (or, with the prompt cache, keeps them for the next request
that shares their prefix), so a finished or cancelled request gives its slot back while the
others go on. `best_slot` picks the free slot whose cached tokens share the longest prefix
with a new prompt, as llama.cpp's server picks its slots.

Exactness: with one slot in use this is `LlamaBackend`'s cell order, so `--exact`'s
bit-identity holds as there. With several, the slots' cells interleave in the cache and
flash attention sums them in a different order than a request alone would see: logits may
move by rounding, so bit-identity with a request run alone is only claimed for one request.
With `separate`, each slot is one KV stream of its own (llama.cpp's `kv_unified = false`):
its cells keep a request's solo order whatever its neighbours do, so on a batch-invariant
model each request writes its solo output, drafts on. The price: llama.cpp refuses a batch
entry carrying two sequence ids in that mode, so drafts are chains (one branch per slot, no
trees; a chain never parks, so no park id either).

The context shares the weights of a loaded `LlamaBackend` (no second copy of the model);
its llama.cpp calls go through the `KVContext` the backend makes (only llama.py imports
llama_cpp).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lookahead.backend.base import LogitRows
from lookahead.backend.kv_cache import KVSlot
from lookahead.backend.llama import LlamaBackend
from lookahead.backend.prompt_reuse import barrier_at, choose_slot
from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray
from lookahead.errors import BackendError, ConfigError

# llama.cpp refuses more sequence ids than this in one context (LLAMA_MAX_SEQ in older
# builds; newer ones allow more, this is the safe bound).
MAX_SEQ = 64


class LlamaSlots:
    """`slots` generations in one llama.cpp context on `backend`'s weights."""

    def __init__(self, backend: LlamaBackend, slots: int, separate: bool = False) -> None:
        if not 1 <= slots <= MAX_SEQ // 2:
            raise ConfigError(f"slots must be in 1..{MAX_SEQ // 2}, got {slots}")
        config = backend.config
        self.vocab = backend
        self.slots = slots
        self.separate = separate
        if separate:  # one KV stream per slot: chain drafts, no park id (see the docstring)
            self.max_branches = 1
            n_seq = slots
        else:
            self.max_branches = max(1, min(config.max_branches, config.n_batch - 1, MAX_SEQ // slots - 1))
            n_seq = slots * (self.max_branches + 1)
        self._kv = backend.new_kv(n_seq, unified=not separate)
        self.n_vocab = backend.n_vocab
        self.n_ctx = self._kv.n_ctx
        self.slot_ctx = self.n_ctx // slots
        self.n_batch = config.n_batch
        self._batch = self._kv.new_batch(self.n_batch, self.max_branches)
        b = self.max_branches
        if separate:
            self._slots = [KVSlot(self._kv, k, 1, self.slot_ctx, park=False) for k in range(slots)]
        else:
            self._slots = [KVSlot(self._kv, k * (b + 1), b, self.slot_ctx) for k in range(slots)]
        self.shift_min = config.cache_reuse if self._kv.can_shift else 0  # KV shift (kv_cache.py), 0 = off
        self.shift_barrier = backend.fim_suf()  # the code after an editor's cursor never moves
        for s in self._slots:
            s.shift_min = self.shift_min
            s.shift_barrier = self.shift_barrier
        self._busy = [False] * slots
        self._last_use = [0] * slots  # when each slot was last taken (least recently used first)
        self._owner = [""] * slots  # whose request wrote each slot's cached cells (`acquire`)
        self._uses = 0
        self.cache_hits = 0  # requests that reused cached cells
        self.tokens_cached = 0  # prompt tokens they did not decode again
        self.tokens_shifted = 0  # of those, the ones moved to new positions (KV shift)

    def close(self) -> None:
        self._kv.close()

    @property
    def n_threads(self) -> int:
        return self._kv.n_threads

    def set_threads(self, threads: int) -> None:
        """Decode with `threads` threads from the next decode on (the thread governor)."""
        self._kv.set_threads(threads)

    @property
    def n_decoded(self) -> int:
        """Tokens decoded since the context was made (how much the prompt cache saved)."""
        return self._kv.n_decoded

    # ---- the vocabulary is the backend's --------------------------------------------------
    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)

    def token_bytes(self, token: int) -> bytes:
        return self.vocab.token_bytes(token)

    # ---- slots ------------------------------------------------------------------------------
    @property
    def n_used(self) -> int:
        """KV cells held by every slot (committed and parked; cached ones in free slots too)."""
        return sum(s.n_used for s in self._slots)

    @property
    def n_cached(self) -> int:
        """Committed cells of every slot, kept for the prompt cache (`n_used` less parked cells)."""
        return sum(len(s.cache_tokens) for s in self._slots)

    def held(self, slot: int) -> bool:
        """Whether llama.cpp still holds a cell of any of the slot's ids (tests: no leaks)."""
        return self._slots[slot].holds_cells()

    def best_slot(self, tokens: Sequence[int], owner: str = "", prefer: int = -1) -> int:
        """The free slot whose cached tokens share the longest prefix with `tokens` (with KV
        shift, counting the runs it would move), where that reuses more than it evicts;
        else an empty or the least recently used slot (`kv_cache.choose_slot`). Only
        `owner`'s cached cells count. Slot `prefer` whenever it is free: a client that names
        a slot (llama.cpp's `id_slot`; llama.vim sends 0) keeps its cells there, as in
        llama-server, even when another slot looks as good to the rule above. BackendError
        if none is free."""
        free = [k for k in range(self.slots) if not self._busy[k]]
        if not free:
            raise BackendError("every slot is in use")
        if prefer in free:
            return prefer
        caches = [s.cache_tokens if self._owner[k] == owner else () for k, s in enumerate(self._slots)]
        at = barrier_at(tokens, self.shift_barrier)
        return choose_slot(caches, free, self._last_use, tokens, self.shift_min, gaps=not self.separate, barrier=at)

    def cached_prompts(self, owner: str, first: int = -1) -> list[list[int]]:
        """Copies of the tokens `owner`'s cached cells hold, slot `first` first, then the
        others (free or not: read from another thread, a copy of a list being changed is
        only a guess, as what it serves is)."""
        order = sorted(range(self.slots), key=lambda k: k != first)
        return [list(self._slots[k].cache_tokens) for k in order if self._owner[k] == owner]

    def acquire(
        self, tokens: Sequence[int] = (), cache: bool = False, owner: str = "", prefer: int = -1
    ) -> tuple[int, int]:
        """Take a free slot for a request whose committed prompt will be `tokens`: with
        `cache`, the one sharing the longest prefix, keeping those cells (`KVSlot.reuse`);
        else the least recently used, emptied. Cells cached by another `owner` (another API
        key's request) are never reused: a tenant must not learn another's prompt from
        what was cached. Returns (slot, tokens kept)."""
        k = self.best_slot(tokens if cache else (), owner, prefer)
        self._busy[k] = True
        self._uses += 1
        self._last_use[k] = self._uses
        s = self._slots[k]
        foreign = self._owner[k] != owner
        self._owner[k] = owner
        if not cache or foreign:
            s.clear()
            return k, 0
        kept = s.reuse(tokens, refill=None if self.separate else lambda t: self._refill(k, t))
        if kept:
            self.cache_hits += 1
            self.tokens_cached += kept - s.refilled
            self.tokens_shifted += s.shifted
        return k, kept

    def _refill(self, slot: int, tokens: TokenArray) -> None:
        """Decode new tokens between the runs a reuse moves (`KVSlot.reuse`), a batch at a time."""
        for lo in range(0, len(tokens), self.n_batch):
            self.prefill(slot, tokens[lo : lo + self.n_batch])

    def slot_shifted(self, slot: int) -> int:
        """Of the tokens the slot kept when last taken, those moved to new positions."""
        return self._slots[slot].shifted

    def slot_refilled(self, slot: int) -> int:
        """Of the tokens the slot kept when last taken, the new ones decoded between moved runs."""
        return self._slots[slot].refilled

    def fork(self, src: int, dst: int, n: int) -> None:
        """Give slot `dst` (taken, its cells freed) the first `n` committed cells of slot
        `src`, decoded once for both: the choices of one request (OpenAI's `n`) share their
        prompt. One KV stream per slot: llama.cpp copies a stream only whole, so the copy
        is then cut to `n`; in one stream the cells are shared, not copied."""
        a, b = self._slots[src], self._slots[dst]
        if not 0 <= n <= a.n_past or not self._busy[dst] or b.n_used:
            raise BackendError(f"cannot fork {n} cells of slot {src} into slot {dst}")
        if self.separate:
            self._kv.seq_cp(a.base, b.base, -1, -1)
            self._kv.seq_rm(b.base, n, -1)
        else:
            for seq in b.ids.tolist():
                self._kv.seq_cp(a.base, int(seq), 0, n)
        b.n_past = n
        b.cache_tokens = a.cache_tokens[:n]

    def release(self, slot: int, keep: bool = False) -> None:
        """Give the slot back: its cells freed, or with `keep` left for the prompt cache."""
        s = self._slots[slot]
        if not keep:
            s.clear()
        s.layout = None
        self._busy[slot] = False

    def reset(self) -> None:
        self._kv.clear()
        for k, s in enumerate(self._slots):
            s.forget()
            self._busy[k] = False

    def slot_past(self, slot: int) -> int:
        return self._slots[slot].n_past

    def slot_used(self, slot: int) -> int:
        return self._slots[slot].n_used

    def cache_tokens(self, slot: int) -> list[int]:
        """The tokens the slot's committed cells hold, in order."""
        return self._slots[slot].cache_tokens

    # ---- decoding -----------------------------------------------------------------------
    def prefill(self, slot: int, tokens: TokenArray) -> None:
        s = self._slots[slot]
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(tokens)
        if n > self.n_batch:
            raise BackendError(f"a prefill chunk of {n} tokens exceeds n_batch {self.n_batch}")
        s.put_prefill(self._batch, 0, tokens)  # checks the slot's room first
        if n == 0:
            return
        self._kv.decode(self._batch, n)
        s.prefilled(tokens)

    def verify(self, items: Sequence[tuple[int, int, Draft]]) -> list[LogitRows]:
        total = sum(len(d) + 1 for _, _, d in items)
        if total > self.n_batch:
            raise BackendError(f"a step of {total} tokens exceeds n_batch {self.n_batch}")
        if self.n_used + total > self.n_ctx:
            raise BackendError("the step does not fit in the context")
        orders: list[np.ndarray] = []
        e = 0
        for slot, root, draft in items:
            if not self._busy[slot]:
                raise BackendError(f"slot {slot} is not in use")
            orders.append(self._slots[slot].put_verify(self._batch, e, root, draft))
            e += len(draft) + 1
        self._kv.decode(self._batch, total)
        return [self._kv.rows(len(order), order) for order in orders]

    def commit(self, slot: int, draft: Draft, accepted: list[int]) -> None:
        """`KVSlot.commit` for the slot's part of the last verify."""
        self._slots[slot].commit(draft, accepted)

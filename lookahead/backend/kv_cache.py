"""The KV cache manager: one generation's cells in a llama.cpp context, written once.

A `KVSlot` owns a range of sequence ids in a context: B branch ids (`ids`, one per leaf of
a draft tree) and one more (`park`) that no batch ever carries. It fills its part of a batch
(prefill chunks, a verify's root and tree), keeps the committed cells after a verify (the
park rule below), and remembers which tokens its committed cells hold (`cache_tokens`), so
a new prompt that shares a prefix with them decodes only the rest (the prompt cache).
`LlamaBackend` is one slot over a whole context; `LlamaSlots` is several in one context.

Pure numpy: the llama.cpp calls it needs are the four of `KVOps` (llama.py's `KVContext`
implements them), so its rules are tested without a model.

Tree batch layout (each node is one batch entry at position n_past + depth; every branch,
root to leaf, is one sequence id):

     depth:        0        1        2        3
     tokens:     [root] ── [a] ──── [b] ──── [c]        leaf c  -> seq 0
                      └─── [a'] ─── [d]                 leaf d  -> seq 1
     entries:    root{0..S-1}  a{0}  b{0}  c{0}  a'{1}  d{1}

Entries go in depth-first preorder (children best-first) and leaves are numbered left to
right, so the leaves below any node are a range of seq ids (`tree_layout.TreeLayout`).

llama.cpp builds the attention mask from the FIRST seq id of each entry and the cells that
carry it, so every branch id must see the whole committed prefix. Invariant between steps:
every committed cell carries all B branch ids; the only other cells are "parked" ones, which
carry just the park id, so nobody attends to them. The root carries all B ids (the batch
validator wants coupled sequences to stay equal).

The park rule (what makes `--exact` true). Why park instead of free: llama.cpp's CPU flash
attention (which makes batched logits bit-identical to one-token decoding) sums the live
cells in cache order, and a freed cell before a live one is refilled by a later token,
changing that order and moving logits by up to ~0.6. Cells are taken in batch order, so with
the preorder layout, for an accepted path ending at x (leaves below x = [lo, hi], keep = lo):
  1. branches left of x (seq < lo) lie before x: park their cells below the accepted path
     (cp to park, rm);
  2. every other branch (seq > lo) lies after x: free its cells; keep's cells deeper
     than x too;
  3. copy keep's accepted cells to every other branch id.
Nothing is recomputed: the accepted cells hold exactly the K/V that one-by-one decoding
would have produced. Parked cells cost capacity (`n_used`) until the slot is cleared; with
best-first children the accepted path is usually leftmost and parks nothing.

The prompt cache keeps that order: it frees the committed cells past the common prefix,
which all lie after the kept ones, and keeps parked cells (freeing a parked cell could open
a hole before a live one), so a new tail goes after the kept prefix as a cold start's would.
Only when the parked cells outnumber the kept ones or leave the new prompt no room are they
freed, holes and all (the output is then close to a cold start's, not bit for bit: exact
requests never reuse cells, so nothing promised changes).

KV shift (llama.cpp's `--cache-reuse N`, off when `shift_min` is 0): past the common prefix,
runs of at least N prompt tokens that the cells hold further on (an editor's window that
dropped its first line) are moved to their new positions (`seq_add`; llama.cpp re-rotates
their keys, RoPE being relative) and kept, and the cells between them freed (`shift_plan`).
A moved cell keeps the K/V it was decoded with, which saw the tokens since dropped: the
output is close to a cold start's, not bit for bit (and the holes left change the order
flash attention sums in), which is why exact requests never reuse cells at all. Where a new
prompt token begins no cached run, llama.cpp's walk ends; given a way to decode (`refill`),
`reuse` goes on past the new tokens to the next run, decodes them in place and puts the run
after them (see `KVSlot.reuse`): an editor's window whose cached copy lost more lines at its
top than the new prompt did is kept, not decoded again. The code after an editor's cursor
(from a fill-in-the-middle prompt's suffix marker on) is never moved: cells decoded before
the line just typed made the model write that line again (`prompt_reuse.shift_plan`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from lookahead.backend.prompt_reuse import barrier_at, common_prefix, shift_plan, split_at_gap
from lookahead.backend.tree_layout import TreeLayout
from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray
from lookahead.errors import BackendError

# Where runs waiting for new tokens before them are put aside (`KVSlot.reuse`): past any
# position a context holds.
_ASIDE = 1 << 24


class KVOps(Protocol):
    """The llama.cpp memory calls a slot needs (`llama_memory_seq_*`)."""

    def seq_rm(self, seq: int, p0: int, p1: int) -> None:
        """Free the cells of `seq` at positions [p0, p1) (-1: open end; seq -1: every id)."""
        ...

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        """Add `dst` to the cells of `src` at positions [p0, p1)."""
        ...

    def seq_pos_max(self, seq: int) -> int:
        """The last position `seq` holds a cell at, -1 if none."""
        ...

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move the cells of `seq` at positions [p0, p1) by `delta` (a cell's position is
        its own, not per id: a cell that also carries other ids moves for them too)."""
        ...


class BatchArrays:
    """The arrays of one llama_batch as numpy buffers (llama.py points a llama_batch at them).

    Entry e decodes `token[e]` at `pos[e]` for the sequence ids `seq[e, :n_seq_id[e]]`,
    with logits when `logits[e]`.
    """

    def __init__(self, capacity: int, n_seq: int) -> None:
        self.capacity = capacity
        self.n_seq = n_seq
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros((capacity, n_seq), dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)


class KVSlot:
    """One generation's cells: branch ids base..base+B-1, park id base+B, at most
    `capacity` cells (committed and parked).

    State: `n_past` committed tokens (`cache_tokens`, their ids in position order), each
    cell carrying every branch id; `parked` masked cells. A verify's root is not committed
    until `commit`.
    """

    def __init__(self, kv: KVOps, base: int, branches: int, capacity: int, park: bool = True) -> None:
        if not park and branches != 1:
            raise ValueError("a slot without a park id drafts chains only (one branch id)")
        self.kv = kv
        self.base = base
        self.branches = branches
        # a chain's rejected cells all lie after the kept ones: one branch never parks, so
        # a slot of one branch may go without the park id (one KV stream per sequence)
        self.park = base + branches if park else -1
        self.ids = np.arange(base, base + branches, dtype=np.int32)
        self.capacity = capacity
        self.n_past = 0
        self.parked = 0
        self.cache_tokens: list[int] = []  # the tokens of the committed cells, in order
        self.layout: TreeLayout | None = None  # the last verify's tree (None: root alone)
        self.root = 0  # the last verify's root
        # KV shift (llama.cpp's --cache-reuse): the shortest cached run `reuse` moves to a
        # new position; 0 = off. The owner sets it, to 0 where the model cannot shift.
        self.shift_min = 0
        # a fill-in-the-middle prompt's suffix marker: no run is moved from its last place in
        # a prompt on (`shift_plan`'s barrier); None: the model has none
        self.shift_barrier: int | None = None
        self.shifted = 0  # of the tokens the last `reuse` kept, those it moved
        self.refilled = 0  # new tokens the last `reuse` decoded between moved runs

    def _own_ids(self) -> list[int]:
        return [*self.ids.tolist(), *([self.park] if self.park >= 0 else [])]

    @property
    def n_used(self) -> int:
        """Cells this slot holds: committed plus parked."""
        return self.n_past + self.parked

    # ---- lifetime -----------------------------------------------------------------------
    def forget(self) -> None:
        """Empty the bookkeeping (the caller freed the cells, e.g. by clearing the context)."""
        self.n_past = self.parked = self.shifted = self.refilled = 0
        self.cache_tokens = []
        self.layout = None

    def clear(self) -> None:
        """Free every cell of the slot's ids (committed, draft and parked)."""
        for seq in self._own_ids():
            self.kv.seq_rm(int(seq), -1, -1)
        self.forget()

    def holds_cells(self) -> bool:
        """Whether llama.cpp still holds a cell of any of the slot's ids."""
        return any(self.kv.seq_pos_max(int(q)) >= 0 for q in self._own_ids())

    def truncate(self, n_past: int) -> None:
        """Keep only the first `n_past` committed tokens; parked cells go too (self-tests)."""
        for seq in self._own_ids():
            self.kv.seq_rm(int(seq), n_past, -1)
        self.n_past = n_past
        self.parked = 0
        del self.cache_tokens[n_past:]
        self.layout = None

    # ---- the prompt cache -----------------------------------------------------------------
    def reuse(self, tokens: Sequence[int], refill: Callable[[TokenArray], None] | None = None) -> int:
        """Keep the committed cells of the longest common prefix of `cache_tokens` and
        `tokens` (with `shift_min`, and the runs `shift_plan` moves after it), free the
        rest; returns how many tokens of `tokens` the slot then holds, its first ones (0:
        the slot is now empty). `shifted` says how many of them were moved.

        With `refill` (decodes tokens after the committed ones, as `put_prefill` and
        `prefilled` do) and a park id, the walk may pass new prompt tokens to reach a run
        further on (`shift_plan`'s `gaps`): those runs wait under the park id alone (no
        batch carries it, so llama.cpp's rule that a sequence's new tokens follow its last
        cell holds), already at their new positions, while `refill` decodes the new tokens
        before each; then every branch id takes them back. `refilled` says how many tokens
        `refill` decoded (counted in the return value, not cached). Parked cells are freed
        first: the park id holds the waiting runs.

        Parked cells stay (see the module docstring), unless they outnumber the kept tokens
        or leave no room for `tokens`: then they are freed and the kept cells stay.
        """
        k = common_prefix(self.cache_tokens, tokens)
        gaps = refill is not None and self.park >= 0
        barrier = barrier_at(tokens, self.shift_barrier)
        plan = shift_plan(self.cache_tokens, tokens, k, self.shift_min, gaps=gaps, barrier=barrier)
        kept = k + sum(n for _, _, n in plan)
        self.shifted = self.refilled = 0
        plan, waiting = split_at_gap(plan, k)  # runs put back at once, and runs that wait
        if kept and self.parked and (waiting or self.parked > kept or self.parked + len(tokens) + 1 > self.capacity):
            # the parked cells, not the prompt, are in the way: free them, not the cache (an
            # editor's drafts rejected over many requests filled a 4k context and made every
            # keystroke a cold start). The holes they leave change the order flash attention
            # sums in: close to a cold start's output, not bit for bit, as a shift is.
            self.kv.seq_rm(self.park, -1, -1)
            self.parked = 0
        if kept == 0 or self.parked + len(tokens) + 1 > self.capacity:
            self.clear()
            return 0
        kv, ids = self.kv, self.ids.tolist()
        for c0, p0, n in plan:
            # the cells between the last run and this one go; this one moves back onto them
            # (each committed cell carries every branch id but has one position: one seq_add)
            for seq in ids:
                kv.seq_rm(int(seq), p0, c0)
            kv.seq_add(self.base, c0, c0 + n, p0 - c0)
            self.shifted += n
        end = plan[-1][1] + plan[-1][2] if plan else k
        for c0, p0, n in waiting:
            # under the park id alone, parked far past every position (runs may move forward
            # over one another's old places), then brought down to where they go
            kv.seq_cp(self.base, self.park, c0, c0 + n)
            for seq in ids:
                kv.seq_rm(int(seq), c0, c0 + n)
            kv.seq_add(self.park, c0, c0 + n, _ASIDE + p0 - c0)
        if end < self.n_past:
            for seq in ids:
                kv.seq_rm(int(seq), end, -1)
        self.n_past = end
        self.cache_tokens = [int(t) for t in tokens[:end]]
        self.layout = None
        if not waiting:
            return kept
        kv.seq_add(self.park, _ASIDE, -1, -_ASIDE)
        try:
            for _, p0, n in waiting:
                gap = np.asarray(tokens[self.n_past : p0], dtype=np.int32)
                refill(gap)  # type: ignore[misc]  # `waiting` is empty without it
                self.refilled += len(gap)
                for seq in ids:
                    kv.seq_cp(self.park, int(seq), p0, p0 + n)
                kv.seq_rm(self.park, p0, p0 + n)
                self.n_past = p0 + n
                self.cache_tokens.extend(int(t) for t in tokens[p0 : p0 + n])
                self.shifted += n
        except BaseException:
            self.clear()  # a refill stopped part way: nothing half-placed stays
            raise
        return self.n_past

    # ---- filling a batch ------------------------------------------------------------------
    def put_prefill(self, batch: BatchArrays, e: int, tokens: TokenArray) -> int:
        """Entries e.. decode `tokens` after the committed prefix (first branch id only, no
        logits); returns the next free entry. Call `prefilled` once the batch is decoded."""
        n = len(tokens)
        if self.n_used + n + 1 > self.capacity:
            raise BackendError(f"{self.n_past + n} tokens do not fit a context of {self.capacity}")
        batch.token[e : e + n] = tokens
        batch.pos[e : e + n] = np.arange(self.n_past, self.n_past + n, dtype=np.int32)
        batch.n_seq_id[e : e + n] = 1
        batch.seq[e : e + n, 0] = self.base
        batch.logits[e : e + n] = 0
        return e + n

    def prefilled(self, tokens: TokenArray) -> None:
        """`tokens` (put by `put_prefill`) are decoded: every branch id shares them."""
        for seq in self.ids[1:].tolist():
            self.kv.seq_cp(self.base, int(seq), self.n_past, -1)
        self.n_past += len(tokens)
        self.cache_tokens.extend(int(t) for t in tokens)

    def put_verify(self, batch: BatchArrays, e: int, root: int, draft: Draft) -> np.ndarray:
        """Entries e.. decode `root` and every node of `draft` (with logits); returns the
        batch entry of each logits row (row 0 the root, row i + 1 node i)."""
        n = len(draft) + 1
        if self.n_used + n > self.capacity:
            raise BackendError("the draft does not fit in the context")
        b = self.branches
        batch.token[e] = root
        batch.pos[e] = self.n_past
        batch.n_seq_id[e] = b
        batch.seq[e, :b] = self.ids
        batch.logits[e : e + n] = 1
        self.root = int(root)
        if not len(draft):
            self.layout = None
            return np.array([e], dtype=np.int32)
        layout = self.layout = TreeLayout(draft, b)
        for i, node in enumerate(layout.order, start=e + 1):
            lo, hi = layout.leaf_range[node]
            batch.token[i] = layout.tokens[node]
            batch.pos[i] = self.n_past + layout.depth[node]
            batch.n_seq_id[i] = hi - lo + 1
            batch.seq[i, : hi - lo + 1] = np.arange(self.base + lo, self.base + hi + 1, dtype=np.int32)
        return layout.rows + e

    # ---- after a verify -------------------------------------------------------------------
    def commit(self, draft: Draft, accepted: list[int]) -> None:
        """Keep the root and the accepted node path (root-to-leaf order) by the park rule."""
        kv = self.kv
        base = self.n_past  # the root's position
        m = len(accepted)
        layout = self.layout
        if layout is None:
            pass
        elif m == 0:
            # every draft cell sits after the root's: freeing them leaves no hole. Remove by
            # branch id, never with -1, which would also free parked cells past the root.
            for leaf in range(layout.n_leaves):
                kv.seq_rm(self.base + leaf, base + 1, -1)
        else:
            x = accepted[-1]
            lo, _ = layout.leaf_range[x]
            keep = self.base + lo
            ranges = [layout.leaf_range[i] for i in accepted]
            for leaf in range(layout.n_leaves):
                seq = self.base + leaf
                if leaf < lo:  # before x in the cache: park, never leave a hole
                    # only below the deepest accepted node on its branch: the accepted
                    # cells it shares stay live (and carry no park id)
                    shared = sum(1 for a, b in ranges if a <= leaf <= b)
                    kv.seq_cp(seq, self.park, base + shared + 1, -1)
                if seq != keep:
                    kv.seq_rm(seq, base + 1, -1)
            kv.seq_rm(keep, base + m + 1, -1)  # x's own descendants lie after x
            for seq in self.ids.tolist():  # the accepted cells are every branch's again
                if seq != keep:
                    kv.seq_cp(keep, int(seq), base + 1, base + m + 1)
            self.parked += layout.parked_before(x, m)
        self.layout = None
        self.n_past = base + m + 1
        self.cache_tokens.append(self.root)
        self.cache_tokens.extend(int(draft.tokens[i]) for i in accepted)

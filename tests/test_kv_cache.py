"""The KV cache manager's rules on a cell-level stand-in for llama.cpp's cache, no model:
after any sequence of verifies, commits and prompt-cache reuses, the live cells hold exactly
the committed tokens, in position order, with no free cell before a live one (what keeps
flash attention's sums, and so `--exact`, as one-by-one decoding would have them)."""

from __future__ import annotations

import numpy as np
import pytest

from lookahead.backend.kv_cache import BatchArrays, KVSlot
from lookahead.backend.prompt_reuse import choose_slot, common_prefix
from lookahead.core.draft import Draft
from lookahead.errors import BackendError
from tests.trees import random_tree

B = 4  # branch ids per slot


class Cells:
    """llama.cpp's unified cache, reduced to what order depends on: each cell is empty or
    holds (position, token, seq ids); a decode takes the first empty cells in batch order."""

    def __init__(self, size: int) -> None:
        self.cells: list[tuple[int, int, set[int]] | None] = [None] * size

    def decode(self, batch: BatchArrays, n: int) -> None:
        free = (i for i, c in enumerate(self.cells) if c is None)
        for e in range(n):
            seqs = {int(q) for q in batch.seq[e, : batch.n_seq_id[e]]}
            self.cells[next(free)] = (int(batch.pos[e]), int(batch.token[e]), seqs)

    def seq_rm(self, seq: int, p0: int, p1: int) -> None:
        for i, c in enumerate(self.cells):
            if c is None or not (p0 < 0 or c[0] >= p0) or not (p1 < 0 or c[0] < p1):
                continue
            if seq < 0:
                c[2].clear()
            else:
                c[2].discard(seq)
            if not c[2]:
                self.cells[i] = None

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        for c in self.cells:
            if c is not None and src in c[2] and (p0 < 0 or c[0] >= p0) and (p1 < 0 or c[0] < p1):
                c[2].add(dst)

    def seq_pos_max(self, seq: int) -> int:
        return max((c[0] for c in self.cells if c is not None and seq in c[2]), default=-1)


def check(cells: Cells, slot: KVSlot) -> None:
    """The manager's invariant, read off the cells."""
    ids = set(slot.ids.tolist())
    live = [(i, c) for i, c in enumerate(cells.cells) if c is not None and c[2] & ids]
    assert all(c[2] == ids for _, c in live), "a committed cell lacks a branch id"
    assert [c[0] for _, c in live] == list(range(slot.n_past)), "live cells out of position order"
    assert [c[1] for _, c in live] == slot.cache_tokens
    if live:
        last = live[-1][0]
        assert all(c is not None for c in cells.cells[:last]), "a hole before a live cell"
    parked = [c for c in cells.cells if c is not None and not c[2] & ids]
    assert all(c[2] == {slot.park} for c in parked)
    assert len(parked) == slot.parked


def step(cells: Cells, slot: KVSlot, batch: BatchArrays, rng: np.random.Generator) -> None:
    draft = random_tree(rng, 50, int(rng.integers(1, B + 1)), p_root=0.4) if rng.random() < 0.8 else Draft.empty()
    slot.put_verify(batch, 0, int(rng.integers(0, 50)), draft)
    cells.decode(batch, len(draft) + 1)
    node = int(rng.integers(-1, len(draft))) if len(draft) else -1
    slot.commit(draft, draft.path_to(node) if node >= 0 else [])


def prefill(cells: Cells, slot: KVSlot, batch: BatchArrays, tokens: list[int]) -> None:
    arr = np.asarray(tokens, dtype=np.int32)
    slot.put_prefill(batch, 0, arr)
    cells.decode(batch, len(arr))
    slot.prefilled(arr)


@pytest.mark.parametrize("seed", range(8))
def test_commits_keep_live_cells_in_order_with_no_hole(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cells = Cells(4096)
    slot = KVSlot(cells, 0, B, 4096)
    batch = BatchArrays(64, B)
    prefill(cells, slot, batch, rng.integers(0, 50, 20).tolist())
    for _ in range(40):
        step(cells, slot, batch, rng)
        check(cells, slot)
    assert slot.parked > 0, "the test should exercise parked cells"


@pytest.mark.parametrize("seed", range(8))
def test_prompt_cache_keeps_the_common_prefix_and_the_order(seed: int) -> None:
    """Several requests in a row on one slot: each keeps what it shares with the cells
    (cut anywhere, even inside the previous generation's output) and decodes the rest
    after it, as a cold start would lay it out."""
    rng = np.random.default_rng(seed)
    cells = Cells(4096)
    slot = KVSlot(cells, 5, B, 4096)  # ids 5..8, park 9: not the context's first ids
    batch = BatchArrays(64, B + 10)
    for _ in range(6):
        old = list(slot.cache_tokens)
        cut = int(rng.integers(0, len(old) + 1))
        prompt = old[:cut] + rng.integers(0, 50, int(rng.integers(1, 30))).tolist()
        kept = slot.reuse(prompt)
        assert kept == 0 or kept == common_prefix(old, prompt)
        assert slot.cache_tokens == prompt[:kept]
        check(cells, slot)
        prefill(cells, slot, batch, prompt[kept:])
        check(cells, slot)
        for _ in range(int(rng.integers(1, 12))):
            step(cells, slot, batch, rng)
            check(cells, slot)


def test_reuse_starts_cold_when_nothing_is_shared() -> None:
    cells = Cells(256)
    slot = KVSlot(cells, 0, B, 256)
    batch = BatchArrays(64, B)
    prefill(cells, slot, batch, [1, 2, 3, 4])
    assert slot.reuse([9, 9]) == 0
    assert slot.n_used == 0 and not slot.holds_cells()
    assert all(c is None for c in cells.cells)


def test_reuse_keeps_everything_for_a_longer_prompt_with_the_same_start() -> None:
    cells = Cells(256)
    slot = KVSlot(cells, 0, B, 256)
    batch = BatchArrays(64, B)
    prefill(cells, slot, batch, [1, 2, 3, 4])
    assert slot.reuse([1, 2, 3, 4, 5, 6]) == 4
    assert slot.n_past == 4


def test_a_full_slot_refuses_a_prefill() -> None:
    cells = Cells(16)
    slot = KVSlot(cells, 0, B, 8)
    batch = BatchArrays(16, B)
    with pytest.raises(BackendError, match="do not fit"):
        slot.put_prefill(batch, 0, np.arange(8, dtype=np.int32))


def test_common_prefix() -> None:
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([5], [6]) == 0


def test_a_slot_without_a_park_id_drafts_chains_and_never_parks() -> None:
    """One KV stream per sequence (llama.cpp's kv_unified off) allows no cell shared by two
    ids: a slot of one branch and no park id still keeps every invariant."""
    rng = np.random.default_rng(3)
    cells = Cells(1024)
    slot = KVSlot(cells, 2, 1, 1024, park=False)
    batch = BatchArrays(16, 1)
    prefill(cells, slot, batch, rng.integers(0, 50, 10).tolist())
    for _ in range(30):
        chain = Draft.chain(rng.integers(0, 50, int(rng.integers(0, 6))).tolist())
        slot.put_verify(batch, 0, int(rng.integers(0, 50)), chain)
        assert all(batch.n_seq_id[: len(chain) + 1] == 1)  # no entry carries two ids
        cells.decode(batch, len(chain) + 1)
        slot.commit(chain, list(range(int(rng.integers(0, len(chain) + 1)))))
        check(cells, slot)
    assert slot.parked == 0
    assert slot.reuse(slot.cache_tokens[:5]) == 5
    slot.clear()
    assert not slot.holds_cells()
    with pytest.raises(ValueError, match="chains only"):
        KVSlot(cells, 0, 2, 1024, park=False)


# ---- which slot a prompt takes (`choose_slot`) ---------------------------------------------
def test_a_prompt_takes_the_slot_holding_its_prefix() -> None:
    caches = [[9, 9, 9], [1, 2, 3, 4], []]
    assert choose_slot(caches, [0, 1, 2], [3, 1, 0], [1, 2, 3, 4, 5]) == 1


def test_a_prompt_sharing_only_a_short_head_leaves_another_conversation_cached() -> None:
    """A new chat shares its system prompt (3 tokens) with the slot of a conversation that
    holds 8: it takes the empty slot, not that one."""
    system = [7, 7, 7]
    caches = [[*system, 1, 2, 3, 4, 5], []]
    assert choose_slot(caches, [0, 1], [1, 0], [*system, 6, 6]) == 1
    # with no empty slot it takes the least recently used one
    caches = [[*system, 1, 2, 3, 4, 5], [4, 4, 4]]
    assert choose_slot(caches, [0, 1], [2, 1], [*system, 6, 6]) == 1
    assert choose_slot(caches, [0, 1], [1, 2], [*system, 6, 6]) == 0


def test_only_free_slots_are_chosen() -> None:
    caches = [[1, 2, 3], [5]]
    assert choose_slot(caches, [1], [0, 0], [1, 2, 3, 4]) == 1


def test_parked_cells_in_the_way_are_freed_not_the_cache() -> None:
    # an editor's requests: drafts rejected over many of them parked more cells than the
    # prompt keeps; the next prompt once started cold (every keystroke read the whole window)
    rng = np.random.default_rng(0)
    cells = Cells(512)
    slot = KVSlot(cells, 0, B, 512)
    batch = BatchArrays(64, B)
    prompt = rng.integers(0, 50, 40).tolist()
    prefill(cells, slot, batch, prompt)
    while slot.parked <= 60:
        step(cells, slot, batch, rng)
    assert slot.parked > 40
    kept = slot.reuse(prompt[:30] + [7, 7, 7])
    assert kept == 30 and slot.parked == 0 and slot.cache_tokens == prompt[:30]
    assert not any(c is not None and c[2] == {slot.park} for c in cells.cells)  # no parked cell left

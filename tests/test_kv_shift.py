"""KV shift (llama.cpp's `--cache-reuse N`), no model: the walk that finds the cached runs a
new prompt holds further back (against llama.cpp's own one-cell-at-a-time loop), and the
slot's cells after a shift: each committed token's cell at its prompt position, carrying
every branch id, and nothing else of the slot's but parked cells."""

from __future__ import annotations

import numpy as np
import pytest

from lookahead.backend.kv_cache import BatchArrays, KVSlot
from lookahead.backend.prompt_reuse import barrier_at, choose_slot, common_prefix, reusable, shift_plan
from tests.test_kv_cache import B, Cells, prefill, step


class ShiftCells(Cells):
    """`Cells` with llama.cpp's `seq_add`: a cell has one position, whatever ids it carries."""

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        for i, c in enumerate(self.cells):
            if c is not None and seq in c[2] and c[0] >= p0 and (p1 < 0 or c[0] < p1):
                self.cells[i] = (c[0] + delta, c[1], c[2])


def llama_walk(cache: list[int], prompt: list[int], n_past: int, n_reuse: int) -> list[tuple[int, int, int]]:
    """llama.cpp server's loop, as written there: head_c steps one cell at a time."""
    plan = []
    head_c = head_p = n_past
    while head_c < len(cache) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= n_reuse:
            plan.append((head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return plan


_line_ids = iter(range(1000, 10**6))


def lines(rng: np.random.Generator, n: int, width: int = 6) -> list[list[int]]:
    """`n` lines of `width` tokens, each begun by a token no other line has (a line number)."""
    return [[next(_line_ids), *rng.integers(0, 40, width - 1).tolist()] for _ in range(n)]


def flat(chunks: list[list[int]]) -> list[int]:
    return [t for c in chunks for t in c]


def test_a_window_that_drops_its_first_line_moves_the_rest_back() -> None:
    rng = np.random.default_rng(0)
    head, window, tail = rng.integers(50, 60, 10).tolist(), lines(rng, 20), rng.integers(60, 70, 8).tolist()
    cache = head + flat(window) + tail
    prompt = head + flat(window[1:]) + [99, 98] + tail
    moved = len(flat(window[1:]))
    assert shift_plan(cache, prompt, 10, 16) == [(10 + 6, 10, moved)]
    assert reusable(cache, prompt, 16) == 10 + moved
    assert shift_plan(cache, prompt, 10, moved + 1) == []  # shorter than N: not moved
    assert shift_plan(cache, prompt, 10, 0) == []  # off
    assert reusable(cache, prompt, 0) == 10


def test_two_dropped_pieces_make_two_runs_and_an_inserted_one_ends_the_walk() -> None:
    a, b, c, d, e = ([k] * 3 + list(range(10 * k, 10 * k + 7)) for k in range(1, 6))
    cache = a + b + c + d + e
    assert shift_plan(cache, a + c + e, 10, 5) == [(20, 10, 10), (40, 20, 10)]
    # a new piece before c: no run starts there, so nothing moves (llama.cpp moves cells back only)
    assert shift_plan(cache, a + [7, 7] + c + e, 10, 5) == []


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_finds_what_llama_cpps_loop_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pieces = lines(rng, 12, width=int(rng.integers(2, 8)))
    cache = flat(pieces)
    keep = sorted(rng.choice(12, size=int(rng.integers(1, 12)), replace=False).tolist())
    prompt = flat([pieces[i] for i in keep])
    if rng.random() < 0.5:
        at = int(rng.integers(0, len(prompt) + 1))
        prompt[at:at] = rng.integers(0, 40, int(rng.integers(1, 4))).tolist()
    k = common_prefix(cache, prompt)
    for n in (1, 3, 6, 12):
        assert shift_plan(cache, prompt, k, n) == llama_walk(cache, prompt, k, n)


def check_shifted(cells: Cells, slot: KVSlot) -> None:
    """After a shift: the committed tokens' cells at positions 0..n_past-1, one each, with
    every branch id; the slot's other cells are parked ones."""
    ids = set(slot.ids.tolist())
    live = sorted((c[0], c[1]) for c in cells.cells if c is not None and c[2] & ids)
    assert all(c[2] == ids for c in cells.cells if c is not None and c[2] & ids)
    assert [p for p, _ in live] == list(range(slot.n_past))
    assert [t for _, t in live] == slot.cache_tokens
    parked = [c for c in cells.cells if c is not None and not c[2] & ids]
    assert all(c[2] == {slot.park} for c in parked) and len(parked) == slot.parked


@pytest.mark.parametrize("seed", range(8))
def test_a_shifted_slot_holds_the_prompt_at_its_positions_through_later_steps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cells = ShiftCells(4096)
    slot = KVSlot(cells, 3, B, 4096)  # ids 3..6, park 7
    slot.shift_min = 8
    batch = BatchArrays(256, B + 10)
    window = lines(rng, 30)
    prefill(cells, slot, batch, flat(window))
    for turn in range(1, 5):
        for _ in range(int(rng.integers(1, 8))):  # drafts, some rejected (parked cells)
            step(cells, slot, batch, rng)
        window = window[1:] + lines(rng, 1)  # the window slides by a line
        prompt = flat(window)
        plan = shift_plan(slot.cache_tokens, prompt, common_prefix(slot.cache_tokens, prompt), 8)
        kept = slot.reuse(prompt)
        assert plan and kept == len(prompt) - 6 and slot.shifted == kept, f"turn {turn}"
        assert slot.cache_tokens == prompt[:kept]
        check_shifted(cells, slot)
        prefill(cells, slot, batch, prompt[kept:])
        check_shifted(cells, slot)


def test_without_shift_min_only_the_common_prefix_is_kept() -> None:
    rng = np.random.default_rng(1)
    cells = ShiftCells(1024)
    slot = KVSlot(cells, 0, B, 1024)
    window = lines(rng, 10)
    prefill(cells, slot, BatchArrays(256, B), flat(window))
    assert slot.reuse(flat(window[1:])) == 0 and slot.shifted == 0  # shares no prefix: cold


def test_a_slot_holding_a_movable_run_is_chosen_over_an_empty_one() -> None:
    rng = np.random.default_rng(2)
    head, window = [1, 2, 3], lines(rng, 20)
    caches = [head + flat(window) + [5] * 30, []]
    prompt = head + flat(window[1:]) + [9]
    assert choose_slot(caches, [0, 1], [1, 2], prompt) == 1  # the shared head alone is too little
    assert choose_slot(caches, [0, 1], [1, 2], prompt, min_run=16) == 0


def test_with_gaps_the_walk_passes_new_tokens_to_the_next_run() -> None:
    a, b, c, d, e = ([k] * 3 + list(range(10 * k, 10 * k + 7)) for k in range(1, 6))
    cache = a + b + c + d + e
    new = a + [7, 7] + c + e
    assert shift_plan(cache, new, 10, 5, gaps=True) == [(20, 12, 10), (40, 22, 10)]
    assert reusable(cache, new, 5, gaps=True) == 10 + 20
    # a run may move forward: the cache lost more of the window than the prompt did
    assert shift_plan(c + d + e, a + b + c + d, 0, 5, gaps=True) == [(0, 20, 20)]
    assert shift_plan(cache, new, 10, 0, gaps=True) == []  # off


class StrictCells(ShiftCells):
    """`ShiftCells` that refuses a batch as llama.cpp does: a sequence's tokens in a batch
    must begin right after the last position it holds."""

    def decode(self, batch: BatchArrays, n: int) -> None:
        first: dict[int, int] = {}
        for e in range(n):
            for q in batch.seq[e, : batch.n_seq_id[e]].tolist():
                first.setdefault(int(q), int(batch.pos[e]))
        for q, p in first.items():
            last = self.seq_pos_max(q)
            assert last < 0 or p == last + 1, f"seq {q}: the batch starts at {p}, the cache ends at {last}"
        super().decode(batch, n)


def editor_turn(seed: int, parked_steps: int) -> tuple[StrictCells, KVSlot, BatchArrays, list[int], list[list[int]]]:
    """A slot holding a follow-up's prompt whose window lost 3 lines at its top, and the next
    quick request's prompt, whose window lost one: its lines 1-2 are not cached at all."""
    rng = np.random.default_rng(seed)
    cells = StrictCells(4096)
    slot = KVSlot(cells, 3, B, 4096)
    slot.shift_min = 8
    batch = BatchArrays(256, B + 10)
    head, window, suffix = rng.integers(50, 60, 10).tolist(), lines(rng, 30), flat(lines(rng, 1))  # < shift_min
    prefill(cells, slot, batch, head + flat(window[3:]) + flat(lines(rng, 3)) + suffix)
    for _ in range(parked_steps):
        step(cells, slot, batch, rng)
    prompt = head + flat(window[1:]) + flat(lines(rng, 1)) + suffix
    return cells, slot, batch, prompt, window


@pytest.mark.parametrize("seed", range(6))
def test_a_run_after_new_tokens_is_kept_and_the_new_tokens_decoded_before_it(seed: int) -> None:
    cells, slot, batch, prompt, window = editor_turn(seed, parked_steps=seed)
    refills: list[list[int]] = []

    def refill(tokens: np.ndarray) -> None:
        refills.append(tokens.tolist())
        prefill(cells, slot, batch, tokens.tolist())

    kept = slot.reuse(prompt, refill=refill)
    assert refills == [flat(window[1:3])]
    assert slot.refilled == len(flat(window[1:3])) and slot.shifted == len(flat(window[3:]))
    assert kept == 10 + len(flat(window[1:])) and slot.cache_tokens == prompt[:kept]
    check_shifted(cells, slot)
    prefill(cells, slot, batch, prompt[kept:])
    check_shifted(cells, slot)
    rng = np.random.default_rng(seed)
    for _ in range(4):  # drafts go on as usual after it
        step(cells, slot, batch, rng)
    check_shifted(cells, slot)


def test_without_refill_the_walk_stops_at_the_new_tokens_as_llama_cpps_does() -> None:
    cells, slot, _, prompt, _ = editor_turn(0, parked_steps=2)
    assert slot.reuse(prompt) == 10 and slot.refilled == 0 and slot.shifted == 0
    check_shifted(cells, slot)


def test_a_refill_that_fails_leaves_the_slot_empty() -> None:
    cells, slot, _, prompt, _ = editor_turn(1, parked_steps=3)

    def refill(tokens: np.ndarray) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        slot.reuse(prompt, refill=refill)
    assert slot.n_past == 0 and not slot.holds_cells()


def test_two_runs_after_new_tokens_each_follow_their_own() -> None:
    rng = np.random.default_rng(5)
    cells = StrictCells(4096)
    slot = KVSlot(cells, 0, B, 4096)
    slot.shift_min = 8
    batch = BatchArrays(256, B + 10)
    window, middle, suffix = lines(rng, 20), lines(rng, 3), flat(lines(rng, 4))
    prefill(cells, slot, batch, flat(window[3:]) + flat(middle) + suffix)
    step(cells, slot, batch, rng)
    new_line = flat(lines(rng, 1))
    prompt = flat(window[1:]) + new_line + suffix
    refills: list[list[int]] = []

    def refill(tokens: np.ndarray) -> None:
        refills.append(tokens.tolist())
        prefill(cells, slot, batch, tokens.tolist())

    # the prompt shares no prefix with the cache: it starts with new tokens
    assert slot.reuse(prompt, refill=refill) == len(prompt)
    assert refills == [flat(window[1:3]), new_line]
    assert slot.shifted == len(flat(window[3:])) + len(suffix)
    check_shifted(cells, slot)


SUF = 999  # a fill-in-the-middle prompt's suffix marker (lines' tokens are 0-40 and 1000+)


def test_no_run_is_moved_from_the_suffix_marker_on() -> None:
    a, b, c = ([k] * 3 + list(range(10 * k, 10 * k + 7)) for k in range(1, 4))
    cache = a + b + [SUF] + c
    typed = a + b + [7, 7] + [SUF] + c  # a line typed above the cursor: the suffix's cells are stale
    assert barrier_at(typed, SUF) == 22 and barrier_at(typed, None) == len(typed) and barrier_at(a, SUF) == len(a)
    assert shift_plan(cache, typed, 20, 5, gaps=True) == [(20, 22, 11)]
    assert shift_plan(cache, typed, 20, 5, gaps=True, barrier=22) == []
    assert reusable(cache, typed, 5, gaps=True, barrier=22) == 20
    # a run that begins before the marker goes on through it (a window that lost its top line)
    assert shift_plan(cache, b + [SUF] + c, 0, 5, gaps=True, barrier=10) == [(10, 0, 21)]


@pytest.mark.parametrize("barrier", [True, False])
def test_a_slot_keeps_the_suffix_after_a_typed_line_only_without_a_marker(barrier: bool) -> None:
    rng = np.random.default_rng(3)
    cells = StrictCells(4096)
    slot = KVSlot(cells, 0, B, 4096)
    slot.shift_min, slot.shift_barrier = 8, (SUF if barrier else None)
    batch = BatchArrays(256, B + 10)
    above, suffix, typed = flat(lines(rng, 12)), [SUF, *flat(lines(rng, 4))], flat(lines(rng, 1))
    prefill(cells, slot, batch, above + suffix)
    step(cells, slot, batch, rng)
    refills: list[list[int]] = []

    def refill(tokens: np.ndarray) -> None:
        refills.append(tokens.tolist())
        prefill(cells, slot, batch, tokens.tolist())

    kept = slot.reuse(above + typed + suffix, refill=refill)
    assert (kept, refills) == ((len(above), []) if barrier else (len(above + typed + suffix), [typed]))
    check_shifted(cells, slot)

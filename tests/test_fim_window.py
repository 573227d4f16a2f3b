"""A FIM prompt's prefix window stays where the cached prompt had it (`apps/fim_window.py`),
no model: llama.vim's 256 lines above the cursor, cut by tokens, move the window's top with
every keystroke; a window that moved up shared nothing with the cache past the chunks."""

from __future__ import annotations

from lookahead.apps.fim import infill_prompt
from lookahead.apps.fim_window import ANCHOR, aligned_start
from tests.test_fim import MID, PRE, SUF, Vocab

# a file of numbered lines: every window of it is unique
FILE = "".join(f"line {i:04d} of the file\n" for i in range(400))  # 400 lines, 24 chars each


def cached_prompt(prefix: list[int], start: int) -> list[int]:
    return [9, 9, PRE, *prefix[start:], SUF, 10, MID, 11, 12]


def test_the_cut_stays_put_without_a_cached_prompt_or_a_cut() -> None:
    prefix = list(range(100, 1100))
    assert aligned_start(prefix, 200, PRE, [], 64) == 200
    assert aligned_start(prefix, 0, PRE, [cached_prompt(prefix, 10)], 64) == 0  # the whole prefix fits


def test_the_window_begins_where_the_cached_one_began_within_the_slack() -> None:
    prefix = list(range(100, 1100))
    assert aligned_start(prefix, 200, PRE, [cached_prompt(prefix, 230)], 64) == 230  # it had moved up
    assert aligned_start(prefix, 200, PRE, [cached_prompt(prefix, 150)], 64) == 150  # text typed since
    assert aligned_start(prefix, 200, PRE, [cached_prompt(prefix, 300)], 64) == 200  # too far: llama.cpp's cut
    assert aligned_start(prefix, 200, PRE, [cached_prompt(prefix, 300), cached_prompt(prefix, 190)], 64) == 190
    other = list(range(5000, 6000))
    assert aligned_start(prefix, 200, PRE, [cached_prompt(other, 200)], 64) == 200  # another file
    assert aligned_start(prefix, 200, PRE, [[9, PRE, *prefix[220 : 220 + ANCHOR - 1]]], 64) == 200  # too short


def test_an_editors_next_prompt_shares_its_whole_window_with_the_cached_one() -> None:
    """The follow-up assumed a long suggestion accepted (its prefix longer); the next
    keystroke's prefix is shorter, so llama.cpp's cut begins earlier than the cached
    window: aligned, the new prompt shares everything before the cursor's line."""
    vocab = Vocab(repo=False)

    def prompt(prefix: str, cached: list[list[int]] | None = None) -> list[int]:
        fim = infill_prompt(vocab, prefix, "\nrest\n", n_ctx=8192, n_predict=64, n_batch=1024, cached=cached or [])
        return fim.tokens

    typed = FILE[: 300 * 24]
    assumed = typed + "    a suggestion that was assumed accepted, over two lines\n        and more\n"
    followup = prompt(assumed)
    plain = prompt(typed + "x = 1\n")
    aligned = prompt(typed + "x = 1\n", [followup])
    window = followup[: followup.index(SUF)]
    assert plain[: len(window)] != window[: len(plain)]  # llama.cpp's cut: the window moved up

    def shared(a: list[int], b: list[int]) -> int:
        return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)

    top = len(assumed) - 3 * 1024 // 4  # where the follow-up's window began
    assert shared(aligned, followup) == 1 + len(typed) - top  # PRE and every typed token in the window
    assert shared(plain, followup) == 1
    assert len(aligned) < len(plain) and len(plain) - len(aligned) <= 1024 // 4

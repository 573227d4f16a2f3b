"""The copy-through-edits source on token streams (no model)."""

from __future__ import annotations

from lookahead.core.draft import SOURCE_EDIT
from lookahead.index.edits import EditSource

# A "function" as tokens: 7 stands for the old name, 70 for the new one.
PROMPT = [1, 2, 7, 3, 4, 5, 6, 8, 7, 9, 10, 11, 12, 13, 7, 14, 15, 16, 17]


def drafted(src: EditSource, depth: int = 8) -> list[int]:
    cands = src.propose(depth, 4)
    assert len(cands) <= 1
    return cands[0].tokens.tolist() if cands else []


def test_a_rename_is_learned_and_drafted_at_the_next_occurrence():
    src = EditSource()
    src.observe(PROMPT)
    src.observe([1, 2, 7, 3])  # copying: aligned after 4 tokens
    assert drafted(src, 4) == [4, 5, 6, 8]
    src.observe([4, 5, 6, 8, 70])  # the edit: 70 where the prompt has 7
    assert drafted(src) == []  # an open edit drafts nothing
    src.observe([9, 10])  # the prompt again after the old name: 7 -> 70 learned
    # the copy goes on, and the next occurrence of the old name is drafted renamed
    assert drafted(src, 6) == [11, 12, 13, 70, 14, 15]
    src.observe([11, 12, 13, 70, 14])
    assert drafted(src) == [15, 16, 17]
    cand = src.propose(3, 1)[0]
    assert cand.source == SOURCE_EDIT and len(cand.q) == 3 and (cand.q > 0).all() and (cand.q <= 1).all()


def test_a_multi_token_substitution_is_drafted_whole():
    src = EditSource()
    src.observe(PROMPT)
    src.observe([1, 2, 7, 3, 4, 5, 6, 8, 70, 71, 9, 10])  # 7 -> 70 71
    assert drafted(src, 5) == [11, 12, 13, 70, 71]
    src.observe([11, 12, 13, 70])  # half way through the new text
    assert drafted(src, 3) == [71, 14, 15]


def test_a_deletion_resyncs_and_a_stray_token_reopens_an_edit():
    src = EditSource()
    src.observe(PROMPT)
    src.observe([1, 2, 7, 3, 4])
    src.observe([6, 8])  # 5 deleted
    assert drafted(src, 3) == [7, 9, 10]
    src.observe([99])  # not the prompt and no substitution: an edit opens
    assert drafted(src) == []


def test_text_that_never_copies_the_prompt_gets_no_drafts():
    src = EditSource()
    src.observe(PROMPT)
    for t in [40, 41, 42, 43, 44, 45, 46, 47, 2, 7, 48]:
        src.observe([t])
        assert drafted(src) == []


def test_a_long_rewrite_is_dropped_and_the_copy_realigns_later():
    src = EditSource()
    src.observe(PROMPT)
    src.observe([1, 2, 7, 3])
    src.observe(list(range(100, 120)))  # too long to be a small edit
    assert drafted(src) == []
    src.observe([11, 12, 13, 7])  # four prompt tokens again: aligned
    assert drafted(src, 3) == [14, 15, 16]


def test_confidence_grows_with_the_length_of_the_copy():
    src = EditSource()
    src.observe(PROMPT)
    src.observe([1, 2, 7, 3])  # just aligned
    fresh = src.propose(6, 1)[0].q
    assert (fresh[1:] > fresh[:-1]).all()  # deeper copied tokens follow a longer copy
    assert 0.5 < fresh[0] < 0.9
    src.observe([4, 5, 6, 8, 7, 9, 10, 11])  # twelve tokens copied
    assert src.propose(1, 1)[0].q[0] > fresh[-1]
    assert (src.propose(6, 1)[0].q < 1).all()


def test_fenced_code_is_found_by_bytes_whatever_the_token_boundaries():
    from lookahead.index.codetext import in_fences

    pieces = [b"Fix", b" this", b":\n", b"``", b"`py", b"thon\n", b"x = 1", b"\n", b"```", b"\nThanks", b"!"]
    assert in_fences(pieces) == [False, False, False, True, True, True, True, True, True, False, False]
    assert in_fences([b"no", b" fences"]) == [False, False]
    assert in_fences([b"```\n", b"open", b" to the end"]) == [True, True, True]


def test_a_copy_from_a_fenced_block_grows_surer_than_a_copy_of_prose():
    """The same tokens copied from a code block and from prose: equal drafts, the code
    block's surer at every depth (a code edit writes the whole block back; a summary quotes
    a phrase and moves on)."""
    words = {1: b"Fix", 2: b":\n", 3: b"```\n", 4: b"```\n"}
    token_bytes = lambda t: words.get(t, b" w%d" % t)  # noqa: E731
    body = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    fenced, plain = EditSource(token_bytes), EditSource(token_bytes)
    fenced.observe([1, 2, 3, *body, 4])
    plain.observe([1, 2, *body])
    for src in (fenced, plain):
        src.observe(body[:4])  # aligned after 4 copied tokens
    a, b = fenced.propose(6, 1)[0], plain.propose(6, 1)[0]
    assert a.tokens.tolist() == b.tokens.tolist() == body[4:10]
    assert (a.q > b.q).all() and a.q[0] >= 0.88 and b.q[0] == 0.8
    assert EditSource().propose(6, 1) == []  # no prompt yet: nothing to copy


CODE_EDIT = b"""Rename `buf` to `buffer` everywhere in this function. Return the whole function.

def read(stream, size):
    # read the whole stream, a chunk at a time
    buf = bytearray()
    while True:
        chunk = stream.read(size)
        if not chunk:
            break

        buf.extend(chunk)
    return bytes(buf)
Thanks!"""


def lines_of(flags: list[bool], pieces: list[bytes]) -> list[bytes]:
    return [p for p, f in zip(pieces, flags, strict=True) if f]


def test_code_pasted_without_fences_is_code_and_its_instruction_is_not():
    from lookahead.index.codetext import in_code

    pieces = [line + b"\n" for line in CODE_EDIT.split(b"\n")]
    code = lines_of(in_code(pieces), pieces)
    assert code[0].startswith(b"def read") and code[-1] == b"    return bytes(buf)\n"
    assert b"\n" in code  # the blank line inside the function
    assert len(code) == len(pieces) - 3  # all but the instruction, its blank line and "Thanks!"


def test_a_token_starting_with_a_newline_goes_with_the_line_it_ends():
    from lookahead.index.codetext import in_code

    pieces = [b"Tidy this up.", b"\n\n", b"x = f(1)", b"\n", b"print(x)", b"\nDone", b" now."]
    assert in_code(pieces) == [False, False, True, True, True, True, False]


def test_prose_that_names_code_is_prose():
    from lookahead.index.codetext import looks_like_code

    for line in (
        b"Normally, d[key] returns a COPY of the entry.  This needs care when",
        b"with dbm databases is that the values (not the keys!) in a shelf can",
        b"Rename `f(x)` to `g(x)` in this module:",
        b"Change `x = f(y)` to `x = g(y)`.",
        b"if d[key] is a list, appending to it does not write it back",
        b"Amira Haddad; 4B; 96; 15.5; up",
        b"for the reader who wants more, the appendix lists every source",
    ):
        assert not looks_like_code(line), line
    for line in (
        b"def read(stream, size):",
        b"from typing import List, Optional",
        b"        d = shelve.open(filename) # open, with (g)dbm filename -- no suffix",
        b"for url in urls:",
        b"return frames, bytes(buf)",
        b"int main(void) {",
        b"x = compute(y);",
    ):
        assert looks_like_code(line), line


def test_code_alone_is_a_completion_and_counts_as_code_only_in_fences():
    """A prompt of code with no instruction is continued, not written back: the copy prior
    of code is for code under an instruction."""
    from lookahead.index.codetext import in_code

    alone = [b"def f(x):\n", b"    return x + 1\n", b"\n", b"def g(y):\n"]
    assert in_code(alone) == [False] * 4
    fenced = [b"```\n", b"def f(x):\n", b"```\n"]
    assert in_code(fenced) == [True] * 3


def test_a_copy_of_unfenced_code_grows_surer_than_a_copy_of_prose():
    pieces = {1: b"Rename it.", 2: b"\n\n", 3: b"def", 4: b" f", 5: b"(x):\n"}
    token_bytes = lambda t: pieces.get(t, b"    y%d = x\n" % t)  # noqa: E731
    prose_bytes = lambda t: {1: b"Rename it.", 2: b"\n\n"}.get(t, b" word%d" % t)  # noqa: E731
    body = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    code, prose = EditSource(token_bytes), EditSource(prose_bytes)
    code.observe([1, 2, 3, 4, 5, *body])
    prose.observe([1, 2, 3, 4, 5, *body])
    for src in (code, prose):
        src.observe(body[:4])
    a, b = code.propose(6, 1)[0], prose.propose(6, 1)[0]
    assert a.tokens.tolist() == b.tokens.tolist() == body[4:10]
    assert (a.q > b.q).all()


def test_json_data_does_not_start_code_but_a_dict_inside_code_goes_on_with_it():
    from lookahead.index.codetext import in_code

    text = b'Data:\n[\n  {\n    "a": 1\n  }\n]\nCode:\ndef f():\n    d = {\n        "x": 1,\n    }\n    return d'
    lines = text.split(b"\n")
    flags = in_code([line + b"\n" for line in lines])
    assert [line for line, f in zip(lines, flags, strict=True) if f] == lines[7:]


def test_prose_ends_at_a_sentences_line_or_a_paragraph_not_inside_code():
    from lookahead.index.codetext import prose_ends

    pieces = [b"Fix", b" it", b".\n", b"Keep", b" going\n", b"here\n", b"\n", b"x:", b"\n"]
    code = [False] * 7 + [True, True]
    # "it.\n" ends a sentence's line, "here\n" a paragraph; "going\n" wraps; code never ends
    assert prose_ends(pieces, code) == [False, False, True, False, False, True, False, False, False]


def test_a_copy_of_prose_stops_at_the_end_of_its_sentences_line():
    """A model restating the instruction goes its own way after it: the draft stops there,
    not 40 tokens into the code that follows."""
    words = {1: b" Rename", 2: b" x", 3: b" to", 4: b" y", 5: b" in", 6: b" f", 7: b".\n", 8: b"```\n"}
    token_bytes = lambda t: words.get(t, b" w%d" % t)  # noqa: E731
    src = EditSource(token_bytes)
    src.observe([1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 8])
    src.observe([1, 2, 3, 4])  # the output restates the instruction
    assert drafted(src, 10) == [5, 6, 7]
    plain = EditSource()  # no bytes: no lines known, the copy runs on
    plain.observe([1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 8])
    plain.observe([1, 2, 3, 4])
    assert drafted(plain, 10) == [5, 6, 7, 8, 20, 21, 22, 8]


def test_a_comment_in_code_is_prose_to_the_copy_prior():
    from lookahead.index.codetext import in_code, in_comments

    pieces = [b"Fix it.\n", b"x = 1", b" #", b" note", b" here\n", b"y", b" = f(2)\n", b"z = g('#1')", b" // c\n"]
    code = in_code(pieces)
    assert code == [False] + [True] * 8
    assert in_comments(pieces, code) == [False, False, True, True, True, False, False, False, True]
    assert in_comments([b"# a", b" note\n"], [False, False]) == [False, False]  # prose: no comment


def test_a_copy_through_a_comment_is_priced_as_prose_and_runs_on():
    """A summary quotes a comment and moves on, so its tokens get the prose prior; but a
    comment ending in "." inside code is not the end of an instruction: the copy goes on."""
    words = {1: b"Tidy", 2: b" this.\n", 3: b"x", 4: b" = f(1)", 5: b" # one", 6: b" more.\n"}
    token_bytes = lambda t: words.get(t, b"    y%d = x\n" % t)  # noqa: E731
    src = EditSource(token_bytes)
    src.observe([1, 2, 3, 4, 5, 6, 10, 11, 12, 13])
    src.observe([1, 2, 3, 4])  # aligned at the comment
    cand = src.propose(8, 1)[0]
    assert cand.tokens.tolist() == [5, 6, 10, 11, 12, 13]
    q = cand.q.tolist()
    # the comment at r / (r + 1), the code after it at r / (r + 0.5)
    assert abs(q[0] - 0.8) < 1e-6 and abs(q[2] - 6 / 6.5) < 1e-6

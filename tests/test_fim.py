"""FIM prompts for editors' requests (`lookahead.apps.fim`): llama.cpp's layout and cuts, no model."""

from __future__ import annotations

import pytest

from lookahead.apps.fim import CHARS_PER_TOKEN, Chunk, FimUnsupported, clip, indent_cut, infill_prompt

PRE, SUF, MID, REP, SEP, BOS = 1, 2, 3, 4, 5, 6


class Vocab:
    """One token per character (its code point); FIM tokens 1-5 as asked, BOS 6 if `bos`."""

    def __init__(self, *, fim: bool = True, repo: bool = True, bos: bool = False) -> None:
        self.fim, self.repo, self.bos = fim, repo, bos
        self.parsed: list[str] = []  # texts tokenized with special tokens parsed

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        if parse_special:
            self.parsed.append(text)
        return ([BOS] if add_special and self.bos else []) + [ord(c) for c in text]

    def fim_pre(self) -> int | None:
        return PRE if self.fim else None

    def fim_suf(self) -> int | None:
        return SUF if self.fim else None

    def fim_mid(self) -> int | None:
        return MID if self.fim else None

    def fim_rep(self) -> int | None:
        return REP if self.repo else None

    def fim_sep(self) -> int | None:
        return SEP if self.repo else None


NAMES = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}


def chars(tokens: list[int]) -> str:
    return "".join(NAMES.get(t, chr(t)) for t in tokens)


def test_the_repository_pattern_as_llama_cpp_lays_it_out() -> None:
    vocab = Vocab(bos=True)
    p = infill_prompt(
        vocab,
        "int main() {\n",
        "}\n",
        extra=[Chunk("llama.h", "int f();\n"), Chunk("util.h", "int g();\n")],
        prompt="    int n = f",
        n_ctx=4096,
        n_predict=64,
    )
    assert chars(p.tokens) == (
        "<REP>myproject\n<SEP>llama.h\nint f();\n<SEP>util.h\nint g();\n<SEP>filename\n"
        "<BOS><PRE>int main() {\n    int n = f<SUF>}\n<MID>"
    )
    assert p.cut == 0
    assert chars(p.suffix_tokens) == "}\n"
    assert [chars(t) for t in p.extra_tokens] == ["int f();\n", "int g();\n"]
    assert vocab.parsed == ["    int n = f"]  # the prompt may name special tokens, the code may not


def test_without_repository_tokens_chunks_are_snippets() -> None:
    p = infill_prompt(Vocab(repo=False), "a", "b", extra=[Chunk("x.py", "X")], n_ctx=4096, n_predict=16)
    assert chars(p.tokens) == "\n\n--- snippet ---\n\nX<PRE>a<SUF>b<MID>"
    assert chars(infill_prompt(Vocab(repo=False), "a", "b", n_ctx=4096, n_predict=16).tokens) == "<PRE>a<SUF>b<MID>"


def test_cuts_keep_the_text_nearest_the_cursor_with_llama_cpp_shares() -> None:
    prefix, suffix = "p" * 2000 + "P", "S" + "s" * 2000
    p = infill_prompt(Vocab(repo=False), prefix, suffix, prompt="xy", n_ctx=100_000, n_predict=128, n_batch=400)
    body = chars(p.tokens)
    # the prefix keeps its last 3/4 of a batch; the suffix its first 1/4, less the prompt and 2
    assert body == "<PRE>" + "p" * 299 + "Pxy<SUF>S" + "s" * 95 + "<MID>"
    assert p.cut == 2001 - 300 + 2001 - 96
    assert len(p.suffix_tokens) == 2001  # whole, for drafting


def test_extra_chunks_fill_what_the_context_leaves_keeping_their_end() -> None:
    extra = [Chunk("a", "A" * 50), Chunk("b", "B" * 50)]
    # n_ctx - batch - 2 * n_predict = 300 - 200 - 2 * 20 = 60 extra tokens
    p = infill_prompt(Vocab(), "pre", "suf", extra=extra, n_ctx=300, n_predict=20, n_batch=200)
    head = p.tokens[: p.tokens.index(PRE)]
    assert len(head) == 60

    whole = len("<REP>myproject\n") - 4 + 2 * (1 + 2 + 50) + 1 + len("filename\n")
    assert chars(head).endswith("B" * 50 + "<SEP>filename\n")
    assert p.cut == whole - 60


def test_a_context_smaller_than_a_batch_still_fits() -> None:
    p = infill_prompt(Vocab(bos=True), "p" * 5000, "s" * 5000, n_ctx=512, n_predict=64)
    assert len(p.tokens) + 64 <= 512
    assert chars(p.tokens).startswith("<BOS><PRE>p")


def test_a_model_without_fim_tokens_is_told_so() -> None:
    with pytest.raises(FimUnsupported, match="no fill-in-the-middle prefix, suffix, middle token"):
        infill_prompt(Vocab(fim=False), "a", "b", n_ctx=512, n_predict=8)


@pytest.mark.parametrize(
    ("text", "n_indent", "cut"),
    [
        ("x = 1\n    y = 2\n", 4, None),  # every later line indented enough
        ("x = 1\n  y = 2\n", 4, 8),  # the second line is not: cut after its indentation
        ("x\n    y\nz", 4, 8),
        ("x\n", 4, None),  # nothing after the newline yet: undecided
        ("x\n  ", 4, None),  # only blanks so far: undecided
        ("x\n\n", 4, 2),  # an empty line ends it, as in llama.cpp
        ("  first line is free\n", 8, None),
        ("x\n  y\n", 0, None),  # 0: off
        ("x\n\ty\n", 1, None),  # a tab counts as one
    ],
)
def test_indent_cut(text: str, n_indent: int, cut: int | None) -> None:
    assert indent_cut(text, n_indent) == cut


def test_a_small_context_splits_between_the_code_and_the_chunks() -> None:
    extra = [Chunk("a", "A" * 5000)]
    p = infill_prompt(Vocab(), "p" * 5000, "s" * 5000, extra=extra, n_ctx=2048, n_predict=24)
    head = p.tokens[: p.tokens.index(PRE)]
    assert len(head) == 2048 - 1000 - 48  # batch (2048 - 48) // 2 = 1000
    assert len(p.tokens) + 24 <= 2048
    # the chunks' cut does not move when the prefix grows (a prompt cache keeps the start)
    q = infill_prompt(Vocab(), "p" * 40, "s", extra=extra, n_ctx=2048, n_predict=24)
    assert q.tokens[: q.tokens.index(PRE)] == head


class CountingVocab(Vocab):
    """`Vocab`, counting the characters it is asked to tokenize."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        self.seen += len(text)
        return super().tokenize(text, add_special=add_special, parse_special=parse_special)


def test_texts_far_past_the_context_are_cut_before_they_are_tokenized() -> None:
    # a 5 MB suffix once cost seconds of tokenizing and indexing, though a few hundred
    # of its tokens could reach the prompt
    vocab = CountingVocab()
    big = "line\n" * 1_000_000
    extra = [Chunk(f"f{i}", "x" * 100_000) for i in range(20)]
    p = infill_prompt(vocab, big, big, extra=extra, prompt="xy", n_ctx=512, n_predict=32)
    budget = 512 * CHARS_PER_TOKEN
    assert vocab.seen <= 3 * budget + 1000
    assert len(p.prefix_tokens) <= budget and len(p.suffix_tokens) <= budget
    assert len(p.tokens) + 32 <= 512


def test_clip_keeps_whole_lines_nearest_the_cursor_and_the_last_chunks() -> None:
    prefix = "".join(f"p{i}\n" for i in range(100))
    suffix = "".join(f"s{i}\n" for i in range(100))
    chunks = [Chunk("a", "A" * 10), Chunk("b", "B" * 10), Chunk("c", "C" * 10)]
    pre, suf, kept = clip(prefix, suffix, chunks, n_ctx=2)  # a budget of 32 characters
    assert prefix.endswith(pre) and pre.startswith("p") and len(pre) <= 32 and pre.endswith("p99\n")
    assert suffix.startswith(suf) and suf.endswith("\n") and len(suf) <= 32
    assert [c.filename for c in kept] == ["b", "c"]
    assert clip("short", "text", chunks, n_ctx=100) == ("short", "text", chunks)

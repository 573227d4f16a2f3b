"""Which tokens of a prompt are code: inside a ``` fenced block, or on a line that looks
like code (pasted without fences, as users often do).

The copy-through-edits source trusts a copy of code sooner than a copy of prose (see
`lookahead.index.edits`); this tells the two apart, finds the comments inside code (priced
as prose) and the ends of prose sentences' lines (where a copy of prose stops). A wrong
guess costs little: it only moves how fast that source's confidence grows or how far one
draft runs, and the controller's calibration still corrects it.
"""

from __future__ import annotations

import re

FENCE = b"```"

# Outside fences, a line is code when it opens with a keyword or holds code's symbols without
# ending as a sentence does ("Rename `f(x)` to `g(x)`:" is prose); an indented line goes on
# a block of code (a docstring, an argument list), but does not start one (indented prose
# and data are common too).
_KEYWORD = re.compile(
    rb"(def|class|async|await|import|from|return|yield|if|elif|else|for|while|with|try|"
    rb"except|finally|raise|assert|pass|break|continue|lambda|function|const|let|var|fn|pub|"
    rb"impl|struct|enum|public|private|protected|static|package|func|switch|case)\b|@\w|#include|#define"
)
_IMPORT = re.compile(rb"(from\s+[\w.]+\s+import|import\s+[\w.]+(,|\s+as\s|$))")
# a call ("f(", not prose's "word (aside)"), brackets, assignment, arrows; ";" only at the
# end (inside a line it separates data as often)
_SYMBOLS = re.compile(rb"\w\(|[=\[\]{}]|->|::|;$")
_SENTENCE_END = (b".", b"?", b"!", b":")
# A line of JSON data (an object, or a "key": value member) does not start a block of code,
# whatever its brackets (a report copies its values, not its lines); nor does a line of
# brackets alone. Inside a block of code both go on with it (a dict literal's lines).
_JSON_LINE = re.compile(rb'[\[{]*\s*"[^"]*"\s*:')
_WORD = re.compile(rb"\w")
_COMMENT = re.compile(rb"\s(#|//)\s.*$")  # a trailing comment is prose inside code
# Prose that names code ("if d[key] is a list, d.close() is slow") has symbols too, but
# most of its words are plain: more than this share of them and the line is prose.
PLAIN_WORDS = 0.5


def looks_like_code(line: bytes) -> bool:
    """Whether one line (without its newline), outside fences, looks like code by itself."""
    body = _COMMENT.sub(b"", line.strip())
    if not body or _JSON_LINE.match(body) or not _WORD.search(body):
        return False
    words = body.split()
    plain = sum(1 for w in words if w.strip(b",.;:!?").isalpha()) / len(words)
    symbols = _SYMBOLS.search(body) is not None
    if _IMPORT.match(body):
        return True
    if _KEYWORD.match(body):
        # wrapped prose starts lines with "with", "for", "if" too: a keyword line is code
        # when it opens a block, is short, or is mostly symbols
        return body.endswith((b":", b"{", b";")) or len(words) <= 4 or (symbols and plain <= 0.7)
    return symbols and not body.endswith(_SENTENCE_END) and plain <= PLAIN_WORDS


def in_fences(pieces: list[bytes]) -> list[bool]:
    """Per token (its bytes), whether it starts inside a ``` fenced block: after an odd
    number of fences. The fence lines themselves count as inside (their language tag and
    newline are copied with the code)."""
    text = b"".join(pieces)
    fences: list[int] = []
    at = text.find(FENCE)
    while at >= 0:
        fences.append(at)
        at = text.find(FENCE, at + len(FENCE))
    out: list[bool] = []
    offset, k = 0, 0  # k: fences that start before this token's first byte
    for piece in pieces:
        while k < len(fences) and fences[k] < offset:
            k += 1
        # inside: an odd number of fences before it, or a fence starting at this token
        out.append(k % 2 == 1 or (k < len(fences) and fences[k] < offset + max(len(piece), 1)))
        offset += len(piece)
    return out


class _Lines:
    """The prompt's text split into lines, and the line of each token's first byte (a token
    that starts with a newline goes with the line it ends). Built once, read by each of the
    per-token questions below."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.text = b"".join(pieces)
        self.lines = self.text.split(b"\n")
        self.starts: list[int] = []  # per line: offset of its first byte
        offset = 0
        for line in self.lines:
            self.starts.append(offset)
            offset += len(line) + 1
        self.offsets: list[int] = []  # per token: offset of its first byte
        self.line_of: list[int] = []  # per token: its line
        offset, i = 0, 0
        for piece in pieces:
            while i + 1 < len(self.starts) and self.starts[i + 1] <= offset:
                i += 1
            self.offsets.append(offset)
            self.line_of.append(i)
            offset += len(piece)


def in_code(pieces: list[bytes], lines: _Lines | None = None) -> list[bool]:
    """Per token (its bytes), whether it starts inside a fenced block or on a line of code.
    A blank line, and an indented one, go with the line before them (a blank line or a
    docstring inside a function is code); a token that starts with a newline goes with the
    line it ends."""
    fenced = in_fences(pieces)
    at = lines or _Lines(pieces)
    code: list[bool] = []
    before = False
    for line in at.lines:
        # a blank line keeps the last one's kind; an indented one may go on a block of code
        indented = line.startswith((b" ", b"\t"))
        before = before if not line.strip() else looks_like_code(line) or (before and indented)
        code.append(before)
    if all(c or not line.strip() for c, line in zip(code, at.lines, strict=True)):
        # code alone, with no instruction: a completion continues it rather than writing it
        # back, so only fenced code counts
        return fenced
    return [inside or code[i] for inside, i in zip(fenced, at.line_of, strict=True)]


def prose_ends(pieces: list[bytes], code: list[bool]) -> list[bool]:
    """Per token (its bytes) and whether it is code (`in_code`): whether it is prose holding
    the end of a sentence's line or of a paragraph (a newline after ".", "?", "!" or ":", or
    before a blank line). A copy of prose seldom runs on past one: a model restating the
    instruction goes its own way after it."""
    text = b"".join(pieces)
    out: list[bool] = []
    offset = 0
    for piece, is_code in zip(pieces, code, strict=True):
        end = False
        if not is_code:
            at = piece.find(b"\n")
            while at >= 0 and not end:
                nl = offset + at
                last = nl - 1  # the last byte before the newline that is not a space or tab
                while last >= 0 and text[last] in b" \t":
                    last -= 1
                end = (last >= 0 and text[last : last + 1] in _SENTENCE_END) or text[nl + 1 : nl + 2] == b"\n"
                at = piece.find(b"\n", at + 1)
        out.append(end)
        offset += len(piece)
    return out


_COMMENT_START = re.compile(rb"(^|\s)(#|//)(\s|$)")


def in_comments(pieces: list[bytes], code: list[bool], lines: _Lines | None = None) -> list[bool]:
    """Per token (its bytes) and whether it is code (`in_code`): whether it starts inside a
    comment of a code line (after "# " or "// ", its space included). A comment is prose in
    code: a summary quotes it and moves on, as it does the document's text."""
    at = lines or _Lines(pieces)
    comment = []  # per line: offset where its comment starts (None: no comment)
    for line, start in zip(at.lines, at.starts, strict=True):
        m = _COMMENT_START.search(line)
        comment.append(None if m is None else start + m.start())
    out: list[bool] = []
    for is_code, offset, i in zip(code, at.offsets, at.line_of, strict=True):
        c = comment[i]
        out.append(is_code and c is not None and c <= offset)
    return out


def copy_kinds(
    pieces: list[bytes], *, code_lines: bool = True, prose_stops: bool = True
) -> tuple[list[bool], list[bool]]:
    """For the copy-through-edits source, per prompt token: whether a copy of it is priced
    as code (in a block of code, not in a comment), and whether a copy stops after it (the
    end of a prose sentence's line). Without `code_lines` only fenced code is code, without
    `prose_stops` no copy stops (the bench's A/B of each)."""
    lines = _Lines(pieces)
    code = in_code(pieces, lines) if code_lines else in_fences(pieces)
    ends = prose_ends(pieces, code) if prose_stops else [False] * len(pieces)
    comments = in_comments(pieces, code, lines)
    # a comment is copied as prose is, but a copy does not stop at its end
    return [c and not m for c, m in zip(code, comments, strict=True)], ends

"""Where a code completion ends by the code's own structure: pure functions of the text.

`CodeStop(language, prefix, suffix)(completion)` is the length of `completion` to keep, or
None while the completion has not left the cursor's block. It is called on the text
streamed so far, again and again as it grows, so it only decides on what is written:
a line that has no code yet, or whose first word may still grow into `else`, waits.

Python (indentation):
- The block is the one the cursor is in: its first logical line with code, from the start
  of the logical line holding the cursor (decorators skipped), is the anchor, and its
  indentation the block's. The completion ends before the first later logical line that
  dedents below it (blank lines and lines inside brackets or strings never count).
- If the anchor opens a block (ends with `:`, like `def f(x):`), the block is its body:
  the completion ends before the first later line back at the anchor's indentation, unless
  it continues the statement (`elif`, `else`, `except`, `finally`).

Brace languages (C, Rust, Go, JavaScript ...):
- The completion ends before a closing bracket that goes below the cursor's nesting level
  when the code after the cursor starts with that bracket (it is already there); otherwise
  the bracket is written and the completion ends with its line, if that line ends below
  the cursor's level (`}` ends the block; `} else {` goes on).
- At the cursor's level, a blank line after a block the completion opened and closed (a
  whole function) ends it.

Both: a closing bracket below the cursor's level that the code after the cursor already
has ends the completion (the cursor in `f(a, |)` writes the arguments, not the `)`).
Other languages have no structural stop (only --max-tokens and --stop).

Strings and comments are skipped with a small lexer (quotes, triple quotes, backticks,
`#` or `//` and `/* */` comments); a string still open at the end of the text is assumed
to run on, since the model is still writing it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PYTHON = "python"
BRACES = "braces"

_PYTHON = ".py .pyi .pyw .pyx"
_BRACE = """
    .c .h .cc .cpp .cxx .hpp .hh .cu .cuh .m .mm .rs .go .java .kt .kts .scala .groovy
    .gradle .cs .fs .swift .dart .js .mjs .cjs .ts .tsx .jsx .vue .svelte .php .css .scss
    .less .zig .proto .thrift .sol .json .jsonc
"""
_PYTHON_SUFFIXES = frozenset(_PYTHON.split())
_BRACE_SUFFIXES = frozenset(_BRACE.split())
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(_OPENERS.values())
_CONTINUATIONS = frozenset({"elif", "else", "except", "finally"})
# the cursor's logical line is looked for this far back at most (a lost quote in the prefix
# must not make the whole file one logical line)
_HEAD_LIMIT = 20_000


def language_of(path: str | Path) -> str | None:
    """PYTHON, BRACES, or None (no structural stop) for a file name."""
    suffix = Path(path).suffix.lower()
    if suffix in _PYTHON_SUFFIXES:
        return PYTHON
    if suffix in _BRACE_SUFFIXES:
        return BRACES
    return None


@dataclass(frozen=True)
class _Syntax:
    line_comment: str
    block_comments: bool
    triple_quotes: bool
    backticks: bool  # `...` strings that may span lines (JavaScript, Go)


_SYNTAX = {
    PYTHON: _Syntax("#", block_comments=False, triple_quotes=True, backticks=False),
    BRACES: _Syntax("//", block_comments=True, triple_quotes=False, backticks=True),
}


def _code(text: str, syntax: _Syntax) -> Iterator[tuple[int, str]]:
    """(index, char) of each character outside strings and comments. Newlines inside a
    multi-line string or block comment are skipped with it."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            yield i, c
            i += 1
        elif text.startswith(syntax.line_comment, i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif syntax.block_comments and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif syntax.triple_quotes and text.startswith(c * 3, i) and c in "\"'":
            i = _string_end(text, c * 3, i + 3, multiline=True)
        elif c == "`" and syntax.backticks:
            i = _string_end(text, c, i + 1, multiline=True)
        elif c in "\"'":
            end = _string_end(text, c, i + 1, multiline=False)
            if c == "'" and not syntax.triple_quotes and (end > n or text[end - 1] != "'"):
                yield i, c  # no closing quote on the line: a Rust lifetime, not a string
                i += 1
            else:
                i = min(end, n)
        else:
            yield i, c
            i += 1


def _string_end(text: str, quote: str, i: int, multiline: bool) -> int:
    """Index just past the string's closing quote; the line's end (not multiline) or the
    text's end (plus one, so a caller can tell) when it is not closed."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif text.startswith(quote, i):
            return i + len(quote)
        elif c == "\n" and not multiline:
            return i
        else:
            i += 1
    return n + 1


def _indent(line: str) -> int:
    body = line.lstrip(" \t")
    return len(line[: len(line) - len(body)].expandtabs(8))


class CodeStop:
    """The structural stop for a completion between `prefix` and `suffix` (see the module
    docstring). Calling it costs O(the cursor's logical line + the completion)."""

    def __init__(self, language: str | None, prefix: str, suffix: str) -> None:
        self.language = language
        self.head = head_of(language, prefix) if language else ""
        self.suffix = suffix

    def __call__(self, completion: str, final: bool = False) -> int | None:
        return code_stop(self.language, self.head, completion, self.suffix, final)


def head_of(language: str, prefix: str) -> str:
    """The text of the logical line holding the cursor, up to the cursor: from the start
    of its first physical line (Python: the line a bracket or string spanning lines began
    on; other languages: the cursor's physical line)."""
    line_start = prefix.rfind("\n") + 1
    if language != PYTHON:
        return prefix[line_start:]
    window_start = prefix.rfind("\n", 0, max(0, len(prefix) - _HEAD_LIMIT)) + 1
    text = prefix[window_start:]
    start, depth, last = 0, 0, ""
    for i, c in _code(text, _SYNTAX[PYTHON]):
        if c == "\n":
            if depth <= 0 and last != "\\":
                start, depth = i + 1, 0
            last = ""
            continue
        if c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            depth -= 1
        last = c
    return text[start:]


def code_stop(language: str | None, head: str, completion: str, suffix: str = "", final: bool = False) -> int | None:
    """The length of `completion` to keep, or None (no stop yet). `head`: the cursor's
    logical line up to the cursor (`head_of`); `suffix`: the text after the cursor; `final`:
    the completion is finished, so a last word is whole."""
    if language == PYTHON:
        return _python_stop(head, completion, suffix.lstrip()[:1], final)
    if language == BRACES:
        return _brace_stop(head, completion, suffix.lstrip()[:1])
    return None


def _python_stop(head: str, completion: str, next_char: str, final: bool) -> int | None:
    text = head + completion
    h = len(head)
    depth = 0
    base_depth: int | None = None  # bracket depth at the cursor
    starts = [0]  # logical line starts
    headers: list[bool] = []  # per complete logical line: ends with ':'
    last = ""  # last code character (not a space) of the current logical line
    bracket_cut: int | None = None
    for i, c in _code(text, _SYNTAX[PYTHON]):
        if base_depth is None and i >= h:
            base_depth = depth
        if c == "\n":
            if depth <= 0 and last != "\\":
                headers.append(last == ":")
                starts.append(i + 1)
                depth, last = 0, ""
            continue
        if c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            if base_depth is not None and depth - 1 < base_depth:
                if c == next_char:  # the code after the cursor closes it already
                    bracket_cut = i - h
                    break
                base_depth = depth - 1
            depth -= 1
        if not c.isspace():
            last = c
    dedent_cut = _dedent_cut(text, starts, headers, final)
    cuts = [c for c in (bracket_cut, None if dedent_cut is None else dedent_cut - h) if c is not None]
    return max(0, min(cuts)) if cuts else None


def _dedent_cut(text: str, starts: list[int], headers: list[bool], final: bool) -> int | None:
    """Start (in `text`) of the first logical line that leaves the anchor's block."""
    base = -1
    header = False
    for k, start in enumerate(starts):
        first = text[start:].split("\n", 1)[0]
        body = first.lstrip(" \t")
        if not body.strip():
            continue  # blank, or nothing written on it yet
        indent = _indent(first)
        if base < 0:
            if body.startswith("@"):
                continue  # a decorator: the block is the definition below it
            if k >= len(headers):
                return None  # the anchor is still being written
            base, header = indent, headers[k]
            continue
        if indent < base:
            return start
        if header and indent == base:
            word = body[: len(body) - len(body.lstrip("abcdefghijklmnopqrstuvwxyz_"))]
            if start + (len(first) - len(body)) + len(word) == len(text) and not final:
                return None  # `el` may still become `else`
            if word not in _CONTINUATIONS:
                return start
    return None


def _brace_stop(head: str, completion: str, next_char: str) -> int | None:
    text = head + completion
    h = len(head)
    depth = 0
    base: int | None = None  # bracket depth at the cursor
    went_in = False  # the completion opened a { block below the cursor's level ...
    closed = False  # ... and closed it again
    line_start = 0
    for i, c in _code(text, _SYNTAX[BRACES]):
        if base is None and i >= h:
            base = depth
        if c == "\n":
            if base is not None and i >= h:
                if depth < base:
                    return i - h  # the line that closed the cursor's block ends it
                if closed and depth == base and not text[line_start:i].strip():
                    return line_start - h  # a blank line after a whole block
            line_start = i + 1
        elif c in _OPENERS:
            depth += 1
            if c == "{" and base is not None and depth > base:
                went_in = True
        elif c in _CLOSERS:
            depth -= 1
            if base is not None and depth < base and c == next_char:
                return i - h  # the code after the cursor closes it already
            if went_in and base is not None and depth == base:
                closed = True
    return None


def finish(completion: str, suffix: str) -> str:
    """A completion cut by a structural stop, ready to insert: trailing blank space
    dropped, but the line break kept when the cut was at a line's start and the text after
    the cursor does not begin with one (so the next line is not glued on)."""
    kept = completion.rstrip()
    if "\n" in completion[len(kept) :] and not suffix.lstrip(" \t").startswith(("\n", "\r")):
        kept += "\n"
    return kept

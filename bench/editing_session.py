"""An editing session as an editor plugin sends it: the requests, built from a real file.

Someone opens a file, moves the cursor to a line, and types a few lines there, character by
character; whenever they pause, the plugin asks the server for a suggestion. This module
turns a file into that sequence of requests, exactly in the shape llama.vim sends them
(`autoload/llama.vim`, `s:fim` and `s:ring_update`), with no server and no model, so the
session is the same for every server it is replayed against.

What is typed: the `n_lines` lines starting at `start` are taken out of the file; the user
types them back where they were, the rest of the file around them. Pauses: after the
indentation of each new line (where a suggestion is most often wanted) and, within a line,
at the first word boundary once `pause_chars` characters have been typed since the last
pause. Each pause is one `/infill` request:

    input_prefix   the `n_prefix` lines above the cursor line, each ending in "\\n"
    prompt         the cursor line up to the cursor
    input_suffix   the rest of the cursor line, "\\n", then the `n_suffix` lines below
    input_extra    chunks of other files ({filename, text}, llama.vim's ring buffer)
    n_indent       the cursor line's indentation
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# llama.vim's defaults: 256 lines above, 64 below, chunks of 64 lines, 128 tokens at most
N_PREFIX = 256
N_SUFFIX = 64
CHUNK_LINES = 64
N_PREDICT = 128
# llama.vim's "t_max_predict_ms": how long it lets the server write after the first token
BUDGET_MS = 1000


@dataclass(frozen=True)
class Pause:
    """The buffer when the user stops typing: what the plugin sends from it."""

    prefix: str  # input_prefix
    middle: str  # prompt: the cursor line up to the cursor
    suffix: str  # input_suffix
    indent: int  # n_indent
    typed: int  # characters typed so far in the session


@dataclass(frozen=True)
class Session:
    """One file, one place in it, the text typed there and the pauses while typing it."""

    name: str  # path of the file, as the plugin names it
    start: int  # first line typed (0-based)
    typed: str  # the lines typed, joined with "\n"
    extra: list[dict[str, str]]  # input_extra: chunks of neighbouring files
    pauses: list[Pause]


def pauses(
    lines: list[str],
    start: int,
    n_lines: int,
    *,
    pause_chars: int = 12,
    n_prefix: int = N_PREFIX,
    n_suffix: int = N_SUFFIX,
) -> list[Pause]:
    """The pauses while lines[start:start + n_lines] are typed back, character by character."""
    before, target, after = lines[:start], lines[start : start + n_lines], lines[start + n_lines :]
    out: list[Pause] = []
    typed = 0
    for i, line in enumerate(target):
        above = before + target[:i]
        indent = len(line) - len(line.lstrip(" \t"))
        last = -len(line)  # where the last pause was
        for pos in range(indent, len(line)):
            word_end = pos > indent and _word(line[pos - 1]) and not _word(line[pos])
            if pos == indent or (word_end and pos - last >= pause_chars):
                prefix = "".join(s + "\n" for s in above[-n_prefix:]) if n_prefix else ""
                suffix = "\n" + "".join(s + "\n" for s in after[:n_suffix])
                out.append(Pause(prefix, line[:pos], suffix, indent, typed + pos))
                last = pos
        typed += len(line) + 1
    return out


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def chunks(paths: list[Path], root: Path, n: int, lines: int = CHUNK_LINES) -> list[dict[str, str]]:
    """input_extra: the first `lines` lines of each of `n` files (as llama.vim's ring holds
    chunks of files the user opened), named relative to `root`."""
    out = []
    for p in paths[:n]:
        text = "".join(s + "\n" for s in p.read_text().splitlines()[:lines])
        out.append({"filename": str(p.relative_to(root)), "text": text})
    return out


def body_start(lines: list[str], min_line: int = 40) -> int:
    """Where to type: the first line of a function body at or after `min_line` (after its
    signature and docstring) whose next three lines are code, so there is code above to
    read and a few lines to type."""
    i = min_line
    while i < len(lines):
        if not lines[i].lstrip().startswith("def "):
            i += 1
            continue
        k = i
        while k < len(lines) and not lines[k].rstrip().endswith(":"):  # a signature on several lines
            k += 1
        k += 1
        doc = lines[k].strip() if k < len(lines) else ""
        if doc.startswith(('"""', "'''")):
            quote = doc[:3]
            if not (len(doc) > 3 and doc.endswith(quote)):  # a docstring on several lines
                k += 1
                while k < len(lines) and quote not in lines[k]:
                    k += 1
            k += 1
        body = lines[k : k + 3]
        if len(body) == 3 and all(s.strip() and not s.lstrip().startswith("#") for s in body):
            return k
        i = k
    return min(min_line, max(0, len(lines) - 4))


def session(
    path: Path,
    root: Path,
    neighbours: list[Path],
    *,
    n_lines: int,
    n_extra: int,
    pause_chars: int,
    n_prefix: int = N_PREFIX,
    n_suffix: int = N_SUFFIX,
    label: str = "",
) -> Session:
    """The session of typing `n_lines` lines into the first function body of `path` past its
    40th line, with chunks of `neighbours` as the other files."""
    lines = path.read_text().splitlines()
    start = body_start(lines)
    return Session(
        name=label + str(path.relative_to(root)),
        start=start,
        typed="\n".join(lines[start : start + n_lines]),
        extra=chunks(neighbours, root, n_extra),
        pauses=pauses(lines, start, n_lines, pause_chars=pause_chars, n_prefix=n_prefix, n_suffix=n_suffix),
    )


def infill_body(
    s: Session, p: Pause, *, n_predict: int = N_PREDICT, budget_ms: int = BUDGET_MS, seed: int = 0, greedy: bool = False
) -> dict[str, Any]:
    """llama.vim's suggestion request at this pause. Three changes, for measuring: `stream`
    (to time the first token and each one after it; the server's work is the same),
    `return_tokens` (to count them), `seed` (the same draw on every server and repeat); and no
    `response_fields` (the statistics are wanted whole). `greedy`: temperature 0 (with the
    `temperature` sampler listed, which llama.vim leaves out), so every server writes the
    model's same text and their times compare the servers rather than their samplers."""
    sampling: dict[str, Any] = {"samplers": ["top_k", "top_p", "infill"]}
    if greedy:
        sampling = {"samplers": ["top_k", "top_p", "temperature"], "temperature": 0.0}
    return {
        "id_slot": 0,
        "input_prefix": p.prefix,
        "input_suffix": p.suffix,
        "input_extra": s.extra,
        "prompt": p.middle,
        "n_predict": n_predict,
        "stop": [],
        "n_indent": p.indent,
        "top_k": 40,
        "top_p": 0.90,
        **sampling,
        "stream": True,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": budget_ms,
        "return_tokens": True,
        "seed": seed,
    }


def warm_up_body(s: Session) -> dict[str, Any]:
    """llama.vim's ring update when the cursor arrives: the chunks only, `n_predict` 0."""
    return {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": s.extra,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }

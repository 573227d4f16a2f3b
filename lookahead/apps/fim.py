"""Fill-in-the-middle prompts for an editor's request, laid out as llama.cpp's server lays
them out for `/infill`, so a model reads the same tokens from us as from llama-server.

    [FIM_REP]myproject\\n                    (the repository pattern, where the model has it)
    [FIM_SEP]filename0\\n extra chunk 0      (one per `input_extra` chunk; without FIM_SEP
    [FIM_SEP]filename1\\n extra chunk 1       a plain "--- snippet ---" line separates them)
    [FIM_SEP]filename\\n
    [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

`prompt` (the current line up to the cursor, as llama.vim sends it) goes right after the
prefix. What must be cut to fit is cut far from the cursor, with llama.cpp's shares: the
prefix keeps its last 3/4 of a batch, the suffix its first 1/4 less the prompt, and the
extra chunks what the context has left beside a batch and two replies, their end (nearest
the file) first.
A model without FIM tokens cannot do this: `FimUnsupported` says which are missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lookahead.apps.complete import FimVocab
from lookahead.apps.fim_window import aligned_start
from lookahead.errors import UserError

# llama.cpp's defaults: its batch size (the FIM part is sized to fit one), and the names it
# writes in the repository pattern (it has no way yet to be told the real ones).
DEFAULT_BATCH = 2048
PROJECT_NAME = "myproject"
CURRENT_FILE = "filename"
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"  # between chunks, for models without FIM_SEP


class FimUnsupported(UserError):
    """The model's vocabulary lacks a token fill-in-the-middle needs."""


class InfillVocab(FimVocab, Protocol):
    """What `infill_prompt` needs of a vocabulary (`LlamaVocab` has it)."""

    def fim_rep(self) -> int | None: ...

    def fim_sep(self) -> int | None: ...


@dataclass(frozen=True)
class Chunk:
    """Text from another file the editor has open (llama.vim's ring of yanked and seen lines)."""

    filename: str
    text: str


@dataclass(frozen=True)
class InfillPrompt:
    tokens: list[int]  # what the model reads
    suffix_tokens: list[int]  # the suffix, as far as `clip` kept it (a draft source even where it was cut)
    extra_tokens: list[list[int]]  # each kept chunk's text (draft sources likewise)
    cut: int  # tokens of prefix, suffix and chunks left out to fit
    prefix_tokens: list[int] = field(default_factory=list)  # the prefix, as far as `clip` kept it


# When a text is far longer than the context, it is cut before it is tokenized, taking a
# token to cover at most this many characters: what lies beyond could not fit in the
# prompt anyway, and tokenizing or indexing it would cost time in proportion to the text
# (a 5 MB suffix: seconds), not to the context.
CHARS_PER_TOKEN = 16


def clip(prefix: str, suffix: str, extra: Sequence[Chunk], n_ctx: int) -> tuple[str, str, list[Chunk]]:
    """The parts of a FIM request's texts that could reach a prompt of `n_ctx` tokens: the
    end of the prefix, the start of the suffix (each cut at a line's edge, so the kept
    lines tokenize as they would whole), and the last chunks (the ring's most recent)."""
    budget = max(1, n_ctx) * CHARS_PER_TOKEN
    if len(prefix) > budget:
        tail = prefix[-budget:]
        prefix = tail[tail.find("\n") + 1 :]
    if len(suffix) > budget:
        head = suffix[:budget]
        suffix = head[: head.rfind("\n") + 1] or head
    kept: list[Chunk] = []
    room = budget
    for chunk in reversed(extra):
        room -= len(chunk.text) + len(chunk.filename)
        if room < 0:
            break
        kept.append(chunk)
    return prefix, suffix, kept[::-1]


def fim_tokens(vocab: FimVocab) -> tuple[int, int, int]:
    """(prefix, suffix, middle) tokens, or FimUnsupported naming the missing ones."""
    pre, suf, mid = vocab.fim_pre(), vocab.fim_suf(), vocab.fim_mid()
    missing = [name for name, tok in (("prefix", pre), ("suffix", suf), ("middle", mid)) if tok is None]
    if pre is None or suf is None or mid is None:
        raise FimUnsupported(
            f"infill is not supported by this model: it has no fill-in-the-middle {', '.join(missing)} "
            "token (serve a code model such as qwen2.5-coder-0.5b)"
        )
    return pre, suf, mid


def infill_prompt(
    vocab: InfillVocab,
    prefix: str,
    suffix: str,
    *,
    extra: Sequence[Chunk] = (),
    prompt: str = "",
    n_ctx: int,
    n_predict: int,
    n_batch: int = DEFAULT_BATCH,
    cached: Sequence[Sequence[int]] = (),
) -> InfillPrompt:
    """The tokens of a FIM request, cut to fit `n_ctx` with `n_predict` tokens to write
    (< 0: no limit, as llama.cpp reads it). Raises FimUnsupported without FIM tokens.
    `cached`: prompts the KV cache holds; a cut prefix window begins where theirs began
    when that is near llama.cpp's cut (`fim_window.aligned_start`)."""
    pre, suf, mid = fim_tokens(vocab)
    rep, sep = vocab.fim_rep(), vocab.fim_sep()
    prefix, suffix, extra = clip(prefix, suffix, extra, n_ctx)

    def tok(text: str) -> list[int]:
        return vocab.tokenize(text, add_special=False)

    extra_tokens: list[int] = [rep, *tok(PROJECT_NAME + "\n")] if rep is not None else []
    chunk_tokens = []
    for chunk in extra:
        head = [sep, *tok(chunk.filename + "\n")] if sep is not None else tok(SNIPPET_SEPARATOR)
        chunk_tokens.append(tok(chunk.text))
        extra_tokens += head + chunk_tokens[-1]
    if sep is not None:
        extra_tokens += [sep, *tok(CURRENT_FILE + "\n")]

    prefix_tokens, suffix_tokens = tok(prefix), tok(suffix)
    prompt_tokens = vocab.tokenize(prompt, add_special=False, parse_special=True)
    bos = vocab.tokenize("", add_special=True)  # [BOS] if the model wants one, else []
    n_predict = max(0, n_predict)
    # llama.cpp sizes the FIM part to one batch and gives the chunks a fixed share of the
    # rest, whatever the prefix's length: the chunks' cut then stays put from one keystroke
    # to the next, and so does the start of the prompt (what a prompt cache reuses). Where
    # that share would be nothing (a context under a batch and two replies), the FIM part
    # and the chunks split the context in halves; and the FIM part always fits beside the
    # reply, the 3 FIM tokens and BOS.
    if extra and n_ctx - n_batch - 2 * n_predict <= 0:
        n_batch = (n_ctx - 2 * n_predict) // 2
    batch = max(0, min(n_batch, n_ctx - n_predict - 4 - len(bos)))
    n_prefix = min(len(prefix_tokens), 3 * (batch // 4))
    n_suffix = min(len(suffix_tokens), max(0, batch // 4 - (2 + len(prompt_tokens))))
    n_extra = min(max(0, n_ctx - batch - 2 * n_predict), len(extra_tokens))
    if cached:
        start = len(prefix_tokens) - n_prefix
        room = n_ctx - n_predict - (n_extra + len(bos) + n_prefix + len(prompt_tokens) + n_suffix + 3)
        aligned = aligned_start(prefix_tokens, start, pre, cached, batch // 4)
        if start - aligned <= room:  # a longer window still fits beside the reply
            n_prefix = len(prefix_tokens) - aligned

    tokens = [
        *extra_tokens[len(extra_tokens) - n_extra :],
        *bos,
        pre,
        *prefix_tokens[len(prefix_tokens) - n_prefix :],
        *prompt_tokens,
        suf,
        *suffix_tokens[:n_suffix],
        mid,
    ]
    cut = len(prefix_tokens) - n_prefix + len(suffix_tokens) - n_suffix + len(extra_tokens) - n_extra
    return InfillPrompt(tokens, suffix_tokens, chunk_tokens, cut, prefix_tokens)


def indent_cut(text: str, n_indent: int) -> int | None:
    """Where llama.cpp's `n_indent` ends a completion: at the first line after the first
    whose indentation (spaces and tabs) is below `n_indent`, once something follows that
    indentation (an empty line counts, as in llama.cpp). The cut keeps that line's
    indentation, as llama.cpp does. None: no such line (yet)."""
    if n_indent <= 0:
        return None
    start = text.find("\n") + 1
    while start > 0:
        pos = start
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and pos - start < n_indent:
            return pos
        start = text.find("\n", start) + 1
    return None

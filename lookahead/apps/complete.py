"""Code completion at a cursor in a file: the library behind `lookahead complete`.

    split = split_at_cursor(read_source(path), line=12)          # or a <CURSOR> marker
    prompt = completion_prompt(model.backend, split, room=...)   # FIM tokens if the model has them
    for event in stream_completion(model, prompt, split, language=language_of(path)): ...

The prompt is fill-in-the-middle when the model's vocabulary names FIM tokens (read from
the GGUF, e.g. Qwen2.5-Coder's <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>):
[BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>, as llama.cpp's own infill builds it;
otherwise the prefix alone. Either way, the code after the cursor is a draft source, and
so can the user's repository be (`context_corpus`). The completion ends at the end of
the cursor's block (`lookahead.apps.codestop`), at --max-tokens, at a stop string, or where
the model ends it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lookahead.api import Model
from lookahead.apps.codestop import CodeStop, finish
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Event, GenerationError, Result, Stats, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import UserError
from lookahead.index.base import DraftSource
from lookahead.index.corpus import CorpusError, CorpusIndex
from lookahead.index.ignore import GitIgnore
from lookahead.index.prediction import PredictionIndex
from lookahead.progress import Progress

DEFAULT_MARKER = "<CURSOR>"
# The suffix keeps at most this share of a prompt that must be cut to fit the context (the
# code just before the cursor says more about what comes next than the code after it).
SUFFIX_SHARE = 0.25
MIN_ROOM = 16  # fewer prompt tokens than this cannot say anything about the cursor


@dataclass(frozen=True)
class Cursor:
    line: int  # 1-based
    col: int  # 1-based, in characters (code points) of the line


@dataclass(frozen=True)
class Split:
    """A file's text cut at the cursor (a marker, if the cursor was one, taken out)."""

    prefix: str
    suffix: str
    cursor: Cursor
    marker: str | None = None  # the marker removed from the text, if any

    @property
    def text(self) -> str:
        """The file without the marker."""
        return self.prefix + self.suffix

    def with_completion(self, completion: str) -> str:
        """The file with `completion` at the cursor (its line breaks made the file's own)."""
        if "\r\n" in self.text:
            completion = completion.replace("\r\n", "\n").replace("\n", "\r\n")
        return self.prefix + completion + self.suffix


def read_source(path: str | Path) -> str:
    """The file's text (UTF-8), or a UserError saying why not."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"file not found: {path}")
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\0" in raw:
        raise UserError(f"{path} is not a text file (it has NUL bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def split_at_cursor(
    text: str, *, line: int | None = None, col: int | None = None, marker: str = DEFAULT_MARKER
) -> Split:
    """Cut `text` at the cursor: `line` (1-based) and `col` (1-based, default: the end of
    the line), or else the one `marker` in the text (removed). Both at once is an error:
    a marker left in the file by mistake would be sent to the model as code."""
    if not marker:
        raise UserError("the cursor marker must not be empty")
    found = text.count(marker)
    if line is None:
        if col is not None:
            raise UserError("--col needs --line")
        if found == 0:
            raise UserError(f"no cursor: the file has no {marker} marker (put one in, or give --line)")
        if found > 1:
            raise UserError(f"the file has {found} {marker} markers: leave exactly one")
        at = text.index(marker)
        prefix, suffix = text[:at], text[at + len(marker) :]
        start = prefix.rfind("\n") + 1
        return Split(prefix, suffix, Cursor(prefix.count("\n") + 1, at - start + 1), marker)
    if found:
        raise UserError(
            f"--line was given but the file also has a {marker} marker: use one cursor "
            "(take the marker out, or name another with --marker)"
        )
    lines = text.split("\n")
    if line < 1 or line > len(lines):
        raise UserError(f"--line {line} is outside the file (lines 1 to {len(lines)})")
    body = lines[line - 1].removesuffix("\r")
    end = len(body) + 1
    if col is None:
        col = end
    if col < 1 or col > end:
        raise UserError(f"--col {col} is outside line {line} (columns 1 to {end})")
    at = sum(len(x) + 1 for x in lines[: line - 1]) + col - 1
    return Split(text[:at], text[at:], Cursor(line, col))


class FimVocab(Protocol):
    """What `completion_prompt` needs of a vocabulary (`LlamaVocab` has it)."""

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]: ...

    def fim_pre(self) -> int | None: ...

    def fim_suf(self) -> int | None: ...

    def fim_mid(self) -> int | None: ...


@dataclass(frozen=True)
class CompletionPrompt:
    tokens: list[int]  # what the model reads
    fim: bool  # fill-in-the-middle (the model sees the suffix too)
    suffix_tokens: list[int]  # the code after the cursor, as a draft source
    cut: int = 0  # prompt tokens left out to fit the context
    # The blank indentation before the cursor on an otherwise empty line, left out of the
    # prompt: tokenizers join spaces with the word after them, so a prompt ending in spaces
    # makes a model write odd indentation (" return" after four spaces, one too many).
    # The model writes the indentation itself; `heal` takes it off the completion again.
    healed: str = ""

    def heal(self, text: str) -> str:
        """The completion as it goes in at the cursor: without the indentation already there."""
        return text[len(self.healed) :] if self.healed and text.startswith(self.healed) else text


def blank_indent(prefix: str) -> str:
    """The blank indentation the cursor sits on, on an otherwise empty line ("" if none):
    left out of the prompt for the model to write (see `CompletionPrompt.healed`)."""
    line = prefix[prefix.rfind("\n") + 1 :]
    return line if line and not line.strip(" \t") else ""


def completion_prompt(vocab: FimVocab, split: Split, *, fim: bool = True, room: int) -> CompletionPrompt:
    """The prompt for a completion at `split`'s cursor, at most `room` tokens (the context
    less the tokens to generate): fill-in-the-middle when `fim` and the vocabulary has FIM
    tokens, the prefix alone otherwise. A prompt too long keeps the code nearest the
    cursor: the end of the prefix and (at most a quarter of it) the start of the suffix."""
    if room < MIN_ROOM:
        raise GenerationError(
            f"no room for a prompt: the context leaves {room} tokens beside --max-tokens "
            "(raise --ctx-size or lower --max-tokens)"
        )
    bos = vocab.tokenize("", add_special=True)  # [BOS] if the model wants one, else []
    healed = blank_indent(split.prefix)
    prefix = vocab.tokenize(split.prefix[: len(split.prefix) - len(healed)], add_special=False)
    suffix = vocab.tokenize(split.suffix, add_special=False)
    specials = (vocab.fim_pre(), vocab.fim_suf(), vocab.fim_mid())
    pre, suf, mid = specials
    if fim and pre is not None and suf is not None and mid is not None:
        free = room - len(bos) - 3
        keep_suffix = min(len(suffix), max(free - len(prefix), int(free * SUFFIX_SHARE)))
        keep_prefix = min(len(prefix), free - keep_suffix)
        tokens = [*bos, pre, *prefix[len(prefix) - keep_prefix :], suf, *suffix[:keep_suffix], mid]
        cut = len(prefix) - keep_prefix + len(suffix) - keep_suffix
        return CompletionPrompt(tokens, True, suffix, cut, healed)
    keep_prefix = min(len(prefix), room - len(bos))
    tokens = [*bos, *prefix[len(prefix) - keep_prefix :]]
    if not tokens:
        raise GenerationError("nothing before the cursor, and this model has no fill-in-the-middle tokens")
    return CompletionPrompt(tokens, False, suffix, len(prefix) - keep_prefix, healed)


def context_corpus(
    model: Model, folder: str | Path, file: str | Path | None = None, progress: Progress | None = None
) -> CorpusIndex:
    """The user's code under `folder` as a draft corpus: what git ignores, vendored and
    generated files left out (`lookahead.index.ignore`), and `file` too (the one being
    completed: its text is the prompt and the suffix, and leaving it out keeps its edits
    from rebuilding the index). Cached on disk by content: a changed file rebuilds it.
    Raises CorpusError if the folder holds no usable text."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CorpusError(f"context folder not found: {folder}")
    d = model.drafting
    ignore = GitIgnore(folder, exclude=[file] if file is not None else [])
    return CorpusIndex.load_or_build(
        [folder], d.tokenize, d.tokenizer_id, d.corpus_cache, progress, ignore=ignore
    )


def stream_completion(
    model: Model,
    prompt: CompletionPrompt,
    split: Split,
    *,
    language: str | None,
    max_tokens: int = 128,
    stop: Sequence[str] = (),
    sampling: SamplingConfig | None = None,
    draft: DraftConfig | None = None,
    context: CorpusIndex | None = None,
) -> Iterator[Event]:
    """Generate the completion: a Step per verify step, whose text is what is final so far
    (text that a structural stop could still take back, such as the line being written
    and trailing blank space, is held until it is settled, and comes with a later Step),
    then Done with the completion.

    `language` (`codestop.language_of`; None: no structural stop). When the structural
    stop fires, generation stops there (the engine's generator is closed) and the
    completion is cut; its statistics then count every token generated, the few past the
    cut too, and the prefill time is the first step's wait less its draft and verify.
    """
    # The suffix as a draft source: a PredictionIndex, a cursor into the code after the
    # cursor, rather than a CorpusIndex over it. When the completion runs into code that
    # is already there (the model rewriting the next lines, as a prefix-only model does),
    # it copies that code in one run: the prediction index finds the spot on 2 to 8 shared
    # tokens, then follows it token by token and proposes the whole rest of the suffix as
    # one long chain, more confident the longer the run holds (0.95 after 12 tokens). A
    # corpus index looks the last 3 tokens up afresh at every step, and with one
    # occurrence its estimate (1/(1 + 12/agreement)) stays low, so its drafts stay short.
    sources: list[DraftSource] = []
    if prompt.suffix_tokens:
        sources.append(PredictionIndex(prompt.suffix_tokens, aligned=False))
    if context is not None:
        sources.append(context.fresh())
    events = model.stream(
        "",
        tokens=prompt.tokens,
        max_tokens=max_tokens,
        stop=stop,
        sampling=sampling,
        draft=draft,
        sources=sources,
    )
    return finish_completion(events, prompt, split, language=language)


def finish_completion(
    events: Iterator[Event], prompt: CompletionPrompt, split: Split, *, language: str | None
) -> Iterator[Event]:
    """A generation's events as a completion at the cursor (see `stream_completion`),
    wherever they were generated: here, or by a server (`lookahead.apps.remote`)."""
    code_stop = CodeStop(language, split.prefix, split.suffix)  # on the text as it goes in
    tally = _Tally()
    text = ""  # the streamed text so far
    shown = 0  # how much of the completion (healed) the Steps yielded so far carry
    try:
        for event in events:
            if isinstance(event, Done):
                result = event.result
                final = prompt.heal(result.text)
                cut = code_stop(final, final=True)
                if cut is not None:
                    final = finish(final[:cut], split.suffix)
                if final[shown:]:  # what was held back: one last Step, no tokens of its own
                    yield Step([], final[shown:], 0, 0, 0, 0.0, 0.0, 0.0)
                yield Done(dataclasses.replace(result, text=final))
                return
            tally.add(event)
            text += event.text
            done = prompt.heal(text)
            cut = code_stop(done)
            if cut is not None:
                final = finish(done[:cut], split.suffix)
                yield dataclasses.replace(event, text=final[shown:])
                yield Done(Result(final, tally.tokens, tally.stats, "stop"))
                return
            # settled: the complete lines, less trailing blank space
            settled = done[: done.rfind("\n") + 1].rstrip()
            yield dataclasses.replace(event, text=settled[shown:])
            shown = max(shown, len(settled))
    finally:
        if isinstance(events, Generator):
            events.close()  # stops the engine where it is


class _Tally:
    """The statistics of a generation stopped before its Done (which carries the engine's)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.tokens: list[int] = []
        self.stats = Stats()

    def add(self, step: Step) -> None:
        now = time.perf_counter()
        s = self.stats
        if not s.steps:  # the first step also waited for the prefill
            s.prefill_s = max(0.0, now - self.start - step.verify_s - step.draft_s)
        self.tokens += step.tokens
        s.n_tokens = len(self.tokens)
        s.steps += 1
        s.drafted += step.drafted
        s.accepted += step.accepted
        s.k_trace.append(step.drafted)
        s.decode_s = now - self.start - s.prefill_s


def write_completion(path: str | Path, split: Split, completion: str, original: bytes | None = None) -> None:
    """Insert `completion` at the cursor of the file at `path` (the marker, if any, goes):
    written to a temporary file in the same folder, then renamed over it, so the file is
    either the old one or the new one, never half of one; its permissions are kept.
    With `original` (the file's bytes when it was read), a file saved meanwhile (an editor
    while the model wrote) is not overwritten: a UserError says so."""
    path = Path(path)
    data = split.with_completion(completion).encode("utf-8")
    if original is not None and path.read_bytes() != original:
        raise UserError(f"{path} changed while the completion was written; it was not overwritten")
    mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

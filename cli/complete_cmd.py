"""`lookahead complete FILE`: complete code at a cursor, print it, or write it in."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from lookahead.apps.codestop import language_of
from lookahead.apps.complete import (
    CompletionPrompt,
    Split,
    completion_prompt,
    context_corpus,
    finish_completion,
    read_source,
    split_at_cursor,
    stream_completion,
    write_completion,
)
from lookahead.apps.remote import ENV_API_KEY, ServerUnavailable, remote_events, remote_prompt
from lookahead.backend.llama import LlamaVocab
from lookahead.cli.generate_cmd import check_options, json_summary, live_info, open_model, print_result
from lookahead.cli.live import show
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Event, Result
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import UserError
from lookahead.index.corpus import CorpusError, CorpusIndex
from lookahead.index.ignore import find_repository


def completion_json(split: Split, prompt: CompletionPrompt, result: Result, written: bool) -> dict[str, Any]:
    """The --json object: the completion, the cursor, whether the prompt was FIM, whether it
    was written into the file, then `generate --json`'s statistics (its `text` is
    `completion` here)."""
    stats = json_summary(result)
    del stats["text"]
    return {
        "completion": result.text,
        "line": split.cursor.line,
        "col": split.cursor.col,
        "fim": prompt.fim,
        "written": written,
        **stats,
    }


def context_folder(file: Path, context: Path | None, no_context: bool) -> tuple[Path | None, bool]:
    """(the folder to draft from, whether the user named it)."""
    if no_context:
        if context is not None:
            raise UserError("give --corpus DIR or --no-corpus, not both")
        return None, False
    if context is not None:
        if not context.is_dir():
            raise CorpusError(f"context folder not found: {context}")
        return context, True
    return find_repository(file), False


def run_complete(
    *,
    file: Path,
    line: int | None,
    col: int | None,
    marker: str,
    fim: bool,
    context: Path | None,
    no_context: bool,
    no_block_stop: bool,
    write: bool,
    as_json: bool,
    model: str,
    max_tokens: int,
    sampling: dict[str, Any],
    stop: list[str] | None,
    exact: bool,
    no_spec: bool,
    n_ctx: int,
    threads: int,
    live: bool = False,
    server: str | None = None,
) -> None:
    """The command, its options as `lookahead complete` takes them."""
    # Everything about the input is checked before the model loads.
    sampling_cfg = SamplingConfig(**sampling)
    draft_cfg = DraftConfig(enabled=not no_spec, exact=exact)
    check_options(max_tokens=max_tokens, n_ctx=n_ctx, threads=threads, draft=draft_cfg)
    original = file.read_bytes() if write and file.is_file() else None  # --write refuses if it changes
    split = split_at_cursor(read_source(file), line=line, col=col, marker=marker)
    folder, named = context_folder(file, context, no_context)
    if write and not (os.access(file, os.W_OK) and os.access(file.resolve().parent, os.W_OK)):
        raise UserError(f"cannot write {file} (--write needs the file and its folder writable)")
    err = Console(stderr=True)
    language = None if no_block_stop else language_of(file)
    if server:
        remote = ask_server(server, split, fim, max_tokens, sampling_cfg, tuple(stop or ()), draft_cfg, err)
        if remote is not None:
            prompt, events = remote
            result = show(finish_completion(events, prompt, split, language=language), echo=not as_json, err=err)
            finish_complete(
                file, split, prompt, result, write=write, as_json=as_json, err=err, n_ctx=n_ctx, original=original
            )
            return
    prompts: list[CompletionPrompt] = []

    def build_prompt(path: Path) -> None:  # with the vocabulary alone, before the weights load
        vocab = LlamaVocab(path)
        try:
            room = (n_ctx or vocab.n_ctx_train) - max_tokens - 1
            prompts.append(completion_prompt(vocab, split, fim=fim, room=room))
        finally:
            vocab.close()

    lm, _ = open_model(model, n_ctx=n_ctx, threads=threads, draft=draft_cfg, live=live, err=err, check=build_prompt)
    prompt = prompts[0]
    corpus: CorpusIndex | None = None
    if folder is not None and draft_cfg.enabled:
        with err.status(f"indexing {folder} to draft from (cached until a file changes)"):
            try:
                corpus = context_corpus(lm, folder, file)
            except CorpusError:
                if named:
                    raise
                # the repository found on our own has nothing to read: draft without it
    if prompt.cut:
        err.print(f"[dim]{prompt.cut} prompt tokens left out to fit the context[/dim]", highlight=False)
    events = stream_completion(
        lm,
        prompt,
        split,
        language=language,
        max_tokens=max_tokens,
        stop=tuple(stop or ()),
        sampling=sampling_cfg,
        draft=draft_cfg,
        context=corpus,
    )
    result = show(events, echo=not as_json, live=live_info(lm, draft_cfg, live, as_json), err=err)
    finish_complete(
        file, split, prompt, result, write=write, as_json=as_json, err=err, n_ctx=lm.backend.n_ctx, original=original
    )


def finish_complete(
    file: Path,
    split: Split,
    prompt: CompletionPrompt,
    result: Result,
    *,
    write: bool,
    as_json: bool,
    err: Console,
    n_ctx: int,
    original: bytes | None = None,
) -> None:
    """Write the completion in (--write; refused if the file changed since `original` was read),
    then the --json object or the summary line."""
    if write:
        write_completion(file, split, result.text, original)
    if as_json:
        sys.stdout.write(json.dumps(completion_json(split, prompt, result, write), ensure_ascii=False) + "\n")
        return
    print_result(result, False, err, n_ctx=n_ctx)
    if write:
        err.print(f"[dim]wrote the completion into {file} at {split.cursor.line}:{split.cursor.col}[/dim]")


def ask_server(
    server: str,
    split: Split,
    fim: bool,
    max_tokens: int,
    sampling: SamplingConfig,
    stop: tuple[str, ...],
    draft: DraftConfig,
    err: Console,
) -> tuple[CompletionPrompt, Iterator[Event]] | None:
    """The server's completion (None: it cannot be reached, so the model loads here)."""
    if not server.startswith(("http://", "https://")):
        raise UserError(f"--server must be an http:// or https:// URL, got {server!r}")
    try:
        return remote_events(
            server,
            split,
            remote_prompt(split, fim),
            max_tokens=max_tokens,
            sampling=sampling,
            stop=stop,
            draft=draft,
            api_key=os.environ.get(ENV_API_KEY) or None,
        )
    except ServerUnavailable as exc:
        err.print(f"[dim]{exc}: loading the model here instead[/dim]", highlight=False)
        return None

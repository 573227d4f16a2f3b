"""A fill-in-the-middle request's prompt and its own draft sources, for every route that
writes one (llama.cpp's `/infill`, OpenAI's `/v1/completions` with a `suffix`).

An editor's request carries the code around the cursor: the suffix (what follows the
cursor), the file's text above it, and `input_extra` chunks from other files. Each is a
draft source for that request: the suffix as a cursor into the code that follows (a
completion that runs into existing code copies it in one run), the rest as a small corpus
(their text is often where the next line is already written: a name, a call, a pattern).
"""

from __future__ import annotations

from collections.abc import Sequence

from lookahead.api import Model
from lookahead.apps.fim import DEFAULT_BATCH, Chunk, FimUnsupported, infill_prompt
from lookahead.index.base import DraftSource
from lookahead.index.corpus import CorpusError, CorpusIndex
from lookahead.index.prediction import PredictionIndex
from lookahead.server.errors import APIError

MIN_CONTEXT_DOC = 8  # shorter texts say too little to draft from


def fim_tokens_and_sources(
    model: Model,
    prefix: str,
    suffix: str,
    *,
    extra: Sequence[Chunk] = (),
    prompt: str = "",
    n_ctx: int,
    n_predict: int,
    n_batch: int = DEFAULT_BATCH,
    cached: Sequence[Sequence[int]] = (),
) -> tuple[list[int], list[DraftSource]]:
    """A FIM prompt and the request's own draft sources (the suffix; the prefix and the
    extra chunks as a corpus); APIError 400 for a model without FIM tokens. `n_batch`: the
    code around the cursor's share of the prompt, as llama-server's `-b` (`infill_prompt`);
    `cached`: the prompts the KV cache holds, where the prefix window may stay put."""
    try:
        fim = infill_prompt(
            model.backend,
            prefix,
            suffix,
            extra=extra,
            prompt=prompt,
            n_ctx=n_ctx,
            n_predict=n_predict,
            n_batch=n_batch,
            cached=cached,
        )
    except FimUnsupported as exc:
        raise APIError(400, str(exc), param="model", code="fim_not_supported") from exc
    # the draft sources cover at most a context's worth of each text (`fim.clip` cut the
    # texts before tokenizing): their cost follows the context, not the request's size
    sources: list[DraftSource] = []
    if fim.suffix_tokens:
        sources.append(PredictionIndex(fim.suffix_tokens[:n_ctx], aligned=False))
    before = fim.prefix_tokens[-n_ctx:] + (model.backend.tokenize(prompt, add_special=False) if prompt else [])
    corpus = code_corpus([before, *fim.extra_tokens])
    if corpus is not None:
        sources.append(corpus)
    return fim.tokens, sources


def code_corpus(docs: Sequence[Sequence[int]]) -> CorpusIndex | None:
    """The file's own text and the other files' chunks as a corpus (None: too little text)."""
    docs = [d for d in docs if len(d) >= MIN_CONTEXT_DOC]
    if not docs:
        return None
    try:
        return CorpusIndex.from_tokens(docs)
    except CorpusError:
        return None

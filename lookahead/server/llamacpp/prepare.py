"""llama.cpp's adapter: a request to `/infill` or `/completion` said as a `Generation` per
answer (which `generation.jobs_for` makes a job): its prompt tokens, its limits, its
sampling, and the draft sources of where the code is.

An editor's request carries the code around the cursor: the suffix (what follows the
cursor), the file's text above it, and `input_extra` chunks from other files. Each is a
draft source for that request, beside the prompt's own indexes and the service's memory of
earlier requests with the same key: the suffix as a cursor into the code that follows (a
completion that runs into existing code copies it in one run), the rest as a small corpus
(their text is often where the next line is already written: a name, a call, a pattern).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lookahead.api import Model
from lookahead.apps.fim import DEFAULT_BATCH, Chunk
from lookahead.core.constraint import ConstraintFactory
from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import LookaheadError, UserError
from lookahead.index.base import DraftSource
from lookahead.server.errors import APIError, context_exceeded
from lookahead.server.fim import fim_tokens_and_sources
from lookahead.server.generation import Generation
from lookahead.server.jobs import Job
from lookahead.server.llamacpp.schemas import CompletionRequest, InfillRequest, NativeRequest
from lookahead.server.logit_bias import model_bias


@dataclass(frozen=True)
class Prepared:
    """A request ready to queue."""

    tokens: list[int]
    max_tokens: int
    capped: bool  # n_predict was more than the context leaves
    sources: list[DraftSource]


def infill_tokens(
    model: Model, body: InfillRequest, n_ctx: int, n_batch: int = DEFAULT_BATCH, cached: Sequence[Sequence[int]] = ()
) -> tuple[list[int], list[DraftSource]]:
    """`/infill`'s prompt and draft sources (`cached`: prompts the KV cache holds)."""
    return fim_tokens_and_sources(
        model,
        body.input_prefix,
        body.input_suffix,
        extra=[Chunk(c.filename, c.text) for c in body.input_extra],
        prompt=body.prompt,
        n_ctx=n_ctx,
        n_predict=body.n_predict,
        n_batch=n_batch,
        cached=cached if body.cache_prompt else (),
    )


def completion_tokens(model: Model, body: CompletionRequest) -> list[int]:
    """`/completion`'s prompt: text (with BOS where the model wants one), token ids, or a
    mix of both as llama.cpp reads it (BOS only before a leading text)."""
    # special tokens written in the text are read as such, as llama.cpp reads them: a client
    # that builds its own FIM prompt (Continue) writes <|fim_prefix|> ... <|fim_middle|>
    parts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            tokens += model.vocab.tokenize(part, add_special=i == 0, parse_special=True)
        else:
            tokens.append(part)
    n_vocab = model.vocab.n_vocab
    bad = [t for t in tokens if not 0 <= t < n_vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is not in the vocabulary (0 to {n_vocab - 1})", param="prompt")
    return tokens


def limits(tokens: list[int], n_predict: int, n_ctx: int) -> tuple[int, bool]:
    """(tokens to write at most, whether n_predict was cut to what the context leaves);
    APIError 400 when the prompt alone fills the context."""
    room = n_ctx - len(tokens) - 1
    if room < 1:
        raise context_exceeded(
            f"the request ({len(tokens)} prompt tokens) exceeds the available context size ({n_ctx} tokens)",
            len(tokens),
            n_ctx,
            "prompt",
        )
    if n_predict < 0 or n_predict > room:
        return room, n_predict > room
    return n_predict, False


def sampling_of(model: Model, body: NativeRequest, constraint: ConstraintFactory | None) -> SamplingConfig:
    """The request's sampler chain with its logit bias and constraint (APIError 400 for
    what cannot be sampled; run off the event loop, as bias texts are tokenized)."""
    try:
        sampling = body.sampling()
    except UserError as exc:
        raise APIError(400, str(exc)) from exc
    bias = model_bias(model, body.logit_bias)
    if bias or constraint:
        sampling = replace(sampling, logit_bias=bias, constraint=constraint)
    if body.uses_infill() and sampling.temperature > 0:
        sampling = replace(sampling, infill=model.vocab)  # llama.cpp's infill sampler (core/infill.py)
    return sampling


def generation_of(
    prepared: Prepared,
    body: NativeRequest,
    sampling: SamplingConfig,
    draft: DraftConfig,
    owner: str = "",
    on_done: Callable[[Job, Sequence[int]], None] | None = None,
) -> Generation:
    """What to generate for one prepared answer."""
    return Generation(
        tokens=prepared.tokens,
        max_tokens=prepared.max_tokens,
        stop=body.stops(),
        sampling=sampling,
        draft=draft,
        sources=list(prepared.sources),
        cache_prompt=body.cache_prompt,  # llama.cpp's default: on (keep this prompt's cells for the next)
        progress=body.stream and body.return_progress,
        owner=owner,
        on_done=on_done,
        slot=body.id_slot,
    )


def prepare(
    model: Model,
    body: NativeRequest,
    n_ctx: int,
    memory_source: DraftSource | None,
    n_batch: int = DEFAULT_BATCH,
    cached: Sequence[Sequence[int]] = (),
) -> Prepared:
    """Tokenize and check one request (APIError 400 for what cannot be served); `cached`:
    the prompts the KV cache holds for it (a FIM prefix window stays where they have it)."""
    try:
        if isinstance(body, InfillRequest):
            tokens, sources = infill_tokens(model, body, n_ctx, n_batch, cached)
        else:
            assert isinstance(body, CompletionRequest)
            tokens, sources = completion_tokens(model, body), []
    except LookaheadError as exc:
        raise APIError(400, str(exc), param="prompt") from exc
    max_tokens, capped = limits(tokens, body.n_predict, n_ctx)
    if memory_source is not None:
        sources.append(memory_source)
    return Prepared(tokens, max_tokens, capped, sources)

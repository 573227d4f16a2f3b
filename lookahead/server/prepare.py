"""One request before it queues: check it against the model (400s for what cannot be served),
tokenize it, and build its `Job` (sampling, drafting options, draft sources, what to
remember when it is done)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from lookahead.api import Model
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Result
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import LookaheadError, UserError
from lookahead.index.base import DraftSource
from lookahead.index.prediction import PredictionIndex
from lookahead.server.errors import APIError
from lookahead.server.jobs import Job
from lookahead.server.schemas import ChatCompletionRequest, CompletionRequest, _Common
from lookahead.server.service import Service


def prepare(service: Service, body: _Common, chat: bool, partition: str, loop: asyncio.AbstractEventLoop) -> Job:
    """Tokenize and check a request (APIError 400 for what cannot be served), build its job."""
    model = service.model
    config = service.config
    assert model is not None
    if body.model and body.model != config.model_id:
        raise APIError(
            400,
            f"the model {body.model!r} is not served here; this server serves {config.model_id!r}",
            param="model",
            code="model_not_found",
        )
    try:
        if isinstance(body, ChatCompletionRequest):
            tokens = model.prompt_tokens(body.as_messages(), chat=True)
            wanted = body.limit()
        else:
            assert isinstance(body, CompletionRequest)
            tokens = model.prompt_tokens(body.text())
            wanted = body.max_tokens
    except LookaheadError as exc:
        raise APIError(400, str(exc), param="messages" if chat else "prompt") from exc
    assert service.worker is not None
    n_ctx = service.worker.n_ctx  # one request's context (a slot's, with --parallel)
    room = n_ctx - len(tokens) - 1
    if room < 1:
        raise APIError(
            400,
            f"the prompt has {len(tokens)} tokens, but the context holds {n_ctx}",
            param="messages" if chat else "prompt",
            code="context_length_exceeded",
        )
    if wanted is not None and wanted > room:
        raise APIError(
            400,
            f"max_tokens is {wanted}, but the context of {n_ctx} tokens leaves {room} after the "
            f"prompt's {len(tokens)}",
            param="max_tokens",
            code="context_length_exceeded",
        )
    try:
        sampling = SamplingConfig(temperature=body.temperature, top_p=body.top_p, top_k=0, seed=body.seed)
        draft = draft_config(config.draft, body)
    except UserError as exc:
        raise APIError(400, str(exc), param="lookahead") from exc
    sources: list[DraftSource] = []
    prediction = prediction_source(model, body)
    if prediction is not None:
        sources.append(prediction)
    memory = service.memory
    if memory is not None:
        shared = memory.source(partition)
        if shared is not None:
            sources.append(shared)

    def remember(job: Job, result: Result) -> None:
        if memory is not None:
            memory.add(partition, [job.tokens + result.tokens])

    return Job(
        tokens=tokens,
        max_tokens=wanted or room,
        stop=body.stops(),
        sampling=sampling,
        draft=draft,
        sources=sources,
        loop=loop,
        on_done=remember,
    )


def draft_config(base: DraftConfig, body: _Common) -> DraftConfig:
    """The server's drafting defaults with the request's `lookahead` options laid over them."""
    opts = body.lookahead
    if opts is None:
        return base
    changes = {k: v for k, v in opts.model_dump().items() if v is not None}
    return replace(base, **changes)


def prediction_source(model: Model, body: _Common) -> PredictionIndex | None:
    """A draft source over the request's Predicted Output, if it sent one."""
    if body.prediction is None:
        return None
    text = body.prediction.text()
    return PredictionIndex(model.backend.tokenize(text, add_special=False)) if text else None

"""OpenAI's adapter: one request before it queues, checked against the model (400s for what
cannot be served), tokenized, and said as a `Generation` (sampling, drafting options, draft
sources, how it is remembered), which `generation.jobs_for` makes a job.

The queue is asked first (429 before any work), and a prediction longer than the context
is refused before its index (some hundreds of bytes a token) is built.
"""

from __future__ import annotations

from jinja2 import TemplateError

from lookahead.api import Model
from lookahead.apps.fim import DEFAULT_BATCH
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import LookaheadError, UserError
from lookahead.index.base import DraftSource
from lookahead.index.prediction import PredictionIndex
from lookahead.server.admit import admission, draft_settings, remembering
from lookahead.server.constrained import request_constraint
from lookahead.server.errors import APIError, context_exceeded
from lookahead.server.fim import fim_tokens_and_sources
from lookahead.server.generation import Generation
from lookahead.server.jobs import cache_owner
from lookahead.server.logit_bias import model_bias
from lookahead.server.openai.schemas import ChatCompletionRequest, CompletionRequest, _Common
from lookahead.server.service import Service


def prepare(service: Service, body: _Common, chat: bool, caller: str | None) -> Generation:
    """Tokenize and check a request (APIError 400 for what cannot be served): what to generate."""
    model = service.model
    config = service.config
    worker = service.worker
    assert model is not None and worker is not None
    with admission():
        worker.check_room()
    # any `model` name is answered by the one model served (named in the response), as
    # llama-server and LM Studio answer it: clients often insist on sending one
    own_sources: list[DraftSource] = []
    try:
        if isinstance(body, ChatCompletionRequest):
            assert service.chat is not None
            tokens = service.chat.tokens(body)  # APIError 400 for what the template cannot render
            wanted = body.limit()
        else:
            assert isinstance(body, CompletionRequest)
            wanted = body.max_tokens
            # with `suffix`: the fill-in-the-middle prompt /infill builds, the suffix a draft source
            tokens, own_sources = openai_prompt(model, body, worker.n_ctx, config.fim_batch)
    except LookaheadError as exc:
        raise APIError(400, str(exc), param="messages" if chat else "prompt") from exc
    except (ValueError, TemplateError) as exc:  # the model's chat template refused the messages
        raise APIError(400, f"the model's chat template refused these messages: {exc}", param="messages") from exc
    n_ctx = worker.n_ctx  # one request's context (a slot's, with --parallel)
    room = n_ctx - len(tokens) - 1
    if room < 1:
        raise context_exceeded(
            f"the prompt has {len(tokens)} tokens, but the context holds {n_ctx}",
            len(tokens),
            n_ctx,
            "messages" if chat else "prompt",
        )
    if wanted is not None and wanted > room:
        raise context_exceeded(
            f"max_tokens is {wanted}, but the context of {n_ctx} tokens leaves {room} after the "
            f"prompt's {len(tokens)}",
            len(tokens),
            n_ctx,
            "max_tokens",
        )
    try:
        bias = model_bias(model, body.logit_bias)
        sampling = SamplingConfig(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=0,
            seed=body.seed,
            logit_bias=bias,
            n_probs=body.n_probs(),
            constraint=request_constraint(model, body.grammar, body.json_schema, body.response_format),
        )
    except UserError as exc:
        raise APIError(400, str(exc), param="lookahead") from exc
    draft = draft_settings(config.draft, body.lookahead, worker.capacity)
    sources: list[DraftSource] = list(own_sources)
    predicted = prediction_tokens(model, body, n_ctx, len(tokens))
    if predicted:
        sources.append(PredictionIndex(predicted))
    memory = service.memory
    partition = memory.partition(caller) if memory is not None else ""
    if memory is not None:
        shared = memory.source(partition)
        if shared is not None:
            sources.append(shared)

    return Generation(
        tokens=tokens,
        max_tokens=wanted or room,
        stop=body.stops(),
        sampling=sampling,
        draft=draft,
        sources=sources,
        on_done=remembering(memory, partition),
        predicted=predicted,
        cache_prompt=body.cache_prompt,
        progress=body.stream and body.return_progress,
        owner=cache_owner(caller),
    )


def prediction_tokens(model: Model, body: _Common, n_ctx: int, n_prompt: int = 0) -> list[int] | None:
    """The request's Predicted Output as tokens (None without one); 400 past the context,
    as no output could repeat more of it."""
    if body.prediction is None:
        return None
    tokens = model.vocab.tokenize(body.prediction.text(), add_special=False)
    if len(tokens) > n_ctx:
        raise context_exceeded(
            f"the prediction has {len(tokens)} tokens, but the context holds {n_ctx}",
            n_prompt,
            n_ctx,
            "prediction",
        )
    return tokens


def openai_prompt(
    model: Model, body: CompletionRequest, n_ctx: int, n_batch: int = DEFAULT_BATCH
) -> tuple[list[int], list[DraftSource]]:
    """`/v1/completions`' prompt: the text, or with a non-empty `suffix` the FIM prompt
    (the suffix then a draft source too). APIError 400 for a suffix on a model without FIM."""
    if not body.suffix:
        return model.prompt_tokens(body.text()), []
    return fim_tokens_and_sources(
        model, body.text(), body.suffix, n_ctx=n_ctx, n_predict=body.max_tokens or -1, n_batch=n_batch
    )

"""llama.cpp's own server API on this service, so its clients work unchanged:

    POST /infill       fill-in-the-middle for editors (llama.vim, llama.vscode)
    POST /completion   a raw completion (text or token ids), llama.cpp's response fields
                       (also as /completions, as in llama-server: OpenAI's is /v1/completions)
    POST /tokenize, /detokenize
    GET  /props, /slots

Streaming answers as llama.cpp streams them: one `data: {...}` line per piece of text, the
last with `"stop": true` and the statistics (no `[DONE]`, which is OpenAI's). Errors are
in this service's error shape (`{"error": {"message", "type", ...}}`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from lookahead.backend.base import Vocabulary
from lookahead.core.engine import Progress, Stats
from lookahead.errors import UserError
from lookahead.server import idle
from lookahead.server.admit import admission, draft_settings, remembering
from lookahead.server.constrained import request_constraint
from lookahead.server.deps import Caller, ready
from lookahead.server.errors import APIError
from lookahead.server.generation import jobs_for
from lookahead.server.jobs import Job, cache_owner
from lookahead.server.llamacpp.drafting import request_drafting
from lookahead.server.llamacpp.prepare import Prepared, generation_of, prepare, sampling_of
from lookahead.server.llamacpp.run import Watch, follow
from lookahead.server.llamacpp.schemas import (
    CompletionRequest,
    DetokenizeRequest,
    InfillRequest,
    NativeRequest,
    TokenizeRequest,
)
from lookahead.server.llamacpp.shape import NativeShape, Outcome, pick_fields, text_of
from lookahead.server.service import Service
from lookahead.server.sse import LLAMACPP, sse_response

router = APIRouter()


@router.post("/infill", response_model=None)
async def infill(body: InfillRequest, request: Request, caller: Caller) -> Response:
    service = ready(request)
    return await answer(service, service.config.defaults.apply(body), request, caller, "infill")


@router.post("/completion", response_model=None)
@router.post("/completions", response_model=None)  # llama-server's name for it too (not OpenAI's)
async def completion(body: CompletionRequest, request: Request, caller: Caller) -> Response:
    service = ready(request)
    return await answer(service, service.config.defaults.apply(body), request, caller, "completion")


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request, caller: Caller) -> dict[str, Any]:
    vocab = model_of(ready(request)).vocab
    # off the event loop: up to the body limit of text, and a piece per token with_pieces
    return await run_in_threadpool(tokenized, vocab, body)


def tokenized(vocab: Vocabulary, body: TokenizeRequest) -> dict[str, Any]:
    """`/tokenize`'s answer (APIError 400 for text that is not valid Unicode)."""
    try:
        tokens = vocab.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
    except UserError as exc:
        raise APIError(400, str(exc), param="content") from exc
    if not body.with_pieces:
        return {"tokens": tokens}
    pieces = []
    for t in tokens:
        raw = vocab.token_bytes(t)
        try:
            piece: str | list[int] = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)  # llama.cpp's form for a piece that is not valid UTF-8
        pieces.append({"id": t, "piece": piece})
    return {"tokens": pieces}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request, caller: Caller) -> dict[str, Any]:
    model = model_of(ready(request))
    n_vocab = model.vocab.n_vocab
    bad = [t for t in body.tokens if not 0 <= t < n_vocab]
    if bad:
        raise APIError(400, f"token id {bad[0]} is not in the vocabulary (0 to {n_vocab - 1})", param="tokens")
    return {"content": await run_in_threadpool(text_of, model, body.tokens, True)}


@router.get("/props")
async def props(request: Request, caller: Caller) -> dict[str, Any]:
    svc = ready(request)
    model = model_of(svc)
    defaults = svc.config.defaults.apply(NativeRequest())
    return {
        "default_generation_settings": {"params": settings(defaults), "n_ctx": worker_of(svc).n_ctx},
        "total_slots": slot_count(svc),
        "model_alias": svc.config.model_id,
        "model_path": str(model.vocab.path),
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": svc.config.slots_endpoint,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "chat_template": svc.config.chat_template or model.vocab.meta("tokenizer.chat_template") or "",
        "bos_token": "",
        "eos_token": "",
        "build_info": "lookahead",
        "is_sleeping": False,
    }


@router.get("/slots")
async def slots(request: Request, caller: Caller) -> list[dict[str, Any]]:
    svc = ready(request)
    if not svc.config.slots_endpoint:
        raise APIError(501, "this server does not serve /slots: start it with --slots")
    worker = worker_of(svc)
    running = worker.running  # which slot a request runs in is not tracked: the first ones
    return [
        {"id": i, "n_ctx": worker.n_ctx, "speculative": True, "is_processing": i < running}
        for i in range(slot_count(svc))
    ]


def model_of(service: Service) -> Any:
    assert service.model is not None
    return service.model


def worker_of(service: Service) -> Any:
    assert service.worker is not None
    return service.worker


def slot_count(service: Service) -> int:
    return int(worker_of(service).capacity)


def settings(body: NativeRequest) -> dict[str, Any]:
    """`generation_settings`: the request's sampling as llama.cpp names it."""
    return {
        "seed": body.seed if body.seed >= 0 else 0xFFFFFFFF,
        "temperature": body.temperature,
        "top_k": body.top_k,
        "top_p": body.top_p,
        "min_p": body.min_p,
        "repeat_last_n": body.repeat_last_n,
        "repeat_penalty": body.repeat_penalty,
        "n_predict": body.n_predict,
        "n_indent": body.n_indent,
        "t_max_predict_ms": body.t_max_predict_ms,
        "stop": list(body.stops()),
        "samplers": body.samplers if isinstance(body.samplers, list) else ["top_k", "top_p", "min_p", "temperature"],
        "stream": body.stream,
    }


async def answer(
    service: Service, body: NativeRequest, request: Request, caller: str | None, endpoint: str
) -> Response:
    """Prepare, queue and answer one request (several jobs for `n_cmpl` > 1)."""
    model = model_of(service)
    worker = worker_of(service)
    memory = service.memory
    partition = memory.partition(caller) if memory is not None else ""
    # one body per answer: each prompt of a list of prompts, each n_cmpl times
    prompts = body.prompts() if isinstance(body, CompletionRequest) else [None]
    per_prompt = [body if p is None else body.model_copy(update={"prompt": p}) for p in prompts]
    answers = [b for b in per_prompt for _ in range(body.completions())]
    n = len(answers)
    if body.stream and n > 1:
        raise APIError(400, "several prompts or n_cmpl > 1 are not supported with stream", param="n_cmpl")

    draft = draft_settings(service.config.draft, body.lookahead, worker.capacity)  # before any work
    draft = request_drafting(draft, body)  # an editor's time budget: drafts end at the line's end

    def prepare_all() -> list[Prepared]:
        with admission():
            worker.check_room()  # 429 before any work
        memory_source = (lambda: memory.source(partition)) if memory is not None else (lambda: None)
        # an editor's prefix window stays where the cache has it (not for exact requests,
        # whose prompt must not depend on what ran before)
        cached = [] if draft.exact else worker.cached_prompts(cache_owner(caller), body.id_slot)
        fim_batch = service.config.fim_batch
        return [prepare(model, b, worker.n_ctx, memory_source(), fim_batch, cached) for b in answers]

    # 400 for an invalid grammar or schema; parsed off the event loop (a schema's can be long)
    constraint = await run_in_threadpool(request_constraint, model, body.grammar, body.json_schema)
    prepared = await run_in_threadpool(prepare_all)
    first = prepared[0]
    prompt_texts = [await run_in_threadpool(text_of, model, p.tokens, True) for p in prepared]
    shapes = [
        NativeShape(
            service.config.model_id,
            prompt_texts[i],
            len(p.tokens),
            settings(body),
            body.return_tokens,
            i,
            model.vocab.token_bytes,
        )
        for i, p in enumerate(prepared)
    ]
    # llama.vim's and llama.vscode's requests that only bring new context (`n_predict: 0`)
    # queue as warm-ups (`Job.warm_up`): the prompt goes into the cache, nothing is written;
    # without `cache_prompt` there is nothing to keep, so the answer comes at once
    if body.n_predict == 0 and not body.cache_prompt:
        service.metrics.requests.labels(endpoint, "200").inc()
        body_out = [pick_fields(s.final(Outcome("", [], Stats(), "limit")), body.response_fields) for s in shapes]
        return JSONResponse(body_out[0] if n == 1 else body_out)
    loop = asyncio.get_running_loop()
    sampling = await run_in_threadpool(sampling_of, model, body, constraint)
    on_done = remembering(memory, partition)  # by the worker, also for a job our stops end
    generations = [generation_of(p, body, sampling, draft, cache_owner(caller), on_done) for p in prepared]
    # completion i of a prompt: seed + i, as llama-server (and OpenAI's `n`)
    jobs = jobs_for(generations, loop, choices=body.completions(), whole=not body.stream)
    # each job's llama.cpp stops, made before it queues: the worker takes its steps through
    # them (`Job.on_step`), and the prompt's time runs from here
    watches = {id(job): Watch(body.n_indent, body.t_max_predict_ms) for job in jobs}
    for job in jobs:
        watches[id(job)].watched_by(job)
    try:
        with admission():  # a 429 part-way cancels what this request already queued
            for job in jobs:
                worker.submit(job)
    except BaseException:
        for job in jobs:
            job.cancel()
        raise

    def follow_job(job: Job, p: Prepared, stream: bool) -> AsyncIterator[Any]:
        return follow(
            job,
            watches[id(job)],
            stops=body.stops(),
            detokenize=lambda toks: text_of(model, toks),
            request=None if stream else request,
            capped=p.capped,
        )

    async def outcome(job: Job, p: Prepared) -> Outcome:
        async for item in follow_job(job, p, stream=False):
            if isinstance(item, Outcome):
                return item
        raise APIError(503, "the generation was cancelled")

    def after(response: Response, outcomes: list[Outcome | None]) -> Response:
        """The response, with the idle work its answer calls for (`idle.py`) run once it is
        sent: `outcomes` is read then (a stream's is filled in as it ends)."""

        def work() -> None:
            o = outcomes[0]
            if o is not None and idle.wanted(
                o.stop_type, o.text, n, body.cache_prompt, service.config.idle_tokens, draft.exact
            ):
                idle.start(service, body, o.text, draft, cache_owner(caller), jobs[0].seq)

        if endpoint == "infill":
            response.background = BackgroundTask(work)
        return response

    if body.stream:
        ended: list[Outcome | None] = [None]  # the stream's Outcome, once it is out
        lines = stream_lines(
            follow_job(jobs[0], first, stream=True), shapes[0], body, service, jobs[0], endpoint, ended
        )
        return after(sse_response(lines, LLAMACPP, service.config.stream_ping), ended)
    try:
        outcomes = await asyncio.gather(*(outcome(j, p) for j, p in zip(jobs, prepared, strict=True)))
    finally:
        for job in jobs:
            job.cancel()
    service.metrics.requests.labels(endpoint, "200").inc()
    bodies = [pick_fields(s.final(o), body.response_fields) for s, o in zip(shapes, outcomes, strict=True)]
    return after(JSONResponse(bodies[0] if n == 1 else bodies), list(outcomes))


async def stream_lines(
    items: AsyncIterator[Any],
    shape: NativeShape,
    body: NativeRequest,
    service: Service,
    job: Job,
    endpoint: str,
    ended: list[Outcome | None] | None = None,
) -> AsyncIterator[str]:
    """A stream's lines; its Outcome also goes into `ended` (for the work after it)."""
    status = "200"
    n_predicted = 0
    try:
        async for item in items:
            if isinstance(item, Outcome):
                if ended is not None:
                    ended[0] = item
                final = pick_fields(shape.final(item, streamed=True), body.response_fields)
                yield json.dumps(final, separators=(",", ":"))
                break
            if isinstance(item, Progress):
                part = shape.progress(item, n_predicted)
                yield json.dumps(part, separators=(",", ":"))
                continue
            text, tokens, probs = item
            n_predicted += len(tokens)
            part = shape.partial(text, tokens, n_predicted, probs)
            yield json.dumps(part, separators=(",", ":"))
    except APIError as exc:
        status = str(exc.status)
        yield json.dumps(exc.body())
    finally:
        job.cancel()
        service.metrics.requests.labels(endpoint, status).inc()

"""A request from its body to its answer: prepared, queued on the worker, then answered whole
(JSON) or as a stream of server-sent events; a client that goes away cancels its job."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from sse_starlette.sse import EventSourceResponse

from lookahead.core.engine import Done, Result, Step
from lookahead.core.sampling import TokenProbs
from lookahead.errors import LookaheadError, UserError
from lookahead.server.errors import APIError, error_body
from lookahead.server.jobs import END, Job, ShuttingDown
from lookahead.server.metrics import Metrics
from lookahead.server.prepare import admission, prepare
from lookahead.server.schemas import _Common
from lookahead.server.service import Service
from lookahead.server.shape import Shape
from lookahead.server.verbose import verbose_of


async def serve(
    service: Service, body: _Common, request: Request, caller: str | None, chat: bool
) -> Response | dict[str, Any]:
    """Answer one completion request (chat or not), streamed or whole."""
    loop = asyncio.get_running_loop()
    endpoint = "chat" if chat else "completions"
    job = await run_in_threadpool(prepare, service, body, chat, caller, loop)
    assert service.worker is not None
    with admission():
        service.worker.submit(job)
    assert service.model is not None
    model_id = service.config.model_id
    verbose = verbose_of(service.model, model_id, body, job.tokens) if body.verbose else None
    shape = Shape(chat, model_id, body, len(job.tokens), job.predicted, service.model.backend.token_bytes, verbose)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventSourceResponse(
            sse(job, shape, include_usage, service.metrics, endpoint), ping=15, send_timeout=60
        )
    try:
        result = await collect(job, request)
    except BaseException:
        job.cancel()
        raise
    whole = await run_in_threadpool(shape.whole, result)  # counts a prediction's tokens
    service.metrics.requests.labels(endpoint, "200").inc()
    return whole


async def collect(job: Job, request: Request) -> Result:
    """Wait for the job's Result, cancelling it if the client goes away meanwhile."""
    result: Result | None = None
    last_check = time.monotonic()
    while True:
        try:
            item = await asyncio.wait_for(job.events.get(), timeout=0.5)
        except TimeoutError:
            item = None
        if time.monotonic() - last_check >= 0.5:
            last_check = time.monotonic()
            if await request.is_disconnected():
                job.cancel()
                raise asyncio.CancelledError
        if item is None:
            continue
        if item is END:
            break
        raise_for(item)
        if isinstance(item, Done):
            result = item.result
    if result is None:
        raise APIError(503, "the generation was cancelled")
    return result


def raise_for(item: object) -> None:
    """An error event from the worker as the APIError to answer with (other events pass)."""
    if isinstance(item, ShuttingDown):
        raise APIError(503, "the server is shutting down")
    if isinstance(item, UserError):
        raise APIError(400, str(item))
    if isinstance(item, LookaheadError):
        raise APIError(500, f"the model failed: {item}")
    if isinstance(item, Exception):
        raise APIError(500, "internal error while generating (see the server log)")


async def sse(
    job: Job, shape: Shape, include_usage: bool, metrics: Metrics, endpoint: str
) -> AsyncIterator[dict[str, str]]:
    """SSE events of a streaming response; a client that goes away cancels the job."""
    status = "200"
    pending: list[TokenProbs] = []  # with logprobs: those of tokens not yet sent
    try:
        first = True
        if shape.chat:  # the role first, alone, as OpenAI and llama-server send it
            yield {"data": json.dumps(shape.role_chunk())}
            first = False
        while True:
            item = await job.events.get()
            if item is END:
                break
            try:
                raise_for(item)
            except APIError as exc:
                status = str(exc.status)
                yield {"data": json.dumps(error_body(exc.status, exc.message))}
                break
            if isinstance(item, Step):
                pending += item.probs  # a token whose text is held back goes with the next text
            if isinstance(item, Step) and item.text:
                yield {"data": json.dumps(shape.chunk(item.text, None, first, pending))}
                first, pending = False, []
            elif isinstance(item, Done):
                last = shape.chunk("", item.result.finish_reason, first)
                if shape.verbose is not None:  # on the finishing chunk, as llama-server sends it
                    last["__verbose"] = await run_in_threadpool(shape.verbose, item.result)
                yield {"data": json.dumps(last)}
                if include_usage:
                    usage = await run_in_threadpool(shape.usage_chunk, item.result)
                    yield {"data": json.dumps(usage)}
        yield {"data": "[DONE]"}
    finally:
        job.cancel()  # a no-op once the job has ended; stops it if the client went away
        metrics.requests.labels(endpoint, status).inc()

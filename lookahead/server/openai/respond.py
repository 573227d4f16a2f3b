"""A request from its body to its answer: prepared, queued on the worker, then answered whole
(JSON) or as a stream of server-sent events; a client that goes away cancels its job."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from lookahead.core.engine import Done, Progress, Result, Step
from lookahead.core.sampling import TokenProbs
from lookahead.server.admit import admission
from lookahead.server.choices import merged
from lookahead.server.errors import APIError
from lookahead.server.follow import follow
from lookahead.server.generation import jobs_for
from lookahead.server.jobs import Job
from lookahead.server.metrics import Metrics
from lookahead.server.openai.prepare import prepare
from lookahead.server.openai.schemas import _Common
from lookahead.server.openai.shape import Shape
from lookahead.server.openai.verbose import verbose_of
from lookahead.server.service import Service
from lookahead.server.sse import OPENAI, sse_response


async def serve(
    service: Service, body: _Common, request: Request, caller: str | None, chat: bool
) -> Response | dict[str, Any]:
    """Answer one completion request (chat or not), streamed or whole; with `n` > 1 a job
    per choice (`choices.py`)."""
    loop = asyncio.get_running_loop()
    endpoint = "chat" if chat else "completions"
    # each choice prepared alone: a draft source's stream is one generation's
    generations = [await run_in_threadpool(prepare, service, body, chat, caller) for _ in range(body.n)]
    jobs = jobs_for(generations, loop, choices=body.n, whole=not body.stream)
    assert service.worker is not None
    try:
        with admission():
            for job in jobs:
                service.worker.submit(job)
    except BaseException:
        for job in jobs:
            job.cancel()
        raise
    assert service.model is not None
    first = jobs[0]
    model_id = service.config.model_id
    verbose = verbose_of(service.model, model_id, body, first.tokens) if body.verbose else None
    shape = Shape(
        chat, model_id, body, len(first.tokens), first.predicted, service.model.vocab.token_bytes, verbose
    )
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        payloads = sse(jobs, shape, include_usage, service.metrics, endpoint)
        return sse_response(payloads, OPENAI, service.config.stream_ping)
    try:
        results = await asyncio.gather(*(collect(job, request) for job in jobs))
    finally:
        for job in jobs:
            job.cancel()  # a no-op for those that ended; stops the others if one failed
    whole = await run_in_threadpool(shape.whole, results)  # counts a prediction's tokens
    service.metrics.requests.labels(endpoint, "200").inc()
    return whole


async def collect(job: Job, request: Request) -> Result:
    """Wait for the job's Result, cancelling it if the client goes away meanwhile."""
    result: Result | None = None
    async for item in follow(job, request):
        if isinstance(item, Done):
            result = item.result
    if result is None:
        raise APIError(503, "the generation was cancelled")
    return result


async def sse(
    jobs: Sequence[Job], shape: Shape, include_usage: bool, metrics: Metrics, endpoint: str
) -> AsyncIterator[str]:
    """The payloads of a streaming response, each chunk naming its choice; a client that
    goes away cancels the jobs."""
    status = "200"
    pending: list[list[TokenProbs]] = [[] for _ in jobs]  # with logprobs: those of tokens not yet sent
    first = [True] * len(jobs)
    results: list[Result | None] = [None] * len(jobs)
    try:
        if shape.chat:  # the role first, alone, as OpenAI and llama-server send it
            for i in range(len(jobs)):
                yield json.dumps(shape.role_chunk(i))
                first[i] = False
        try:
            async for i, item in merged(jobs):
                if isinstance(item, Progress):
                    yield json.dumps(shape.progress_chunk(item, i))
                elif isinstance(item, Step):
                    pending[i] += item.probs  # a token whose text is held back goes with the next text
                    if item.text:
                        yield json.dumps(shape.chunk(item.text, None, first[i], pending[i], i))
                        first[i], pending[i] = False, []
                elif isinstance(item, Done):
                    results[i] = item.result
                    last = shape.chunk("", item.result.finish_reason, first[i], index=i)
                    if shape.verbose is not None:  # on the finishing chunk, as llama-server sends it
                        last["__verbose"] = await run_in_threadpool(shape.verbose, item.result)
                    yield json.dumps(last)
        except APIError as exc:
            status = str(exc.status)
            yield json.dumps(exc.body())
        done = [r for r in results if r is not None]
        if include_usage and status == "200" and len(done) == len(jobs):
            usage = await run_in_threadpool(shape.usage_chunk, done)
            yield json.dumps(usage)
        yield "[DONE]"
    finally:
        for job in jobs:
            job.cancel()  # a no-op once a job has ended; stops it if the client went away
        metrics.requests.labels(endpoint, status).inc()

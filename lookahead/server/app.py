"""The OpenAI-compatible HTTP service: one model kept warm, requests decoded one at a time.

    POST /v1/completions, /v1/chat/completions   (stream or not; OpenAI's fields)
    GET  /v1/models, /health (503 while loading), /metrics (Prometheus text)

Each request drafts from the usual per-request indexes plus, when given, its `prediction`
(OpenAI Predicted Outputs) and the service's memory of earlier requests with the same API
key (`memory.py`). `create_app` takes a loader, so tests can hand it a model already
loaded; `lookahead serve` passes one that loads by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lookahead.api import Model
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Result, Step
from lookahead.core.multi import default_parallel
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import LookaheadError, UserError
from lookahead.index.base import DraftSource
from lookahead.index.prediction import PredictionIndex
from lookahead.server import compat, errors, native_routes
from lookahead.server.batch_worker import BatchWorker
from lookahead.server.errors import APIError
from lookahead.server.memory import SharedIndex, partition_of
from lookahead.server.metrics import Metrics
from lookahead.server.native_prepare import openai_prompt
from lookahead.server.schemas import ChatCompletionRequest, CompletionRequest, _Common
from lookahead.server.worker import END, Job, QueueFull, ShuttingDown, Worker

log = logging.getLogger("lookahead.server")


@dataclass(frozen=True)
class ServeConfig:
    """How the service runs. Built once at the edge (`lookahead serve`, tests)."""

    model_id: str  # the name clients see in /v1/models and may send as `model`
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    max_queue: int = 16  # requests waiting beyond the running one; then 429
    shared_index: bool = True  # draft from earlier requests with the same key
    index_file: Path | None = None  # persist the shared index here
    index_max_tokens: int = 65536  # per key
    index_max_requests: int = 256  # per key
    max_body_bytes: int = 8 << 20  # larger request bodies get 413
    draft: DraftConfig = field(default_factory=DraftConfig)  # per-request defaults
    shutdown_timeout: float = 10.0  # seconds the running request gets to finish on shutdown
    calibrate: bool = True  # measure the verify cost at start, not on the first request
    # requests decoded together in one batch per step; 1 = one at a time (the serial
    # worker), 0 = what pays on this machine (`lookahead.core.multi.default_parallel`)
    parallel: int = 1


class Service:
    """What the routes share: the model once loaded, its worker, memory and metrics."""

    def __init__(self, config: ServeConfig, loader: Callable[[], Model]) -> None:
        self.config = config
        self.loader = loader
        self.metrics = Metrics()
        self.model: Model | None = None
        self.worker: Worker | BatchWorker | None = None
        self.memory: SharedIndex | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()
        self.on_fatal: Callable[[str], None] | None = None

    def start(self) -> None:
        threading.Thread(target=self._load, name="load-model", daemon=True).start()

    def _load(self) -> None:
        try:
            model = self.loader()
            if self.config.calibrate and self.config.draft.enabled and self.config.draft.adaptive:
                model.calibrate()
            if self.config.shared_index:
                self.memory = SharedIndex(
                    model.drafting.tokenizer_id,
                    max_tokens=self.config.index_max_tokens,
                    max_requests=self.config.index_max_requests,
                    path=self.config.index_file,
                )
            parallel = self.config.parallel
            if parallel == 0:
                parallel = default_parallel(CostModel(model.calibrate()))
                log.info("--parallel %d (from the measured cost curve)", parallel)
            if parallel > 1:
                self.worker = BatchWorker(model, self.metrics, self.config.max_queue, parallel, self.config.draft)
            else:
                self.worker = Worker(model, self.metrics, self.config.max_queue)
            self.model = model
            self.ready.set()
            log.info("model %s ready", self.config.model_id)
        except Exception as exc:  # noqa: BLE001 - reported through /health and on_fatal
            self.load_error = str(exc) if isinstance(exc, LookaheadError) else repr(exc)
            log.error("could not load the model: %s", self.load_error)
            if self.on_fatal is not None:
                self.on_fatal(self.load_error)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close(self.config.shutdown_timeout)
        if self.memory is not None:
            self.memory.close()
        if self.model is not None:
            self.model.close()
            self.model = None

    # ---- one request, before it queues ---------------------------------------------------
    def prepare(self, body: _Common, chat: bool, partition: str, loop: asyncio.AbstractEventLoop) -> Job:
        """Tokenize and check a request (APIError 400 for what cannot be served), build its job."""
        model = self.model
        assert model is not None
        # any `model` name is answered by the one model served (named in the response), as
        # llama-server and LM Studio answer it: clients often insist on sending one
        own_sources: list[DraftSource] = []
        try:
            if isinstance(body, ChatCompletionRequest):
                tokens = model.prompt_tokens(body.as_messages(), chat=True)
                wanted = body.limit()
            else:
                assert isinstance(body, CompletionRequest)
                wanted = body.max_tokens
                # with `suffix`: the fill-in-the-middle prompt /infill builds, the suffix a draft source
                tokens, own_sources = openai_prompt(model, body, self.worker.n_ctx if self.worker else 0)
        except LookaheadError as exc:
            raise APIError(400, str(exc), param="messages" if chat else "prompt") from exc
        assert self.worker is not None
        n_ctx = self.worker.n_ctx  # one request's context (a slot's, with --parallel)
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
            draft = self._draft_config(body)
        except UserError as exc:
            raise APIError(400, str(exc), param="lookahead") from exc
        sources: list[DraftSource] = list(own_sources)
        prediction = self._prediction_source(model, body)
        if prediction is not None:
            sources.append(prediction)
        if self.memory is not None:
            shared = self.memory.source(partition)
            if shared is not None:
                sources.append(shared)

        def remember(job: Job, result: Result) -> None:
            if self.memory is not None:
                self.memory.add(partition, [job.tokens + result.tokens])

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

    def _draft_config(self, body: _Common) -> DraftConfig:
        base = self.config.draft
        opts = body.lookahead
        if opts is None:
            return base
        changes = {k: v for k, v in opts.model_dump().items() if v is not None}
        return replace(base, **changes)

    def _prediction_source(self, model: Model, body: _Common) -> PredictionIndex | None:
        if body.prediction is None:
            return None
        text = body.prediction.text()
        return PredictionIndex(model.backend.tokenize(text, add_special=False)) if text else None


# ---- the app ---------------------------------------------------------------------------


def create_app(config: ServeConfig, loader: Callable[[], Model]) -> FastAPI:
    service = Service(config, loader)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        yield
        await run_in_threadpool(service.close)

    app = FastAPI(title="lookahead", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    errors.install(app, on_error=lambda kind: service.metrics.errors.labels(kind).inc())
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)

    def authorize(request: Request) -> str:
        """The caller's partition; 401 without a valid key when keys are configured."""
        if not config.api_keys:
            return partition_of(None)
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if not header and "x-api-key" in request.headers:  # Anthropic's header, which llama-server takes too
            scheme, key = "bearer", request.headers["x-api-key"].strip()
        if scheme.lower() != "bearer" or not any(hmac.compare_digest(key, k) for k in config.api_keys):
            raise APIError(401, "missing or invalid API key (send 'Authorization: Bearer KEY')", code="invalid_api_key")
        return partition_of(key)

    def ready() -> Service:
        if service.load_error is not None:
            raise APIError(503, f"the model could not be loaded: {service.load_error}")
        if not service.ready.is_set():
            raise APIError(503, "the model is still loading", headers={"Retry-After": "5"})
        return service

    @app.get("/health")
    async def health() -> JSONResponse:
        if service.load_error is not None:
            return JSONResponse({"status": "error", "message": service.load_error}, 503)
        if not service.ready.is_set():
            return JSONResponse({"status": "loading"}, 503, {"Retry-After": "5"})
        return JSONResponse({"status": "ok", "model": config.model_id})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def list_models(partition: str = Depends(authorize)) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": config.model_id, "object": "model", "created": 0, "owned_by": "lookahead"}],
        }

    @app.post("/v1/completions", response_model=None)
    async def completions(
        body: CompletionRequest, request: Request, partition: str = Depends(authorize)
    ) -> Response | dict[str, Any]:
        return await _serve(ready(), body, request, partition, chat=False)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(
        body: ChatCompletionRequest, request: Request, partition: str = Depends(authorize)
    ) -> Response | dict[str, Any]:
        return await _serve(ready(), body, request, partition, chat=True)

    native_routes.install(app, service, authorize, ready)  # llama.cpp's own API: /infill, /completion, ...
    compat.install(app)  # the OpenAI routes without /v1, CORS
    return app


async def _serve(
    service: Service, body: _Common, request: Request, partition: str, chat: bool
) -> Response | dict[str, Any]:
    loop = asyncio.get_running_loop()
    endpoint = "chat" if chat else "completions"
    job = await run_in_threadpool(service.prepare, body, chat, partition, loop)
    assert service.worker is not None
    try:
        service.worker.submit(job)
    except QueueFull as exc:
        raise APIError(
            429, "too many requests waiting; retry later", headers={"Retry-After": str(exc.retry_after)}
        ) from exc
    except ShuttingDown as exc:
        raise APIError(503, "the server is shutting down") from exc
    model = service.model
    assert model is not None
    shape = _Shape(
        chat, service.config.model_id, body, len(job.tokens), lambda t: model.backend.tokenize(t, add_special=False)
    )
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventSourceResponse(
            _sse(job, shape, include_usage, service.metrics, endpoint), ping=15, send_timeout=60
        )
    try:
        result = await _collect(job, request)
    except BaseException:
        job.cancel()
        raise
    service.metrics.requests.labels(endpoint, "200").inc()
    return shape.whole(result)


async def _collect(job: Job, request: Request) -> Result:
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
        _raise_for(item)
        if isinstance(item, Done):
            result = item.result
    if result is None:
        raise APIError(503, "the generation was cancelled")
    return result


def _raise_for(item: object) -> None:
    if isinstance(item, ShuttingDown):
        raise APIError(503, "the server is shutting down")
    if isinstance(item, UserError):
        raise APIError(400, str(item))
    if isinstance(item, LookaheadError):
        raise APIError(500, f"the model failed: {item}")
    if isinstance(item, Exception):
        raise APIError(500, "internal error while generating (see the server log)")


async def _sse(
    job: Job, shape: _Shape, include_usage: bool, metrics: Metrics, endpoint: str
) -> AsyncIterator[dict[str, str]]:
    """SSE events of a streaming response; a client that goes away cancels the job."""
    status = "200"
    try:
        first = True
        while True:
            item = await job.events.get()
            if item is END:
                break
            try:
                _raise_for(item)
            except APIError as exc:
                status = str(exc.status)
                yield {"data": json.dumps(errors.error_body(exc.status, exc.message))}
                break
            if isinstance(item, Step) and item.text:
                yield {"data": json.dumps(shape.chunk(item.text, None, first))}
                first = False
            elif isinstance(item, Done):
                yield {"data": json.dumps(shape.chunk("", item.result.finish_reason, first))}
                if include_usage:
                    yield {"data": json.dumps(shape.usage_chunk(item.result))}
        yield {"data": "[DONE]"}
    finally:
        job.cancel()  # a no-op once the job has ended; stops it if the client went away
        metrics.requests.labels(endpoint, status).inc()


class _Shape:
    """Response bodies in OpenAI's shapes, for one request."""

    def __init__(
        self, chat: bool, model_id: str, body: _Common, prompt_tokens: int, tokenize: Callable[[str], list[int]]
    ) -> None:
        self.chat = chat
        self._tokenize = tokenize
        self.model = model_id
        self.body = body
        self.prompt_tokens = prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def usage(self, result: Result) -> dict[str, Any]:
        s = result.stats
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": s.n_tokens,
            "total_tokens": self.prompt_tokens + s.n_tokens,
        }
        if self.body.prediction is not None:
            usage["completion_tokens_details"] = self.prediction_details(result)
        return usage

    def prediction_details(self, result: Result) -> dict[str, int]:
        """OpenAI's definition: prediction tokens that appeared in the completion (accepted)
        and those that did not (rejected)."""
        assert self.body.prediction is not None
        return prediction_counts(self.body.prediction.text(), result, self._tokenize)

    @staticmethod
    def stats(result: Result) -> dict[str, Any]:
        s = result.stats
        return {
            "steps": s.steps,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "alpha": round(s.alpha, 4),
            "decode_s": round(s.decode_s, 4),
            "prefill_s": round(s.prefill_s, 4),
        }

    def whole(self, result: Result) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": None,
                "finish_reason": result.finish_reason,
            }
            out = self._head("chat.completion")
        else:
            text = result.text
            if isinstance(self.body, CompletionRequest) and self.body.echo:
                text = self.body.text() + text
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": result.finish_reason}
            out = self._head("text_completion")
        out["choices"] = [choice]
        out["usage"] = self.usage(result)
        out["lookahead"] = self.stats(result)
        return out

    def chunk(self, text: str, finish: str | None, first: bool) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text or not finish else {}
            if first:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            out = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            out = self._head("text_completion")
        out["choices"] = [choice]
        return out

    def usage_chunk(self, result: Result) -> dict[str, Any]:
        out = self._head("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"] = self.usage(result)
        out["lookahead"] = self.stats(result)
        return out


def prediction_counts(prediction: str, result: Result, tokenize: Callable[[str], list[int]]) -> dict[str, int]:
    """accepted: prediction tokens that appear, in order, in the completion; rejected: the rest."""
    predicted = tokenize(prediction)
    matcher = difflib.SequenceMatcher(None, predicted, result.tokens, autojunk=False)
    accepted = sum(block.size for block in matcher.get_matching_blocks())
    return {"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": len(predicted) - accepted}


class BodyLimit:
    """413 for request bodies over `limit` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        body = json.dumps(errors.error_body(413, f"the request body is larger than {self.limit} bytes")).encode()
        await send(
            {"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass

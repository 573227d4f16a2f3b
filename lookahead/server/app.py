"""The OpenAI-compatible HTTP service: one model kept warm, requests served by a worker
that decodes one at a time or, with `--parallel N`, up to N together in one batch per step.

    POST /v1/completions, /v1/chat/completions   (stream or not; OpenAI's fields)
    GET  /v1/models, /health (503 while loading), /metrics (Prometheus text)

Each request drafts from the usual per-request indexes plus, when given, its `prediction`
(OpenAI Predicted Outputs) and the service's memory of earlier requests with the same API
key (`memory.py`). `create_app` takes a loader, so tests can hand it a model already
loaded; `lookahead serve` passes one that loads by name.

The rooms, one job each: `config.py` (ServeConfig), `service.py` (the loaded model, its
worker, memory, metrics), `deps.py` (key check, readiness), `prepare.py` (a request's checks
and its Job), `respond.py` (queue, wait, SSE), `shape.py` (OpenAI's response bodies),
`chat.py` (messages to a prompt through the chat template), `verbose.py` (`__verbose`),
`limits.py` (the body limit), `errors.py` (OpenAI's error shape), `jobs.py` / `worker.py` /
`batch_worker.py` (the generation thread). Routes live in `routes_*.py`, one `APIRouter`
per area: a new area adds its module and one `include_router` line below.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from lookahead.api import Model
from lookahead.server import compat, errors, native_routes, replica, routes_openai, routes_ops, routes_template
from lookahead.server.config import ServeConfig
from lookahead.server.limits import BodyLimit
from lookahead.server.service import Service
from lookahead.server.shape import prediction_counts

__all__ = ["ServeConfig", "Service", "create_app", "prediction_counts"]


def create_app(config: ServeConfig, loader: Callable[[], Model]) -> FastAPI:
    """The ASGI app: its service starts loading the model when the app starts."""
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
    replica.install(app, service, config.replica_id or replica.default_replica_id())
    app.include_router(routes_ops.router)
    app.include_router(routes_openai.router)
    app.include_router(native_routes.router)  # llama.cpp's own API: /infill, /completion, /tokenize ...
    app.include_router(routes_template.router)  # /apply-template, /v1/chat/completions/input_tokens
    compat.install(app, config.cors_origins)  # the OpenAI routes without /v1, CORS
    return app

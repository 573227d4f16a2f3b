"""The OpenAI-compatible HTTP service: one model kept warm, requests served by a worker
that decodes one at a time or, with `--parallel N`, up to N together in one batch per step.

    POST /v1/completions, /v1/chat/completions   (stream or not; OpenAI's fields)
    GET  /v1/models, /health (503 while loading), /metrics (Prometheus text)

Each request drafts from the usual per-request indexes plus, when given, its `prediction`
(OpenAI Predicted Outputs) and the service's memory of earlier requests with the same API
key (`memory.py`). `create_app` takes a loader, so tests can hand it a model already
loaded; `lookahead serve` passes one that loads by name.

The rooms, one job each. Each dialect is a folder: `openai/` (OpenAI's routes, request
bodies, a request's checks and its Job, the answer whole or streamed, response bodies,
`__verbose`) and `llamacpp/` (llama.cpp's routes, bodies, jobs, the editor's stops, answers).
What they share sits here: `admit.py` (the queue's refusals, drafting settings, the `exact`
refusal, `cache_prompt`), `follow.py` (the one loop that follows a running job), `sse.py`
(the one SSE writer), `fim.py` (a fill-in-the-middle prompt and its draft sources),
`options.py`, `request_limits.py`, `constrained.py`, `logit_bias.py`, `choices.py` (several
completions of one prompt); `config.py` (ServeConfig), `service.py` (the loaded model, its
worker, memory, metrics), `deps.py` (key check, readiness), `chat.py` (messages to a prompt
through the chat template), `limits.py` (the body limit), `json_body.py` (bodies read as
JSON whatever their content type, a lone surrogate refused; HEAD as GET), `errors.py` (OpenAI's error
shape), `jobs.py` / `worker.py` / `batch_worker.py` (the generation thread). Routes live in
`routes_*.py` and each dialect's `routes.py`, one `APIRouter` per area: a new area adds its
module and one `include_router` line below.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from lookahead.api import Model
from lookahead.server import compat, errors, replica, routes_ops, routes_template
from lookahead.server.config import ServeConfig
from lookahead.server.json_body import HeadAsGet, JSONBody
from lookahead.server.limits import BodyLimit
from lookahead.server.llamacpp import routes as llamacpp_routes
from lookahead.server.openai import routes as openai_routes
from lookahead.server.openai.shape import prediction_counts
from lookahead.server.service import Service

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
    app.add_middleware(JSONBody)  # inside the body limit: it reads bodies the limit has passed
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    replica.install(app, service, config.replica_id or replica.default_replica_id())
    app.include_router(routes_ops.router)
    app.include_router(openai_routes.router)
    app.include_router(llamacpp_routes.router)  # llama.cpp's own API: /infill, /completion, /tokenize ...
    app.include_router(routes_template.router)  # /apply-template, /v1/chat/completions/input_tokens
    app.add_middleware(HeadAsGet)  # HEAD is the GET of the same path without its body
    compat.install(app, config.cors_origins)  # the OpenAI routes without /v1, CORS
    return app

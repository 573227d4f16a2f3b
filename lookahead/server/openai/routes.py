"""OpenAI's routes: `/v1/models`, `/v1/completions`, `/v1/chat/completions` (behind the key)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from lookahead.server.deps import Caller, ServiceDep, ready
from lookahead.server.openai.respond import serve
from lookahead.server.openai.schemas import ChatCompletionRequest, CompletionRequest

router = APIRouter()


@router.get("/v1/models")
async def list_models(service: ServiceDep, caller: Caller) -> dict[str, Any]:
    config = service.config
    return {
        "object": "list",
        "data": [
            {
                "id": config.model_id,
                "object": "model",
                "created": 0,
                "owned_by": "lookahead",
                "aliases": list(config.aliases or (config.model_id,)),
                "tags": list(config.tags),
            }
        ],
    }


@router.post("/v1/completions", response_model=None)
async def completions(
    body: CompletionRequest, request: Request, caller: Caller
) -> Response | dict[str, Any]:
    service = ready(request)
    return await serve(service, service.config.defaults.apply(body), request, caller, chat=False)


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, caller: Caller
) -> Response | dict[str, Any]:
    service = ready(request)
    return await serve(service, service.config.defaults.apply(body), request, caller, chat=True)

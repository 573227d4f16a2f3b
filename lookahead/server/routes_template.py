"""What the chat template makes of a conversation, without generating (behind the key):

    POST /apply-template                      {"messages": [...]} -> {"prompt": "..."}
    POST /v1/chat/completions/input_tokens    {"messages": [...]} -> {"input_tokens": N}
                                              (also without /v1, as llama-server serves it)

Both take a chat completion's body (its other fields are ignored) and read `messages`,
`add_generation_prompt` and `continue_final_message` as a chat completion does, so the
prompt and the count are those of the same request sent to `/v1/chat/completions`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from lookahead.server.chat import ChatPrompts
from lookahead.server.deps import Caller, ready
from lookahead.server.openai.schemas import ChatInput
from lookahead.server.service import Service

router = APIRouter()


def prompts_of(service: Service) -> ChatPrompts:
    assert service.chat is not None  # set with the model, which `ready` waited for
    return service.chat


@router.post("/apply-template")
async def apply_template(body: ChatInput, request: Request, caller: Caller) -> dict[str, Any]:
    """The prompt text the model would read for these messages (llama-server's route)."""
    prompts = prompts_of(ready(request))
    return {"prompt": await run_in_threadpool(prompts.text, body)}


@router.post("/v1/chat/completions/input_tokens")
async def input_tokens(body: ChatInput, request: Request, caller: Caller) -> dict[str, Any]:
    """How many prompt tokens a chat completion with these messages would count."""
    prompts = prompts_of(ready(request))
    tokens = await run_in_threadpool(prompts.tokens, body)
    return {"input_tokens": len(tokens), "object": "response.input_tokens"}

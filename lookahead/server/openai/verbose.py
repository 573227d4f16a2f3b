"""llama-server's `__verbose` (a request's `"verbose": true`): beside OpenAI's answer, the
same answer in llama.cpp's own API's shape, with the prompt as the model read it (the chat
template's output, special tokens written out), for seeing what a template made of the
messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lookahead.core.engine import Result
from lookahead.server.llamacpp.shape import NativeShape, Outcome, stop_of, text_of
from lookahead.server.openai.schemas import ChatCompletionRequest, _Common


def verbose_of(model: Any, model_id: str, body: _Common, tokens: list[int]) -> Callable[[Result], dict[str, Any]]:
    """The `__verbose` body of a request's Result (call it off the event loop: it detokenizes)."""

    wanted = body.limit() if isinstance(body, ChatCompletionRequest) else getattr(body, "max_tokens", None)

    def build(result: Result) -> dict[str, Any]:
        settings = {
            "seed": body.seed if body.seed is not None else 0xFFFFFFFF,  # llama.cpp's "random"
            "temperature": body.temperature,
            "top_p": body.top_p,
            "n_predict": wanted or -1,
            "stop": list(body.stops()),
            "stream": body.stream,
        }
        stop_type, word = stop_of(text_of(model, result.tokens), result.text, body.stops(), result.finish_reason)
        shape = NativeShape(model_id, text_of(model, tokens, special=True), len(tokens), settings)
        outcome = Outcome(result.text, result.tokens, result.stats, stop_type, word, truncated=result.context_full)
        return shape.final(outcome)

    return build

"""Response bodies in OpenAI's shapes (whole responses, stream chunks, usage) for one request.

`whole` and `usage_chunk` count a prediction's tokens: call them off the event loop."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lookahead.core.engine import Result
from lookahead.core.sampling import TokenProbs
from lookahead.server.accounting import prediction_counts
from lookahead.server.logprobs import Piece, chat_logprobs, completion_logprobs
from lookahead.server.native_shape import timings
from lookahead.server.schemas import CompletionRequest, _Common


class Shape:
    """Response bodies in OpenAI's shapes, for one request."""

    def __init__(
        self,
        chat: bool,
        model_id: str,
        body: _Common,
        prompt_tokens: int,
        predicted: Sequence[int] | None = None,
        piece: Piece | None = None,  # a token's bytes: for `logprobs`
        verbose: Callable[[Result], dict[str, Any]] | None = None,  # `__verbose`, when asked for
    ) -> None:
        self.piece = piece
        self.verbose = verbose
        self.chat = chat
        self.predicted = predicted  # the prediction's tokens, when the request sent one
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
            # OpenAI's count of prompt tokens served from the cache (here: KV cells reused)
            "prompt_tokens_details": {"cached_tokens": s.tokens_cached},
        }
        if self.body.prediction is not None:
            # OpenAI's definition: prediction tokens that appeared in the completion (accepted)
            # and those that did not (rejected); linear time, but off the event loop all the same
            usage["completion_tokens_details"] = prediction_counts(self.predicted or [], result.tokens)
        return usage

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

    def logprobs(self, probs: Sequence[TokenProbs], offset: int = 0) -> dict[str, Any] | None:
        """A choice's `logprobs` (None when the request asked for none)."""
        if not self.body.n_probs() or self.piece is None:
            return None
        if self.chat:
            return chat_logprobs(probs, self.piece, self.body.top_logprobs or 0)
        return completion_logprobs(probs, self.piece, offset)

    def whole(self, result: Result) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": self.logprobs(result.probs),
                "finish_reason": result.finish_reason,
            }
            out = self._head("chat.completion")
        else:
            text = result.text
            if isinstance(self.body, CompletionRequest) and self.body.echo:
                text = self.body.text() + text
            logprobs = self.logprobs(result.probs, len(text) - len(result.text))
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": result.finish_reason}
            out = self._head("text_completion")
        out["choices"] = [choice]
        out["usage"] = self.usage(result)
        out["lookahead"] = self.stats(result)
        out["timings"] = self.timings(result)
        if self.verbose is not None:
            out["__verbose"] = self.verbose(result)
        return out

    def chunk(self, text: str, finish: str | None, first: bool, probs: Sequence[TokenProbs] = ()) -> dict[str, Any]:
        logprobs = self.logprobs(probs) if probs else None
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text or not finish else {}
            if first:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            out = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
            out = self._head("text_completion")
        out["choices"] = [choice]
        return out

    def role_chunk(self) -> dict[str, Any]:
        """A chat stream's first chunk: the role alone, before any text (as OpenAI and llama-server)."""
        out = self._head("chat.completion.chunk")
        delta = {"role": "assistant", "content": None}
        out["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]
        return out

    def usage_chunk(self, result: Result) -> dict[str, Any]:
        out = self._head("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"] = self.usage(result)
        out["lookahead"] = self.stats(result)
        out["timings"] = self.timings(result)
        return out

    def timings(self, result: Result) -> dict[str, Any]:
        """llama.cpp's `timings` object, as llama-server adds it to OpenAI's responses."""
        cached = result.stats.tokens_cached
        return timings(result.stats, self.prompt_tokens - cached, cached)

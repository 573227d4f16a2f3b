"""Response bodies in OpenAI's shapes (whole responses, stream chunks, usage) for one request,
with one choice per generation (`n`, see `choices.py`).

`whole` and `usage_chunk` count a prediction's tokens: call them off the event loop."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lookahead.core.engine import Result
from lookahead.core.progress import Progress
from lookahead.core.sampling import TokenProbs
from lookahead.server.accounting import prediction_counts
from lookahead.server.choices import total_stats
from lookahead.server.llamacpp.shape import progress_json, timings
from lookahead.server.logprobs import Piece, chat_logprobs, completion_logprobs
from lookahead.server.openai.schemas import CompletionRequest, _Common


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

    def usage(self, results: Sequence[Result]) -> dict[str, Any]:
        """OpenAI's usage of every choice together: the prompt once, the completions summed."""
        s = total_stats(results)
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
            counts = [prediction_counts(self.predicted or [], r.tokens) for r in results]
            usage["completion_tokens_details"] = {k: sum(c[k] for c in counts) for k in counts[0]}
        return usage

    @staticmethod
    def stats(results: Sequence[Result]) -> dict[str, Any]:
        s = total_stats(results)
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

    def choice(self, result: Result, index: int) -> dict[str, Any]:
        """One generation as choice `index` of a whole response."""
        if self.chat:
            return {
                "index": index,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": self.logprobs(result.probs),
                "finish_reason": result.finish_reason,
            }
        text = result.text
        if isinstance(self.body, CompletionRequest) and self.body.echo:
            text = self.body.text() + text
        logprobs = self.logprobs(result.probs, len(text) - len(result.text))
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": result.finish_reason}

    def whole(self, results: Sequence[Result]) -> dict[str, Any]:
        out = self._head("chat.completion" if self.chat else "text_completion")
        out["choices"] = [self.choice(r, i) for i, r in enumerate(results)]
        out["usage"] = self.usage(results)
        out["lookahead"] = self.stats(results)
        out["timings"] = self.timings(results)
        if self.verbose is not None:  # the first choice's, as llama-server's parent task reports it
            out["__verbose"] = self.verbose(results[0])
        return out

    def chunk(
        self, text: str, finish: str | None, first: bool, probs: Sequence[TokenProbs] = (), index: int = 0
    ) -> dict[str, Any]:
        logprobs = self.logprobs(probs) if probs else None
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text or not finish else {}
            if first:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            out = self._head("chat.completion.chunk")
        else:
            choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
            out = self._head("text_completion")
        out["choices"] = [choice]
        return out

    def role_chunk(self, index: int = 0) -> dict[str, Any]:
        """A chat stream's first chunk: the role alone, before any text (as OpenAI and llama-server)."""
        out = self._head("chat.completion.chunk")
        delta = {"role": "assistant", "content": None}
        out["choices"] = [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]
        return out

    def progress_chunk(self, progress: Progress, index: int = 0) -> dict[str, Any]:
        """llama-server's `prompt_progress` chunk (`return_progress`): an empty delta (a chat's
        carries the role, as there) with how far the prompt's prefill has gone."""
        out = self.role_chunk(index) if self.chat else self.chunk("", None, False, index=index)
        out["prompt_progress"] = progress_json(progress)
        return out

    def usage_chunk(self, results: Sequence[Result]) -> dict[str, Any]:
        out = self._head("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"] = self.usage(results)
        out["lookahead"] = self.stats(results)
        out["timings"] = self.timings(results)
        return out

    def timings(self, results: Sequence[Result]) -> dict[str, Any]:
        """llama.cpp's `timings` object, as llama-server adds it to OpenAI's responses."""
        stats = total_stats(results)
        cached = stats.tokens_cached
        return timings(stats, self.prompt_tokens - cached, cached)

"""OpenAI's `logprobs` in a response, from the probabilities the sampler kept per token:

    chat:         {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
    completions:  {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}

Log-probabilities are of the model's own distribution (before temperature and top-p), as
OpenAI's and llama.cpp's are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lookahead.core.sampling import TokenProbs

Piece = Callable[[int], bytes]


def _entry(token: int, logprob: float, piece: Piece) -> dict[str, Any]:
    raw = piece(token)
    return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}


def chat_logprobs(probs: Sequence[TokenProbs], piece: Piece, top: int) -> dict[str, Any]:
    """Chat's `choices[i].logprobs`, with `top` candidates per token."""
    content = []
    for p in probs:
        entry = _entry(p.token, p.value, piece)
        entry["top_logprobs"] = [_entry(t, v, piece) for t, v in p.top[:top]]
        content.append(entry)
    return {"content": content}


def completion_logprobs(probs: Sequence[TokenProbs], piece: Piece, offset: int = 0) -> dict[str, Any]:
    """/v1/completions' `choices[i].logprobs` (the legacy form); `offset`: where the text
    starts in the choice's `text` (the prompt's length with `echo`)."""
    tokens: list[str] = []
    offsets: list[int] = []
    for p in probs:
        offsets.append(offset)
        text = piece(p.token).decode("utf-8", "replace")
        tokens.append(text)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [p.value for p in probs],
        "top_logprobs": [{piece(t).decode("utf-8", "replace"): v for t, v in p.top} for p in probs],
        "text_offset": offsets,
    }

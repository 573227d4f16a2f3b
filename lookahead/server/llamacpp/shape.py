"""Response bodies of llama.cpp's own server API (`/completion`, `/infill`), field for field.

    {"index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted",
     "tokens_evaluated", "generation_settings", "prompt", "has_new_line", "truncated",
     "stop_type", "stopping_word", "tokens_cached", "timings": {...}}

`timings` has llama.cpp's keys (`prompt_n`, `prompt_ms`, ... `predicted_per_second`) and
its drafting counts (`draft_n`, `draft_n_accepted`). A request's `response_fields` keeps
only the fields it names, `a/b` naming field b inside a (the key stays "a/b", as llama.cpp
writes it and llama.vim reads it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lookahead.core.engine import Stats
from lookahead.core.progress import Progress
from lookahead.core.sampling import TokenProbs


@dataclass(frozen=True)
class Outcome:
    """How one generation ended, in llama.cpp's terms."""

    text: str
    tokens: list[int]
    stats: Stats
    stop_type: str  # "eos", "word" (a stop string), "limit" (n_predict, n_indent, time, context)
    stopping_word: str = ""
    truncated: bool = False  # the context ran out
    probs: tuple[TokenProbs, ...] = ()  # with n_probs: one per token
    # tokens written by the step that decoded the prompt's last token: the prompt's time,
    # not the prediction's (llama.cpp's first token comes with the prompt, its rate leaves it out)
    first_tokens: int = 0


def stop_of(full_text: str, text: str, stops: Sequence[str], finish_reason: str) -> tuple[str, str]:
    """(stop_type, stopping_word) of an engine's Result: a "stop" whose text was cut before
    one of `stops` ended on that word, any other "stop" on an end-of-generation token."""
    if finish_reason != "stop":
        return "limit", ""
    rest = full_text[len(text) :] if full_text.startswith(text) else ""
    for word in stops:
        if rest.startswith(word):
            return "word", word
    return "eos", ""


def probs_json(probs: Sequence[TokenProbs], piece: Callable[[int], bytes]) -> list[dict[str, Any]]:
    """llama.cpp's `completion_probabilities`: per token its id, text, bytes and logprob (or
    prob, with post_sampling_probs), and the most likely candidates in the same form."""

    def one(token: int, value: float, key: str) -> dict[str, Any]:
        raw = piece(token)
        return {"id": token, "token": raw.decode("utf-8", "replace"), "bytes": list(raw), key: value}

    out = []
    for p in probs:
        key, top_key = ("prob", "top_probs") if p.post else ("logprob", "top_logprobs")
        entry = one(p.token, p.value, key)
        entry[top_key] = [one(t, v, key) for t, v in p.top]
        out.append(entry)
    return out


def progress_json(progress: Progress) -> dict[str, int]:
    """llama.cpp's `prompt_progress` object (`lookahead.core.progress`)."""
    return {
        "total": progress.total,
        "cache": progress.cache,
        "processed": progress.processed,
        "time_ms": round(progress.elapsed_s * 1000),
    }


def timings(
    stats: Stats, prompt_n: int, cache_n: int = 0, first_tokens: int = 0, end_token: bool = False
) -> dict[str, Any]:
    """llama.cpp's `timings` object (times in milliseconds, rates per second). The rate
    counts the tokens written in `predicted_ms`, as llama-server counts them: all but the
    `first_tokens` that came with the prompt's time, and with `end_token` the end of
    generation the model wrote last (its step is in `predicted_ms`; llama-server counts it
    as a token, the text leaves it out)."""
    prompt_ms = stats.prefill_s * 1e3
    predicted_ms = stats.decode_s * 1e3
    n = stats.n_tokens
    n_gen = max(n - first_tokens + (1 if end_token and n else 0), 0)
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / n_gen if n_gen else 0.0,
        "predicted_per_second": 1e3 * n_gen / predicted_ms if predicted_ms > 0 else 0.0,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
    }


def text_of(model: Any, tokens: list[int], special: bool = False) -> str:
    """The tokens' text; `special`: with control tokens written out (<|fim_prefix|>, ...), as
    llama.cpp writes a prompt it echoes and `/detokenize`'s answer."""
    vocab = model.vocab

    def piece(t: int) -> bytes:
        raw: bytes = vocab.token_bytes(t)
        return raw if raw or not special else vocab.special_text(t).encode("utf-8")

    return b"".join(piece(t) for t in tokens).decode("utf-8", "replace")


def pick_fields(body: dict[str, Any], paths: Sequence[str] | None) -> dict[str, Any]:
    """The fields `paths` names, as llama.cpp's `response_fields` picks them; a path that
    names nothing is left out without error. None or empty: the whole body."""
    if not paths:
        return body
    out: dict[str, Any] = {}
    for path in paths:
        node: Any = body
        for key in path.split("/"):
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            out[path] = node
    return out


@dataclass(frozen=True)
class NativeShape:
    """The bodies of one request's answer."""

    model: str
    prompt: str  # the prompt as the model read it (llama.cpp echoes it)
    n_prompt: int  # prompt tokens
    settings: dict[str, Any]  # generation_settings
    return_tokens: bool = False
    index: int = 0
    piece: Callable[[int], bytes] | None = None  # a token's bytes, for completion_probabilities

    def final(self, out: Outcome, streamed: bool = False, cache_n: int = 0) -> dict[str, Any]:
        """The last (or only) body; a stream's last one carries no content of its own.
        `cache_n`: prompt tokens reused from the KV cache (default: what the generation says)."""
        cache_n = cache_n or out.stats.tokens_cached
        body = {
            "index": self.index,
            "content": "" if streamed else out.text,
            "tokens": [] if streamed or not self.return_tokens else out.tokens,
            "id_slot": 0,
            "stop": True,
            "model": self.model,
            "tokens_predicted": out.stats.n_tokens,
            "tokens_evaluated": self.n_prompt,
            "generation_settings": self.settings,
            "prompt": self.prompt,
            "has_new_line": "\n" in out.text,
            "truncated": out.truncated,
            "stop_type": out.stop_type,
            "stopping_word": out.stopping_word,
            # prompt tokens whose KV cells were reused from an earlier request (the prompt cache)
            "tokens_cached": cache_n,
            "timings": timings(
                out.stats, self.n_prompt - cache_n, cache_n, out.first_tokens, end_token=out.stop_type == "eos"
            ),
        }
        if out.probs and not streamed and self.piece is not None:
            body["completion_probabilities"] = probs_json(out.probs, self.piece)
        return body

    def progress(self, progress: Progress, n_predicted: int) -> dict[str, Any]:
        """A streamed piece with no text and how far the prompt has been read
        (`return_progress`, llama.cpp's `prompt_progress`)."""
        body = self.partial("", [], n_predicted)
        body["prompt_progress"] = progress_json(progress)
        return body

    def partial(
        self, text: str, tokens: list[int], n_predicted: int, probs: Sequence[TokenProbs] = ()
    ) -> dict[str, Any]:
        """One streamed piece of text."""
        body = {
            "index": self.index,
            "content": text,
            "tokens": tokens if self.return_tokens else [],
            "stop": False,
            "id_slot": 0,
            "tokens_predicted": n_predicted,
            "tokens_evaluated": self.n_prompt,
        }
        if probs and self.piece is not None:
            body["completion_probabilities"] = probs_json(probs, self.piece)
        return body

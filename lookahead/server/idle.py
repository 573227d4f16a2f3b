"""Work while the editor is idle: the request it most likely sends next, read and begun
before it comes.

When a fill-in-the-middle request ends at a limit (the editor's time budget, `n_predict`, an
`n_indent` stop) rather than where the model ended the middle, the editor very often asks
next for the continuation: llama.vim and llama.vscode send, once a suggestion is shown, and
again each time one is accepted, the request that assumes it accepted (the suggestion moved
from the middle into the prefix, the same suffix and chunks). After such an answer, and
only while no request waits, the service builds that request (`accepted`), reads its prompt
into the KV cache in small chunks and writes its first tokens greedily (`Worker.idle`).

The next request stops this work at once: part way through a prefill chunk of `IDLE_CHUNK`
tokens (llama.cpp's abort callback: that chunk's cells are dropped, the ones before it kept;
a request whose prompt holds that chunk lets it finish, `keeps_chunk`) or between two verify
steps. It then keeps the cached cells it shares, as any request does: all of its prompt when
the guess was right (or the window the plugin slid, by KV shift), and drafts from the tokens
written (`continuation_source`), verified as usual, so what it writes is the model's own. A
wrong guess costs the CPU time spent while idle, and the next request waits at most for the
verify step in progress. `lookahead serve --idle-tokens 0` turns it off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lookahead.backend.prompt_reuse import common_prefix
from lookahead.core.draft_state import DraftConfig
from lookahead.index.base import DraftSource
from lookahead.index.prediction import PredictionIndex

IDLE_CHUNK = 64  # prompt tokens per decode while idle: the most work a request's arrival discards
TAIL = 64  # prompt tokens that must match at the end for the written tokens to be aligned


def accepted(prefix: str, prompt: str, content: str) -> tuple[str, str]:
    """The (input_prefix, prompt) of the follow-up that assumes `content` accepted: what was
    written after the cursor joins the text before it, less its trailing empty lines (which
    llama.vim does not insert); the last line becomes the prompt, the lines before it join
    the prefix (where llama.vim and llama.vscode put them)."""
    text = prompt + content.rstrip("\n")
    cut = text.rfind("\n") + 1
    return prefix + text[:cut], text[cut:]


@dataclass
class IdleJob:
    """A guessed request to begin while idle."""

    tokens: list[int]  # its prompt
    max_tokens: int  # how many tokens to write at most
    draft: DraftConfig
    sources: list[DraftSource]
    owner: str  # whose cached cells it may reuse (`Job.owner`): the request it follows
    after: int  # the `Job.seq` of that request: the guess is stale once another is submitted


@dataclass
class Continuation:
    """What the last idle job read and wrote, for the next request of the same owner."""

    owner: str
    prompt: list[int]
    written: list[int] = field(default_factory=list)


def continuation_source(cont: Continuation | None, tokens: Sequence[int], owner: str) -> DraftSource | None:
    """A draft source of the tokens written while idle for a request with prompt `tokens`:
    aligned with its output when both prompts end alike (the guess was right where it
    matters: the code after and just before the cursor), else drafted only once the output
    meets them. None when there is nothing of this owner's."""
    if cont is None or cont.owner != owner or not cont.written:
        return None
    n = min(TAIL, len(tokens), len(cont.prompt))
    aligned = n > 0 and list(tokens[-n:]) == cont.prompt[-n:]
    return PredictionIndex(cont.written, aligned=aligned)


def keeps_chunk(tokens: Sequence[int], owner: str, guess: IdleJob, n_past: int) -> bool:
    """Whether a request (its prompt `tokens`, its `owner`) that arrived while the prefill
    chunk after the guess's first `n_past` cells decodes lets that chunk finish: its prompt
    holds the guess's tokens through the chunk (at most IDLE_CHUNK further), so it would
    read them again. Else the chunk stops part way. A request after Tab very often is the
    guess, and arrives while its prompt is still being read."""
    reach = min(len(guess.tokens) - 1, n_past + IDLE_CHUNK)
    return owner == guess.owner and common_prefix(tokens, guess.tokens) >= reach


def wanted(stop_type: str, text: str, answers: int, cache_prompt: bool, idle_tokens: int, exact: bool) -> bool:
    """Whether a request's answer calls for idle work: one answer that a limit ended (not
    the model's end of the middle, not a stop word), with text, its prompt kept in the cache."""
    return idle_tokens > 0 and answers == 1 and cache_prompt and not exact and stop_type == "limit" and bool(text)


def plan(service: Any, body: Any, text: str, draft: DraftConfig, owner: str, after: int) -> IdleJob | None:
    """The idle job after `/infill` request `body` answered `text` (None when the guessed
    request cannot be built: it is only a guess)."""
    from lookahead.server.errors import APIError
    from lookahead.server.llamacpp.prepare import infill_tokens

    model, worker = service.model, service.worker
    prefix, prompt = accepted(body.input_prefix, body.prompt, text)
    guess = body.model_copy(update={"input_prefix": prefix, "prompt": prompt})
    # shaped against the cells cached now (the answered request's), as the request itself
    # will be when it comes: a FIM prefix window that stays where the cache has it
    # (`apps/fim_window.py`) must stay there in the guess too, or the guess reads a window
    # the request does not send and the cells it replaces were the right ones
    cached = worker.cached_prompts(owner, body.id_slot) if body.cache_prompt else []
    try:
        tokens, sources = infill_tokens(model, guess, worker.n_ctx, service.config.fim_batch, cached)
    except APIError:
        return None
    room = worker.n_ctx - len(tokens) - 1
    n = min(service.config.idle_tokens, room)
    if n < 1:
        return None
    return IdleJob(tokens, n, draft, sources, owner, after)


def start(service: Any, body: Any, text: str, draft: DraftConfig, owner: str, after: int) -> None:
    """Plan the idle job and hand it to the worker (a response's background task, once the
    answer is sent). A worker that cannot work while idle (`--parallel`) declines it."""
    worker = service.worker
    if worker is None or not worker.takes_idle_work():
        return
    job = plan(service, body, text, draft, owner, after)
    if job is not None:
        worker.idle(job)

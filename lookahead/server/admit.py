"""What every generating route decides the same way, whatever its dialect: the queue's
refusals as HTTP answers, the request's drafting settings, the `exact` refusal on a
batching server, whether a job keeps its prompt's KV cells (`cache_prompt`), and how a job
is remembered (`remembering`, the `Job.on_done` the worker runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from lookahead.core.draft_state import DraftConfig
from lookahead.errors import UserError
from lookahead.server.errors import APIError
from lookahead.server.jobs import Job, QueueFull, ShuttingDown
from lookahead.server.memory import SharedIndex
from lookahead.server.options import LookaheadOptions


@contextmanager
def admission() -> Iterator[None]:
    """The worker's refusals as the API's: 429 with Retry-After when the queue is full, 503
    when shutting down."""
    try:
        yield
    except QueueFull as exc:
        raise APIError(
            429, "too many requests waiting; retry later", headers={"Retry-After": str(exc.retry_after)}
        ) from exc
    except ShuttingDown as exc:
        raise APIError(503, "the server is shutting down") from exc


def draft_settings(base: DraftConfig, options: LookaheadOptions | None, capacity: int) -> DraftConfig:
    """The server's drafting defaults with the request's `lookahead` options laid over them;
    APIError 400 for options that do not go together, or `exact` on a batching server."""
    draft = base
    if options is not None:
        changes = {k: v for k, v in options.model_dump().items() if v is not None}
        try:
            draft = replace(base, **changes)
        except UserError as exc:
            raise APIError(400, str(exc), param="lookahead") from exc
    refuse_exact_in_batch(draft, capacity)
    return draft


def refuse_exact_in_batch(draft: DraftConfig, capacity: int) -> None:
    """400 for `exact` on a server that decodes requests in batches.

    Refused rather than served through a one-slot path: serving it exactly would mean
    draining the batch (every other client waits for this one), and answering from the
    batch is not exact (neighbours' cells change the kernels' summation order)."""
    if draft.exact and capacity > 1:
        raise APIError(
            400,
            "lookahead.exact needs a server started with --parallel 1: in a batch of requests the "
            "output is not bit-identical to plain decoding",
            param="lookahead.exact",
        )


def keeps_prompt(requested: bool, choices: int) -> bool:
    """Whether a job reuses and keeps its prompt's KV cells (`Job.cache_prompt`): as the
    request asks, and always for several completions of one prompt (OpenAI's `n`, llama.cpp's
    `n_cmpl`), whose prompt is read once for all of them. (Exact mode still starts cold:
    `Model.stream` decides that below the server.)"""
    return requested or choices > 1


def remembering(memory: SharedIndex | None, partition: str) -> Callable[[Job, Sequence[int]], None] | None:
    """The `Job.on_done` that keeps a request (its prompt and what it wrote) in the service's
    memory of earlier requests, in the caller's partition; None when the service keeps none.
    The worker runs it, off the event loop."""
    if memory is None:
        return None

    def remember(job: Job, written: Sequence[int]) -> None:
        memory.add(partition, [job.tokens + list(written)])

    return remember

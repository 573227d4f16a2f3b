"""Following one queued job from the event loop, the same way on every route: its events as
the worker emits them, a failed generation as the APIError to answer with, and a client that
goes away (checked twice a second) cancelling the job. What a dialect makes of the events
(OpenAI's chunks, llama.cpp's stops and fields) is its own; the loop is this one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

from fastapi import Request

from lookahead.core.engine import Done, Progress, Step
from lookahead.errors import LookaheadError, UserError
from lookahead.server.errors import APIError
from lookahead.server.jobs import END, Job, ShuttingDown

POLL_S = 0.5  # how often a client that may have gone away is asked


async def follow(job: Job, request: Request | None = None) -> AsyncGenerator[Progress | Step | Done, None]:
    """The job's events until it ends (END is not passed on; a job cut short ends without a
    Done). APIError for a failed generation. With `request` (an answer sent whole), a client
    gone away cancels the job and this raises CancelledError; a stream's writer notices that
    itself."""
    last_check = time.monotonic()
    while True:
        try:
            item = await asyncio.wait_for(job.events.get(), timeout=POLL_S)
        except TimeoutError:
            item = None
        if request is not None and time.monotonic() - last_check >= POLL_S:
            last_check = time.monotonic()
            if await request.is_disconnected():
                job.cancel()
                raise asyncio.CancelledError
        if item is None:
            continue
        if item is END:
            return
        raise_for(item)
        yield item


def raise_for(item: object) -> None:
    """An error event from the worker as the APIError to answer with (other events pass)."""
    if isinstance(item, ShuttingDown):
        raise APIError(503, "the server is shutting down")
    if isinstance(item, UserError):
        raise APIError(400, str(item))
    if isinstance(item, LookaheadError):
        raise APIError(500, f"the model failed: {item}")
    if isinstance(item, Exception):
        raise APIError(500, "internal error while generating (see the server log)")

"""OpenAI's `n`: several choices for one request, each generated as a sample of its own.

Each choice is a job of its own (its own sampler, draft sources and events), queued together
on the worker. With a `seed`, choice i samples with seed + i, as llama-server seeds its
`n_cmpl` children, so the choices differ when sampling and a request is still repeatable;
greedy choices are equal. The prompt is decoded once for all of them (whatever
`cache_prompt` says): on one slot they run one after another and each after the first
reuses, through the prompt cache, the cells the first left; with `--parallel N` they run
side by side, each further choice waiting for the first's prompt to be in, then starting
from a copy of its cells in a slot of its own (`LlamaSlots.fork`), as llama-server starts
its `n_cmpl` children. Usage is OpenAI's: the prompt counted once, the completions summed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from lookahead.core.engine import Done, Progress, Result, Stats, Step
from lookahead.server.errors import APIError
from lookahead.server.follow import follow
from lookahead.server.jobs import END, Job


def as_choice(job: Job, index: int, first: Job) -> Job:
    """A job prepared for this request (its own events and draft sources: a source's stream
    is one generation's) made choice `index` of several: its seed derived, its prompt's
    cells shared with the `first` choice's (through the prompt cache, or copied from its
    slot with `--parallel`)."""
    seed = job.sampling.seed
    if seed is not None and index:
        job.sampling = replace(job.sampling, seed=seed + index)
    job.sibling_of = first if index else None
    return job


async def merged(jobs: Sequence[Job]) -> AsyncIterator[tuple[int, Progress | Step | Done]]:
    """(choice index, event) of every job as they arrive (`follow`), until each has ended;
    a job's APIError ends it. Stopping early leaves the jobs to the caller to cancel."""
    if len(jobs) == 1:  # the common case, without a relay
        async for item in follow(jobs[0]):
            yield 0, item
        return
    out: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def relay(i: int, job: Job) -> None:
        try:
            async for item in follow(job):
                await out.put((i, item))
        except APIError as exc:
            await out.put((i, exc))
        await out.put((i, END))

    tasks = [asyncio.create_task(relay(i, job)) for i, job in enumerate(jobs)]
    try:
        left = len(jobs)
        while left:
            i, item = await out.get()
            if item is END:
                left -= 1
                continue
            if isinstance(item, APIError):
                raise item
            yield i, item
    finally:
        for task in tasks:
            task.cancel()


def total_stats(results: Sequence[Result]) -> Stats:
    """The choices' statistics as one request's: generated tokens, steps, drafts and times
    summed; the cached prompt tokens are the first choice's (the prompt is counted once)."""
    total = Stats()
    for r in results:
        s = r.stats
        total.n_tokens += s.n_tokens
        total.steps += s.steps
        total.drafted += s.drafted
        total.accepted += s.accepted
        total.prefill_s += s.prefill_s
        total.decode_s += s.decode_s
        total.k_trace += s.k_trace
    total.tokens_cached = results[0].stats.tokens_cached if results else 0
    return total

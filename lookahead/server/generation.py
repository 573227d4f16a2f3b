"""One request's generation in neither dialect's words, and the one place it becomes the
`Job`(s) a worker runs.

Each dialect has a thin adapter (`openai/prepare.py`, `llamacpp/prepare.py`) that reads its
body, tokenizes the prompt, checks the limits and builds a `Generation` per answer it will
give; `jobs_for` turns them into jobs: the cache policy decided for all of them
(`admit.keeps_prompt`) and several completions of one prompt made choices of it
(`choices.as_choice`: seed + i, the prompt's cells shared). What happens to a job after it
queues is the same on every route (`follow.py`); only the answer's shape is the dialect's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.index.base import DraftSource
from lookahead.server.admit import keeps_prompt
from lookahead.server.choices import as_choice
from lookahead.server.jobs import Job


@dataclass
class Generation:
    """What to generate for one answer, whatever route asked for it."""

    tokens: list[int]  # the prompt, tokenized and within the context
    max_tokens: int  # what the context leaves at most (0: a warm-up, prefill only)
    stop: tuple[str, ...]  # stop strings
    sampling: SamplingConfig  # with the request's constraint and logit bias
    draft: DraftConfig  # the server's drafting settings with the request's laid over (`admit.draft_settings`)
    sources: list[DraftSource] = field(default_factory=list)  # the request's own, then the memory's
    cache_prompt: bool = False  # as the request asks (`jobs_for` decides what the job does)
    progress: bool = False  # Progress events while the prompt goes in
    owner: str = ""  # whose cached KV cells it may reuse (`jobs.cache_owner`)
    on_done: Callable[[Job, Sequence[int]], None] | None = None  # how it is remembered (`admit.remembering`)
    predicted: list[int] | None = None  # OpenAI's Predicted Output, tokenized
    slot: int = -1  # the slot it asks for (llama.cpp's `id_slot`; -1: any), `Job.slot`


def jobs_for(
    generations: Sequence[Generation], loop: asyncio.AbstractEventLoop, choices: int = 1, whole: bool = False
) -> list[Job]:
    """The jobs of one request's answers, in order. Each run of `choices` consecutive
    generations is one prompt's several completions (OpenAI's `n`, llama.cpp's `n_cmpl`):
    choice i samples with seed + i, and their prompt is read once, so it is kept in the
    cache whatever `cache_prompt` asked. `whole`: the answers are sent whole, not streamed
    (`Job.whole`)."""
    jobs = [
        Job(
            tokens=g.tokens,
            max_tokens=g.max_tokens,
            stop=g.stop,
            sampling=g.sampling,
            draft=g.draft,
            sources=list(g.sources),
            loop=loop,
            on_done=g.on_done,
            predicted=g.predicted,
            cache_prompt=keeps_prompt(g.cache_prompt, choices),
            progress=g.progress,
            owner=g.owner,
            slot=g.slot,
            whole=whole,
        )
        for g in generations
    ]
    if choices > 1:
        jobs = [as_choice(job, i % choices, jobs[i - i % choices]) for i, job in enumerate(jobs)]
    return jobs

"""Following one queued generation for llama.cpp's API, with the stops llama.cpp has and the
engine does not: `n_indent` (a line indented less than the cursor's ends the completion)
and `t_max_predict_ms` (the editor's time budget: past it, the completion ends at the next
newline). When one fires, the job is stopped where it is (`Job.stop_here`: the worker notices
between two verify steps, and remembers what was written, as for a finished one) and the
answer is what was written up to the stop.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import replace

from fastapi import Request

from lookahead.apps.fim import indent_cut
from lookahead.core.engine import Done, Progress, Result, Stats, Step
from lookahead.core.sampling import TokenProbs
from lookahead.server.errors import APIError
from lookahead.server.follow import follow as follow_job
from lookahead.server.jobs import Job
from lookahead.server.llamacpp.shape import Outcome, stop_of


class Watch:
    """One generation's text and statistics as its steps arrive, and llama.cpp's stops."""

    def __init__(
        self,
        n_indent: int = 0,
        t_max_predict_ms: int = -1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.n_indent = n_indent
        self.t_max_predict_ms = t_max_predict_ms
        self.clock = clock
        self.start = clock()  # when the request was queued
        self.first: float | None = None  # when the first token arrived
        self.first_pass = 0.0  # the first verify step's seconds (it decoded the prompt's last token)
        self.first_tokens = 0  # the tokens that step wrote: the prompt's, as llama.cpp counts its first
        self.text = ""  # what was written (cut where a stop fired)
        self.tokens: list[int] = []
        self.probs: list[TokenProbs] = []  # with n_probs: one per token
        self.stats = Stats()
        self.sent = 0  # characters of `text` handed out so far
        self.stopped = False  # a stop of ours fired: the job must end here
        # steps the worker took (`decide`) that the route has not read yet: id -> (text, stopped)
        self._decided: dict[int, tuple[str, bool]] = {}

    @property
    def stops(self) -> bool:
        """Whether this request has a stop of llama.cpp's own that a step may fire."""
        return self.n_indent > 0 or self.t_max_predict_ms > 0

    def watched_by(self, job: Job) -> None:
        """Have the worker take `job`'s steps through this Watch (`decide`, on its thread)
        when a stop of llama.cpp's own may fire at one, or when the answer is sent whole:
        its steps reach the route only at its end (`Job.whole`), too late for the clock."""
        if self.stops or job.whole:
            job.on_step = self.decide

    def decide(self, step: Step) -> bool:
        """The worker's side (`Job.on_step`), on its thread, before it emits `step`: take the
        step; whether a stop fired at it. The route then reads what it decided (`take`)."""
        text = self.step(step)
        self._decided[id(step)] = (text, self.stopped)
        return self.stopped

    def take(self, step: Step) -> tuple[str, bool]:
        """The route's side: the text to hand out for `step` and whether the job stops at it,
        as the worker decided it, or taken here for a job without `decide`. Read from what
        was decided for this step, never from `stopped`: by then the worker may be taking
        the next one."""
        decided = self._decided.pop(id(step), None)
        if decided is not None:
            return decided
        text = self.step(step)
        return text, self.stopped

    def step(self, step: Step) -> str:
        """Take one verify step; the text to hand out now (cut short if a stop fired)."""
        now = self.clock()
        s = self.stats
        if self.first is None:
            # llama.cpp's timings: the prompt's time runs until the first token is out (its
            # last token's decode gave that token), the prediction's from there; the engine
            # decodes that last token in its first verify step, so that step is the prompt's
            self.first = now
            self.first_pass = min(step.verify_s + step.draft_s, now - self.start)
            self.first_tokens = len(step.tokens)
            s.prefill_s = now - self.start
        self.tokens += step.tokens
        s.tokens_cached = step.tokens_cached
        self.probs += step.probs
        s.n_tokens = len(self.tokens)
        s.steps += 1
        s.drafted += step.drafted
        s.accepted += step.accepted
        s.decode_s = now - self.first
        start = len(self.text)
        self.text += step.text
        self._check(timed="\n" in step.text, now=now, start=start)
        return self._new()

    def finish(self, result: Result) -> str:
        """Take the engine's Result; the text still to hand out."""
        self.text = result.text
        self.tokens = list(result.tokens)
        # the engine's times, with its first verify step moved to the prompt's (as in `step`)
        first = min(self.first_pass, result.stats.decode_s)
        self.stats = replace(
            result.stats, prefill_s=result.stats.prefill_s + first, decode_s=result.stats.decode_s - first
        )
        self._check(timed=False, now=self.clock())
        return self._new()

    def outcome(
        self,
        stop_type: str,
        word: str = "",
        truncated: bool = False,
        probs: tuple[TokenProbs, ...] = (),
        text: str | None = None,
        tokens: Sequence[int] | None = None,
    ) -> Outcome:
        """How the generation ended: what was written (or the engine's `text`/`tokens`)."""
        text = self.text if text is None else text
        tokens = self.tokens if tokens is None else list(tokens)
        return Outcome(text, tokens, self.stats, stop_type, word, truncated, probs, first_tokens=self.first_tokens)

    def _check(self, *, timed: bool, now: float, start: int = 0) -> None:
        cut = indent_cut(self.text, self.n_indent)
        if cut is not None:
            self.text = self.text[: max(cut, self.sent)]
            self.stopped = True
        elif timed and self.t_max_predict_ms > 0 and self.first is not None:
            # llama.cpp: once past the budget, stop where a newline was just written. Every
            # token of a step came out at its end, past the budget if the step ended past it:
            # the answer ends at the step's first newline, where llama.cpp, writing them one
            # by one, would have stopped (a draft accepted whole can hold several lines)
            self.stopped = (now - self.first) * 1e3 > self.t_max_predict_ms
            if self.stopped:
                self.text = self.text[: self.text.index("\n", max(start, self.sent)) + 1]

    def _new(self) -> str:
        new = self.text[self.sent :]
        self.sent = len(self.text)
        return new


Piece = tuple[str, list[int], tuple[TokenProbs, ...]]  # text to hand out, the tokens written with it, their probs


async def follow(
    job: Job,
    watch: Watch,
    *,
    stops: Sequence[str],
    detokenize: Callable[[list[int]], str],
    request: Request | None = None,
    capped: bool = False,
) -> AsyncIterator[Piece | Outcome | Progress]:
    """The job's text as it comes (`follow.follow`, with the Watch's stops), then its
    Outcome. APIError for a failed generation, or one that ended without an answer; a client
    gone away (`request`) cancels the job. `capped`: n_predict was cut to what the context
    leaves, so a "length" end is the context running out (llama.cpp's `truncated`)."""
    try:
        async with aclosing(follow_job(job, request)) as events:
            async for item in events:
                if isinstance(item, Progress):  # only a request with return_progress gets these
                    yield item
                elif isinstance(item, Step):
                    text, stopped = watch.take(item)
                    if stopped:
                        job.stop_here()  # ended here, as an answer: the worker remembers it
                    if text or item.tokens:
                        yield text, list(item.tokens), item.probs
                    if stopped:
                        yield watch.outcome("limit", probs=tuple(watch.probs))
                        return
                elif isinstance(item, Done):
                    result = item.result
                    text = watch.finish(result)
                    if text:
                        yield text, [], ()
                    if watch.stopped:
                        yield watch.outcome("limit", probs=tuple(watch.probs))
                        return
                    kind, word = stop_of(detokenize(result.tokens), result.text, stops, result.finish_reason)
                    truncated = result.context_full or (capped and result.finish_reason == "length")
                    probs = tuple(watch.probs[: len(result.tokens)])
                    yield watch.outcome(kind, word, truncated, probs, text=result.text, tokens=result.tokens)
                    return
        raise APIError(503, "the generation was cancelled")
    finally:
        job.cancel()  # a no-op once the job has ended; stops it if we stopped or the client left

"""Work while idle (`server/idle.py`): the guessed next request is the one llama.vim builds
when a suggestion is accepted; the worker begins it only while nothing waits, stops it for
any request that arrives (within a step), and hands what it wrote to the next request of the
same owner as drafts. No model: a stand-in whose steps take a known time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from bench.vim_session import ctx_local, render
from lookahead.core.draft_state import DraftConfig
from lookahead.core.request import Done, Result, Stats, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.index.prediction import PredictionIndex
from lookahead.server.idle import IDLE_CHUNK, Continuation, IdleJob, accepted, continuation_source, keeps_chunk, wanted
from lookahead.server.jobs import END, Job
from lookahead.server.metrics import Metrics
from lookahead.server.worker import Worker

FILE = [
    "import os",
    "",
    "def walk(top):",
    "    for root, dirs, files in os.walk(top):",
    "        for name in files:",
    "            yield os.path.join(root, name)",
    "",
    "",
    "def main():",
    "    ",
    "    return 0",
]


@pytest.mark.parametrize(
    "content",
    [
        "    for path in walk('.'):\n",  # one line, ended at the budget's newline
        "    for path in walk('.'):\n        print(path)\n",  # two lines
        "    for path in walk('.'):\n        print(path)\n\n\n",  # trailing empty lines dropped
        "    count = 0",  # no newline: the middle grows
        "    count = 0\n    for path in walk('.'):\n        count += 1",  # indented as the line is
    ],
)
def test_the_guess_is_the_follow_up_llama_vim_sends(content: str) -> None:
    # the cursor on the blank line in main(), after its indentation: llama.vim sends the line
    # as an empty prompt, and the model writes the indentation with the line
    y, x = 9, 4
    quick = ctx_local(FILE, y, x)
    prev, _ = render(content, FILE, y, x)
    follow = ctx_local(FILE, y, x, prev, indent_last=quick.indent)
    assert accepted(quick.prefix, quick.middle, content) == (follow.prefix, follow.middle)


def test_a_continued_follow_up_is_guessed_the_same_way() -> None:
    assert accepted("a\n", "    x = ", "1\n    y = 2\n") == ("a\n    x = 1\n", "    y = 2")
    assert accepted("a\n", "    x = 1", "") == ("a\n", "    x = 1")


def test_only_an_answer_a_limit_ended_calls_for_idle_work() -> None:
    assert wanted("limit", "x\n", 1, True, 64, False)
    assert not wanted("eos", "x\n", 1, True, 64, False)  # the model ended the middle
    assert not wanted("word", "x\n", 1, True, 64, False)
    assert not wanted("limit", "", 1, True, 64, False)
    assert not wanted("limit", "x\n", 2, True, 64, False)  # several answers
    assert not wanted("limit", "x\n", 1, False, 64, False)  # nothing cached to build on
    assert not wanted("limit", "x\n", 1, True, 0, False)  # --idle-tokens 0
    assert not wanted("limit", "x\n", 1, True, 64, True)  # exact: always a cold start


def test_the_written_tokens_draft_aligned_only_when_the_prompts_end_alike() -> None:
    cont = Continuation("k", list(range(100)), [7, 8, 9])
    aligned = continuation_source(cont, list(range(100)), "k")
    assert isinstance(aligned, PredictionIndex) and aligned.aligned
    slid = continuation_source(cont, [5, *range(3, 100)], "k")  # the window moved, the end the same
    assert isinstance(slid, PredictionIndex) and slid.aligned
    other = continuation_source(cont, [*range(99), 55], "k")  # another cursor place
    assert isinstance(other, PredictionIndex) and not other.aligned
    assert continuation_source(cont, list(range(100)), "other key") is None
    assert continuation_source(Continuation("k", [1], []), [1], "k") is None
    assert continuation_source(None, [1], "k") is None


class StandIn:
    """A model whose generation writes token 1, 2, 3... one per `step_s`, recording each
    call; a prefill long enough to be interrupted raises as the backend does."""

    def __init__(self, step_s: float = 0.02) -> None:
        self.step_s = step_s
        self.n_ctx = 4096
        self.calls: list[dict[str, Any]] = []
        self.closed = 0
        self.backend = SimpleNamespace(
            interrupt=None, prefill_chunk=None, n_used=0, cache_tokens=[], tokens_shifted=0, n_decoded=0,
            reset=lambda: None, abort=None, n_past=0,
        )  # fmt: skip
        self.chunks_seen: list[int | None] = []
        self.aborts_seen: list[Any] = []
        self.restored: list[list[int]] = []
        self.backend.snapshot = lambda: SimpleNamespace(tokens=list(self.backend.cache_tokens))
        self.backend.restore = lambda snap: self.restored.append(snap.tokens)

    def stream(self, prompt: str, **kw: Any) -> Iterator[Step | Done]:
        self.calls.append(kw)
        self.chunks_seen.append(self.backend.prefill_chunk)
        self.aborts_seen.append(self.backend.abort)
        self.backend.cache_tokens = list(kw["tokens"])  # its prompt replaces the cached one
        written: list[int] = []
        try:
            for i in range(kw["max_tokens"]):
                time.sleep(self.step_s)
                self.backend.n_decoded += 1
                written.append(i + 1)
                yield Step([i + 1], "x", 0, 0, 0, self.step_s, 0.0, 0.0)
            yield Done(Result("x" * len(written), written, Stats(n_tokens=len(written)), "length"))
        finally:
            self.closed += 1


def real_job(loop: asyncio.AbstractEventLoop, max_tokens: int = 2) -> Job:
    return Job(tokens=list(range(100)), max_tokens=max_tokens, stop=(), sampling=SamplingConfig(temperature=0.8),
               draft=DraftConfig(), sources=(), loop=loop, cache_prompt=True)  # fmt: skip


def idle_job(after: int, max_tokens: int = 5) -> IdleJob:
    return IdleJob(list(range(100)), max_tokens, DraftConfig(), [], "", after)


def wait_for(cond: Any, timeout: float = 5.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.005)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def test_idle_work_runs_greedy_in_small_chunks_and_is_kept_for_the_next_request(loop: Any) -> None:
    model, metrics = StandIn(), Metrics()
    worker = Worker(model, metrics, max_queue=4)  # type: ignore[arg-type]
    try:
        assert worker.idle(idle_job(after=0, max_tokens=5))
        wait_for(lambda: worker.continuation is not None)
        cont = worker.continuation
        assert cont is not None and cont.written == [1, 2, 3, 4, 5] and cont.prompt == list(range(100))
        assert model.calls[0]["sampling"].temperature == 0  # greedy: the likeliest drafts
        assert model.calls[0]["cache_prompt"] is True
        assert model.chunks_seen[0] is not None and model.chunks_seen[0] <= 64
        assert model.backend.prefill_chunk is None  # restored for requests
        stop = model.aborts_seen[0]  # a chunk in progress is stopped by what stops the work
        assert stop is not None and not stop() and model.backend.abort is None
        text = metrics.render().decode()
        assert 'lookahead_idle_tokens_total{kind="written"} 5.0' in text
        # not a request: neither generated tokens nor a cancel counted when it ends
        assert "lookahead_completion_tokens_total 0.0" in text and "lookahead_cancelled_total 0.0" in text
        job = real_job(loop)
        worker.submit(job)
        wait_for(lambda: len(model.calls) == 2 and not worker.busy)
        sources = model.calls[1]["sources"]
        assert any(isinstance(s, PredictionIndex) and s.aligned for s in sources)  # the same prompt
        assert worker.continuation is None  # used once
        assert model.calls[1]["sampling"].temperature == 0.8  # the request's own sampling
        assert model.aborts_seen[1] is None  # a request's decodes are not stopped part way
    finally:
        worker.close(5)


def test_a_request_that_arrives_stops_idle_work_within_a_step(loop: Any) -> None:
    model = StandIn(step_s=0.05)
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        assert worker.idle(idle_job(after=0, max_tokens=200))  # 10 s if nothing stopped it
        wait_for(lambda: model.backend.n_decoded >= 3)
        t0 = time.monotonic()
        job = real_job(loop)
        worker.submit(job)
        wait_for(lambda: len(model.calls) == 2)
        assert time.monotonic() - t0 < 1.0
        assert model.closed >= 1  # the idle generation was closed, not left running
        wait_for(lambda: not worker.busy)
        assert len(model.calls[1]["sources"]) == 1  # drafts from what it wrote before the stop
    finally:
        worker.close(5)


def test_a_guess_is_declined_once_another_request_came(loop: Any) -> None:
    model = StandIn()
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        first = real_job(loop)
        worker.submit(first)
        assert first.seq == 1
        wait_for(lambda: not worker.busy)
        second = real_job(loop)
        worker.submit(second)
        wait_for(lambda: not worker.busy)
        assert not worker.idle(idle_job(after=first.seq))  # stale: the second came after the first
        assert worker.idle(idle_job(after=second.seq))
    finally:
        worker.close(5)


def test_a_waiting_request_goes_before_a_guess(loop: Any) -> None:
    model = StandIn(step_s=0.05)
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        job = real_job(loop, max_tokens=10)
        worker.submit(job)
        wait_for(lambda: worker.running == 1)
        worker._idle = idle_job(after=job.seq)  # as if accepted just before the next request
        nxt = real_job(loop)
        worker.submit(nxt)
        wait_for(lambda: len(model.calls) == 2)
        assert model.calls[1]["sampling"].temperature == 0.8  # the request, not the guess
        wait_for(lambda: not worker.busy)
        time.sleep(0.1)
        assert len(model.calls) == 2  # the guess was dropped
    finally:
        worker.close(5)


def test_cells_the_guess_replaced_come_back_for_a_request_that_shares_more_with_them(loop: Any) -> None:
    model = StandIn()
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        first = real_job(loop)  # prompt 0..99
        worker.submit(first)
        wait_for(lambda: not worker.busy)
        guess = IdleJob([*range(50), *range(500, 560)], 3, DraftConfig(), [], "", first.seq)
        assert worker.idle(guess)
        wait_for(lambda: worker.continuation is not None)
        typed_on = real_job(loop)
        typed_on.tokens = [*range(100), 7]  # the first prompt and a key typed: not the guess
        worker.submit(typed_on)
        wait_for(lambda: not worker.busy)
        assert model.restored == [list(range(100))]  # the first request's cells, put back
        assert worker.idle(IdleJob(list(guess.tokens), 3, DraftConfig(), [], "", typed_on.seq))
        wait_for(lambda: worker.continuation is not None)
        right = real_job(loop)
        right.tokens = [*guess.tokens, 9]  # the guess was right: its cells stay
        worker.submit(right)
        wait_for(lambda: not worker.busy)
        assert len(model.restored) == 1
    finally:
        worker.close(5)


def test_a_worker_of_several_slots_declines_idle_work() -> None:
    from lookahead.server.jobs import WorkerBase

    base = WorkerBase(Metrics(), 4, 2)
    assert not base.takes_idle_work() and not base.idle(idle_job(after=0))


def test_end_is_still_the_last_event_of_a_request_after_idle_work(loop: Any) -> None:
    model = StandIn()
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        worker.idle(idle_job(after=0, max_tokens=3))
        wait_for(lambda: worker.continuation is not None)
        job = real_job(loop)
        worker.submit(job)
        wait_for(lambda: not worker.busy)
        loop.run_until_complete(asyncio.sleep(0.01))
        items = []
        while not job.events.empty():
            items.append(job.events.get_nowait())
        assert items[-1] is END and isinstance(items[-2], Done)
    finally:
        worker.close(5)


def test_a_request_that_holds_the_chunk_in_progress_lets_it_finish() -> None:
    guess = IdleJob(list(range(300)), 8, DraftConfig(), [], "k", 0)
    assert keeps_chunk(list(range(300)), "k", guess, 0)  # the guess itself (after Tab)
    assert keeps_chunk([*range(200), 7, 7], "k", guess, 100)  # the same through the chunk
    assert not keeps_chunk([*range(150), 7, 7], "k", guess, 100)  # not: it stops part way
    assert not keeps_chunk([5, *range(1, 300)], "k", guess, 0)  # typed on: another prompt
    assert not keeps_chunk(list(range(300)), "other key", guess, 0)  # not its cells
    assert keeps_chunk([*range(299), 7], "k", guess, 290)  # the last chunk: all but the last token
    assert not keeps_chunk(list(range(100 + IDLE_CHUNK - 1)), "k", guess, 100)


def test_the_chunk_stop_asks_about_the_request_that_waits(loop: Any) -> None:
    model = StandIn()
    worker = Worker(model, Metrics(), max_queue=4)  # type: ignore[arg-type]
    try:
        guess = IdleJob(list(range(100)), 5, DraftConfig(), [], "", 0)
        stop = worker._chunk_stop(guess, before=model.backend.n_decoded)
        assert not stop()  # nothing waits
        early, right, wrong = real_job(loop), real_job(loop), real_job(loop)  # real_job's prompt is the guess's
        wrong.tokens = [7, *range(1, 100)]
        early.seq, right.seq, wrong.seq = 1, 2, 3
        with worker._cv:  # put in the queue by hand: the thread is not woken to take them
            worker._waiting.append(early)
            assert stop()  # the job's first chunk: read again in one batch
            model.backend.n_decoded += 64  # a chunk read
            assert stop()  # decided once per request
            worker._waiting[0] = right
            assert not stop()  # the chunk in progress is this request's own prompt
            worker._waiting[0] = wrong
            assert stop()
            worker._waiting.clear()
    finally:
        worker.close(5)

"""Prompt progress (`lookahead.core.progress`) on the fake backends: one report before the
prompt's first decode and one after each decode that took more of it in, alone and in a
batch; asking for it changes nothing else."""

from __future__ import annotations

from collections.abc import Sequence

from lookahead.core.control import FixedPolicy
from lookahead.core.engine import Done, GenerationConfig, Progress, Result, Step, generate
from lookahead.core.multi import Batch
from lookahead.core.sampling import SamplingConfig
from tests.fake_backend import FakeModel, FakeMultiModel, TreeDrafter

VOCAB = 16
PROMPT = [(7 * i + 3) % VOCAB for i in range(50)]
CONFIG = GenerationConfig(max_tokens=12, sampling=SamplingConfig(temperature=0.8, seed=5))


class CountingModel(FakeModel):
    """A FakeModel that records each prefill call's size."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(n_vocab=VOCAB, seed=3, **kwargs)
        self.chunks: list[int] = []

    def prefill(self, tokens) -> None:  # type: ignore[no-untyped-def]
        self.chunks.append(len(tokens))
        super().prefill(tokens)


def check_reports(reports: Sequence[Progress], total: int, cache: int) -> None:
    """llama-server's rules: the first has processed == cache, each later one more, the last
    all of the prompt; total and cache never change."""
    assert reports, "no progress reported"
    assert reports[0].processed == reports[0].cache == cache
    assert all(r.total == total and r.cache == cache for r in reports)
    assert all(b.processed > a.processed for a, b in zip(reports, reports[1:], strict=False))
    assert reports[-1].processed == total
    assert all(b.elapsed_s >= a.elapsed_s >= 0 for a, b in zip(reports, reports[1:], strict=False))


def run(model: FakeModel, progress: bool, cache_prompt: bool = False) -> tuple[list[object], Result]:
    events = list(
        generate(model, PROMPT, CONFIG, TreeDrafter(VOCAB), FixedPolicy(3, budget=6, branches=2),
                 cache_prompt=cache_prompt, progress=progress)
    )
    done = events[-1]
    assert isinstance(done, Done)
    return events, done.result


def test_a_report_before_the_prefill_after_each_chunk_and_after_the_first_verify() -> None:
    model = CountingModel(n_batch=16)
    events, _ = run(model, progress=True)
    reports = [e for e in events if isinstance(e, Progress)]
    # 49 tokens before the last in chunks of 16 (16, 16, 16, 1), then the first verify
    assert model.chunks == [16, 16, 16, 1]
    assert [r.processed for r in reports] == [0, 16, 32, 48, 49, 50]
    check_reports(reports, total=50, cache=0)
    # every report comes before the first Step: the prompt is in before anything is written
    first_step = next(i for i, e in enumerate(events) if isinstance(e, Step))
    assert all(isinstance(e, Progress) for e in events[:first_step])
    assert not any(isinstance(e, Progress) for e in events[first_step:])


def test_asking_for_progress_changes_neither_the_output_nor_the_decodes() -> None:
    plain_model, reported_model = CountingModel(n_batch=16), CountingModel(n_batch=16)
    plain_events, plain = run(plain_model, progress=False)
    _, reported = run(reported_model, progress=True)
    assert not any(isinstance(e, Progress) for e in plain_events)
    assert reported.tokens == plain.tokens
    assert reported_model.verified == plain_model.verified
    assert plain_model.chunks == [49]  # one call; the backend chunks it by n_batch itself


def test_a_cached_prompt_reports_its_cached_prefix_first() -> None:
    model = CountingModel(n_batch=16)
    run(model, progress=False, cache_prompt=True)
    events, _ = run(model, progress=True, cache_prompt=True)
    reports = [e for e in events if isinstance(e, Progress)]
    # the whole prompt but its last token was cached: the first report, then the first verify
    assert [r.processed for r in reports] == [49, 50]
    check_reports(reports, total=50, cache=49)


def test_a_batched_request_reports_per_chunk_and_its_neighbour_reports_nothing() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=3)
    batch = Batch(model, chunk=20)
    other = batch.add(PROMPT[:10], CONFIG)
    batch.step()  # its prompt in, and it writes: from now on prompts go in by chunks
    watched = batch.add(PROMPT, CONFIG, progress=True)
    reports: list[Progress] = []
    while not batch.idle:
        for req, event in batch.step():
            if isinstance(event, Progress):
                assert req is watched and req is not other
                reports.append(event)
    # a chunk of 20, then the 29 left at once (not 20 and a short 9), then the first verify
    assert [r.processed for r in reports] == [0, 20, 49, 50]
    check_reports(reports, total=50, cache=0)


def test_a_sibling_waits_for_its_parents_prompt_and_copies_it_instead_of_prefilling() -> None:
    """The choices of one request (OpenAI's `n`) with --parallel: the prompt decoded once."""
    model = FakeMultiModel(slots=3, n_vocab=VOCAB, seed=3)
    batch = Batch(model, chunk=20)
    greedy = GenerationConfig(max_tokens=12)
    parent = batch.add(PROMPT, greedy)
    child = batch.add(PROMPT, greedy, parent=parent)
    other = batch.add(PROMPT[:10], greedy)
    results: dict[int, Result] = {}
    first_step = True
    while not batch.idle:
        for req, event in batch.step():
            if isinstance(event, Done):
                results[req.id] = event.result
        if first_step:  # the parent's prompt is not in yet: the child waits, the other joins
            assert child in batch.waiting and other in batch.active
            first_step = False
    assert model.forked == len(PROMPT) - 1
    prefilled = sum(model.steps) - sum(r.stats.steps for r in results.values())  # verify steps decode 1 token each
    assert prefilled == (len(PROMPT) - 1) + (10 - 1)  # the parent's prompt and the other's, not the child's
    assert results[child.id].tokens == results[parent.id].tokens  # greedy: the same choice
    assert results[child.id].stats.tokens_cached == len(PROMPT) - 1

"""Batched generations on the fake multi-slot backend: each request writes what it would
write alone, cancelling one changes nobody else, and no KV cell is ever leaked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.core.control import ControlConfig, Controller, CostModel, FixedPolicy
from lookahead.core.draft import Draft
from lookahead.core.engine import Done, GenerationConfig, GenerationError, Result, Step, generate
from lookahead.core.multi import Batch, BatchRequest, prefill_take, run_batch
from lookahead.core.sampling import SamplingConfig
from tests.fake_backend import FakeModel, FakeMultiModel, TreeDrafter

VOCAB = 16


def prompt(i: int, n: int = 3) -> list[int]:
    rng = np.random.default_rng(100 + i)
    return [int(t) for t in rng.integers(0, VOCAB, n)]


def config(i: int, sampled: bool, max_tokens: int = 40) -> GenerationConfig:
    sampling = SamplingConfig(temperature=0.9, seed=7 + i) if sampled else SamplingConfig()
    return GenerationConfig(max_tokens=max_tokens, sampling=sampling)


def policy(i: int) -> FixedPolicy | Controller | None:
    """A mix: fixed-K trees, the adaptive controller, plain decoding."""
    kind = i % 3
    if kind == 0:
        return FixedPolicy(3, budget=6, branches=2)
    if kind == 1:
        return Controller(ControlConfig(budget=8, branches=2, min_gain=0.5))
    return None


def solo(i: int, cfg: GenerationConfig, p: list[int], n_ctx: int) -> Result:
    model = FakeModel(n_vocab=VOCAB, seed=1, n_ctx=n_ctx)
    drafter = TreeDrafter(VOCAB) if policy(i) is not None else None
    *_, done = generate(model, p, cfg, drafter, policy(i))
    assert isinstance(done, Done)
    return done.result


def job(i: int, sampled: bool, max_tokens: int = 40):  # type: ignore[no-untyped-def]
    pol = policy(i)
    return prompt(i, 3 + i), config(i, sampled, max_tokens), (TreeDrafter(VOCAB) if pol else None), pol


def finished(events) -> dict[int, Result]:  # type: ignore[no-untyped-def]
    out: dict[int, Result] = {}
    for i, event in events:
        if isinstance(event, Done):
            out[i] = event.result
    return out


@pytest.mark.parametrize("sampled", [False, True])
def test_each_request_writes_what_it_would_write_alone(sampled: bool) -> None:
    model = FakeMultiModel(slots=4, n_vocab=VOCAB, seed=1, n_ctx=4096)
    jobs = [job(i, sampled) for i in range(6)]  # more requests than slots: two wait
    results = finished(run_batch(model, jobs, budget=12))
    assert sorted(results) == list(range(6))
    for i, (p, cfg, _, _) in enumerate(jobs):
        alone = solo(i, cfg, p, model.slot_ctx)
        assert results[i].tokens == alone.tokens
        assert results[i].text == alone.text
        assert results[i].finish_reason == alone.finish_reason
    assert model.n_used == 0 and not model.ctx
    assert max(model.steps) <= model.n_batch
    assert sum(r.stats.drafted for r in results.values()) > 0  # drafts were verified


def test_steps_are_batched() -> None:
    model = FakeMultiModel(slots=4, n_vocab=VOCAB, seed=1)
    jobs = [(prompt(i), config(i, False), None, None) for i in range(4)]
    batch = Batch(model)
    for p, cfg, d, pol in jobs:
        batch.add(p, cfg, d, pol)
    batch.step()
    assert batch.last.requests == 4 and batch.last.tokens == 4  # four roots, one decode


def test_stop_strings_and_end_tokens_end_one_request_only() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1)
    base = FakeModel(n_vocab=VOCAB, seed=1).greedy(prompt(0), 30)
    stop = bytes([97 + base[12]]).decode() + bytes([97 + base[13]]).decode()
    cfg = GenerationConfig(max_tokens=30, stop=(stop,))
    jobs = [(prompt(0), cfg, TreeDrafter(VOCAB), FixedPolicy(3, budget=6, branches=2)), job(1, False, 30)]
    results = finished(run_batch(model, jobs))
    alone = solo(0, cfg, prompt(0), model.slot_ctx)
    assert results[0].text == alone.text and results[0].finish_reason == "stop"
    assert results[1].tokens == solo(1, jobs[1][1], jobs[1][0], model.slot_ctx).tokens


def test_cancelling_one_request_frees_its_cells_and_changes_nobody_else() -> None:
    model = FakeMultiModel(slots=3, n_vocab=VOCAB, seed=1)
    batch = Batch(model, budget=12)
    jobs = [job(i, True) for i in range(3)]
    reqs = [batch.add(*j) for j in jobs]
    results: dict[int, Result] = {}
    for _ in range(3):
        batch.step()
    used = model.slot_used(reqs[1].slot)
    assert used > 0
    before = model.n_used
    batch.cancel(reqs[1])
    assert model.n_used == before - used
    while not batch.idle:
        for req, event in batch.step():
            assert req is not reqs[1]
            if isinstance(event, Done):
                results[req.id] = event.result
    for i in (0, 2):
        assert results[reqs[i].id].tokens == solo(i, jobs[i][1], jobs[i][0], model.slot_ctx).tokens
    assert model.n_used == 0


def test_prefill_is_chunked_and_the_others_keep_stepping() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1)
    batch = Batch(model, chunk=16)
    first = batch.add(prompt(0), config(0, False, 200))
    batch.step()
    long = batch.add(prompt(1, 100), config(1, False, 8))
    emitted_while_prefilling = 0
    while not long.ready:
        events = batch.step()
        assert batch.last.prefill < 2 * 16  # a chunk, or the last chunk with the short tail after it
        emitted_while_prefilling += sum(1 for r, e in events if r is first and isinstance(e, Step))
    assert emitted_while_prefilling >= 6  # 99 prompt tokens in chunks of 16


@pytest.mark.parametrize(
    ("todo", "left", "n_batch", "want"),
    [
        (255, 96, 2048, 96),  # the rest (159) is a chunk or more: this step's share
        (159, 96, 2048, 159),  # the rest would be 63 alone: all of it now
        (100, 96, 2048, 100),
        (40, 96, 2048, 40),
        (300, 20, 2048, 20),  # another request took most of the step
        (50, 20, 2048, 50),
        (150, 96, 128, 96),  # never past n_batch
    ],
)
def test_a_prompt_never_ends_in_a_short_chunk_of_its_own(todo: int, left: int, n_batch: int, want: int) -> None:
    assert prefill_take(todo, left, 96, n_batch) == want


def test_an_editors_prompt_goes_in_at_once_alone_and_beside_a_writer_without_a_short_tail() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1, n_ctx=1024)
    batch = Batch(model, chunk=96)

    def sizes(req: BatchRequest) -> list[int]:
        out = []
        while not req.ready:
            batch.step()
            out.append(batch.last.prefill)
        return out

    assert sizes(batch.add(prompt(3, 256), config(0, False, 200))) == [255]  # nobody waits for the step
    assert sizes(batch.add(prompt(4, 256), config(1, False, 4))) == [96, 159]  # the first one writes


def drain(batch: Batch) -> None:
    while not batch.idle:
        batch.step()


def test_a_request_takes_the_slot_it_names_when_free() -> None:
    """llama.cpp's `id_slot` (llama.vim sends 0): its own slot, even where another holds
    more of its prompt; the best slot when the named one is busy."""
    model = FakeMultiModel(slots=3, n_vocab=VOCAB, seed=1, n_ctx=1024)
    batch = Batch(model)
    first = batch.add(prompt(0, 40), config(0, False, 4), cache_prompt=True)
    drain(batch)
    assert first.slot == 0
    named = batch.add(prompt(0, 40), config(0, False, 4), cache_prompt=True)
    named.want_slot = 2
    batch.step()
    assert named.slot == 2 and named.stats.tokens_cached == 0
    drain(batch)
    again = batch.add(prompt(0, 40), config(0, False, 4), cache_prompt=True)
    again.want_slot = 2
    other = batch.add(prompt(0, 40), config(0, False, 4), cache_prompt=True)
    other.want_slot = 2  # busy by the time it joins: the slot that shares the most
    batch.step()
    assert again.slot == 2 and again.stats.tokens_cached > 0
    assert other.slot == 0 and other.stats.tokens_cached > 0


def test_a_prompt_longer_than_a_slot_is_refused_at_once() -> None:
    model = FakeMultiModel(slots=4, n_vocab=VOCAB, n_ctx=64)
    with pytest.raises(GenerationError, match="the prompt has 20 tokens"):
        Batch(model).add([1] * 20, GenerationConfig(4))


def test_a_full_slot_ends_its_request_as_context_full() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1, n_ctx=64)
    results = finished(run_batch(model, [job(0, False, 100), job(1, False, 5)]))
    assert results[0].context_full and results[0].finish_reason == "length"
    assert not results[1].context_full
    assert model.max_used <= model.n_ctx and model.n_used == 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),  # step at which it arrives
            st.integers(1, 40),  # prompt length
            st.integers(1, 30),  # max_tokens
            st.one_of(st.none(), st.integers(0, 12)),  # steps after arrival until cancelled
            st.integers(0, 2),  # policy kind
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 4),
)
def test_kv_cells_never_leak_nor_overflow(plan, slots) -> None:  # type: ignore[no-untyped-def]
    model = FakeMultiModel(slots=slots, n_vocab=VOCAB, seed=2, n_ctx=256, n_batch=32)
    batch = Batch(model, budget=24, chunk=8, cost=CostModel())
    reqs = {}
    cancel_at = {}
    step = 0
    while step < 400:
        for k, (arrive, n, max_tokens, cancel, kind) in enumerate(plan):
            if arrive == step:
                pol = policy(kind)
                cfg = config(k, kind == 1, max_tokens)
                reqs[k] = batch.add(prompt(k, n), cfg, TreeDrafter(VOCAB) if pol else None, pol)
                if cancel is not None:
                    cancel_at[step + cancel] = reqs[k]
        if step in cancel_at and not cancel_at[step].done:
            batch.cancel(cancel_at[step])
        batch.step()
        assert model.n_used <= model.n_ctx
        assert all(model.slot_used(s) <= model.slot_ctx for s in model.ctx)
        step += 1
        if batch.idle and step > 6:
            break
    assert batch.idle
    assert model.n_used == 0 and not model.ctx
    assert model.max_used <= model.n_ctx


def test_the_default_parallel_batches_only_where_it_beats_serial_drafting() -> None:
    """The batch must beat what one request at a time gains from drafting on the same curve,
    not plain decoding: where a user measured --parallel 4 at 0.96x of the serial service on
    a mixed load (2-vCPU EPYC, t(4) = 2.56 t(1), bound 1.56x), the default is 1; on a curve
    that batches cheaply (a Xeon's t(4) = 1.71) it is 4; a batch that costs its tokens, 1."""
    from lookahead.core.parallel_choice import batching_bound, default_parallel, serial_drafting_gain

    epyc = {1: 1.0, 2: 1.77, 4: 2.56, 8: 4.01, 16: 5.95, 32: 10.7, 64: 19.0}
    assert batching_bound(CostModel(epyc, prior=epyc), 4) == pytest.approx(4 / 2.56)
    assert default_parallel(CostModel(epyc, prior=epyc)) == 1
    xeon = {1: 1.0, 2: 1.33, 4: 1.71, 8: 2.88, 16: 4.59, 32: 8.47, 64: 15.9}
    assert default_parallel(CostModel(xeon, prior=xeon)) == 4
    linear = {n: float(n) for n in (1, 2, 3, 4, 8)}  # a batch costs as much as its tokens
    assert serial_drafting_gain(CostModel(linear, prior=linear)) == pytest.approx(1.0)
    assert default_parallel(CostModel(linear, prior=linear)) == 1
    # cheap up to 3 tokens, dear from 4: the largest N that pays, not the largest N
    three = {1: 1.0, 2: 1.05, 3: 1.1, 4: 3.9, 8: 8.0, 16: 16.0, 64: 64.0}
    assert default_parallel(CostModel(three, prior=three)) == 3


def test_serial_drafting_gain_is_the_best_chain_on_the_curve() -> None:
    """One acceptance of 1.0 on a curve where t(n) = 1 + (n - 1) / 4: a chain of 64 yields
    64 tokens in 16.75 steps; a chance of 0 gains nothing."""
    from lookahead.core.parallel_choice import serial_drafting_gain

    curve = {n: 1.0 + (n - 1) / 4 for n in (1, 2, 4, 8, 16, 32, 64)}
    cost = CostModel(curve, prior=curve)
    assert serial_drafting_gain(cost, (1.0,)) == pytest.approx(64 / 16.75)
    assert serial_drafting_gain(cost, (0.0,)) == pytest.approx(1.0)


class ClockedMulti(FakeMultiModel):
    """A multi-slot backend on a synthetic clock: a verify of n tokens takes the idle
    cost of n times the slowdown of the thread count in use (a load, or none)."""

    def __init__(self, slowdown: dict[int, float], **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.slowdown = slowdown
        self.n_threads = max(slowdown)
        self.now = 0.0

    @staticmethod
    def idle(n: int) -> float:
        return 0.04 * (1 + 0.3 * (n - 1))

    def set_threads(self, threads: int) -> None:
        self.n_threads = threads

    def verify(self, items):  # type: ignore[no-untyped-def]
        rows = super().verify(items)
        self.now += self.idle(sum(1 + len(d) for _, _, d in items)) * self.slowdown[self.n_threads]
        return rows


@pytest.mark.parametrize("loaded", [False, True])
def test_a_batched_loop_under_load_moves_to_the_faster_thread_count(loaded: bool) -> None:
    from lookahead.tuning.threads import BatchThreads, ThreadGovernor

    # under load two threads run 3x slower than idle and one thread 1.5x; idle, one thread
    # is 1.7x slower than two
    model = ClockedMulti({2: 3.0, 1: 1.5} if loaded else {2: 1.0, 1: 1.7}, slots=4, n_vocab=VOCAB, seed=1)
    batch = Batch(model, CostModel({1: 0.04, 8: 0.124}), budget=12, clock=lambda: model.now)
    first = batch.cost
    threads = BatchThreads(ThreadGovernor(2, ClockedMulti.idle), batch, model.set_threads)
    batch.after_verify = threads
    jobs = [job(i, False, max_tokens=60) for i in range(4)]
    reqs = [batch.add(p, cfg, d, pol) for p, cfg, d, pol in jobs]
    results: dict[int, Result] = {}
    while not batch.idle:
        for req, event in batch.step():
            if isinstance(event, Done):
                results[reqs.index(req)] = event.result
    if loaded:
        assert model.n_threads == 1 and threads.governor.threads == 1
        assert batch.cost is threads.costs[1] and batch.cost is not first  # its own curve
    else:
        assert model.n_threads == 2 and threads.governor.switches == 0 and batch.cost is first
    for i, (p, cfg, _, _) in enumerate(jobs):  # the count changes speed, never the output
        assert results[i].tokens == solo(i, cfg, p, model.slot_ctx).tokens


def test_a_batched_loop_starts_at_the_count_the_cpu_probe_fits() -> None:
    from lookahead.tuning.threads import BatchThreads, ThreadGovernor

    class Loaded:  # the kernel's view: one other process holds one of our two CPUs
        cpus = 2

        def others(self) -> float:
            return 1.0

        def now(self) -> float:  # and still there, looking ahead
            return 1.0

    model = ClockedMulti({2: 3.0, 1: 1.5}, slots=2, n_vocab=VOCAB, seed=1)
    batch = Batch(model, CostModel({1: 0.04, 8: 0.124}), budget=12, clock=lambda: model.now)
    threads = BatchThreads(ThreadGovernor(2, ClockedMulti.idle, load=Loaded()), batch, model.set_threads)  # type: ignore[arg-type]
    threads.begin()
    assert model.n_threads == 1 and batch.cost is threads.costs[1]  # before any step


class NoisyOracle:
    """Drafts the true greedy continuation, but with every `every`-th position wrong: long
    drafts accepted in full until the wrong token, where the accept walk stops mid-path."""

    def __init__(self, prompt: list[int], truth: list[int], every: int = 11) -> None:
        future = [*prompt, *truth]
        self.future = [(t + 1) % VOCAB if i >= len(prompt) and i % every == 0 else t for i, t in enumerate(future)]
        self.n = 0

    def observe(self, tokens) -> None:  # type: ignore[no-untyped-def]
        self.n += len(list(tokens))

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        return Draft.chain(self.future[self.n : self.n + min(budget, max_depth)])


def test_oracle_drafts_accept_many_tokens_a_step_stop_mid_path_and_prefill_in_chunks() -> None:
    """Long prompts (several prefill chunks) and drafts that are right for several tokens, then
    wrong: multi-token accepts, mid-path stops and chunked prefill all happen, in one batch,
    and every request still writes plain greedy decoding's output."""
    model = FakeMultiModel(slots=3, n_vocab=VOCAB, seed=1, n_ctx=3 * 256)
    chunk, n_out = 16, 48
    prompts = [prompt(i, 40 + 5 * i) for i in range(3)]  # 40-50 tokens: 3-4 chunks each
    truths = [FakeModel(n_vocab=VOCAB, seed=1).greedy(p, n_out) for p in prompts]
    batch = Batch(model, budget=24, chunk=chunk)
    reqs = []
    steps: list[Step] = []
    results: dict[int, Result] = {}
    prefills: list[int] = []
    for p, t in zip(prompts, truths, strict=True):
        reqs.append(batch.add(p, GenerationConfig(max_tokens=n_out), NoisyOracle(p, t), FixedPolicy(8, budget=8)))
        if len(reqs) == 1:  # the first one alone, at once; the others in chunks while it writes
            for _ in range(2):
                steps += [e for _, e in batch.step() if isinstance(e, Step)]
                prefills.append(batch.last.prefill)
    while not batch.idle:
        for req, event in batch.step():
            if isinstance(event, Step):
                steps.append(event)
            elif isinstance(event, Done):
                results[req.id] = event.result
        prefills.append(batch.last.prefill)
    assert [results[r.id].tokens for r in reqs] == truths
    assert prefills[0] == len(prompts[0]) - 1  # alone: at once
    assert max(prefills[1:]) < 2 * chunk and sum(1 for p in prefills[1:] if p) >= 4  # the others in chunks
    assert sum(1 for s in steps if s.accepted >= 2) >= 10  # multi-token accepts
    assert any(0 < s.accepted < s.drafted for s in steps)  # the walk stopped mid-path
    assert any(s.accepted == s.drafted == 8 for s in steps)  # and went to the end of a draft
    assert model.n_used == 0


def test_each_step_says_who_took_part_and_splits_its_time_by_the_batchs_clock() -> None:
    """The step-timing bench charges each request the steps it took part in: a step lists
    the requests it prefilled and verified, and its decodes fit inside the whole step."""
    ticks = iter(range(10**6))
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1)
    batch = Batch(model, chunk=16, clock=lambda: float(next(ticks)))
    first = batch.add(prompt(0), config(0, False, 30))
    batch.step()
    assert batch.last.verified == [first.id] and batch.last.prefilled == [first.id]
    long = batch.add(prompt(1, 40), config(1, False, 4))
    batch.step()
    info = batch.last
    assert info.prefilled == [long.id] and info.verified == [first.id]
    assert info.prefill_s > 0 and info.verify_s > 0
    assert info.prefill_s + info.verify_s < info.step_s


def test_a_batched_loop_that_sat_idle_reads_the_cpu_probe_again_before_the_next_prefill() -> None:
    from lookahead.tuning.threads import BatchThreads, ThreadGovernor

    class Probe:  # other processes' CPUs, as the test sets them
        cpus, value = 2, 1.0

        def others(self) -> float:
            return self.value

        def now(self) -> float:
            return self.value

    probe = Probe()
    model = ClockedMulti({2: 3.0, 1: 1.5}, slots=2, n_vocab=VOCAB, seed=1)
    at_prefill: list[int] = []
    prefill = model.prefill
    model.prefill = lambda slot, chunk: (at_prefill.append(model.n_threads), prefill(slot, chunk))  # type: ignore[method-assign]
    batch = Batch(model, CostModel({1: 0.04, 8: 0.124}), budget=12, clock=lambda: model.now)
    threads = BatchThreads(ThreadGovernor(2, ClockedMulti.idle, load=probe), batch, model.set_threads)  # type: ignore[arg-type]
    threads.attach()
    threads.begin()
    for i in range(2):  # a request beside a busy process, then one after the load went away
        p, cfg, d, pol = job(i, False, max_tokens=8)
        batch.add(p, cfg, d, pol)
        while not batch.idle:
            batch.step()
        probe.value = 0.0  # the load ends while the batch sits idle
        model.slowdown = {2: 1.0, 1: 1.7}
    assert at_prefill[0] == 1 and at_prefill[-1] == 2
    assert model.n_threads == 2 and batch.cost is threads.costs[2]  # and its cost curve

"""Several generations stepping together: one batched decode per step (continuous batching).

On a CPU a batch of n tokens costs far less than n one-token steps, so requests that run at
the same time share each verify: every step is ONE decode holding each ready request's root
token and its draft tree, each request in a slot of its own (its own sequence ids, KV cells
and parked cells, see `lookahead.backend.slots`). Per request, the step is the engine's
(`lookahead.core.request.Request`, which the single-request loop steps alone): the same
acceptance rule, its own sampler (so its own seeded stream), drafter, policy, stop strings,
max_tokens and text stream. So each request writes exactly
what it would write alone, given the same logits (on a batch-invariant model; with llama.cpp
several requests interleave their cells, so bit-identity is only claimed for one request).

Between steps, requests join (prefill in chunks of at most `chunk` tokens per step, so a long
prompt does not stall the others for long; with the prompt cache, into the free slot whose
cells share the longest prefix with the prompt, only the rest prefilled) and leave: a
finished or cancelled request frees its slot's cells at once, or leaves them cached. Which
draft nodes go into a step is decided for the whole batch
(`lookahead.core.allocate`).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lookahead.backend.base import LogitRows
from lookahead.core.allocate import allocate
from lookahead.core.control import CostModel, FixedPolicy
from lookahead.core.draft import Draft
from lookahead.core.policy import Offer, Policy
from lookahead.core.request import Done, Drafter, Event, GenerationConfig, Request, Result, check_prompt
from lookahead.core.tokens import TokenArray
from lookahead.errors import UserError

# Prompt tokens a joining request decodes per step: large enough that prefill runs near the
# batched speed, small enough that the others wait about one more step for it.
PREFILL_CHUNK = 96


def prefill_take(todo: int, left: int, chunk: int, n_batch: int) -> int:
    """Prompt tokens a request decodes this step: what the step has `left`, or all `todo`
    when the rest would otherwise be a short tail (fewer than `chunk`) decoded alone next
    step. A short batch costs about as much as a full one: on a 2-vCPU Intel Xeon (AVX-512,
    Qwen2.5-Coder 0.5B Q4_K_M) 63 tokens took 2.3x the time of 64 (llama.cpp's kernels take
    another path below 64), so an editor's 255-token prompt went in as 96 + 96 + 63 in 2.9 s
    where one batch took 1.5 s. The step then runs up to `chunk` tokens longer."""
    n = min(todo, left, n_batch)
    if 0 < todo - n < chunk and todo <= n_batch:
        n = todo
    return n


class MultiVerifier(Protocol):
    """A model whose context holds `slots` independent generations.

    Each slot has its own committed prefix (`slot_past`) and cells (`slot_used`, with its
    parked ones), at most `slot_ctx` of them; `n_used` counts every slot's cells.
    """

    n_vocab: int
    n_ctx: int  # cells in the whole context
    slot_ctx: int  # cells one slot may use
    n_batch: int  # most tokens in one decode (every root and draft node of a step)
    max_branches: int  # most leaves per request's draft
    slots: int

    @property
    def n_used(self) -> int: ...

    def acquire(
        self, tokens: Sequence[int] = (), cache: bool = False, owner: str = "", prefer: int = -1
    ) -> tuple[int, int]:
        """A free slot for committed prompt `tokens`: with `cache`, the one whose cells (cached by
        the same `owner`) share its longest prefix, kept; else one emptied; slot `prefer`
        whenever it is free. (slot, kept)."""
        ...

    def release(self, slot: int, keep: bool = False) -> None:
        """Give `slot` back: every cell freed, or with `keep` its committed ones kept (cached)."""
        ...

    def slot_past(self, slot: int) -> int: ...

    def slot_shifted(self, slot: int) -> int: ...  # of the tokens `acquire` kept, those moved (KV shift)
    def slot_refilled(self, slot: int) -> int: ...  # of them, new ones decoded between moved runs

    def fork(self, src: int, dst: int, n: int) -> None:
        """Give the taken, empty slot `dst` the first `n` committed cells of slot `src`."""
        ...

    def slot_used(self, slot: int) -> int: ...

    def prefill(self, slot: int, tokens: TokenArray) -> None:
        """Decode `tokens` (one chunk, at most n_batch) after the slot's committed prefix."""
        ...

    def verify(self, items: Sequence[tuple[int, int, Draft]]) -> Sequence[LogitRows]:
        """One decode of every (slot, root, draft); the logits rows per item."""
        ...

    def commit(self, slot: int, draft: Draft, accepted: list[int]) -> None:
        """As `Verifier.commit`, for the slot's part of the last verify."""
        ...

    def is_eog(self, token: int) -> bool: ...
    def token_bytes(self, token: int) -> bytes: ...


class BatchRequest(Request):
    """One generation in the batch: a `Request` with its place in the batch."""

    def __init__(
        self, id: int, prompt: Sequence[int], config: GenerationConfig, drafter: Drafter | None, policy: Policy
    ) -> None:
        super().__init__(prompt, config, drafter, policy)
        self.id = id
        self.slot = -1  # -1: waiting for a slot
        self.prefilled = 0  # prompt tokens (of prompt[:-1]) in the slot's cache so far
        self.started = False  # prefill done, drafter told the prompt
        self.cache_prompt = False  # reuse a slot's cached prefix, and leave the cells cached after
        self.cache_owner = ""  # whose cached cells it may reuse (an API key's tenant; "" without keys)
        self.want_slot = -1  # the slot it asks for (llama.cpp's `id_slot`), taken when free; -1: any
        self.warm_up = False  # prefill only (an editor's n_predict 0): ends, cached, once its prompt is in
        # a sibling with the same prompt (another choice of one request): this one waits for
        # its prompt to be in, then starts from a copy of those cells instead of its own prefill
        self.parent: BatchRequest | None = None

    @property
    def ready(self) -> bool:
        """Prefill finished: the request takes part in verify steps."""
        return self.slot >= 0 and self.prefilled >= len(self.prompt) - 1


@dataclass
class StepInfo:
    """What the last step did, for metrics and the step-timing bench: requests in the
    decode, tokens in it, and its time split by the batch's own clock."""

    requests: int = 0  # requests whose root was verified
    tokens: int = 0  # tokens in the verify decode (roots + draft nodes)
    prefill: int = 0  # prompt tokens prefilled this step
    verify_s: float = 0.0  # the verify decode alone
    prefill_s: float = 0.0  # the prefill chunks' decodes (every request of the step waits for them)
    step_s: float = 0.0  # the whole step: admission, prefill, drafting, verify, acceptance
    verified: list[int] = field(default_factory=list)  # ids of the requests in the verify
    prefilled: list[int] = field(default_factory=list)  # ids of the requests prefilled this step


class Batch:
    """The requests generating together and the loop that steps them.

    Use: `add` requests (any time between steps), call `step()` until `idle`; each step
    returns the (request, event) pairs it produced, a request's last being its Done.
    `cancel` drops a request at once. `cost` is the shared verify-cost model (t(n) of the
    whole batch); `budget` the most draft nodes per step. `after_verify(size, seconds)`, if
    set, is told every batched verify, and `before_start()` is called before a step that starts
    requests in an idle batch (the thread governor, `lookahead.tuning.threads.BatchThreads`).
    With `isolate` set (a service), an exception while one request drafts, or a UserError
    while it accepts (its grammar leaves no token), ends that request alone: it is cancelled
    and listed in `failed` (read and cleared by the caller), and the step goes on for the
    others; otherwise it propagates, as every other error of a step.
    """

    def __init__(
        self,
        verifier: MultiVerifier,
        cost: CostModel | None = None,
        budget: int = 64,
        min_gain: float = 1.0,
        chunk: int = PREFILL_CHUNK,
        slack: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.verifier = verifier
        self.cost = cost or CostModel()
        self.budget = budget
        self.min_gain = min_gain
        self.slack = slack  # the per-request promise: None = the batch's total (allocate)
        self.chunk = max(1, chunk)
        self.clock = clock
        self.waiting: deque[BatchRequest] = deque()
        self.active: list[BatchRequest] = []
        self.last = StepInfo()
        self.after_verify: Callable[[int, float], None] | None = None
        self.before_start: Callable[[], None] | None = None  # (see the class docstring)
        self.isolate = False
        self.failed: list[tuple[BatchRequest, Exception]] = []
        self._ids = itertools.count()

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.active

    @property
    def free_slots(self) -> int:
        return self.verifier.slots - len(self.active)

    def add(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        drafter: Drafter | None = None,
        policy: Policy | None = None,
        cache_prompt: bool = False,
        warm_up: bool = False,
        progress: bool = False,
        parent: BatchRequest | None = None,
    ) -> BatchRequest:
        """Queue a generation; it joins at the next step with a free slot (with
        `cache_prompt`, the free slot whose cache shares the longest prefix with the prompt:
        those cells are kept, and the request's are left cached when it ends). `warm_up`:
        only prefill the prompt into a slot's cache and end there (`engine.warm`'s batch form).
        `progress`: Progress events as its prompt goes in (`lookahead.core.progress`).
        `parent`: a request with the same prompt whose prefilled cells this one copies.

        Raises GenerationError at once for a prompt a slot cannot hold.
        """
        check_prompt(prompt, self.verifier.slot_ctx)
        if policy is not None:
            policy = policy.for_batch()
        req = BatchRequest(next(self._ids), prompt, config, drafter, policy or FixedPolicy(0))
        req.cache_prompt = cache_prompt or warm_up
        req.warm_up = warm_up
        req.report_progress = progress
        req.parent = parent
        self.waiting.append(req)
        return req

    def cancel(self, req: BatchRequest) -> None:
        """Drop `req` now: its slot's cells are freed before the next step."""
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.active:
            self.active.remove(req)
            self.verifier.release(req.slot, keep=req.cache_prompt)
        req.done = True

    def close(self) -> None:
        """Drop every request (an error in a step, shutting down)."""
        for req in [*self.waiting, *self.active]:
            self.cancel(req)

    # ---- one step -----------------------------------------------------------------------
    def step(self) -> list[tuple[BatchRequest, Event]]:
        """Admit, prefill one chunk, verify every ready request in one decode, accept."""
        v = self.verifier
        if self.before_start is not None and self.waiting and not self.active:
            self.before_start()
        start = self.clock()
        events: list[tuple[BatchRequest, Event]] = []
        for req in list(self.waiting):
            parent = req.parent
            if self.free_slots <= 0:
                break
            if parent is not None and (parent in self.waiting or (parent in self.active and not parent.ready)):
                continue  # its sibling's prompt is not in yet: copied once it is
            self.waiting.remove(req)
            admitted = self.clock()  # before `acquire`: a reuse may decode tokens between moved runs
            if parent is not None and parent in self.active:  # its sibling's prompt cells, copied
                req.slot, _ = v.acquire()
                req.prefilled = shared_prefix(parent.prompt[:-1], req.prompt[:-1])
                v.fork(parent.slot, req.slot, req.prefilled)
                req.stats.tokens_cached = req.prefilled
            else:
                req.slot, req.prefilled = v.acquire(
                    req.prompt[:-1], cache=req.cache_prompt, owner=req.cache_owner, prefer=req.want_slot
                )
                req.stats.tokens_shifted = v.slot_shifted(req.slot) if req.prefilled else 0
                req.stats.tokens_cached = req.prefilled - (v.slot_refilled(req.slot) if req.prefilled else 0)
            req.t_admit = admitted
            if req.report_progress:
                events.append((req, req.progress(req.prefilled, req.t_admit)))
            self.active.append(req)
        info = StepInfo()
        self._prefill(info, events)
        for req in [r for r in self.active if r.warm_up and r.ready]:  # prefilled: done
            self.active.remove(req)
            v.release(req.slot, keep=True)
            req.done = True
            events.append((req, Done(Result("", [], req.stats, "length"))))
        ready = [r for r in self.active if r.ready]
        if ready:
            events += self._verify(ready, info)
        info.step_s = self.clock() - start
        self.last = info
        return events

    def _prefill(self, info: StepInfo, events: list[tuple[BatchRequest, Event]]) -> None:
        """Up to `chunk` prompt tokens, oldest request first; a request whose prompt is in
        joins this step's verify. A request that asks for it gets a Progress per chunk.
        While no request is writing, nobody waits for the step: up to a batch goes in (an
        editor's keystroke, alone, read its 1,024 tokens at 158/s in chunks of 96, against
        186/s in batches of 256, on a 2-vCPU Intel Xeon)."""
        writing = any(r.ready and not r.warm_up for r in self.active)
        left = self.chunk if writing else self.verifier.n_batch
        for req in self.active:
            todo = len(req.prompt) - 1 - req.prefilled
            if todo > 0 and left > 0:
                n = prefill_take(todo, left, self.chunk, self.verifier.n_batch)
                t0 = self.clock()
                chunk = np.asarray(req.prompt[req.prefilled : req.prefilled + n], np.int32)
                self.verifier.prefill(req.slot, chunk)
                took = self.clock() - t0
                req.stats.prefill_s += took
                req.prefilled += n
                left -= n
                info.prefill += n
                info.prefill_s += took
                info.prefilled.append(req.id)
                if req.report_progress:
                    events.append((req, req.progress(req.prefilled, self.clock())))
            if req.ready and not req.started:
                req.started = True
                req.start(self.clock)

    def _propose(self, req: BatchRequest, room: int) -> Draft:
        """The request's draft for this step, cut to what it may verify (as the engine does)."""
        v = self.verifier
        room = min(room, v.slot_ctx - v.slot_used(req.slot) - 2)
        draft = req.propose(room, v.max_branches)
        return Draft.empty() if draft is None else draft

    def _drafts(self, ready: list[BatchRequest], nodes: int) -> tuple[list[Draft], list[Offer]]:
        """Each ready request's draft and offer; with `isolate`, a request whose drafting
        raises is cancelled, listed in `failed` and removed from `ready`."""
        drafts: list[Draft] = []
        offers: list[Offer] = []
        for req in list(ready):
            try:
                draft = self._propose(req, nodes)
                offer = self._offer(req, draft)
            except Exception as exc:
                if not self.isolate:
                    raise
                ready.remove(req)
                self.cancel(req)
                self.failed.append((req, exc))
                continue
            drafts.append(draft)
            offers.append(offer)
        return drafts, offers

    def _offer(self, req: BatchRequest, draft: Draft) -> Offer:
        return req.policy.offer(draft)

    def _verify(self, ready: list[BatchRequest], info: StepInfo) -> list[tuple[BatchRequest, Event]]:
        v = self.verifier
        t0 = self.clock()
        nodes = min(self.budget, v.n_batch - len(ready))
        drafts, offers = self._drafts(ready, nodes)
        if not ready:
            return []
        counts = allocate(offers, self.cost, nodes, self.min_gain, self.slack)
        drafts = [d.prefix(n) for d, n in zip(drafts, counts, strict=True)]
        t1 = self.clock()
        rows = v.verify([(r.slot, r.root, d) for r, d in zip(ready, drafts, strict=True)])
        t2 = self.clock()
        size = len(ready) + sum(len(d) for d in drafts)
        self.cost.observe(size, t2 - t1)
        if self.after_verify is not None:
            self.after_verify(size, t2 - t1)
        info.requests, info.tokens, info.verify_s = len(ready), size, t2 - t1
        info.verified = [r.id for r in ready]
        events: list[tuple[BatchRequest, Event]] = []
        for req, draft, r in zip(ready, drafts, rows, strict=True):
            try:
                events.extend(self._accept(req, draft, r, t2 - t1, (t1 - t0) / len(ready)))
            except UserError as exc:  # its own input (a grammar that leaves no token to write)
                if not self.isolate:
                    raise
                req.cache_prompt = False  # the verify's cells were not committed: clear the slot
                self.cancel(req)
                self.failed.append((req, exc))
        return events

    def _accept(
        self, req: BatchRequest, draft: Draft, rows: LogitRows, verify_s: float, draft_s: float
    ) -> list[tuple[BatchRequest, Event]]:
        """The request's step after the shared decode; a finished request frees its slot."""
        v = self.verifier

        def commit(d: Draft, path: list[int]) -> None:
            v.commit(req.slot, d, path)

        def full() -> bool:
            return v.slot_used(req.slot) + 1 >= v.slot_ctx

        step, done = req.advance(draft, rows, commit, v, full, (verify_s, draft_s), self.clock)
        out: list[tuple[BatchRequest, Event]] = []
        if req.report_progress:  # its first verify decoded the prompt's last token
            req.report_progress = False
            out.append((req, req.progress(len(req.prompt), self.clock())))
        out.append((req, step))
        if done is not None:
            self.active.remove(req)
            v.release(req.slot, keep=req.cache_prompt)  # its cells go now (or stay cached)
            out.append((req, done))
        return out


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def run_batch(
    verifier: MultiVerifier,
    jobs: Sequence[tuple[Sequence[int], GenerationConfig, Drafter | None, Policy | None]],
    cost: CostModel | None = None,
    budget: int = 64,
) -> Iterator[tuple[int, Event]]:
    """Run `jobs` (prompt, config, drafter, policy) together to the end; yields (job index,
    event) as the steps produce them. For tests and the bench."""
    batch = Batch(verifier, cost, budget)
    index: dict[int, int] = {}
    for i, (prompt, config, drafter, policy) in enumerate(jobs):
        index[batch.add(prompt, config, drafter, policy).id] = i
    while not batch.idle:
        for req, event in batch.step():
            yield index[req.id], event

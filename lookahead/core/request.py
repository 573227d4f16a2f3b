"""One request's generation: its state and its step, written once (llama.cpp's server slot,
Arctic's start_request / speculate / stop_request).

A `Request` holds what a generation keeps between verify steps (its prompt and history, its
drafter and policy, its sampler and text stream, its output and statistics) and does the
step that follows a verify: accept -> commit -> observe -> stats -> emit -> Step, and Done
at the end. The single-request loop (`lookahead.core.engine`) steps one alone; the batched
loop (`lookahead.core.multi`) steps many, each after their shared decode. So both end a
generation at the same token and report the same figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lookahead.backend.base import LogitRows
from lookahead.core.accept import accept
from lookahead.core.draft import Draft
from lookahead.core.policy import Policy
from lookahead.core.progress import Progress
from lookahead.core.sampling import Sampler, SamplingConfig, TokenProbs
from lookahead.core.text import TextStream
from lookahead.errors import UserError


class GenerationError(UserError):
    """The request cannot be served as asked (bad limits, prompt too long, ...)."""


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256  # most tokens to generate
    stop: tuple[str, ...] = ()  # generation ends before the first of these strings
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise GenerationError(f"max_tokens must be > 0, got {self.max_tokens}")


class Drafter(Protocol):
    def observe(self, tokens: Sequence[int]) -> None: ...

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft: ...


@dataclass(frozen=True)
class Step:
    """One verify step."""

    tokens: list[int]  # tokens emitted this step: accepted drafts + the bonus token
    text: str  # text safe to show now (may be empty while a character or stop is pending)
    drafted: int  # draft nodes verified
    accepted: int  # draft tokens accepted
    depth: int  # depth of the verified draft
    verify_s: float  # the llama_decode of root + draft
    draft_s: float  # proposing + choosing the draft
    alpha: float  # rolling accepted drafts per step, as the policy sees it
    # prompt tokens the generation reused from the prompt cache (the same on every step), so
    # a reader that stops early, with no Done, still knows it (an editor's time budget)
    tokens_cached: int = 0
    probs: tuple[TokenProbs, ...] = ()  # with sampling.n_probs: one per token emitted, in order


@dataclass
class Stats:
    n_tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_s: float = 0.0
    tokens_cached: int = 0  # prompt tokens whose KV cells were reused from the prompt cache
    tokens_shifted: int = 0  # of those, the ones moved to new positions (KV shift, cache_reuse)
    decode_s: float = 0.0
    k_trace: list[int] = field(default_factory=list)  # nodes verified, per step

    @property
    def alpha(self) -> float:
        """Accepted draft tokens per verify step."""
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.decode_s if self.decode_s > 0 else 0.0


@dataclass(frozen=True)
class Result:
    text: str
    tokens: list[int]
    stats: Stats
    finish_reason: str  # "stop" (end token or stop string) or "length"
    # "length" because the context was full, not because max_tokens were written
    context_full: bool = False
    probs: tuple[TokenProbs, ...] = ()  # with sampling.n_probs: one per token, in order


@dataclass(frozen=True)
class Done:
    """The last event of a generation."""

    result: Result


Event = Step | Done | Progress  # Progress only for a request that asks for it


def fit_draft(draft: Draft, max_leaves: int, max_depth: int, max_nodes: int) -> Draft:
    """The longest prefix of `draft` with at most `max_leaves` leaves, depth <= max_depth
    and at most `max_nodes` nodes.

    Adding a node keeps or grows the leaf count, so the prefix is found in one pass.
    """
    draft = draft.prefix(max(0, max_nodes))
    if not len(draft):
        return draft
    is_leaf = np.zeros(len(draft), dtype=bool)
    leaves = 0
    for i in range(len(draft)):
        par = int(draft.parents[i])
        if draft.depth[i] > max_depth:
            return draft.prefix(i)
        if par < 0 or not is_leaf[par]:
            leaves += 1
            if leaves > max_leaves:
                return draft.prefix(i)
        else:
            is_leaf[par] = False
        is_leaf[i] = True
    return draft


class Vocab(Protocol):
    def is_eog(self, token: int) -> bool: ...

    def token_bytes(self, token: int) -> bytes: ...


def emit_tokens(vocab: Vocab, stream: TextStream, new: Sequence[int], left: int) -> tuple[list[int], str, bool]:
    """The tokens of one step a request writes: up to an end token, a stop string or
    `left` more tokens. Returns (tokens, text safe to show, stopped by an end or a stop).

    `Request.advance` writes every step through it, alone or in a batch.
    """
    emitted: list[int] = []
    text = ""
    for tok in new:
        if vocab.is_eog(tok):
            return emitted, text, True
        emitted.append(tok)
        text += stream.feed(vocab.token_bytes(tok))
        if stream.stopped:
            return emitted, text, True
        if len(emitted) >= left:
            break
    return emitted, text, False


def check_prompt(prompt: Sequence[int], n_ctx: int) -> None:
    """Raise GenerationError for a prompt a context of `n_ctx` cells cannot serve."""
    if not len(prompt):
        raise GenerationError("the prompt is empty")
    if len(prompt) + 1 > n_ctx:
        raise GenerationError(f"the prompt has {len(prompt)} tokens, more than the context of {n_ctx} allows")


class Request:
    """One generation's state between verify steps, and its step.

    Use: `start()` once its prompt (all but the last token, the first root) is in the KV
    cache; then per step `propose` a draft, verify root + draft, and `advance` with the
    logits rows; `advance` returns the Step, and the Done once the generation ends.
    """

    def __init__(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        drafter: Drafter | None,
        policy: Policy,
    ) -> None:
        self.prompt = [int(t) for t in prompt]
        self.config = config
        self.drafter = drafter
        self.policy = policy
        self.sampler = Sampler(config.sampling)
        self.stream = TextStream(config.stop)
        self.history = list(self.prompt)  # prompt + every accepted token (acceptance's context)
        self.out: list[int] = []  # tokens written (up to an end token, a stop or max_tokens)
        self.probs: list[TokenProbs] = []  # with sampling.n_probs: one per token of `out`
        self.stats = Stats()
        self.root = self.prompt[-1]  # the next verify's root: the last token not yet in the cache
        self.finish = "length"
        self.t_start = 0.0
        self.done = False
        self.report_progress = False  # emit Progress events while the prompt goes in
        self.t_admit = 0.0  # when the prompt started going in (Progress.elapsed_s)

    def progress(self, processed: int, now: float) -> Progress:
        """A report of the prompt's prefill with `processed` of its tokens in the cache."""
        return Progress(len(self.prompt), self.stats.tokens_cached, processed, now - self.t_admit)

    def start(self, now: Callable[[], float]) -> None:
        """The prompt is in the cache: the drafter learns it, then decoding time starts."""
        if self.drafter is not None:
            self.drafter.observe(self.prompt)
        self.t_start = now()

    def propose(self, room: int, max_branches: int) -> Draft | None:
        """This step's draft, cut to `room` nodes, the policy's depth, what max_tokens
        leaves and `max_branches` leaves; None when nothing was asked of the drafter (no
        drafter, no room, no budget). The policy's `choose` is the caller's."""
        policy = self.policy
        want = self.config.max_tokens - len(self.out) - 1  # drafts past max_tokens are wasted work
        depth = min(policy.max_depth, room, want)
        if self.drafter is None or depth <= 0 or policy.budget <= 0:
            return None
        draft = self.drafter.propose(policy.budget, depth, policy.branches)
        return fit_draft(draft, max_branches, depth, room)

    def advance(
        self,
        draft: Draft,
        rows: LogitRows,
        commit: Callable[[Draft, list[int]], None],
        vocab: Vocab,
        full: Callable[[], bool],
        timing: tuple[float, float],
        now: Callable[[], float],
    ) -> tuple[Step, Done | None]:
        """The step after a verify of root + `draft`: accept on `rows`, `commit` the path to
        the KV cache, let the policy observe it, count it, emit its tokens. `full()` says
        whether the cache is full after the commit; `timing` is (verify_s, draft_s)."""
        verify_s, draft_s = timing
        path, bonus = accept(draft, rows, self.sampler.pick, self.history)
        picked = self.sampler.take_probs()  # one per token of path + bonus, when asked for
        commit(draft, path)
        self.policy.observe(draft, path, verify_s, bonus)

        new = [int(draft.tokens[i]) for i in path] + [bonus]
        st = self.stats
        st.steps += 1
        st.drafted += len(draft)
        st.accepted += len(path)
        st.k_trace.append(len(draft))

        emitted, text, stopped = emit_tokens(vocab, self.stream, new, self.config.max_tokens - len(self.out))
        if stopped:
            self.finish = "stop"
        self.out.extend(emitted)
        self.probs.extend(picked[: len(emitted)])
        self.history.extend(new)
        if self.drafter is not None:
            self.drafter.observe(new)
        self.root = bonus
        done = stopped or len(self.out) >= self.config.max_tokens or full()
        if done:
            text += self.stream.finish()
        st.decode_s = now() - self.t_start
        st.n_tokens = len(self.out)
        step = Step(
            tokens=emitted,
            text=text,
            drafted=len(draft),
            accepted=len(path),
            depth=draft.max_depth,
            verify_s=verify_s,
            draft_s=draft_s,
            alpha=self.policy.alpha,
            tokens_cached=st.tokens_cached,
            probs=tuple(picked[: len(emitted)]),
        )
        if not done:
            return step, None
        self.done = True
        context_full = self.finish == "length" and len(self.out) < self.config.max_tokens
        return step, Done(Result(self.stream.text, self.out, st, self.finish, context_full, tuple(self.probs)))

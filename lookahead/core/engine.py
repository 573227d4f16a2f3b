"""The decoding loop: propose -> verify -> accept -> observe, as a generator of events.

Plain decoding is the same loop with empty drafts, so both paths share every line that
could make them differ. The CLI's live display, the server's stream and the bench all read
the same events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lookahead.backend.base import Verifier
from lookahead.core.accept import accept
from lookahead.core.control import FixedPolicy
from lookahead.core.draft import Draft
from lookahead.core.policy import Policy
from lookahead.core.sampling import Sampler, SamplingConfig
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


@dataclass
class Stats:
    n_tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_s: float = 0.0
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


@dataclass(frozen=True)
class Done:
    """The last event of a generation."""

    result: Result


Event = Step | Done


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

    Shared by the single-request loop and the batched one (`lookahead.core.multi`), so both
    end a generation at the same token.
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


def generate(
    verifier: Verifier,
    prompt: Sequence[int],
    config: GenerationConfig,
    drafter: Drafter | None = None,
    policy: Policy | None = None,
    node_cap: Callable[[int], int] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    after_verify: Callable[[int, float], None] | None = None,
) -> Iterator[Event]:
    """Generate from `prompt` tokens; yields a Step per verify step, then Done.

    `node_cap(cells in use)`, if given, bounds the draft nodes verified in a step (the
    exact mode's bit-identical batch sizes depend on the cache size). Once it is 0 both
    now and for a full cache (exact mode above its split, on most CPUs), the rest of the
    generation is plain decoding and drafting's per-step work stops. `clock` times the steps (an offline replay passes a
    clock its verifier moves by a modeled cost). `after_verify(batch size, seconds)` sees
    every verify (the thread governor watches them for a busy machine).

    With no drafter (or a policy that drafts nothing) this is plain decoding. A request that
    cannot be served raises GenerationError here, before the first event is asked for.
    """
    check_prompt(prompt, verifier.n_ctx)
    return _run(verifier, prompt, config, drafter, policy, node_cap, clock, after_verify)


def _may_pay(policy: Policy, nodes: int) -> bool:
    """Whether a step verifying at most `nodes` draft nodes might be chosen: for the
    adaptive controller, whether even a draft certain to be accepted would pay (exact mode's
    cap on a CPU where a batch of 2 costs twice one token leaves no such draft)."""
    if nodes <= 0:
        return False
    return policy.could_pay(nodes)


def _run(
    verifier: Verifier,
    prompt: Sequence[int],
    config: GenerationConfig,
    drafter: Drafter | None,
    policy: Policy | None,
    node_cap: Callable[[int], int] | None,
    clock: Callable[[], float],
    after_verify: Callable[[int, float], None] | None = None,
) -> Iterator[Event]:
    """The loop of `generate`, once the request is known to be servable."""
    policy = policy or FixedPolicy(0)
    policy.begin()
    sampler = Sampler(config.sampling)
    stream = TextStream(config.stop)
    stats = Stats()
    history = list(prompt)

    verifier.reset()
    t0 = clock()
    verifier.prefill(np.asarray(prompt[:-1], dtype=np.int32))
    stats.prefill_s = clock() - t0
    root = int(prompt[-1])
    if drafter is not None:
        drafter.observe(prompt)

    out: list[int] = []
    finish = "length"
    t_start = clock()
    while True:
        t0 = clock()
        room = verifier.n_ctx - verifier.n_used - 2  # the root and the bonus must fit too
        room = min(room, verifier.n_batch - 1)  # one decode holds the root and the draft
        if node_cap is not None:
            cap = node_cap(verifier.n_used)
            room = min(room, cap)
            if drafter is not None and not _may_pay(policy, cap) and not _may_pay(policy, node_cap(verifier.n_ctx)):
                # no draft the cap allows can pay, now or for a full cache: decode plainly,
                # without drafting's upkeep
                drafter, policy, node_cap = None, FixedPolicy(0), None
        want = config.max_tokens - len(out) - 1  # drafts past max_tokens are wasted work
        depth = min(policy.max_depth, room, want)
        draft = Draft.empty()
        if drafter is not None and depth > 0 and policy.budget > 0:
            draft = drafter.propose(policy.budget, depth, policy.branches)
            draft = fit_draft(draft, verifier.max_branches, depth, room)
            draft = draft.prefix(policy.choose(draft))
        t1 = clock()
        rows = verifier.verify(root, draft)
        t2 = clock()
        if after_verify is not None:
            after_verify(len(draft) + 1, t2 - t1)
        path, bonus = accept(draft, rows, sampler.pick, history)
        verifier.commit(draft, path)
        policy.observe(draft, path, t2 - t1, bonus)

        new = [int(draft.tokens[i]) for i in path] + [bonus]
        stats.steps += 1
        stats.drafted += len(draft)
        stats.accepted += len(path)
        stats.k_trace.append(len(draft))

        emitted, text, stopped = emit_tokens(verifier, stream, new, config.max_tokens - len(out))
        if stopped:
            finish = "stop"
        out.extend(emitted)
        history.extend(new)
        if drafter is not None:
            drafter.observe(new)
        root = bonus
        done = finish == "stop" or len(out) >= config.max_tokens or verifier.n_used + 1 >= verifier.n_ctx
        if done:
            text += stream.finish()
        stats.decode_s = clock() - t_start
        stats.n_tokens = len(out)
        yield Step(
            tokens=emitted,
            text=text,
            drafted=len(draft),
            accepted=len(path),
            depth=draft.max_depth,
            verify_s=t2 - t1,
            draft_s=t1 - t0,
            alpha=policy.alpha,
        )
        if done:
            break
    context_full = finish == "length" and len(out) < config.max_tokens
    yield Done(Result(text=stream.text, tokens=out, stats=stats, finish_reason=finish, context_full=context_full))

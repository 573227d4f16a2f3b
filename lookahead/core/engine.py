"""The decoding loop: propose -> verify -> accept -> observe, as a generator of events.

Plain decoding is the same loop with empty drafts, so both paths share every line that
could make them differ. The CLI's live display, the server's stream and the bench all read
the same events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from lookahead.backend.base import Verifier
from lookahead.core.control import FixedPolicy
from lookahead.core.draft import Draft
from lookahead.core.request import (
    Done,
    Drafter,
    Event,
    GenerationConfig,
    GenerationError,
    Policy,
    Progress,
    Request,
    Result,
    Stats,
    Step,
    Vocab,
    check_prompt,
    emit_tokens,
    fit_draft,
)

# The request's types are defined with it (`lookahead.core.request`) and read from here too.
__all__ = [
    "Done",
    "Drafter",
    "Event",
    "GenerationConfig",
    "GenerationError",
    "Policy",
    "Progress",
    "Result",
    "Stats",
    "Step",
    "Vocab",
    "check_prompt",
    "emit_tokens",
    "fit_draft",
    "generate",
    "warm",
]


def generate(
    verifier: Verifier,
    prompt: Sequence[int],
    config: GenerationConfig,
    drafter: Drafter | None = None,
    policy: Policy | None = None,
    node_cap: Callable[[int], int] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    after_verify: Callable[[int, float], None] | None = None,
    cache_prompt: bool = False,
    progress: bool = False,
    between_chunks: Callable[[], None] | None = None,
) -> Iterator[Event]:
    """Generate from `prompt` tokens; yields a Step per verify step, then Done.

    With `progress`, a `Progress` event before the prompt's first decode and after each
    (`lookahead.core.progress`): the prefill then goes in chunks of the verifier's n_batch
    tokens, the same chunks its own prefill decodes, so the cells (and the output) are the same.

    With `cache_prompt`, the cells the verifier holds for the longest common prefix of its
    cache and the prompt are kept and only the rest is prefilled (`Stats.tokens_cached`
    counts them; with the backend's KV shift, also cached runs moved after that prefix,
    `Stats.tokens_shifted`); the last prompt token, the first root, is always decoded.

    `node_cap(cells in use)`, if given, bounds the draft nodes verified in a step (the
    exact mode's bit-identical batch sizes depend on the cache size). Once it is 0 both
    now and for a full cache (exact mode above its split, on most CPUs), the rest of the
    generation is plain decoding and drafting's per-step work stops. `clock` times the steps (an offline replay passes a
    clock its verifier moves by a modeled cost). `after_verify(batch size, seconds)` sees
    every verify (the thread governor watches them for a busy machine); `between_chunks()`,
    if given, is called between the prefill's chunks of n_batch tokens (the governor reads the
    machine again: a prefill lasts seconds, and a load may go or come meanwhile).

    With no drafter (or a policy that drafts nothing) this is plain decoding. A request that
    cannot be served raises GenerationError here, before the first event is asked for.
    """
    check_prompt(prompt, verifier.n_ctx)
    return _run(
        verifier, prompt, config, drafter, policy, node_cap, clock, after_verify, cache_prompt, progress, between_chunks
    )


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
    cache_prompt: bool = False,
    progress: bool = False,
    between_chunks: Callable[[], None] | None = None,
) -> Iterator[Event]:
    """The loop of `generate`, once the request is known to be servable."""
    policy = policy or FixedPolicy(0)
    policy.begin()
    req = Request(prompt, config, drafter, policy)

    t0 = req.t_admit = clock()  # a reuse may decode new tokens between moved runs
    if cache_prompt:
        kept = verifier.reuse(prompt[:-1])
        req.stats.tokens_shifted = verifier.shifted
        req.stats.tokens_cached = kept - verifier.refilled
    else:
        verifier.reset()
        kept = 0
    todo = np.asarray(prompt[kept:-1], dtype=np.int32)
    if progress:
        req.report_progress = True
        yield req.progress(kept, t0)
    if progress or between_chunks is not None:  # the verifier's own chunks: the same cells
        for lo in range(0, len(todo), verifier.n_batch):
            if lo and between_chunks is not None:
                between_chunks()
            chunk = todo[lo : lo + verifier.n_batch]
            verifier.prefill(chunk)
            if progress:
                yield req.progress(kept + lo + len(chunk), clock())
    else:
        verifier.prefill(todo)
    req.stats.prefill_s = clock() - t0
    req.start(clock)

    def full() -> bool:
        return verifier.n_used + 1 >= verifier.n_ctx

    while True:
        t0 = clock()
        room = verifier.n_ctx - verifier.n_used - 2  # the root and the bonus must fit too
        room = min(room, verifier.n_batch - 1)  # one decode holds the root and the draft
        if node_cap is not None:
            cap = node_cap(verifier.n_used)
            room = min(room, cap)
            if (
                req.drafter is not None
                and not _may_pay(req.policy, cap)
                and not _may_pay(req.policy, node_cap(verifier.n_ctx))
            ):
                # no draft the cap allows can pay, now or for a full cache: decode plainly,
                # without drafting's upkeep
                req.drafter, req.policy, node_cap = None, FixedPolicy(0), None
        proposed = req.propose(room, verifier.max_branches)
        draft = Draft.empty() if proposed is None else proposed.prefix(req.policy.choose(proposed))
        t1 = clock()
        rows = verifier.verify(req.root, draft)
        t2 = clock()
        if after_verify is not None:
            after_verify(len(draft) + 1, t2 - t1)
        step, done = req.advance(draft, rows, verifier.commit, verifier, full, (t2 - t1, t1 - t0), clock)
        if req.report_progress:  # the first verify decoded the prompt's last token
            req.report_progress = False
            yield req.progress(len(prompt), clock())
        yield step
        if done is not None:
            yield done
            return


def warm(verifier: Verifier, prompt: Sequence[int], clock: Callable[[], float] = time.perf_counter) -> Result:
    """Prefill `prompt` into the prompt cache without generating (an editor's `n_predict: 0`
    request, sent to bring new context in while the user moves): the cells it shares with
    the cache are kept, the rest decoded, so the next request sharing it prefills only its
    own tail. All but the last token, as `generate` leaves them: the request that generates
    from this prompt decodes its last token as its first root. Returns an empty Result
    (`stats.tokens_cached`, `stats.prefill_s`)."""
    check_prompt(prompt, verifier.n_ctx)
    stats = Stats()
    t0 = clock()  # a reuse may decode new tokens between moved runs
    kept = verifier.reuse(prompt[:-1])
    stats.tokens_cached = kept - verifier.refilled
    stats.tokens_shifted = verifier.shifted
    verifier.prefill(np.asarray(prompt[kept:-1], dtype=np.int32))
    stats.prefill_s = clock() - t0
    return Result("", [], stats, "length")

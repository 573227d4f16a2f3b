"""The decoding loop on the fake backend: requests it refuses, and where it must stop."""

from __future__ import annotations

import numpy as np
import pytest

from lookahead.core.control import ControlConfig, Controller, CostModel, FixedPolicy
from lookahead.core.draft import Draft
from lookahead.core.engine import (
    Done,
    Drafter,
    GenerationConfig,
    GenerationError,
    Result,
    Step,
    generate,
)
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import BackendError
from tests.fake_backend import FakeModel, OracleDrafter, TreeDrafter

PROMPT = [1, 2]


def run(
    model: FakeModel, config: GenerationConfig, drafter: Drafter | None = None, policy: FixedPolicy | None = None,
    prompt: list[int] = PROMPT,
) -> tuple[list[Step], Result]:
    *steps, done = generate(model, prompt, config, drafter, policy)
    assert isinstance(done, Done)
    return [s for s in steps if isinstance(s, Step)], done.result


def test_an_empty_prompt_is_refused_when_generate_is_called() -> None:
    """Before any event is asked for: a caller that sets up a stream and reads it later
    (a server answering 400 vs 200) must learn of the error at once."""
    with pytest.raises(GenerationError, match="prompt is empty"):
        generate(FakeModel(), [], GenerationConfig(4))


def test_a_prompt_longer_than_the_context_is_refused_when_generate_is_called() -> None:
    model = FakeModel(n_ctx=8)
    with pytest.raises(GenerationError, match="the prompt has 8 tokens"):
        generate(model, [1] * 8, GenerationConfig(4))
    assert model.verified == []  # nothing was decoded


def test_the_fake_backend_refuses_what_llama_cpp_refuses() -> None:
    """Otherwise an engine that asks too much would pass every test here."""
    nine_leaves = Draft(np.arange(9, dtype=np.int32), np.full(9, -1, np.int32), np.zeros(9, np.int8),
                        np.ones(9, np.float32), np.ones(9, np.float32))
    with pytest.raises(BackendError, match="max_branches"):
        FakeModel().verify(1, nine_leaves)
    model = FakeModel(n_ctx=10, n_batch=4)
    with pytest.raises(BackendError, match="n_batch"):
        model.verify(1, Draft.chain([1, 2, 3, 0]))  # the root + 4 nodes
    with pytest.raises(BackendError, match="do not fit"):
        model.prefill([1] * 10)
    model.prefill([1] * 8)
    model.verify(1, Draft.chain([2]))  # 8 + 2 cells: the context is full, not overflowing
    with pytest.raises(BackendError, match="does not fit"):
        model.verify(1, Draft.chain([2, 3]))


# --- end-of-generation tokens -----------------------------------------------------------


def end_token_model() -> tuple[FakeModel, list[int], int]:
    """A model whose greedy output meets a token for the first time at position k >= 10,
    and that token made an end token: (model, greedy output ignoring end tokens, k)."""
    model = FakeModel(n_vocab=16, seed=3)
    out = model.greedy(PROMPT, 40)
    k = next(i for i in range(10, 40) if out[i] not in out[:i])
    model.eog = {out[k]}
    return model, out, k


def test_generation_stops_at_an_end_token_and_never_emits_it() -> None:
    model, out, k = end_token_model()
    steps, result = run(model, GenerationConfig(40))
    assert result.tokens == out[:k]
    assert result.finish_reason == "stop"
    assert result.text == "".join(chr(97 + t) for t in out[:k])


def test_drafts_accepted_past_an_end_token_are_not_emitted() -> None:
    model, out, k = end_token_model()
    steps, result = run(model, GenerationConfig(40), OracleDrafter(PROMPT + out), FixedPolicy(8))
    assert result.tokens == out[:k]
    assert result.finish_reason == "stop"
    assert result.stats.n_tokens == k
    assert sum(len(s.tokens) for s in steps) == k
    # not vacuous: the last step accepted the end token and drafts after it
    assert steps[-1].accepted > len(steps[-1].tokens) + 1


def test_sampled_generation_ends_at_the_first_end_token_with_and_without_drafts() -> None:
    model = FakeModel(eog={3})
    stops = 0
    for seed in range(100):
        config = GenerationConfig(12, sampling=SamplingConfig(temperature=1.0, top_k=0, seed=seed))
        _, plain = run(model, config)
        _, spec = run(model, config, TreeDrafter(4), FixedPolicy(3, budget=8, branches=2))
        assert spec.tokens == plain.tokens and spec.finish_reason == plain.finish_reason
        assert 3 not in plain.tokens
        assert (plain.finish_reason == "stop") == (len(plain.tokens) < 12)
        stops += plain.finish_reason == "stop"
    assert stops > 50  # not vacuous


# --- the context limit ------------------------------------------------------------------


def test_generation_at_the_context_limit_never_overflows_and_ends_cleanly() -> None:
    """Every size of context, so the last draft meets the limit at every offset; the fake
    backend raises as llama.cpp would if a verify did not fit."""
    prompt = [1, 2, 3]
    for n_ctx in range(5, 40):
        model = FakeModel(n_ctx=n_ctx)
        config = GenerationConfig(100)
        _, plain = run(model, config, prompt=prompt)
        out = model.greedy(prompt, 100)
        _, spec = run(model, config, OracleDrafter(prompt + out), FixedPolicy(8), prompt=prompt)
        assert model.n_used <= n_ctx
        # the cache holds the prompt and every token but the last, and keeps one cell spare
        assert spec.tokens == plain.tokens == out[: n_ctx - len(prompt)], n_ctx
        assert spec.finish_reason == plain.finish_reason == "length"
        assert spec.context_full and plain.context_full


def test_parked_cells_count_against_the_context() -> None:
    """Trees whose accepted path is not the leftmost branch leave parked cells behind: the
    engine must count them (n_used), not only the committed tokens (n_past)."""
    parked = 0
    for n_ctx in range(5, 60):
        model = FakeModel(n_ctx=n_ctx)
        config = GenerationConfig(100, sampling=SamplingConfig(temperature=1.0, top_k=0, seed=n_ctx))
        _, plain = run(model, config)
        _, spec = run(model, config, TreeDrafter(4), FixedPolicy(3, budget=8, branches=2))
        assert model.n_used <= n_ctx
        assert spec.finish_reason == "length" and spec.context_full
        assert spec.tokens == plain.tokens[: len(spec.tokens)]
        parked += model.parked
    assert parked > 0  # not vacuous


def test_a_run_cut_by_the_context_says_so_and_one_cut_by_max_tokens_does_not() -> None:
    """Both finish with "length" (as OpenAI's API does); `context_full` tells them apart."""
    prompt = [1, 2, 3]
    model = FakeModel(n_ctx=20)  # room for 17 tokens
    _, cut = run(model, GenerationConfig(100), prompt=prompt)
    assert (cut.finish_reason, cut.context_full, len(cut.tokens)) == ("length", True, 17)
    for max_tokens in (10, 17):  # 17: both limits at once, and max_tokens was reached
        _, done = run(model, GenerationConfig(max_tokens), prompt=prompt)
        assert (done.finish_reason, done.context_full, len(done.tokens)) == ("length", False, max_tokens)
    model, out, k = end_token_model()
    _, stopped = run(model, GenerationConfig(40))
    assert (stopped.finish_reason, stopped.context_full) == ("stop", False)


# --- the batch limit --------------------------------------------------------------------


def test_drafts_are_cut_to_fit_one_batch_with_the_root() -> None:
    """A small n_batch (an API user's BackendConfig) must cut drafts, not fail mid-generation."""
    model = FakeModel(n_vocab=16, seed=3, n_batch=4)
    config = GenerationConfig(40)
    _, plain = run(model, config)
    for drafter, policy in [
        (OracleDrafter(PROMPT + model.greedy(PROMPT, 40)), FixedPolicy(8)),
        (TreeDrafter(16), FixedPolicy(3, budget=8, branches=2)),
    ]:
        model.verified.clear()
        _, spec = run(model, config, drafter, policy)
        assert spec.tokens == plain.tokens
        assert max(model.verified) == 3  # the root and three nodes: every batch was full


def test_a_cap_of_zero_for_good_turns_drafting_off_for_the_rest_of_the_generation() -> None:
    """Exact mode above its split: no draft can be verified any more, so the drafter is no
    longer fed or asked (its per-step upkeep is plain decoding's overhead)."""
    model = FakeModel(n_vocab=16, seed=3)
    config = GenerationConfig(30)
    _, plain = run(model, config)
    drafter = OracleDrafter(PROMPT + model.greedy(PROMPT, 30))
    observed: list[int] = []
    feed = drafter.observe
    drafter.observe = lambda toks: (observed.append(len(toks)), feed(toks))  # type: ignore[method-assign]
    split = len(PROMPT) + 6
    model.verified.clear()
    result = None
    cap = lambda used: 4 if used < split else 0  # noqa: E731
    for event in generate(model, PROMPT, config, drafter, FixedPolicy(4), node_cap=cap):
        if isinstance(event, Done):
            result = event.result
    assert result is not None and result.tokens == plain.tokens
    calls = len(observed)
    assert 1 < calls < 6  # the prompt, then a few steps below the split, then nothing
    assert max(model.verified[calls:]) == 0  # no draft nodes verified from then on


def test_a_cap_under_which_no_draft_can_pay_turns_drafting_off_at_once() -> None:
    """Exact mode on a CPU where a batch of 2 or 3 costs about as much as the tokens it
    could yield: even drafts certain to be accepted would not beat plain decoding, so the
    adaptive controller is never asked and the drafter never fed after the prompt. A cap
    that leaves a draft which can pay keeps drafting on."""
    model = FakeModel(n_vocab=16, seed=3)
    config = GenerationConfig(30)
    _, plain = run(model, config)
    steep = CostModel({1: 0.01, 2: 0.019, 3: 0.027, 8: 0.03})  # 3 nodes cost 2.7 tokens
    for cap_nodes, drafts in ((2, False), (7, True)):
        drafter = OracleDrafter(PROMPT + model.greedy(PROMPT, 30))
        observed: list[int] = []
        feed = drafter.observe
        drafter.observe = lambda toks, o=observed, f=feed: (o.append(len(toks)), f(toks))  # type: ignore[method-assign]
        policy = Controller(ControlConfig(), steep)
        model.verified.clear()
        *_, done = generate(model, PROMPT, config, drafter, policy, node_cap=lambda used, c=cap_nodes: c)
        assert isinstance(done, Done) and done.result.tokens == plain.tokens
        if drafts:
            assert len(observed) > 1 and max(model.verified) > 0
        else:
            assert len(observed) == 1 and max(model.verified) == 0  # the prompt only


def test_a_new_request_does_not_score_the_last_requests_drafts() -> None:
    """The controller outlives a request (the service's learns across them), but the drafts
    it declined at the end of one are about that text: fed the next request's tokens they
    would count as misses (or hits) of their source. Each generation starts them afresh."""
    model = FakeModel(n_vocab=16, seed=3)
    config = GenerationConfig(20)
    dear = CostModel({1: 0.01, 2: 0.03, 4: 0.06, 64: 1.0})  # no draft pays: all are declined
    policy = Controller(ControlConfig(), dear)
    drafter = OracleDrafter(PROMPT + model.greedy(PROMPT, 60))  # copies past the end
    *_, done = generate(model, PROMPT, config, drafter, policy)
    assert isinstance(done, Done) and max(model.verified) == 0
    assert policy.stats.source_rate  # the declined copies were scored while it wrote
    scored: list[int] = []
    record = policy.stats.record_trials
    policy.stats.record_trials = lambda q, *a: (scored.append(len(q)), record(q, *a))  # type: ignore[method-assign]
    *_, done = generate(model, [5, 9], config, None, policy)  # another text, no drafter
    assert isinstance(done, Done) and scored and max(scored) == 0

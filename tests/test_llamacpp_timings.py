"""llama.cpp's timings from a generation's steps: the prompt's time runs until the first
token is out (the engine decodes the prompt's last token in its first verify step), the
prediction's from there, whether the route stopped the job or the engine finished it."""

from __future__ import annotations

from lookahead.core.engine import Result, Stats, Step
from lookahead.server.llamacpp.run import Watch
from lookahead.server.llamacpp.shape import timings


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def step(tokens: list[int], text: str, verify_s: float, draft_s: float = 0.0) -> Step:
    return Step(tokens=tokens, text=text, drafted=0, accepted=0, depth=0, verify_s=verify_s, draft_s=draft_s, alpha=0.0)


def test_the_first_verify_step_counts_as_the_prompts_time() -> None:
    clock = Clock()
    watch = Watch(clock=clock)
    clock.t += 1.0 + 0.03  # prefill 1 s, then the first step (30 ms) gives the first token
    watch.step(step([1], "a", verify_s=0.03))
    for _ in range(4):  # four more tokens, 40 ms each
        clock.t += 0.04
        watch.step(step([2], "b", verify_s=0.04))
    t = timings(watch.stats, prompt_n=300, first_tokens=watch.first_tokens)
    assert abs(t["prompt_ms"] - 1030.0) < 1e-6
    assert abs(t["predicted_ms"] - 160.0) < 1e-6
    assert t["predicted_n"] == 5
    # llama-server's rate: the tokens written in predicted_ms, not the first (the prompt's)
    assert abs(t["predicted_per_second"] - 4 / 0.16) < 1e-6
    assert abs(t["predicted_per_token_ms"] - 40.0) < 1e-6


def test_drafted_tokens_of_the_first_step_are_not_counted_in_the_decode_rate() -> None:
    clock = Clock()
    watch = Watch(clock=clock)
    clock.t += 0.5
    watch.step(step([1, 2, 3], "abc", verify_s=0.05))  # the first step accepted two drafted tokens
    clock.t += 0.1
    watch.step(step([4, 5], "de", verify_s=0.1))
    out = watch.outcome("limit")
    assert out.first_tokens == 3 and out.tokens == [1, 2, 3, 4, 5]
    t = timings(out.stats, prompt_n=10, first_tokens=out.first_tokens)
    assert t["predicted_n"] == 5
    assert abs(t["predicted_per_second"] - 2 / 0.1) < 1e-6


def test_a_finished_generation_moves_its_first_step_the_same_way() -> None:
    clock = Clock()
    watch = Watch(clock=clock)
    clock.t += 0.5
    watch.step(step([1], "a", verify_s=0.02, draft_s=0.01))
    clock.t += 0.05
    watch.step(step([2], "b", verify_s=0.05))
    engine = Stats(n_tokens=2, steps=2, prefill_s=0.47, decode_s=0.08)  # from the engine's own clock
    watch.finish(Result("ab", [1, 2], engine, "stop"))
    assert abs(watch.stats.prefill_s - 0.50) < 1e-9
    assert abs(watch.stats.decode_s - 0.05) < 1e-9
    assert engine.prefill_s == 0.47 and engine.decode_s == 0.08  # the engine's Result is left as it was


def test_one_token_is_all_prompt_time() -> None:
    clock = Clock()
    watch = Watch(clock=clock)
    clock.t += 0.2
    watch.step(step([1], "a", verify_s=0.03))
    t = timings(watch.stats, prompt_n=10)
    assert t["predicted_ms"] == 0.0 and t["predicted_per_second"] == 0.0
    assert abs(t["prompt_ms"] - 200.0) < 1e-6


def test_an_end_token_counts_in_the_rate_as_llama_server_counts_it() -> None:
    clock = Clock()
    watch = Watch(clock=clock)
    clock.t += 0.5
    watch.step(step([1], "a", verify_s=0.03))
    clock.t += 0.04
    watch.step(step([2], "b", verify_s=0.04))
    clock.t += 0.04
    watch.step(step([], "", verify_s=0.04))  # the model wrote its end token: no text, a step's time
    out = watch.outcome("eos")
    assert out.tokens == [1, 2]
    t = timings(out.stats, prompt_n=10, first_tokens=out.first_tokens, end_token=True)
    assert t["predicted_n"] == 2
    assert abs(t["predicted_per_second"] - 2 / 0.08) < 1e-6  # token 2 and the end token
    cut = timings(out.stats, prompt_n=10, first_tokens=out.first_tokens)
    assert abs(cut["predicted_per_second"] - 1 / 0.08) < 1e-6


def test_past_the_time_budget_a_step_of_several_lines_is_cut_at_its_first_newline() -> None:
    """llama.cpp writes one token at a time and stops at the first newline past
    `t_max_predict_ms`; a draft accepted whole writes several lines in one step, all of them
    past the budget when the step ended past it: the answer ends at its first newline."""
    clock = Clock()
    watch = Watch(t_max_predict_ms=100, clock=clock)
    clock.t += 0.5
    assert watch.step(step([1], "x = 1", verify_s=0.03)) == "x = 1"
    clock.t += 0.05  # within the budget: every line of the step is kept
    assert watch.step(step([2, 3, 4], "\ny = 2\nz", verify_s=0.05)) == "\ny = 2\nz"
    assert not watch.stopped
    clock.t += 0.1  # past it
    assert watch.step(step([5, 6, 7, 8], " = 3\nw = 4\n", verify_s=0.1)) == " = 3\n"
    assert watch.stopped and watch.outcome("limit").text == "x = 1\ny = 2\nz = 3\n"

"""The bench's runners on a stand-in model (no llama.cpp): what each run records."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.methods import lookahead_runner
from bench.tasks import Task
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Result, Stats

TASK = Task("code_edit/x", "code_edit", "rename x")


class Tuning:
    """What lookahead_runner asks of a Model's tuning: a governor made by calibrate()."""

    def __init__(self, adapt_threads: bool) -> None:
        self.adapt_threads = adapt_threads
        self.governor: Any = None

    def calibrate(self) -> None:
        self.governor = SimpleNamespace(switches=0)


class StandIn:
    """What lookahead_runner asks of a Model: its tuning, and one generation that the
    governor sees switch threads once."""

    def __init__(self, adapt_threads: bool) -> None:
        self.tuning = Tuning(adapt_threads)
        self.backend = SimpleNamespace(n_threads=2)

    def prompt_tokens(self, prompt: str, chat: bool) -> list[int]:
        return [1, 2, 3]

    def stream(self, prompt: str, **kwargs: Any) -> list[Done]:
        if self.tuning.adapt_threads and not kwargs["draft"].exact:
            self.tuning.governor.switches += 1  # the run went to one thread
            self.backend.n_threads = 1
        return [Done(Result("ab", [4, 5], Stats(n_tokens=2, steps=2, decode_s=0.1), "length"))]


def test_a_governed_run_records_its_thread_switches_and_a_pinned_or_exact_one_does_not() -> None:
    m = lookahead_runner(StandIn(adapt_threads=True), DraftConfig())(TASK, 2)  # type: ignore[arg-type]
    assert m.extra == {"thread_switches": 1, "threads_at_end": 1}
    pinned = lookahead_runner(StandIn(adapt_threads=False), DraftConfig())(TASK, 2)  # type: ignore[arg-type]
    exact = lookahead_runner(StandIn(adapt_threads=True), DraftConfig(exact=True))(TASK, 2)  # type: ignore[arg-type]
    assert pinned.extra == {} and exact.extra == {}


class Seeing(StandIn):
    """A stand-in that records what the edit source's module holds while it generates."""

    def __init__(self) -> None:
        super().__init__(adapt_threads=False)
        self.seen: dict[str, Any] = {}

    def stream(self, prompt: str, **kwargs: Any) -> list[Done]:
        from lookahead.index import edits

        self.seen = {"copy_kinds": edits.copy_kinds, "prior": edits.CODE_COPY_PRIOR}
        return super().stream(prompt, **kwargs)


def test_an_edit_variant_holds_its_settings_for_the_run_only() -> None:
    from bench.methods import edit_variant_runner
    from lookahead.index import codetext, edits

    before = (edits.copy_kinds, edits.CODE_COPY_PRIOR)
    pasted = [b"Fix it.\n", b"def f():\n", b"    return 1\n"]  # code without fences
    model = Seeing()
    edit_variant_runner(model, "fenced_only")(TASK, 2)  # type: ignore[arg-type]
    # code only inside fences, and no copy of prose stops
    assert model.seen["copy_kinds"](pasted) == ([False, False, False], [False, False, False])
    assert model.seen["prior"] == before[1]
    edit_variant_runner(model, "prose_copies")(TASK, 2)  # type: ignore[arg-type]
    assert model.seen["prior"] == edits.COPY_PRIOR and model.seen["copy_kinds"] is codetext.copy_kinds
    assert codetext.copy_kinds(pasted) == ([False, True, True], [True, False, False])
    assert (edits.copy_kinds, edits.CODE_COPY_PRIOR) == before

"""`simulate`: replay a recorded trace of drafts through a controller with no model, for
tests and tuning."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from lookahead.core.control.controller import Controller
from lookahead.core.draft import Draft


@dataclass
class SimResult:
    """What a replay produced: totals and the n chosen at each step."""

    tokens: int = 0
    seconds: float = 0.0
    chosen: list[int] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def simulate(
    controller: Controller,
    trace: Iterable[tuple[Draft, Sequence[int]]],
    cost: Callable[[int], float],
    *,
    bonus: bool = True,
) -> SimResult:
    """Replay a trace with no model: each entry is a draft and the path of its nodes the
    model would accept if all were verified (recordable from real runs by verifying whole
    drafts). `cost(size)` gives the seconds of a batch; `bonus=False` hides the bonus
    token from the controller, as an engine that does not pass it would.
    """
    result = SimResult()
    for draft, path in trace:
        n = controller.choose(draft)
        # path indices increase (parents precede children): the accepted part is the
        # part of the true path that was verified
        m = 0
        while m < len(path) and path[m] < n:
            m += 1
        # the model's next token: the true path's next node, or a token no node has
        token = int(draft.tokens[path[m]]) if m < len(path) else -1
        seconds = cost(n + 1)
        controller.observe(draft.prefix(n), list(path[:m]), seconds, token if bonus else None)
        # trace entries are independent drafts, not one token stream: later entries' tokens
        # say nothing about this draft, so nothing stays pending past its own bonus token
        controller.shadow.forget()
        result.tokens += m + 1
        result.seconds += seconds
        result.chosen.append(n)
    return result

"""The predicted-output draft source: text the caller expects the output to repeat.

OpenAI's Predicted Outputs (`prediction: {"type": "content", "content": ...}`) is what code
editing clients send: the file being edited, most of which the answer repeats. Unlike the
other sources, the prediction is aligned with the OUTPUT, not the prompt: the output is
expected to start where the prediction starts. So this source keeps a cursor into the
prediction:

- the first `observe` is the prompt: the cursor starts at the prediction's first token;
- each output token that equals the token under the cursor moves it on (a run of agreement);
- a token that differs (the edit) loses the alignment; the cursor comes back after the
  longest of the last 8, 4 or 2 output tokens found in the prediction (at or after where
  the alignment was lost if it occurs there, the first occurrence otherwise), or stays lost
  until one is;
- `propose` offers the prediction from the cursor on, one chain.

Text that the output only runs into, rather than starts with (the code after the cursor, for a
completion: the middle ends where the suffix begins, and rarely begins with it), is indexed
with `aligned=False`: the cursor starts lost, so nothing is drafted until the output meets
the text on 2 to 8 tokens. Drafting the suffix's first tokens at the first step, with the
confidence of an aligned prediction, spent a long verify on the first token of nearly every
editor request (its time to first token) and was almost never accepted.

Its estimate grows with the run of agreement: a fresh alignment after an edit is less
certain than a copy that has held for a dozen tokens. The controller calibrates this
source on its own (SOURCE_PREDICTION), so the numbers are only a start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from lookahead.core.draft import SOURCE_PREDICTION, Candidate
from lookahead.index.walk import int_list

# lengths of the output's tail looked up in the prediction to re-align after an edit
RESYNC_ORDERS = (8, 4, 2)
Q_START = 0.9  # at the very start of the output: the prediction begins where it begins
Q_FRESH = 0.5  # right after re-aligning on 2 tokens
Q_HELD = 0.95  # after a long run of agreement
RUN_FULL = 12  # run length at which the estimate reaches Q_HELD


class PredictionIndex:
    source = SOURCE_PREDICTION

    def __init__(self, prediction: Sequence[int], aligned: bool = True) -> None:
        """`aligned`: the output is expected to start where `prediction` starts (OpenAI's
        Predicted Outputs); False: only where the output meets it (a completion's suffix)."""
        self.prediction = int_list(prediction)
        self.aligned = aligned
        # n-gram -> the positions right after each of its occurrences, in order
        self._after: dict[int, dict[tuple[int, ...], list[int]]] = {n: {} for n in RESYNC_ORDERS}
        p = self.prediction
        for n in RESYNC_ORDERS:
            table = self._after[n]
            for i in range(len(p) - n + 1):
                table.setdefault(tuple(p[i : i + n]), []).append(i + n)
        self._tail: deque[int] = deque(maxlen=max(RESYNC_ORDERS))
        self.cursor: int | None = None  # index of the next expected token; None = lost
        self.run = 0  # output tokens agreeing since the (re)alignment
        self._mark = 0  # the last cursor before the alignment was lost
        self._started = False  # the first observe is the prompt

    def observe(self, tokens: Iterable[int]) -> None:
        if not self._started:
            self._started = True
            self.cursor, self.run = (0 if self.aligned else None), 0
            return
        p = self.prediction
        for t in int_list(tokens):
            self._tail.append(t)
            if self.cursor is not None and self.cursor < len(p) and p[self.cursor] == t:
                self.cursor += 1
                self.run += 1
            else:
                if self.cursor is not None:
                    self._mark = self.cursor
                self._realign()

    def _realign(self) -> None:
        tail = tuple(self._tail)
        old = self._mark
        for n in RESYNC_ORDERS:
            if len(tail) < n:
                continue
            spots = self._after[n].get(tail[-n:])
            if spots:
                ahead = [s for s in spots if s >= old]
                self.cursor = ahead[0] if ahead else spots[0]
                self.run = n
                return
        self.cursor, self.run = None, 0

    def estimate(self) -> float:
        if self.cursor == 0 and self.run == 0:
            return Q_START
        share = min(self.run, RUN_FULL) / RUN_FULL
        return Q_FRESH + (Q_HELD - Q_FRESH) * share

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        if self.cursor is None or max_depth <= 0 or max_candidates <= 0:
            return []
        toks = self.prediction[self.cursor : self.cursor + max_depth]
        if not toks:
            return []
        q = np.full(len(toks), self.estimate(), dtype=np.float32)
        return [Candidate(np.array(toks, dtype=np.int32), q, SOURCE_PREDICTION)]

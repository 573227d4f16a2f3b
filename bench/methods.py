"""The decoding methods the comparison runs, each behind one `run(task, max_tokens)` call.

lookahead methods call `Model.generate` with a DraftConfig. The llama-cpp-python methods
(`plain_llama`, `pld2`, `pld10`) share ONE `llama_cpp.Llama` (made with logits_all=True,
which its draft path needs past n_batch tokens) and swap its `draft_model` per method; they
are fed the very prompt token ids lookahead uses, and decode greedily.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

from bench.tasks import Task
from lookahead.api import Model
from lookahead.draft_state import DraftConfig

LOOKAHEAD_METHODS: dict[str, DraftConfig] = {
    "plain": DraftConfig(enabled=False),
    "fixed": DraftConfig(adaptive=False, k=8, branches=1),
    "adaptive": DraftConfig(),
    "exact": DraftConfig(exact=True),
    # adaptive without the record index (its effect on templated reports)
    "no_records": DraftConfig(records=False),
    "adaptive_chain": DraftConfig(branches=1),
    "adaptive_g13": DraftConfig(min_gain=1.3),
    # tree vs chain at the same fixed budget of 16 verified nodes per step
    "tree": DraftConfig(adaptive=False, k=16, budget=16, branches=3),
    "chain": DraftConfig(adaptive=False, k=16, budget=16, branches=1),
}
LLAMA_METHODS: dict[str, int | None] = {"plain_llama": None, "pld2": 2, "pld10": 10}  # PLD K
ALL_METHODS = (*LOOKAHEAD_METHODS, *LLAMA_METHODS)
DEFAULT_METHODS = ("plain", "fixed", "adaptive", "exact", "tree", "chain", "pld2", "pld10")


@dataclass
class Measurement:
    """One generation. tok/s = decode_tokens / decode_s (prefill excluded)."""

    tokens: list[int]  # generated tokens (end-of-generation token excluded)
    decode_tokens: int  # tokens produced inside the decode_s window
    decode_s: float
    prefill_s: float
    steps: int  # verify steps (llama_decode calls) in the decode window
    drafted: int  # draft tokens verified
    accepted: int  # draft tokens accepted
    k_trace: list[int] = field(default_factory=list)  # draft tokens verified, per step

    @property
    def tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


Runner = Callable[[Task, int], Measurement]


def lookahead_runner(model: Model, config: DraftConfig) -> Runner:
    """A runner for one lookahead DraftConfig (greedy sampling, the library's default)."""

    def run(task: Task, max_tokens: int) -> Measurement:
        r = model.generate(task.prompt, chat=task.chat, max_tokens=max_tokens, draft=config)
        s = r.stats
        return Measurement(
            r.tokens, s.n_tokens, s.decode_s, s.prefill_s, s.steps, s.drafted, s.accepted,
            list(s.k_trace),
        )

    return run


class _Recorder(LlamaDraftModel):
    """Wraps llama-cpp-python's prompt lookup drafter and records each draft's length."""

    def __init__(self, num_pred_tokens: int) -> None:
        self.inner = LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens)
        self.lengths: list[int] = []

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        draft = self.inner(input_ids, **kwargs)
        self.lengths.append(len(draft))
        return draft


class LlamaCppMethods:
    """llama-cpp-python's own decoding, with or without its prompt lookup drafter."""

    def __init__(self, model: Model, n_threads: int, n_ctx: int = 4096) -> None:
        self.model = model
        self.llm = llama_cpp.Llama(
            model_path=str(model.backend.path), n_ctx=n_ctx, n_threads=n_threads,
            n_threads_batch=n_threads, logits_all=True, verbose=False,
        )

    def runner(self, num_pred_tokens: int | None) -> Runner:
        def run(task: Task, max_tokens: int) -> Measurement:
            return self._generate(task, max_tokens, num_pred_tokens)

        return run

    def _generate(self, task: Task, max_tokens: int, num_pred_tokens: int | None) -> Measurement:
        recorder = _Recorder(num_pred_tokens) if num_pred_tokens else None
        self.llm.draft_model = recorder
        self.llm.reset()  # no prompt-prefix reuse from the previous run: prefill afresh
        prompt = self.model.prompt_tokens(task.prompt, task.chat)
        out: list[int] = []
        yielded = 0
        t0 = time.perf_counter()
        t_first = t_last = t0
        for tok in self.llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
            t_last = time.perf_counter()
            if yielded == 0:
                t_first = t_last
            yielded += 1
            if self.model.backend.is_eog(tok):
                break
            out.append(int(tok))
            if len(out) >= max_tokens:
                break
        # Each draft call is followed by one verify batch; the first token came from prefill.
        lengths = recorder.lengths if recorder else []
        steps = len(lengths) if recorder else max(yielded - 1, 0)
        decode_tokens = max(yielded - 1, 0)
        return Measurement(
            out, decode_tokens, t_last - t_first, t_first - t0, steps, sum(lengths),
            max(decode_tokens - steps, 0), list(lengths),
        )


def build_runners(model: Model, methods: list[str], n_threads: int) -> dict[str, Runner]:
    """One runner per method name; the llama-cpp-python Llama is loaded once, if needed."""
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {', '.join(ALL_METHODS)}")
    llama = LlamaCppMethods(model, n_threads) if any(m in LLAMA_METHODS for m in methods) else None
    runners: dict[str, Runner] = {}
    for name in methods:
        if name in LOOKAHEAD_METHODS:
            runners[name] = lookahead_runner(model, LOOKAHEAD_METHODS[name])
        else:
            assert llama is not None
            runners[name] = llama.runner(LLAMA_METHODS[name])
    return runners

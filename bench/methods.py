"""The decoding methods the bench runs, each behind one `run(task, max_tokens)` call.

lookahead methods call `Model.stream` with a DraftConfig and time each step's tokens as
they arrive. The oracle methods draft the plain output of the same prompt (bench/oracle.py).
The llama-cpp-python methods (`plain_llama`, `pld2`, `pld10`) share ONE `llama_cpp.Llama`
(made with logits_all=True, which its draft path needs past n_batch tokens) and swap its
`draft_model` per method; the llama-server methods start a fresh server per prompt
(bench/llama_server.py). All are fed the very prompt token ids lookahead uses, and decode
greedily.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

from bench.llama_server import SERVER_METHODS, LlamaServerMethods
from bench.measurement import Measurement
from bench.oracle import OracleDrafter, OraclePolicy
from bench.tasks import Task
from lookahead.api import Model
from lookahead.core.control import FixedPolicy
from lookahead.core.draft import Draft
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Drafter, Event, GenerationConfig, Policy, Step, generate
from lookahead.index.codetext import copy_kinds

FIXED_KS = (1, 2, 4, 8, 16, 32)  # the fixed-K chains (and oracle chains) the speedup-vs-K chart draws
LOOKAHEAD_METHODS: dict[str, DraftConfig] = {
    "plain": DraftConfig(enabled=False),
    "adaptive": DraftConfig(),
    "exact": DraftConfig(exact=True),
    # always verify a single chain of up to K drafted tokens
    **{f"fixed{k}": DraftConfig(adaptive=False, k=k, branches=1) for k in FIXED_KS},
    # a tree at a fixed budget of 16 verified nodes per step (vs fixed16, a chain of 16)
    "tree": DraftConfig(adaptive=False, k=16, budget=16, branches=3),
    # adaptive without the record index (its effect on templated reports)
    "no_records": DraftConfig(records=False),
    "adaptive_chain": DraftConfig(branches=1),
    "adaptive_g13": DraftConfig(min_gain=1.3),
}
# The oracle drafter (the plain output of the same prompt) at a fixed K; None = under the
# oracle policy, the best K per step. ORACLE_POLICY: the real drafts under the oracle policy.
ORACLE_METHODS: dict[str, int | None] = {"oracle": None, **{f"oracle{k}": k for k in FIXED_KS}}
ORACLE_POLICY = "oracle_policy"
LLAMA_METHODS: dict[str, int | None] = {"plain_llama": None, "pld2": 2, "pld10": 10}  # PLD K
# The default with settings of the edit source's module changed for the run (what they
# add), by name: (module attribute, its value given the module) pairs.
# prose_copies: every copy of the prompt priced as prose, code blocks too (the code prior);
# fenced_only: code found only inside ``` fences, and copies of prose not stopped at the end
# of a sentence's line (the edit source before both: what they add)
EDIT_VARIANTS: dict[str, tuple[tuple[str, Callable[[Any], Any]], ...]] = {
    "prose_copies": (("CODE_COPY_PRIOR", lambda edits: edits.COPY_PRIOR),),
    "fenced_only": (("copy_kinds", lambda edits: partial(copy_kinds, code_lines=False, prose_stops=False)),),
}
ALL_METHODS = (
    *LOOKAHEAD_METHODS, *EDIT_VARIANTS, *ORACLE_METHODS, ORACLE_POLICY, *LLAMA_METHODS, *SERVER_METHODS,
)  # fmt: skip
DEFAULT_METHODS = (
    "plain", "adaptive", "exact", *(f"fixed{k}" for k in FIXED_KS), "tree", "pld2", "pld10", *ORACLE_METHODS,
)  # fmt: skip
# --quick: enough of each family for every chart, in a few minutes
QUICK_METHODS = ("plain", "adaptive", "fixed2", "fixed8", "fixed32", "pld10", "oracle", "oracle2", "oracle32")


def needs_truth(method: str) -> bool:
    """Methods that draft from (or verify knowing) the plain output of the same prompt."""
    return method in ORACLE_METHODS or method == ORACLE_POLICY


def is_chain(method: str) -> bool:
    """The real drafter's single-chain drafts (k drafted, m accepted: depths 1..m accepted,
    depth m + 1 reached and rejected): what the acceptance-by-depth figures pool."""
    config = LOOKAHEAD_METHODS.get(method)
    return config is not None and config.enabled and config.branches == 1


Runner = Callable[[Task, int], Measurement]


def timed(events: Iterable[Event], t0: float) -> Measurement:
    """Run a lookahead generation to its end, timing when each step's tokens arrive."""
    steps: list[Step] = []
    times: list[float] = []
    result = None
    for event in events:
        if isinstance(event, Step):
            times.append(time.perf_counter() - t0)
            steps.append(event)
        elif isinstance(event, Done):
            result = event.result
    assert result is not None, "generation ended without a Done event"
    s = result.stats
    return Measurement(
        result.tokens, s.n_tokens, s.decode_s, s.prefill_s, s.steps, s.drafted, s.accepted, list(s.k_trace),
        step_t=times,
        step_tokens=[len(e.tokens) for e in steps],
        step_accepted=[e.accepted for e in steps],
        step_verify_s=[e.verify_s for e in steps],
        step_draft_s=[e.draft_s for e in steps],
    )


def lookahead_runner(model: Model, config: DraftConfig) -> Runner:
    """A runner for one lookahead DraftConfig (greedy sampling, the library's default)."""

    def run(task: Task, max_tokens: int) -> Measurement:
        tokens = model.prompt_tokens(task.prompt, task.chat)
        # each run as a fresh `lookahead generate` process starts: nothing learned on the
        # bench's earlier prompts (other kinds, other runs) carries over. The controllers go,
        # and the cost curve goes back to the calibrated one a new process loads from the
        # disk cache (with a fresh thread governor): the curve learned on earlier prompts
        # once made one summary draft 11 nodes where a new process drafts 5.
        model.tuning.calibrate()
        t0 = time.perf_counter()
        m = timed(model.stream(task.prompt, tokens=tokens, max_tokens=max_tokens, draft=config), t0)
        gov = model.tuning.governor  # calibrate() made it for this run
        if gov is not None and model.tuning.adapt_threads and not config.exact:
            # a switch to fewer threads slows every step while it lasts: on a noisy machine
            # this tells a switch from a slow method
            m.extra["thread_switches"] = gov.switches
            m.extra["threads_at_end"] = model.backend.n_threads
        return m

    return run


def edit_variant_runner(model: Model, method: str) -> Runner:
    """The default, with the edit source's module attributes of `EDIT_VARIANTS[method]` set
    for the run (the source reads them at every draft, or at the prompt)."""
    from lookahead.index import edits

    changes = EDIT_VARIANTS[method]
    inner = lookahead_runner(model, DraftConfig())

    def run(task: Task, max_tokens: int) -> Measurement:
        saved = [(name, getattr(edits, name)) for name, _ in changes]
        for name, value_of in changes:
            setattr(edits, name, value_of(edits))
        try:
            return inner(task, max_tokens)  # the generation runs to its end in here
        finally:
            for name, value in saved:
                setattr(edits, name, value)

    return run


class _Tracked:
    """The real drafter, also telling `tracker` what was written (so an OraclePolicy knows
    where the output is)."""

    def __init__(self, inner: Drafter, tracker: OracleDrafter) -> None:
        self.inner, self.tracker = inner, tracker

    def observe(self, tokens: Sequence[int]) -> None:
        self.inner.observe(tokens)
        self.tracker.observe(tokens)

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        return self.inner.propose(budget, max_depth, branches)


def oracle_runner(model: Model, truths: dict[str, list[int]], method: str) -> Runner:
    """The oracle drafter at a fixed K or under the oracle policy; or (ORACLE_POLICY) the
    real drafter under the oracle policy. The truth: the plain run's output, by task id."""

    def run(task: Task, max_tokens: int) -> Measurement:
        if task.id not in truths:
            raise RuntimeError(f"{method} needs the plain output of {task.id} first")
        tokens = model.prompt_tokens(task.prompt, task.chat)
        oracle = OracleDrafter(truths[task.id])
        drafter: Drafter = oracle
        policy: Policy
        cost = model.drafting.cost.seconds  # the calibrated curve (the bench calibrates first)
        if method == ORACLE_POLICY:
            config = DraftConfig()
            drafter = _Tracked(model.drafting.drafter(config), oracle)
            policy = OraclePolicy(oracle.next_token, cost, config.k_max, config.branches)
        elif ORACLE_METHODS[method] is None:
            policy = OraclePolicy(oracle.next_token, cost)
        else:
            policy = FixedPolicy(ORACLE_METHODS[method] or 0)
        t0 = time.perf_counter()
        m = timed(generate(model.backend, tokens, GenerationConfig(max_tokens), drafter, policy), t0)
        m.extra["left_truth_at"] = oracle.left_at
        return m

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
        times: list[float] = []
        yielded = 0
        t0 = time.perf_counter()
        t_first = t_last = t0
        for tok in self.llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
            t_last = time.perf_counter()
            times.append(t_last - t0)
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
            step_t=times[: len(out)], step_tokens=[1] * len(out),
        )


def build_runners(
    model: Model,
    methods: list[str],
    n_threads: int,
    truths: dict[str, list[int]],
    llama_server: Path | None = None,
) -> dict[str, Runner]:
    """One runner per method name; the llama-cpp-python Llama is loaded once, if needed.
    `truths`: plain outputs by task id, filled by the caller as plain runs finish."""
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {', '.join(ALL_METHODS)}")
    servers = [m for m in methods if m in SERVER_METHODS]
    if servers and llama_server is None:
        raise ValueError(f"{', '.join(servers)} need a llama-server binary (--llama-server PATH)")
    llama = LlamaCppMethods(model, n_threads) if any(m in LLAMA_METHODS for m in methods) else None
    server = LlamaServerMethods(llama_server, model.backend.path, n_threads) if llama_server else None
    runners: dict[str, Runner] = {}
    for name in methods:
        if name in LOOKAHEAD_METHODS:
            runners[name] = lookahead_runner(model, LOOKAHEAD_METHODS[name])
        elif name in EDIT_VARIANTS:
            runners[name] = edit_variant_runner(model, name)
        elif needs_truth(name):
            runners[name] = oracle_runner(model, truths, name)
        elif name in SERVER_METHODS:
            assert server is not None
            runners[name] = server_runner(model, server, SERVER_METHODS[name])
        else:
            assert llama is not None
            runners[name] = llama.runner(LLAMA_METHODS[name])
    return runners


def server_runner(model: Model, server: LlamaServerMethods, spec_type: str | None) -> Runner:
    def run(task: Task, max_tokens: int) -> Measurement:
        return server.run(model.prompt_tokens(task.prompt, task.chat), max_tokens, spec_type)

    return run

"""The Python API: load a model by name or path, generate a stream of events or a result.

    import lookahead
    model = lookahead.load()                      # the default model, a name, or a .gguf path
    print(model.generate("def fib(n):", max_tokens=64).text)
"""

from __future__ import annotations

import dataclasses
import json
import platform
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from lookahead.backend import probe
from lookahead.backend.llama import BackendConfig, LlamaBackend, LlamaVocab, build_info, default_threads, system_info
from lookahead.backend.slots import LlamaSlots
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig, DraftState
from lookahead.core.engine import Done, Event, GenerationConfig, GenerationError, Result, generate
from lookahead.core.exactness import exact_batch_limit
from lookahead.core.multi import Batch, Request
from lookahead.core.sampling import SamplingConfig
from lookahead.index.base import DraftSource
from lookahead.models import catalog as models
from lookahead.models import gguf
from lookahead.tuning.cpuload import CpuLoad, cpu_load
from lookahead.tuning.threads import BatchThreads, ThreadCosts, ThreadGovernor

__all__ = ["DraftConfig", "Model", "SamplingConfig", "load"]

# llama.cpp pads the attention window to 256 cells with flash attention; past 256 cells in
# use, one-token decoding switches to a split-KV kernel that no batch of 2+ tokens uses, so
# the bit-exact batch sizes differ below and above this many cells (measured: SmolLM2 24+
# below, 1 above; Qwen2.5-Coder-0.5B 3 below, 1 above).
EXACT_SPLIT = 256
# The exactness self-test runs batches above EXACT_SPLIT cells: a smaller context cannot
# hold it (checked before loading, with this number in the message).
EXACT_MIN_CTX = EXACT_SPLIT + 32

# Batch sizes the verify cost t(n) is calibrated at: every size up to 20, where drafts
# mostly are, then a sparser grid the controller interpolates. CPU matmul kernels work on
# blocks of columns, so t(n) is a sawtooth there, not a smooth curve: on a 2-core AVX2
# EPYC with Qwen-0.5B, t(n) / t(1) = 3.23, 2.53, 3.69, 3.45, 4.35, 4.44, 5.50, 5.12 for
# n = 3..10 (an odd batch above 2 costs about as much as the next even one, or more).
# Interpolating between even sizes priced odd ones 10-25% too low, so the controller
# picked them, and the learned estimate at such a size then stood out from its neighbours.
COST_SIZES = (*range(1, 21), 24, 28, 32, 40, 48, 64)
# Part of the cost cache key: bump it when the measurement changes, so old tables are
# measured again (v2: more sizes, interleaved rounds; v3: the context slope too; v4: the
# fastest round, not the median; v5: every size up to 20).
COST_VERSION = "v5"
# The context slope: t(n) measured again with this many cells in the cache (or half the
# context, if smaller), at these sizes. Deep in a long prompt a verify costs more, big
# batches more so: on a 2-core AVX2 EPYC with Qwen-0.5B, ... (see CostModel).
SLOPE_DEPTH = 1024
SLOPE_SIZES = (1, 2, 4, 8, 16, 32, 64)

# Text for the exactness self-test: ordinary code, long enough for 64-token batches.
_SELFTEST_TEXT = (
    "def mean(values):\n    total = 0.0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n\n\nclass Point:\n    def __init__(self, x, y):\n"
    "        self.x = x\n        self.y = y\n\n    def norm(self):\n"
    "        return (self.x ** 2 + self.y ** 2) ** 0.5\n"
)


class Model:
    """A loaded model with one context; generations run one at a time (`generate_many` and
    `add_to` run several together in a context of their own, see `lookahead.core.multi`)."""

    def __init__(
        self,
        backend: LlamaBackend,
        name: str,
        cache_dir: Path,
        verdict: probe.Verdict | None = None,
        cpu: CpuLoad | None = None,
    ) -> None:
        self.backend = backend
        self.name = name
        self.cache_dir = cache_dir
        self.verdict = verdict  # how the backend configuration was chosen (None: not probed)
        self.drafting = DraftState(
            tokenize=lambda text: backend.tokenize(text, add_special=False),
            tokenizer_id=backend.fingerprint(),
            token_bytes=backend.token_bytes,
            corpus_cache=cache_dir / "corpora",
        )
        self._cost_ready = False
        # a busy machine: fewer threads while that is faster (only when the thread count
        # was left to us; see lookahead/tuning/threads.py). Set False to pin the count.
        self.adapt_threads = backend.config.n_threads == 0
        self.governor: ThreadGovernor | None = None
        # the kernel's count of other processes' CPU time (lookahead/tuning/cpuload.py), read since
        # `load` began (None: unreadable here, or the thread count is pinned)
        self.cpu = (cpu or cpu_load()) if self.adapt_threads else None
        # the calibrated t(n), idle, full thread count: sizes and seconds, for interpolation
        self._idle_sizes = np.zeros(0)
        self._idle_seconds = np.zeros(0)
        self._idle_list: list[float] = []
        self._full_threads = backend.n_threads
        self._thread_costs: ThreadCosts | None = None  # made by calibrate()
        self._exact_limits: tuple[int, int] | None = None
        # extra fraction of t(n) per cell in the cache, per n (see CostModel); set by calibrate
        self.cost_slope: dict[int, float] = {}

    def exact_limits(self) -> tuple[int, int]:
        """Largest verify batches whose logits are bit-identical to one-token decoding here,
        (below, above) EXACT_SPLIT cells in the cache (self-test, once per model)."""
        if self._exact_limits is None:
            if self.backend.n_ctx < EXACT_MIN_CTX:
                raise GenerationError(
                    f"exact mode's self-test needs a context of at least {EXACT_MIN_CTX} tokens, "
                    f"this one has {self.backend.n_ctx}: raise n_ctx (--ctx-size)"
                )
            toks = self.backend.tokenize(_SELFTEST_TEXT)
            short = exact_batch_limit(self.backend, toks, max_size=32)
            long = exact_batch_limit(self.backend, toks, max_size=8, context=EXACT_SPLIT + 16)
            self._exact_limits = (short, long)
        return self._exact_limits

    def exact_cap(self) -> Callable[[int], int]:
        """Draft nodes allowed per step in exact mode, given the cells in use."""
        short, long = self.exact_limits()

        def cap(used: int) -> int:
            return short - 1 if used + short <= EXACT_SPLIT else long - 1

        return cap

    def calibrate(self) -> dict[int, float]:
        """Measure (or load from the cache) the verify cost t(n) on this machine.

        Measured on an empty cache: cells left by an earlier generation (a longer context,
        parked cells) would make every size look dearer, and the table is cached. Then
        measured again deeper in the cache, for the context slope (`cost_slope`).
        """
        path = self.cache_dir / "costs.json"
        b = self.backend
        if b.n_threads != self._full_threads:  # the idle curve is the full count's
            b.set_threads(self._full_threads)
        machine = f"{b.n_threads}:{platform.machine()}:{platform.processor()}"
        key = f"{COST_VERSION}:{b.path.name}:{b.path.stat().st_size}:{machine}"
        if not b.config.repack:  # costs are per backend configuration
            key += f":{probe.NO_EXTRA_BUFTS.name}"
        try:
            entry = json.loads(path.read_text())[key]
            costs = {int(n): float(t) for n, t in entry["costs"].items()}
            slope = {int(n): float(t) for n, t in entry["slope"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            b.reset()
            costs = b.measure_cost(COST_SIZES, repeats=4)
            slope = measure_slope(b, costs)
            if plausible(costs):  # one measured while something else ran is not kept
                _store_costs(path, key, {"costs": costs, "slope": slope})
        self.cost_slope = slope
        self.drafting.cost = CostModel(costs, slope=slope, cells=lambda: b.n_used)
        self.drafting.controllers.clear()
        self._cost_ready = True
        self._new_governor(costs)
        return costs

    def _new_governor(self, costs: dict[int, float]) -> None:
        self._idle_sizes = np.array(sorted(costs), dtype=np.float64)
        self._idle_seconds = np.array([costs[k] for k in sorted(costs)], dtype=np.float64)
        # per size up to the largest calibrated one, as plain floats: looked up every step
        self._idle_list = []
        if costs:
            top = int(self._idle_sizes[-1])
            self._idle_list = np.interp(np.arange(top + 1), self._idle_sizes, self._idle_seconds).tolist()
        cost = self.drafting.cost
        self.governor = ThreadGovernor(
            self._full_threads, lambda n: self._idle_cost(n, cost.context), load=self.cpu
        )
        self._thread_costs = ThreadCosts(self._full_threads, cost)

    def _idle_cost(self, size: int, cells: int) -> float:
        """Seconds of a verify of `size` tokens on the idle machine at the full thread count, at
        `cells` cells in use (a long prompt is not load)."""
        if size < len(self._idle_list):
            t = self._idle_list[size]
        else:
            t = float(np.interp(size, self._idle_sizes, self._idle_seconds))
        return t * self.drafting.cost.factor_at(size, cells)

    def new_batch(self, slots: LlamaSlots, draft: DraftConfig, *, govern: bool = True) -> Batch:
        """A batched loop over `slots` for requests drafted by `draft`'s settings: its own
        cost model (the batch's cells are its slots', not this context's: the empty-cache
        curve), the step's node budget (what one request may verify alone, shared by the
        batch), and with `govern` a thread governor of its own (see `govern_batch`)."""
        cost = self.drafting.cost.spawn(self.drafting.cost.measured, context=False)
        batch = Batch(slots, cost, budget=draft.budget, min_gain=draft.min_gain, per_request=draft.fair)
        if govern:
            self.govern_batch(batch, slots)
        return batch

    def govern_batch(self, batch: Batch, slots: LlamaSlots) -> None:
        """Give a batched loop on `slots` its own thread governor (as `stream` has one), when
        the thread count is ours to choose and the cost curve is calibrated."""
        if not self.adapt_threads or self.governor is None:
            return
        if slots.n_threads != self._full_threads:  # made while one generation ran reduced
            slots.set_threads(self._full_threads)
        gov = ThreadGovernor(self._full_threads, lambda n: self._idle_cost(n, slots.n_used), load=self.cpu)
        threads = BatchThreads(gov, batch, slots.set_threads)
        threads.begin()
        batch.after_verify = threads

    def _after_verify(self, size: int, seconds: float) -> None:
        """Feed the thread governor a verify time; apply its switch (threads, cost curve)."""
        gov = self.governor
        if gov is None or not self.adapt_threads:
            return
        self._use_threads(gov.observe(size, seconds))

    def _begin(self) -> None:
        """A generation starts: the governor may pick a count from the CPU probe first."""
        if self.governor is not None and self.adapt_threads:
            self._use_threads(self.governor.begin())

    def _use_threads(self, threads: int | None) -> None:
        """Switch the backend, and the controllers' cost curve, to `threads` (None: stay)."""
        if threads is None:
            return
        self.backend.set_threads(threads)
        if self._thread_costs is None:  # not calibrated: no curve to switch
            return
        cost = self._thread_costs.at(threads, self.drafting.cost)
        self.drafting.cost = cost
        for controller in self.drafting.controllers.values():
            controller.cost = cost

    def ensure_calibrated(self) -> None:
        """Calibrate once (the adaptive controller needs the cost curve)."""
        if not self._cost_ready:
            self.calibrate()

    def prompt_tokens(self, prompt: str | Sequence[dict[str, str]], chat: bool = False) -> list[int]:
        """Tokens for a raw prompt, or for chat messages (a str with chat=True is one user turn)."""
        return prompt_tokens(self.backend, prompt, chat)

    def stream(
        self,
        prompt: str | Sequence[dict[str, str]],
        *,
        chat: bool = False,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        sampling: SamplingConfig | None = None,
        draft: DraftConfig | None = None,
        sources: Sequence[DraftSource] = (),
        tokens: Sequence[int] | None = None,
    ) -> Iterator[Event]:
        """Generate, yielding a Step per verify step and a final Done with the Result.

        `sources`: draft sources for this generation only, beside the usual indexes (the
        server's predicted output and its memory of earlier requests). `tokens`: the
        prompt already tokenized (by `prompt_tokens`); `prompt` and `chat` are then unused.
        """
        config = GenerationConfig(max_tokens, tuple(stop), sampling or SamplingConfig())
        draft = draft or DraftConfig()
        tokens = list(tokens) if tokens is not None else self.prompt_tokens(prompt, chat)
        # not in exact mode: its promise is plain decoding's logits at the configured count
        adapt = self.adapt_threads and not draft.exact
        hook = self._after_verify if adapt and self.governor is not None else None
        if draft.enabled and draft.adaptive and not self._cost_ready:
            self.calibrate()
            hook = self._after_verify if adapt else None
        if hook is not None:
            self._begin()
        if not draft.enabled:
            return generate(self.backend, tokens, config, after_verify=hook)
        drafter = self.drafting.drafter(draft, extra=sources)
        policy = self.drafting.policy(draft)
        cap = self.exact_cap() if draft.exact else None
        return generate(self.backend, tokens, config, drafter, policy, cap, after_verify=hook)

    def add_to(
        self,
        batch: Batch,
        tokens: Sequence[int],
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        sampling: SamplingConfig | None = None,
        draft: DraftConfig | None = None,
        sources: Sequence[DraftSource] = (),
    ) -> Request:
        """Queue one generation on `batch` (see `lookahead.core.multi`), with the drafter and
        policy `stream` would build for it alone. `draft.exact`'s batch-size cap is not
        applied: bit-identity is claimed for one request at a time only."""
        config = GenerationConfig(max_tokens, tuple(stop), sampling or SamplingConfig())
        draft = draft or DraftConfig()
        if not draft.enabled:
            return batch.add(tokens, config)
        if draft.adaptive:
            self.ensure_calibrated()
        drafter = self.drafting.drafter(draft, extra=sources)
        return batch.add(tokens, config, drafter, self.drafting.policy(draft))

    def generate_many(
        self,
        prompts: Sequence[str | Sequence[dict[str, str]]],
        *,
        parallel: int = 4,
        chat: bool = False,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        sampling: SamplingConfig | None = None,
        draft: DraftConfig | None = None,
    ) -> list[Result]:
        """Generate for every prompt, up to `parallel` at a time in one batched decode per
        step (the rest join as others finish); the Results in the prompts' order. Each
        request's context is the model's n_ctx / parallel."""
        draft = draft or DraftConfig()
        if draft.enabled and draft.adaptive:  # the batch's cost model starts from the curve
            self.ensure_calibrated()
        slots = LlamaSlots(self.backend, parallel)
        try:
            batch = self.new_batch(slots, draft)
            ids = [
                self.add_to(
                    batch, self.prompt_tokens(p, chat), max_tokens=max_tokens, stop=stop, sampling=sampling,
                    draft=draft,
                ).id
                for p in prompts
            ]
            results: dict[int, Result] = {}
            while not batch.idle:
                for req, event in batch.step():
                    if isinstance(event, Done):
                        results[req.id] = event.result
        finally:
            slots.close()
        return [results[i] for i in ids]

    def generate(self, prompt: str | Sequence[dict[str, str]], **kwargs: object) -> Result:
        """Like `stream`, but returns only the final Result (text, tokens, stats)."""
        for event in self.stream(prompt, **kwargs):  # type: ignore[arg-type]
            if isinstance(event, Done):
                return event.result
        raise AssertionError("generation ended without a Done event")

    def close(self) -> None:
        self.backend.close()


def load(
    model: str | Path = models.DEFAULT_MODEL,
    *,
    cache_dir: Path | None = None,
    backend: BackendConfig | None = None,
    progress: models.Progress | None = None,
    probe_backend: bool = True,
) -> Model:
    """Load a model by name (assembling it on first use) or by path to a .gguf file.

    With `probe_backend` (the default), the llama.cpp configuration is the first one that
    ran correctly on this CPU in a child process (see `lookahead.backend.probe`; cached, so
    this costs a few seconds once per model, build and machine). A `backend` with
    `repack=False` is only checked, never switched back on.
    """
    config = backend or BackendConfig()
    # read from here, so a generation right after loading has an interval to judge the load by
    cpu = cpu_load() if config.n_threads == 0 else None
    cache = cache_dir or models.default_cache_dir()
    path = models.resolve_model(str(model), cache, progress)
    gguf.check_gguf(path)
    verdict = None
    if probe_backend:
        verdict = choose_backend(path, config, cache.parent, progress)
        config = dataclasses.replace(config, repack=verdict.candidate.repack)
    return Model(LlamaBackend(path, config), str(model), cache.parent, verdict, cpu)


def prompt_tokens(vocab: LlamaVocab, prompt: str | Sequence[dict[str, str]], chat: bool = False) -> list[int]:
    """Tokens for a raw prompt, or for chat messages (a str with chat=True is one user turn)."""
    if isinstance(prompt, str) and not chat:
        return vocab.tokenize(prompt, add_special=True, parse_special=False)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return vocab.chat_prompt(messages)


def has_chat_template(path: Path) -> bool:
    """Whether the GGUF model at `path` carries a chat template (an instruct model); reads
    the vocabulary alone, no weights."""
    vocab = LlamaVocab(path)
    try:
        return bool(vocab.meta("tokenizer.chat_template"))
    finally:
        vocab.close()


def check_prompt_fits(path: Path, prompt: str | Sequence[dict[str, str]], chat: bool, n_ctx: int) -> int:
    """Tokenize with the model's vocabulary alone (no weights loaded) and raise
    GenerationError if the prompt cannot fit a context of `n_ctx` (0 = the model's own).
    Returns the prompt's length in tokens."""
    vocab = LlamaVocab(path)
    try:
        n = len(prompt_tokens(vocab, prompt, chat))
        limit = n_ctx or vocab.n_ctx_train
    finally:
        vocab.close()
    if n == 0:
        raise GenerationError("the prompt is empty")
    if n + 1 > limit:
        raise GenerationError(
            f"the prompt has {n} tokens, more than a context of {limit} allows: "
            "shorten it or raise the context size (n_ctx, --ctx-size)"
        )
    return n


PROBE_CACHE = "probe.json"


def measure_slope(b: LlamaBackend, costs: dict[int, float]) -> dict[int, float]:
    """Extra fraction of t(n) per cached cell, per n: t(n) measured again with SLOPE_DEPTH
    cells in the cache (or half the context), against `costs` (an empty cache). Empty when
    the context is too small to tell; the cache is left empty."""
    depth = min(SLOPE_DEPTH, b.n_ctx // 2)
    sizes = [n for n in SLOPE_SIZES if n in costs and depth + n + 1 < b.n_ctx]
    if depth < 256 or not sizes:
        return {}
    b.reset()
    # any tokens do: attention's cost depends on how many cells there are, not what they hold
    b.prefill(np.arange(depth, dtype=np.int32) % b.n_vocab)
    deep = b.measure_cost(sizes, repeats=3)
    b.reset()
    return {n: max(0.0, deep[n] / costs[n] - 1.0) / depth for n in sizes if n in deep}


def _store_costs(path: Path, key: str, entry: dict[str, dict[int, float]]) -> None:
    """Add `entry` (the cost curve and its context slope) under `key` to the cost cache file,
    atomically."""
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs the measurement next time


def plausible(costs: dict[int, float]) -> bool:
    """False for a cost curve no idle machine measures: a batch much cheaper than one token
    (the one-token decodes were stalled by another process). Such a curve is used for this
    process only, never cached."""
    t1 = costs.get(1)
    if not t1:
        return False
    return all(t >= 0.8 * t1 for n, t in costs.items() if n > 1)


def choose_backend(
    path: Path, config: BackendConfig, cache_root: Path, progress: models.Progress | None = None
) -> probe.Verdict:
    """The backend configuration that runs correctly here (cached verdict, or a probe)."""
    candidates = probe.CANDIDATES if config.repack else (probe.NO_EXTRA_BUFTS,)
    label = "checking which llama.cpp CPU path works here (once per model and machine)"
    if progress is not None:
        progress(label, 0, None)
    verdict = probe.choose(
        path.resolve(),
        threads=config.n_threads or default_threads(),
        cache_file=cache_root / PROBE_CACHE,
        build=build_info(),
        candidates=candidates,
        system_info=system_info(),
    )
    if progress is not None:
        progress(label, 1, 1)
    return verdict

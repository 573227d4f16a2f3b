"""The Python API: load a model by name or path, generate a stream of events or a result.

    import lookahead
    model = lookahead.load()                      # the default model, a name, or a .gguf path
    print(model.generate("def fib(n):", max_tokens=64).text)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

from lookahead.backend import probe
from lookahead.backend.base import Vocabulary
from lookahead.backend.grammar_guard import GrammarParser
from lookahead.backend.llama import BackendConfig, LlamaBackend, LlamaVocab, build_info, default_threads, system_info
from lookahead.backend.slots import LlamaSlots
from lookahead.core.draft_state import DraftConfig, DraftState
from lookahead.core.engine import Done, Event, GenerationConfig, GenerationError, Result, generate, warm
from lookahead.core.multi import Batch, BatchRequest
from lookahead.core.sampling import SamplingConfig
from lookahead.index.base import DraftSource
from lookahead.models import catalog as models
from lookahead.models import gguf
from lookahead.tuning.cpuload import CpuLoad, cpu_load
from lookahead.tuning.machine import MachineTuning

__all__ = ["DraftConfig", "Model", "SamplingConfig", "load"]

def reuses_cache(cache_prompt: bool, draft: DraftConfig) -> bool:
    """Whether a generation reuses (and keeps) cached KV cells: as asked, except in exact
    mode, which starts cold: a cell's K/V depends on the batch it was decoded in (the same
    prompt prefilled in two chunks instead of one moved SmolLM2's next logits by up to 1.0),
    so only a cold start's prefill gives a cold start's output bit for bit."""
    return cache_prompt and not draft.exact


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
        # what this machine's measurements decide (cost curve, threads, exact limits)
        self.tuning = MachineTuning(backend, cache_dir, self.drafting, cpu)
        # grammars from requests, checked in a child process before llama.cpp parses them here
        self.grammars = GrammarParser(backend)

    def new_batch(self, slots: LlamaSlots, draft: DraftConfig, *, govern: bool = True) -> Batch:
        """A batched loop over `slots` for requests drafted by `draft`'s settings: its own
        cost model (the batch's cells are its slots', not this context's: the empty-cache
        curve), the step's node budget (what one request may verify alone, shared by the
        batch), and with `govern` a thread governor of its own (see `MachineTuning.govern_batch`)."""
        cost = self.drafting.cost.spawn(self.drafting.cost.measured, context=False)
        batch = Batch(slots, cost, budget=draft.budget, min_gain=draft.min_gain, slack=draft.fairness_slack)
        if govern:
            self.tuning.govern_batch(batch, slots)
        return batch

    @property
    def vocab(self) -> Vocabulary:
        """The model's tokenizer and file (what the server reads of it, `Vocabulary`)."""
        return self.backend

    @property
    def n_ctx(self) -> int:
        """Tokens the model's one context holds."""
        return self.backend.n_ctx

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
        cache_prompt: bool = True,
        progress: bool = False,
    ) -> Iterator[Event]:
        """Generate, yielding a Step per verify step and a final Done with the Result.

        `sources`: draft sources for this generation only, beside the usual indexes (the
        server's predicted output and its memory of earlier requests). `tokens`: the
        prompt already tokenized (by `prompt_tokens`); `prompt` and `chat` are then unused.
        `cache_prompt`: keep the KV cells of what this prompt shares with the last
        generation's tokens and prefill only the rest (`Result.stats.tokens_cached`); not in
        exact mode, whose promise is a cold start's output bit for bit. `progress`: Progress
        events while the prompt goes in (`lookahead.core.progress`).
        """
        config = GenerationConfig(max_tokens, tuple(stop), sampling or SamplingConfig())
        draft = draft or DraftConfig()
        tokens = list(tokens) if tokens is not None else self.prompt_tokens(prompt, chat)
        hook = self.tuning.prepare(draft)
        # with a governor, a long prefill's count is read again between its chunks
        again = self.tuning.begin if hook is not None else None
        if not draft.enabled:
            return generate(
                self.backend, tokens, config, after_verify=hook, cache_prompt=cache_prompt, progress=progress,
                between_chunks=again,
            )  # fmt: skip
        drafter = self.drafting.drafter(draft, extra=sources)
        policy = self.drafting.policy(draft)
        cap = self.tuning.exact_cap() if draft.exact else None
        cache_prompt = reuses_cache(cache_prompt, draft)
        return generate(
            self.backend, tokens, config, drafter, policy, cap, after_verify=hook, cache_prompt=cache_prompt,
            progress=progress, between_chunks=again,
        )

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
        cache_prompt: bool = True,
        progress: bool = False,
        parent: BatchRequest | None = None,
    ) -> BatchRequest:
        """Queue one generation on `batch` (see `lookahead.core.multi`), with the drafter and
        policy `stream` would build for it alone. `draft.exact`'s batch-size cap is not
        applied: bit-identity is claimed for one request at a time only. `cache_prompt`:
        the request goes to the free slot whose cache shares the longest prefix with its
        prompt, prefills only the rest, and leaves its cells cached when it ends. `parent`:
        a request of the same prompt whose prefilled cells this one copies (`Batch.add`)."""
        config = GenerationConfig(max_tokens, tuple(stop), sampling or SamplingConfig())
        draft = draft or DraftConfig()
        cache_prompt = reuses_cache(cache_prompt, draft)
        if not draft.enabled:
            return batch.add(tokens, config, cache_prompt=cache_prompt, progress=progress, parent=parent)
        if draft.adaptive:
            self.tuning.ensure_calibrated()
        drafter = self.drafting.drafter(draft, extra=sources)
        policy = self.drafting.policy(draft)
        return batch.add(
            tokens, config, drafter, policy, cache_prompt=cache_prompt, progress=progress, parent=parent
        )

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
            self.tuning.ensure_calibrated()
        slots = LlamaSlots(self.backend, parallel)
        try:
            batch = self.new_batch(slots, draft)
            ids = [
                self.add_to(
                    batch, self.prompt_tokens(p, chat), max_tokens=max_tokens, stop=stop, sampling=sampling,
                    draft=draft, cache_prompt=False,
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

    def warm(self, tokens: Sequence[int]) -> Result:
        """Prefill `tokens` into the prompt cache without generating (an editor's `n_predict: 0`
        request; see `lookahead.core.engine.warm`), at the thread count the machine allows now."""
        self.tuning.begin()
        return warm(self.backend, tokens)

    def generate(self, prompt: str | Sequence[dict[str, str]], **kwargs: object) -> Result:
        """Like `stream`, but returns only the final Result (text, tokens, stats)."""
        for event in self.stream(prompt, **kwargs):  # type: ignore[arg-type]
            if isinstance(event, Done):
                return event.result
        raise AssertionError("generation ended without a Done event")

    def close(self) -> None:
        self.grammars.close()
        self.backend.close()


def load(
    model: str | Path = models.DEFAULT_MODEL,
    *,
    cache_dir: Path | None = None,
    backend: BackendConfig | None = None,
    progress: models.Progress | None = None,
    probe_backend: bool = True,
    path: Path | None = None,
) -> Model:
    """Load a model by name (assembling it on first use) or by path to a .gguf file.

    `path`: the file `locate` already found for `model` (it is then neither looked up nor
    checked again). With `probe_backend` (the default), the llama.cpp configuration is the first one that
    ran correctly on this CPU in a child process (see `lookahead.backend.probe`; cached, so
    this costs a few seconds once per model, build and machine). A `backend` with
    `repack=False` is only checked, never switched back on.
    """
    config = backend or BackendConfig()
    # sampled from here on, so a generation right after loading has recent readings to judge the load by
    cpu = cpu_load() if config.n_threads == 0 else None
    cache = cache_dir or models.default_cache_dir()
    if path is None:
        path = locate(model, cache, progress)
    verdict = None
    if probe_backend:
        verdict = choose_backend(path, config, cache.parent, progress)
        config = dataclasses.replace(config, repack=verdict.candidate.repack)
    return Model(LlamaBackend(path, config), str(model), cache.parent, verdict, cpu)


def locate(model: str | Path, cache_dir: Path, progress: models.Progress | None = None) -> Path:
    """The GGUF file of a model name (assembled on first use) or path, its header checked:
    what `load` opens, found before the weights load (a caller can check a prompt first)."""
    path = models.resolve_model(str(model), cache_dir, progress)
    gguf.check_gguf(path)
    return path


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

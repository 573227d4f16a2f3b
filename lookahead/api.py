"""The Python API: load a model by name or path, generate a stream of events or a result.

    import lookahead
    model = lookahead.load()                      # the default model, a name, or a .gguf path
    print(model.generate("def fib(n):", max_tokens=64).text)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lookahead import models
from lookahead.backend.llama import BackendConfig, LlamaBackend
from lookahead.engine import Done, Event, GenerationConfig, Policy, Result, generate
from lookahead.sampling import SamplingConfig


@dataclass(frozen=True)
class DraftConfig:
    """How to guess: which indexes, how big a tree, fixed or adaptive."""

    enabled: bool = True  # False = plain decoding (the baseline)
    k: int = 8  # most draft tokens per branch (tree depth) when not adaptive
    budget: int = 16  # most tree nodes verified per step
    branches: int = 1  # most children per node (1 = a single chain)
    ngram_order: int = 4  # longest context of the n-gram table
    corpora: tuple[Path, ...] = ()  # static corpus folders (besides the stream itself)

    def __post_init__(self) -> None:
        for name in ("k", "budget", "branches", "ngram_order"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class LoadConfig:
    """How to load a model (resolved once, at the edge: CLI, server, bench)."""

    model: str = models.DEFAULT_MODEL  # a known name or a path to a .gguf file
    cache_dir: Path | None = None  # where named models are assembled (None = user cache)
    backend: BackendConfig = field(default_factory=BackendConfig)


class Model:
    """A loaded model with one context; generations run one at a time."""

    def __init__(self, backend: LlamaBackend, name: str) -> None:
        self.backend = backend
        self.name = name

    def prompt_tokens(self, prompt: str | Sequence[dict[str, str]], chat: bool = False) -> list[int]:
        """Tokens for a raw prompt, or for chat messages (a str with chat=True is one user turn)."""
        if isinstance(prompt, str) and not chat:
            return self.backend.tokenize(prompt, add_special=True, parse_special=False)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        return self.backend.chat_prompt(messages)

    def stream(
        self,
        prompt: str | Sequence[dict[str, str]],
        *,
        chat: bool = False,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        sampling: SamplingConfig | None = None,
        draft: DraftConfig | None = None,
    ) -> Iterator[Event]:
        """Generate, yielding a Step per verify step and a final Done with the Result."""
        config = GenerationConfig(max_tokens, tuple(stop), sampling or SamplingConfig())
        draft = draft or DraftConfig()
        tokens = self.prompt_tokens(prompt, chat)
        drafter, policy = self._drafting(draft)
        return generate(self.backend, tokens, config, drafter, policy)

    def generate(self, prompt: str | Sequence[dict[str, str]], **kwargs: object) -> Result:
        """Like `stream`, but returns only the final Result (text, tokens, stats)."""
        for event in self.stream(prompt, **kwargs):  # type: ignore[arg-type]
            if isinstance(event, Done):
                return event.result
        raise AssertionError("generation ended without a Done event")

    def _drafting(self, draft: DraftConfig) -> tuple[object | None, Policy | None]:
        from lookahead.drafting import make_drafter, make_policy

        if not draft.enabled:
            return None, None
        return make_drafter(draft, self), make_policy(draft, self)

    def close(self) -> None:
        self.backend.close()


def load(
    model: str | Path = models.DEFAULT_MODEL,
    *,
    cache_dir: Path | None = None,
    backend: BackendConfig | None = None,
    progress: models.Progress | None = None,
) -> Model:
    """Load a model by name (assembling it on first use) or by path to a .gguf file."""
    cache = cache_dir or models.default_cache_dir()
    path = models.resolve_model(str(model), cache, progress)
    models.check_gguf(path)
    return Model(LlamaBackend(path, backend), str(model))

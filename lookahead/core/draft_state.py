"""Builds the drafter (indexes + proposer) and the policy for one generation.

Kept apart from the engine, so the engine never knows which indexes exist, and apart from
the API, so the bench and the server can build the same pieces. What outlives a request
(the corpus tables, the cost curve, the controllers' calibration) lives in `DraftState`,
one per loaded model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lookahead.core.allocate import DEFAULT_SLACK, check_slack
from lookahead.core.control import ControlConfig, Controller, CostModel, FixedPolicy
from lookahead.core.engine import Policy
from lookahead.core.propose import Proposer
from lookahead.errors import ConfigError
from lookahead.index.base import DraftSource
from lookahead.index.corpus import SHIPPED_CORPORA, CorpusIndex
from lookahead.index.edits import EditSource
from lookahead.index.ngram import NgramIndex
from lookahead.index.records import RecordSource
from lookahead.index.suffix import SuffixIndex
from lookahead.models.catalog import Progress

# Most nodes per verify batch (the context's n_batch is 512); so also the deepest draft, as a
# draft is never deeper than its node count.
MAX_BUDGET = 256
_CONTROL = ControlConfig()  # the controller knobs' defaults


@dataclass(frozen=True)
class DraftConfig:
    """How to guess: which indexes, how big a tree, fixed or adaptive."""

    enabled: bool = True  # False = plain decoding (the baseline)
    adaptive: bool = True  # choose the draft size each step from measured cost and alpha
    k: int = 8  # with adaptive=False: draft tokens per branch (fixed K)
    # k_max, budget, branches, probe_every, min_gain: the adaptive controller's knobs, passed
    # on by control(); `ControlConfig` documents them and holds their defaults. budget and
    # branches bound the fixed-K drafts too.
    k_max: int = _CONTROL.k_max  # with adaptive=True: deepest draft the controller may verify
    budget: int = _CONTROL.budget  # most tree nodes verified per step
    branches: int = _CONTROL.branches  # most children per tree node (1 = a single chain)
    ngram_order: int = 4  # longest context of the n-gram table
    records: bool = True  # draft whole report records, values taken from the prompt's data rows
    edits: bool = True  # copy the prompt through the substitutions the output made (renames)
    shipped_corpora: bool = True  # draft from the corpora/ folder shipped with lookahead
    corpora: tuple[Path, ...] = ()  # more static corpus folders (e.g. the user's repository)
    exact: bool = False  # only verify batch sizes whose logits are bit-identical to plain
    probe_every: int = _CONTROL.probe_every  # probe after this many declined steps; 0 = never
    min_gain: float = _CONTROL.min_gain  # draft only when the expected speedup beats this
    # batched requests (serve --parallel, generate_many): draft only where no request's
    # expected pace drops more than this fraction below its pace without drafts; 0 = not at
    # all (--fair), None = the batch's total tokens/s (--batch-total); see core.allocate
    fairness_slack: float | None = DEFAULT_SLACK
    # Every draft ends at its first line end. For a request that ends at a line end at a step
    # nobody knows in advance (an editor's time budget: past it, the answer ends at the next
    # newline; `lookahead.server.llamacpp.drafting`): what a draft holds past a line end is
    # verified, then cut from the answer whenever that step turns out to be the last.
    to_line_end: bool = False

    def __post_init__(self) -> None:
        check_slack(self.fairness_slack)
        for name in ("k", "k_max", "budget", "branches", "ngram_order"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("k", "k_max", "budget"):
            if getattr(self, name) > MAX_BUDGET:
                raise ConfigError(f"{name} must be <= {MAX_BUDGET}, got {getattr(self, name)}")

    def control(self) -> ControlConfig:
        """The adaptive controller's knobs."""
        return ControlConfig(
            k_max=self.k_max,
            budget=self.budget,
            branches=self.branches,
            probe_every=self.probe_every,
            min_gain=self.min_gain,
        )


# controllers kept per drafting configuration: a service's clients may send any
# (k_max, budget) pair, and each controller holds tables of some megabytes; the least
# recently used is dropped past this (a request that holds it keeps it to its end)
MAX_CONTROLLERS = 16


@dataclass
class DraftState:
    """Per-model drafting state that outlives a request."""

    tokenize: Callable[[str], list[int]]
    tokenizer_id: str
    token_bytes: Callable[[int], bytes]
    corpus_cache: Path
    cost: CostModel = field(default_factory=CostModel)
    controllers: OrderedDict[ControlConfig, Controller] = field(default_factory=OrderedDict)
    corpora: dict[tuple[Path, ...], CorpusIndex | None] = field(default_factory=dict)

    def corpus(self, config: DraftConfig, progress: Progress | None = None) -> CorpusIndex | None:
        paths: tuple[Path, ...] = (
            (SHIPPED_CORPORA,) if config.shipped_corpora and SHIPPED_CORPORA.is_dir() else ()
        )
        paths += tuple(Path(p) for p in config.corpora)
        if not paths:
            return None
        if paths not in self.corpora:
            self.corpora[paths] = CorpusIndex.load_or_build(
                list(paths), self.tokenize, self.tokenizer_id, self.corpus_cache, progress
            )
        return self.corpora[paths]

    def drafter(
        self, config: DraftConfig, progress: Progress | None = None, extra: Sequence[DraftSource] = ()
    ) -> Proposer:
        """Fresh per-request indexes over prompt + output, plus the shared corpus tables
        and the caller's `extra` sources (fresh streams, this request's only)."""
        sources: list[DraftSource] = [SuffixIndex(), NgramIndex(max_order=config.ngram_order)]
        if config.edits:
            sources.append(EditSource(self.token_bytes))
        if config.records:
            sources.append(RecordSource(self.token_bytes, self.tokenize))
        corpus = self.corpus(config, progress)
        if corpus is not None:
            sources.append(corpus.fresh())
        sources.extend(extra)
        return Proposer(sources, ends_line=self.ends_line if config.to_line_end else None)

    def ends_line(self, token: int) -> bool:
        """Whether `token`'s text holds a newline."""
        return b"\n" in self.token_bytes(token)  # the backend keeps each token's bytes

    def policy(self, config: DraftConfig) -> Policy:
        if not config.adaptive:
            budget = min(config.budget, config.k * config.branches)
            return FixedPolicy(config.k, budget=budget, branches=config.branches)
        ctl = config.control()
        if ctl not in self.controllers:
            self.controllers[ctl] = Controller(ctl, self.cost)
            while len(self.controllers) > MAX_CONTROLLERS:
                self.controllers.popitem(last=False)
        self.controllers.move_to_end(ctl)
        return self.controllers[ctl]

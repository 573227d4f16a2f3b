"""Builds the drafter (indexes + proposer) and the policy for one generation from a DraftConfig.

Kept apart from the engine so the engine never knows which indexes exist, and apart from
the API so the bench and the server can build the same pieces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookahead.engine import FixedPolicy, Policy
from lookahead.index.ngram import NgramIndex
from lookahead.index.suffix import SuffixIndex
from lookahead.propose import Proposer

if TYPE_CHECKING:
    from lookahead.api import DraftConfig, Model


def make_drafter(config: DraftConfig, model: Model) -> Proposer:
    """Fresh per-request indexes over prompt + output (the suffix index ranks first)."""
    sources = [SuffixIndex(), NgramIndex(max_order=config.ngram_order)]
    return Proposer(sources)


def make_policy(config: DraftConfig, model: Model) -> Policy:
    return FixedPolicy(config.k, budget=max(config.budget, 1), branches=config.branches)

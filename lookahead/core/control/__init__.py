"""Adaptive K: how many draft nodes to verify each step, from measured cost and acceptance.

A step verifies the root plus the first n nodes of the best-first draft in one batch of
n + 1 tokens, costing t(n + 1) seconds, and yields the accepted path plus one bonus token.
A node is accepted only if its whole path is, so with calibrated conditional estimates q'
its acceptance probability is P'(i) = product of q' from the root down to i, and the
expected tokens of the step are 1 + sum_{i<n} P'(i) (expectation is additive over nodes,
so this holds for trees as well as chains). The controller picks

    n* = argmax_n (1 + sum_{i<n} P'(i)) / t(n + 1),      n = 0 being plain decoding,

and drafts only when that beats plain decoding, 1 / t(1), by `min_gain`.

One job per module:

    cost.py        CostModel        measures t(size) on this machine (calibrated, then learned)
    acceptance.py  AcceptanceStats  learns how far the sources' own q can be trusted
    shadow.py      ShadowScorer     turns the drafts that were declined into free trials
    controller.py  Controller       decides n each step from the three above
    config.py      ControlConfig    the controller's knobs and defaults
    fixed.py       FixedPolicy      the non-adaptive alternative (verify what was drafted),
                   ForcedPolicy     and its base for any policy whose choice is final
    simulate.py    simulate         replays a recorded trace with no model (tests, tuning)
"""

from lookahead.core.control.acceptance import N_BINS, Q_EDGES, AcceptanceStats
from lookahead.core.control.config import ControlConfig
from lookahead.core.control.controller import Choice, Controller, path_probs
from lookahead.core.control.cost import DEFAULT_SHAPE, DEFAULT_T1, CostModel
from lookahead.core.control.fixed import FixedPolicy, ForcedPolicy
from lookahead.core.control.shadow import MAX_PENDING, ShadowScorer, Trials
from lookahead.core.control.simulate import SimResult, simulate

__all__ = [
    "DEFAULT_SHAPE",
    "DEFAULT_T1",
    "MAX_PENDING",
    "N_BINS",
    "Q_EDGES",
    "AcceptanceStats",
    "Choice",
    "ControlConfig",
    "Controller",
    "CostModel",
    "FixedPolicy",
    "ForcedPolicy",
    "ShadowScorer",
    "SimResult",
    "Trials",
    "path_probs",
    "simulate",
]

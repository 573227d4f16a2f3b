"""`ControlConfig`: the adaptive controller's knobs and their defaults, in one place."""

from __future__ import annotations

from dataclasses import dataclass

from lookahead.errors import ConfigError


@dataclass(frozen=True)
class ControlConfig:
    """Knobs of the adaptive-K controller, with the defaults production runs. Built once at
    the edge (CLI, server, bench), through `DraftConfig.control()`."""

    # Deepest node a verified prefix may contain (the longest chain, K).
    k_max: int = 64
    # Most draft nodes verified in one step; the batch is budget + 1 tokens.
    budget: int = 64
    # Most children per node the proposer may build (1 = a single chain). Passed through
    # to the drafter; choose() takes whatever tree it gets.
    branches: int = 2
    # Draft only when a step's expected tokens/s beats plain decoding by this factor. Covers
    # what t(n) leaves out (building the tree and the batch, KV bookkeeping: a few % of a
    # ~20 ms step), the optimism of taking the best of many noisy estimates, and that early
    # in a request the acceptance estimates are still the indexes' own (optimistic) ones,
    # while a failed draft costs 2.4+ one-token steps on a 2-core CPU (the measurement
    # that chose 1.15 is in bench/README.md, "Measurements behind defaults").
    min_gain: float = 1.15
    # While not drafting, verify a small probe after this many declined steps that taught
    # nothing (no bonus token given to observe); 0 = never probe. Off by default: every
    # declined draft is scored for free against the tokens the model then writes, which
    # teaches as much as a probe, and on a CPU where a batch of 2 costs ~2.4 one-token
    # steps a failed probe is expensive. Worth it for a caller that passes no bonus token.
    probe_every: int = 0
    # Nodes in a probe; doubled (up to `budget`) after a probe accepted in full, so a turn
    # to copyable text is confirmed in a few steps.
    probe_nodes: int = 2
    # Steps in the rolling alpha; its EMA uses the matching rate 2 / (window + 1).
    window: int = 32
    # Trials: each (source, depth, q bin) calibration cell weighs its own trials with an
    # exponential window about this long. Longer is steadier; a change test (see
    # `AcceptanceStats.record_trials`) drops the history when the text changes regime.
    calib_window: float = 30.0
    # Steps: all acceptance evidence halves in this time, so a cell that stops being
    # tried drifts back to trusting the source's own q.
    half_life: float = 32.0
    # Strength, in trials, of the Beta prior centred on each node's raw q: with no evidence
    # q' = q, and evidence takes over after a few trials.
    prior_trials: float = 2.0
    # Strength, in trials kept at their promise, of the source-level trust's prior of 1
    # (see `AcceptanceStats.calibrated`).
    source_prior_trials: float = 4.0

    def __post_init__(self) -> None:
        if min(self.k_max, self.branches, self.window, self.probe_nodes) < 1 or self.budget < 0:
            raise ConfigError("k_max, branches, window, probe_nodes must be >= 1, budget >= 0")
        if self.min_gain <= 0 or self.calib_window < 1 or self.half_life <= 0:
            raise ConfigError("min_gain and half_life must be > 0, calib_window >= 1")
        if self.probe_every < 0 or self.prior_trials <= 0:
            raise ConfigError("probe_every must be >= 0, prior_trials > 0")

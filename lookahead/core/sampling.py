"""Turning one row of logits into one token, the way plain decoding would.

The order follows llama.cpp's default sampler chain: logit bias -> repeat penalty -> top-k -> top-p ->
min-p (on the untempered distribution) -> temperature -> draw. A draw consumes exactly one
uniform number, so with the same seed the n-th generated token uses the n-th number whether
or not drafts were verified: speculative output then equals plain output token for token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lookahead.errors import ConfigError

GREEDY_BELOW = 1e-5  # temperatures below this sample as greedy (argmax)


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 (or below GREEDY_BELOW) = greedy (argmax); > 0 = sample
    top_k: int = 40  # keep the k most likely tokens (0 = all)
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p, in (0, 1]
    min_p: float = 0.0  # drop tokens below min_p * (probability of the best token)
    repeat_penalty: float = 1.0  # > 1 discourages tokens seen in the last repeat_last_n
    repeat_last_n: int = 64  # how far back the repeat penalty looks
    seed: int | None = None  # None = fresh entropy
    # (token, bias) added to that token's logit before anything else (-inf bans it), as
    # llama.cpp's logit_bias; a token listed twice gets both. Part of the target
    # distribution: drafts are verified against the biased logits, so output stays exact.
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < math.inf:
            raise ConfigError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise ConfigError(f"min_p must be in [0, 1], got {self.min_p}")
        if not 0 < self.repeat_penalty < math.inf:
            raise ConfigError(f"repeat_penalty must be a finite number > 0, got {self.repeat_penalty}")
        if self.repeat_last_n < 0:
            raise ConfigError(f"repeat_last_n must be >= 0, got {self.repeat_last_n}")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ConfigError(f"seed must be in [0, 2**64), got {self.seed}")
        if any(tok < 0 or math.isnan(bias) or bias == math.inf for tok, bias in self.logit_bias):
            raise ConfigError("logit_bias needs token ids >= 0 and biases that are numbers or -inf")

    @property
    def greedy(self) -> bool:
        # a tiny temperature is greedy: dividing logits by 1e-310 overflows to inf and the
        # draw would then pick nonsense, where the intent (and the limit) is the argmax
        return self.temperature < GREEDY_BELOW


def penalize(logits: npt.NDArray[np.float32], recent: Sequence[int], penalty: float) -> npt.NDArray[np.float32]:
    """llama.cpp's repeat penalty on a copy: positive logits divided, negative multiplied."""
    out = np.array(logits, dtype=np.float32, copy=True)
    if penalty == 1.0 or not len(recent):
        return out
    ids = np.unique(np.asarray(recent, dtype=np.int64))
    vals = out[ids]
    out[ids] = np.where(vals > 0, vals / penalty, vals * penalty)
    return out


def bias_logits(logits: npt.NDArray[np.float32], bias: Sequence[tuple[int, float]]) -> npt.NDArray[np.float32]:
    """`logits` with each (token, bias) added, on a copy; ids past the row are skipped."""
    out = np.array(logits, dtype=np.float32, copy=True)
    for tok, b in bias:
        if tok < len(out):
            out[tok] += np.float32(b)
    return out


class Sampler:
    """Picks tokens from logits rows: greedy or seeded sampling, one uniform per token."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self._rng = np.random.default_rng(config.seed)

    def pick(self, logits: npt.NDArray[np.float32], history: Sequence[int]) -> int:
        """The next token after `history` (all tokens so far, prompt included)."""
        cfg = self.config
        if cfg.logit_bias:
            logits = bias_logits(logits, cfg.logit_bias)
        if cfg.repeat_penalty != 1.0:
            recent = history[-cfg.repeat_last_n :] if cfg.repeat_last_n > 0 else ()
            logits = penalize(logits, recent, cfg.repeat_penalty)
        if cfg.greedy:
            return int(np.argmax(logits))
        return self._draw(logits, float(self._rng.random()))

    def _draw(self, logits: npt.NDArray[np.float32], u: float) -> int:
        cfg = self.config
        n = len(logits)
        idx = np.argpartition(-logits, cfg.top_k - 1)[:cfg.top_k] if 0 < cfg.top_k < n else np.arange(n)
        vals = logits[idx].astype(np.float64)
        # most likely first; ties broken by token id so the order never depends on
        # argpartition's internal layout
        order = np.lexsort((idx, -vals))
        idx, vals = idx[order], vals[order]
        probs = np.exp(vals - vals[0])
        probs /= probs.sum()
        keep = len(probs)
        if cfg.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), cfg.top_p)) + 1)
        if cfg.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(probs >= cfg.min_p * probs[0]))))
        vals = vals[:keep] / cfg.temperature
        probs = np.exp(vals - vals[0])
        cdf = np.cumsum(probs)
        j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        return int(idx[min(j, keep - 1)])

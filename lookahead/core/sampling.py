"""Turning one row of logits into one token, the way plain decoding would.

The order follows llama.cpp's default sampler chain: logit bias -> repeat penalty -> (a grammar's
mask, `constraint.py`) -> top-k -> top-p -> min-p (on the untempered distribution) ->
temperature -> draw. A draw consumes exactly one uniform number, so with the same seed the
n-th generated token uses the n-th number whether or not drafts were verified: speculative
output then equals plain output token for token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lookahead.core.constraint import ConstraintFactory, TokenConstraint, restrict
from lookahead.core.infill import InfillVocab, infill_keep
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
    # record, for each token picked, the n most likely tokens and their log-probabilities
    # (llama.cpp's n_probs): of the model's own distribution, or with post_sampling_probs
    # of the distribution the token was drawn from (after bias, penalty, top-k/p, min-p, temperature)
    n_probs: int = 0
    post_sampling_probs: bool = False
    # makes a fresh state of a rule on the next token (a grammar) for each generation: the
    # target distribution is the model's masked to what the rule allows (`constraint.py`)
    constraint: ConstraintFactory | None = None
    # llama.cpp's `infill` sampler after top-k/top-p when sampling (`infill.py`): editors'
    # fill-in-the-middle requests list it; None: not in the chain
    infill: InfillVocab | None = None

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
        if self.n_probs < 0:
            raise ConfigError(f"n_probs must be >= 0, got {self.n_probs}")
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
    """`logits` with each (token, bias) added, on a copy; ids past the row are skipped
    (a token listed twice gets both biases, in one vectorised add)."""
    out = np.array(logits, dtype=np.float32, copy=True)
    ids = np.fromiter((t for t, _ in bias), dtype=np.int64, count=len(bias))
    values = np.fromiter((b for _, b in bias), dtype=np.float32, count=len(bias))
    inside = ids < len(out)
    np.add.at(out, ids[inside], values[inside])
    return out


@dataclass(frozen=True)
class TokenProbs:
    """One picked token's probability and the most likely candidates beside it, most likely
    first: log-probabilities of the model's distribution, or (`post`) probabilities of the
    distribution the token was drawn from."""

    token: int
    value: float  # the picked token's logprob (or prob, when post)
    top: tuple[tuple[int, float], ...]  # (token, logprob or prob)
    post: bool = False


def top_logprobs(logits: npt.NDArray[np.float32], n: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Log-softmax of a row, and the ids of its n largest entries, most likely first."""
    row = logits.astype(np.float64)
    finite = row[np.isfinite(row)]
    peak = finite.max() if len(finite) else 0.0
    logp = row - peak - math.log(np.exp(row - peak).sum())
    n = min(n, len(row))
    ids = np.argpartition(-logp, n - 1)[:n]
    ids = ids[np.isfinite(logp[ids])]  # a token that cannot be drawn is no candidate (nor valid JSON)
    return logp, ids[np.lexsort((ids, -logp[ids]))]


class Sampler:
    """Picks tokens from logits rows: greedy or seeded sampling, one uniform per token.
    With `n_probs`, each pick's probabilities are kept in `probs` (the caller takes them)."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        self.probs: list[TokenProbs] = []
        self._post: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None
        # every pick is kept (acceptance walks one path), so one state advanced per pick
        self.constraint: TokenConstraint | None = config.constraint() if config.constraint else None

    def take_probs(self) -> list[TokenProbs]:
        """The probabilities of the picks since the last call, in pick order."""
        out, self.probs = self.probs, []
        return out

    def pick(self, logits: npt.NDArray[np.float32], history: Sequence[int]) -> int:
        """The next token after `history` (all tokens so far, prompt included); the
        constraint, if any, moves past it (the caller keeps every token picked)."""
        token = self._pick(logits, history)
        if self.constraint is not None:
            self.constraint.accept(token)
        if self.config.n_probs > 0:
            self.probs.append(self._probs_of(logits, token))
        return token

    def _probs_of(self, logits: npt.NDArray[np.float32], token: int) -> TokenProbs:
        n = self.config.n_probs
        if self.config.post_sampling_probs:
            ids, probs = self._post if self._post is not None else (np.array([token]), np.array([1.0]))
            chosen = float(probs[ids == token][0]) if np.any(ids == token) else 0.0
            top = tuple((int(i), float(p)) for i, p in zip(ids[:n], probs[:n], strict=True) if p > 0)
            return TokenProbs(token, chosen, top, post=True)
        logp, ids = top_logprobs(logits, n)
        return TokenProbs(token, float(logp[token]), tuple((int(i), float(logp[i])) for i in ids))

    def _pick(self, logits: npt.NDArray[np.float32], history: Sequence[int]) -> int:
        cfg = self.config
        self._post = None
        if cfg.logit_bias:
            logits = bias_logits(logits, cfg.logit_bias)
        if cfg.repeat_penalty != 1.0:
            recent = history[-cfg.repeat_last_n :] if cfg.repeat_last_n > 0 else ()
            logits = penalize(logits, recent, cfg.repeat_penalty)
        if self.constraint is not None:
            # greedy needs only the best allowed token; sampling the top_k best allowed
            logits = restrict(logits, self.constraint, 1 if cfg.greedy else cfg.top_k)
        if cfg.greedy:
            return int(np.argmax(logits))
        return self._draw(logits, float(self._rng.random()))

    def _draw(self, logits: npt.NDArray[np.float32], u: float) -> int:
        cfg = self.config
        n = len(logits)
        k = cfg.top_k if 0 < cfg.top_k < n else n
        if k > WIDE and not (cfg.n_probs > 0 and cfg.post_sampling_probs) and cfg.infill is None:
            return draw_wide(logits, u, cfg.temperature, cfg.top_p, cfg.min_p)
        idx = top_k_ids(logits, k) if k < n else np.arange(n)
        vals = logits[idx].astype(np.float64)
        # most likely first; ties broken by token id
        order = np.lexsort((idx, -vals))
        idx, vals = idx[order], vals[order]
        probs = np.exp(vals - vals[0])
        probs /= probs.sum()
        keep = len(probs)
        if cfg.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), cfg.top_p)) + 1)
        if cfg.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(probs >= cfg.min_p * probs[0]))))
        idx, vals = idx[:keep], vals[:keep]
        if cfg.infill is not None:  # llama.cpp's chain: top-k, top-p, then infill
            idx, vals = infill_keep(idx, vals, cfg.infill)
            keep = len(idx)
        vals = vals / cfg.temperature
        probs = np.exp(vals - vals[0])
        cdf = np.cumsum(probs)
        if cfg.n_probs > 0 and cfg.post_sampling_probs:
            self._post = (idx, probs / cdf[-1])
        j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        return int(idx[min(j, keep - 1)])


# top_k's candidates are looked for among the tokens within these many logits of the best one
# (on Qwen2.5-Coder's code rows, within 10: a median of ~40, within 20: a few thousand)
TOP_K_GAPS = (10.0, 20.0)


def top_k_ids(logits: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.int64]:
    """The ids of the k largest logits, most likely first, ties by id: the first k of the
    full sort by (-logit, id). Found among the tokens within a gap of the best one (the
    narrowest of TOP_K_GAPS that holds k tokens, else the whole row): once k tokens are
    there, the k-th largest value is too, and so is every token tied with it. Partitioning
    the whole 152k row cost 1.5-3.5 ms per sampled token on a busy 2-vCPU machine, the few
    thousand candidates near the top about a tenth of it."""
    peak = float(np.max(logits))
    for gap in TOP_K_GAPS:
        sel = np.flatnonzero(logits >= peak - gap)
        if len(sel) >= k:
            break
    else:  # the whole row (made only here: 152k ids cost half of a usual call)
        sel = np.arange(len(logits))
    if len(sel) > k:
        vals = logits[sel]
        edge = np.partition(vals, len(sel) - k)[len(sel) - k]  # the k-th largest
        sel = sel[vals >= edge]  # with every token tied with it
    order = np.lexsort((sel, -logits[sel].astype(np.float64)))[:k]
    return sel[order].astype(np.int64)


# Above this many candidates (top_k 0, OpenAI's default, on a 152k vocabulary), `draw_wide`
# sorts only as much of the row as the draw reaches: sorting the whole row cost 10-30 ms per
# token on a 2-vCPU machine, as much as a forward pass of a 0.5B model.
WIDE = 4096
FIRST = 64  # the first prefix sorted; each further round takes 8 times more


def draw_wide(logits: npt.NDArray[np.float32], u: float, temperature: float, top_p: float, min_p: float) -> int:
    """The token `Sampler` draws with `u` from all of `logits` (no top-k), sorting a prefix.

    The same rule as the full sort: candidates most likely first (ties by id), top-p's
    smallest prefix reaching `top_p` of the mass, min-p's cut, temperature, then the token
    where the cumulative tempered mass passes `u` times the total. Only the most likely m
    tokens are sorted (every token tied with the m-th included, so the sorted prefix is the
    full sort's), m growing 8-fold until the prefix holds top-p's cut and the draw's point;
    the tempered total comes from the whole row. A distribution's mass sits in its head, so
    the first prefix nearly always suffices."""
    n = len(logits)
    row = logits.astype(np.float64)
    peak = float(row.max())
    weight = np.exp(row - peak)  # untempered, the best token's = 1
    total = float(weight.sum())
    keep_min = max(1, int(np.count_nonzero(weight >= min_p))) if min_p > 0.0 else n
    tempered_total: float | None = None
    m = FIRST
    while True:
        if m >= n:
            sel = np.arange(n)
        else:
            edge = np.partition(row, n - m)[n - m]  # the m-th largest value
            sel = np.flatnonzero(row >= edge)
        vals = row[sel]
        order = np.lexsort((sel, -vals))
        sel, vals = sel[order], vals[order]
        whole = len(sel) == n
        # keep: how many of the most likely tokens are kept; known: whether that is final
        keep, known = min(keep_min, len(sel)), keep_min <= len(sel) or whole
        if top_p < 1.0:
            cut = int(np.searchsorted(np.cumsum(weight[sel]) / total, top_p))
            if cut < len(sel) or whole:
                keep, known = min(keep, cut + 1), True
            elif not known:
                m *= 8  # top-p's cut lies past this prefix
                continue
        tempered = np.exp(vals[:keep] / temperature - vals[0] / temperature)
        cdf = np.cumsum(tempered)
        if known:
            point = u * cdf[-1]
        else:
            # no top-p, and min-p keeps more than this prefix: the point comes from the
            # kept tokens' whole tempered mass, and lies in the prefix or past it
            if tempered_total is None:
                t = np.exp(row / temperature - peak / temperature)
                tempered_total = float((t[weight >= min_p] if min_p > 0.0 else t).sum())
            point = u * tempered_total
            if point >= cdf[-1]:
                m *= 8
                continue
        j = int(np.searchsorted(cdf, point, side="right"))
        return int(sel[min(j, keep - 1)])

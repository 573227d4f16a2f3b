"""Exact mode's limits on this machine: the largest verify batches whose logits are
bit-identical to one-token decoding, below and above EXACT_SPLIT cells in the cache (a
self-test, run once per loaded model; see `lookahead.core.exactness`)."""

from __future__ import annotations

from collections.abc import Callable

from lookahead.backend.llama import LlamaBackend
from lookahead.core.engine import GenerationError
from lookahead.core.exactness import exact_batch_limit

# llama.cpp pads the attention window to 256 cells with flash attention; past 256 cells in
# use, one-token decoding switches to a split-KV kernel that no batch of 2+ tokens uses, so
# the bit-exact batch sizes differ below and above this many cells (bench/README.md has
# what was measured).
EXACT_SPLIT = 256
# The self-test runs batches above EXACT_SPLIT cells: a smaller context cannot hold it
# (checked before loading, with this number in the message).
EXACT_MIN_CTX = EXACT_SPLIT + 32

# Text for the self-test: ordinary code, long enough for 64-token batches.
_SELFTEST_TEXT = (
    "def mean(values):\n    total = 0.0\n    for v in values:\n        total += v\n"
    "    return total / len(values)\n\n\nclass Point:\n    def __init__(self, x, y):\n"
    "        self.x = x\n        self.y = y\n\n    def norm(self):\n"
    "        return (self.x ** 2 + self.y ** 2) ** 0.5\n"
)


def measure_exact_limits(backend: LlamaBackend) -> tuple[int, int]:
    """(below, above) EXACT_SPLIT cells: the largest bit-identical verify batch sizes."""
    if backend.n_ctx < EXACT_MIN_CTX:
        raise GenerationError(
            f"exact mode's self-test needs a context of at least {EXACT_MIN_CTX} tokens, "
            f"this one has {backend.n_ctx}: raise n_ctx (--ctx-size)"
        )
    toks = backend.tokenize(_SELFTEST_TEXT)
    short = exact_batch_limit(backend, toks, max_size=32)
    long = exact_batch_limit(backend, toks, max_size=8, context=EXACT_SPLIT + 16)
    return short, long


def node_cap(limits: tuple[int, int]) -> Callable[[int], int]:
    """Draft nodes allowed per step in exact mode, given the cells in use."""
    short, long = limits

    def cap(used: int) -> int:
        return short - 1 if used + short <= EXACT_SPLIT else long - 1

    return cap

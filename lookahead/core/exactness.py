"""Exact mode's self-test: which verify batch sizes give logits bit-identical to
one-token decoding, on any Verifier (llama.cpp's kernels switch with the batch size and
the cache size, so the answer is per model, build and CPU)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lookahead.backend.base import Verifier
from lookahead.core.draft import Draft
from lookahead.errors import BackendError


def exact_batch_limit(verifier: Verifier, tokens: Sequence[int], max_size: int = 64, context: int = 0) -> int:
    """Largest n such that verifying batches of 1..n tokens gives logits bit-identical to
    one-token decoding (self-test on `tokens`), with `context` cells already in the cache.

    Kernels switch with batch size, so sizes are tried upward and the first mismatch
    ends the search. Leaves the cache empty.
    """
    toks = [int(t) for t in tokens]
    if len(toks) < 2:
        raise BackendError("the exactness self-test needs at least 2 tokens")
    filler = (toks * (context // len(toks) + 1))[:context]
    toks = toks[: max_size + 1]
    max_size = min(max_size, len(toks) - 1, verifier.n_batch, verifier.n_ctx - context - 2)
    verifier.reset()
    verifier.prefill(np.asarray(filler + toks[:1], dtype=np.int32))
    start = verifier.n_past
    ref = []
    for t in toks[1 : max_size + 1]:  # one token at a time: the reference rows
        ref.append(verifier.verify(t, Draft.empty())[0].copy())
        verifier.commit(Draft.empty(), [])
    limit = 1
    for n in range(2, max_size + 1):
        verifier.truncate(start)
        rows = verifier.verify(toks[1], Draft.chain(toks[2 : n + 1]))
        if not all(np.array_equal(rows[i], ref[i]) for i in range(n)):
            break
        limit = n
    verifier.reset()
    return limit

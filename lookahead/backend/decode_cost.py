"""Timing one decode of n tokens, per n: the verify cost curve t(n) the controller plans with.

Pure numpy over a batch and two callbacks (decode the batch's first n entries, free what
was decoded), so `LlamaBackend.measure_cost` stays a thin call and this is tested alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from lookahead.backend.kv_cache import BatchArrays


def measure(
    batch: BatchArrays,
    decode: Callable[[int], None],
    undo: Callable[[], None],
    start: int,
    n_vocab: int,
    sizes: Sequence[int],
    repeats: int,
) -> dict[int, float]:
    """Seconds for one decode of n chained tokens at position `start`, per n in `sizes`
    (the fastest of `repeats` rounds); `undo()` frees the cells each decode added.

    Rounds visit every size once, in a shuffled order (fixed seed), and the first round
    only warms caches: a machine that slows down or speeds up during the measurement
    (another process, frequency scaling) then moves every size alike, instead of
    making the sizes measured last look dearer than the rest. The fastest round, not the
    median: other processes only ever add time, and small decodes suffer most (a stalled
    thread holds every step at llama.cpp's barrier), so a median taken in a noisy minute
    made t(1) 35% dearer and the whole curve look flatter than it is. The curve is the
    idle machine's; the controller's scale follows how fast it runs from step to step.
    """
    b = batch
    todo = [int(n) for n in sizes]
    times: dict[int, list[float]] = {n: [] for n in todo}
    rng = np.random.default_rng(0)
    for rnd in range(repeats + 1):
        for n in rng.permutation(todo).tolist():
            b.token[:n] = np.arange(n, dtype=np.int32) % n_vocab
            b.pos[:n] = np.arange(start, start + n, dtype=np.int32)
            b.n_seq_id[:n] = 1
            b.seq[:n, 0] = 0
            b.logits[:n] = 1
            t0 = time.perf_counter()
            decode(n)
            seconds = time.perf_counter() - t0
            undo()
            if rnd:
                times[n].append(seconds)
    return {n: float(np.min(times[n])) for n in todo}

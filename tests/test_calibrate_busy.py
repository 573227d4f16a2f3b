"""A cost curve measured while another process used the CPUs is used, never cached."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lookahead.tuning.calibrate import BUSY_CPUS, COST_CACHE, calibrated_costs
from lookahead.tuning.cpuload import Reading, others_meter


class FakeBackend:
    """What calibration reads of a backend: a curve t(n) = 20 ms + 15 ms per extra token,
    dearer by 0.02% per cached cell."""

    n_ctx = 4096
    n_vocab = 1000
    n_threads = 2
    config = SimpleNamespace(repack=True)

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cells = 0
        self.measured = 0

    def reset(self) -> None:
        self.cells = 0

    def prefill(self, tokens: np.ndarray) -> None:
        self.cells += len(tokens)

    def measure_cost(self, sizes, repeats: int = 2) -> dict[int, float]:
        self.measured += 1
        return {n: (0.02 + 0.015 * (n - 1)) * (1 + 2e-4 * self.cells) for n in sizes}


@pytest.fixture
def backend(tmp_path: Path) -> FakeBackend:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return FakeBackend(model)


def meter(value: float | None):
    return lambda: (lambda: value)


@pytest.mark.parametrize("others", [0.0, BUSY_CPUS / 2, None])
def test_a_curve_measured_on_a_quiet_machine_is_cached(tmp_path: Path, backend: FakeBackend, others) -> None:
    costs, slope = calibrated_costs(backend, tmp_path, others=meter(others))
    assert costs[1] == pytest.approx(0.02) and slope[1] == pytest.approx(2e-4)
    assert json.loads((tmp_path / COST_CACHE).read_text())
    again, _ = calibrated_costs(backend, tmp_path, others=meter(others))
    assert again == costs and backend.measured == 2  # the curve and its slope, read back after


def test_a_curve_measured_beside_a_busy_process_is_used_but_not_cached(tmp_path: Path, backend: FakeBackend) -> None:
    costs, slope = calibrated_costs(backend, tmp_path, others=meter(1.0))
    assert costs[1] == pytest.approx(0.02) and slope  # this process uses what it measured
    assert not (tmp_path / COST_CACHE).exists()
    calibrated_costs(backend, tmp_path, others=meter(0.0))  # the next process measures again
    assert backend.measured == 4 and (tmp_path / COST_CACHE).exists()


def test_others_meter_counts_other_processes_only() -> None:
    readings = iter(
        [
            Reading(busy=100.0, own=10.0, wall=0.0),
            Reading(busy=101.2, own=11.0, wall=1.0),  # 1.2 CPU-s busy, 1.0 ours
            Reading(busy=103.0, own=11.2, wall=2.0),  # since the start: 3.0 busy, 1.2 ours
        ]
    )
    since = others_meter(lambda: next(readings))
    assert since() == pytest.approx(0.2)
    assert since() == pytest.approx(0.9)
    assert others_meter(lambda: None)() is None  # unreadable counters: unknown


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_others_meter_reads_this_machine() -> None:
    since = others_meter()
    time.sleep(0.05)
    value = since()
    assert value is not None and 0 <= value <= len(os.sched_getaffinity(0)) + 0.5

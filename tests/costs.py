"""Verify cost curves in tests: where a test's outcome must not follow what this machine's
cost curve is, or what else was busy while it was measured."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest


def calibrate_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibration measures as if no other process were busy (a curve measured beside a busy
    one is not kept: test_calibrate_busy.py), so a test of the cache does not depend on
    what else the machine runs."""
    from lookahead.tuning import calibrate, machine

    def quiet() -> object:
        return lambda: 0.0

    monkeypatch.setattr(machine, "calibrated_costs", lambda b, root: calibrate.calibrated_costs(b, root, quiet))


def use_curve(monkeypatch: pytest.MonkeyPatch, costs: Mapping[int, float]) -> None:
    """Calibration gives `costs` (seconds by batch size, no context slope) without measuring."""
    from lookahead.tuning import machine

    monkeypatch.setattr(machine, "calibrated_costs", lambda b, root: (dict(costs), {}))


@contextmanager
def frozen_costs() -> Iterator[None]:
    """The controller keeps the curve it starts with: it does not learn this machine's verify
    times as it runs (on a 2-vCPU AMD EPYC, SmolLM2 at one thread took 2.5 one-token steps
    for a batch of 2, and a curve learned from that rightly drafts nothing)."""
    from lookahead.core.control import CostModel

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CostModel, "observe", lambda self, size, seconds: None)
        yield

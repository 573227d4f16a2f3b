"""bench/clock.py: the replay's clock checked against real runs, step by step."""

from __future__ import annotations

import pytest

from bench.clock import compare, modeled_seconds


def run(method: str, k_trace: list[int], accepted: list[int], decode_s: float) -> dict[str, object]:
    return {
        "task": "code_edit/x", "method": method, "k_trace": k_trace, "step_accepted": accepted,
        "step_verify_s": [decode_s / len(k_trace)] * len(k_trace), "decode_s": decode_s,
    }  # fmt: skip


def test_each_step_is_priced_at_the_cells_of_its_time() -> None:
    seen: list[tuple[int, int]] = []

    def cost(n: int, cells: int) -> float:
        seen.append((n, cells))
        return 1.0

    r = run("adaptive", [0, 4, 2], [0, 4, 1], 3.0)
    assert modeled_seconds(r, 10, cost) == 3.0
    assert seen == [(1, 11), (5, 16), (3, 19)]


def test_speedups_real_and_modeled() -> None:
    cal = {1: 0.01, 8: 0.04}
    runs = [run("plain", [0] * 8, [0] * 8, 0.1), run("adaptive", [7], [7], 0.05)]
    (row,) = compare(runs, {"code_edit/x": 100}, cal, {1: 1e-3, 8: 0.0})
    assert row["real"] == pytest.approx(2.0)
    assert row["flat"] == pytest.approx(8 * 0.01 / 0.04)
    # deep in the cache one-token steps cost more, the batch of 8 does not: drafting gains
    assert row["deep"] > row["flat"]

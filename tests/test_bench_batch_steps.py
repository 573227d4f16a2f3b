"""The step-timing bench's bookkeeping, with no model: who is charged which step's seconds,
and the pace ratios against the plain mode."""

from __future__ import annotations

from typing import Any

import pytest

from bench.batch_steps import KINDS, charge, rounds, summarize


def test_a_request_is_charged_the_decodes_of_every_step_it_took_part_in() -> None:
    steps = [
        {"prefill_s": 0.5, "verify_s": 0.0, "verified": [], "prefilled": [0]},  # 0 joins
        {"prefill_s": 0.5, "verify_s": 0.1, "verified": [0], "prefilled": [1]},  # 1 joins: 0 waits
        {"prefill_s": 0.0, "verify_s": 0.2, "verified": [0, 1], "prefilled": []},
        {"prefill_s": 0.0, "verify_s": 0.1, "verified": [1], "prefilled": []},  # 0 has left
    ]
    charged = charge(steps)
    assert charged[0] == pytest.approx(0.5 + 0.6 + 0.2)
    assert charged[1] == pytest.approx(0.6 + 0.2 + 0.1)


def run(paces: list[tuple[str, int, float]], step_s: float) -> dict[str, Any]:
    requests = [{"kind": k, "tokens": n, "charged_s": s} for k, n, s in paces]
    return {"requests": requests, "steps": 3, "verify_s": step_s / 2, "prefill_s": step_s / 4, "step_s": step_s,
            "tokens": sum(n for _, n, _ in paces)}  # fmt: skip


def test_paces_are_compared_request_by_request_with_the_plain_run() -> None:
    runs = {
        "plain": [run([("prose", 10, 1.0), ("code_edit", 10, 1.0)], 2.0)],
        "batch-total": [run([("prose", 10, 2.0), ("code_edit", 10, 0.25)], 2.0)],
    }
    s = summarize(runs)
    assert s["plain"]["pace_vs_plain"] == {"code_edit": 1.0, "prose": 1.0}
    assert s["batch-total"]["pace_vs_plain"] == {"code_edit": 4.0, "prose": 0.5}
    assert s["batch-total"]["lowest_pace_vs_plain"] == 0.5
    assert s["batch-total"]["python_share"] == pytest.approx(0.25)


def test_every_round_mixes_the_kinds() -> None:
    for tasks in rounds(3, 4):
        assert {t.kind for t in tasks} == set(KINDS)

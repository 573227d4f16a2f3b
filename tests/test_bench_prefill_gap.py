"""bench/prefill_gap's checks and table without a model."""

from __future__ import annotations

import pytest

import bench.prefill_gap as gap


@pytest.mark.parametrize("bad", [["--tokens", "8"], ["--repeats", "0"], ["--gap", "1", "--quiet", "2"]])
def test_bad_options_exit_with_a_usage_error_before_loading_a_model(bad: list[str], monkeypatch) -> None:
    monkeypatch.setattr(gap, "load", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as exc:
        gap.main(bad)
    assert exc.value.code == 2


def test_the_table_gives_each_condition_its_median_range_and_thread_counts() -> None:
    runs = [
        {"condition": "idle", "tok_s": 190.0, "threads": 2},
        {"condition": "gap-busy", "tok_s": 100.0, "threads": 1},
        {"condition": "idle", "tok_s": 180.0, "threads": 2},
        {"condition": "gap-busy", "tok_s": 185.0, "threads": 2},
        {"condition": "gap-busy", "tok_s": 178.0, "threads": 2},
    ]
    text = gap.table(runs)
    assert "| idle | 185 (180-190) | 2 | 2 |" in text
    assert "| gap-busy | 178 (100-185) | 1, 2 | 3 |" in text
    assert text.index("| idle") < text.index("| gap-busy")  # in the order they first ran

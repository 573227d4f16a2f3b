"""bench/parallel without a model: the workload mix and the table."""

from __future__ import annotations

from bench.parallel import MODES, kinds_markdown, markdown, summarize, summarize_kinds, workload


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


def test_each_kind_gets_its_requests_pace_and_the_ratios() -> None:
    itl = {"serial": 0.02, "serial, no drafts": 0.04, "parallel, no drafts": 0.05, "parallel, drafts": 0.025}
    records = [
        {"mode": m, "clients": 4, "repeat": 0, "wall_s": 2.0, "tokens": 100,
         "itl": [itl[m], 0.1], "kinds": ["code_edit", "prose"]}
        for m in MODES
    ]
    rows = summarize_kinds(records, [4])
    assert {(r["kind"], r["requests"]) for r in rows} == {("code_edit", 1), ("prose", 1)}
    text = kinds_markdown(rows)
    # code edits: 40 tok/s batched with drafts, 20 batched alone, 50 serial with drafts
    assert "| 4 | code_edit | 1 | 50.0 | 25.0 | 20.0 | 40.0 | 2.00x | 0.80x |" in text
    assert "| 4 | prose | 1 | 10.0 | 10.0 | 10.0 | 10.0 | 1.00x | 1.00x |" in text
    assert kinds_markdown(summarize_kinds(records[:1], [4])).count("| 4 |") == 2  # one mode: no ratios


def test_a_workload_of_one_kind() -> None:
    queues = workload(4, 3, ("prose",))
    assert {t.kind for q in queues for t in q} == {"prose"}


def test_the_fair_mode_gets_its_own_column_against_batching_alone() -> None:
    from bench.parallel import ALL_MODES, FAIR

    itl = {"serial": 0.02, "serial, no drafts": 0.04, "parallel, no drafts": 0.05, "parallel, drafts": 0.025}
    itl[FAIR] = 0.04
    records = [
        {"mode": m, "clients": 4, "repeat": 0, "wall_s": 2.0, "tokens": 100, "itl": [itl[m]], "kinds": ["code_edit"]}
        for m in ALL_MODES
    ]
    text = kinds_markdown(summarize_kinds(records, [4]))
    # fair drafts 25 tok/s against batching alone's 20
    assert "| 4 | code_edit | 1 | 50.0 | 25.0 | 20.0 | 40.0 | 25.0 | 2.00x | 0.80x | 1.25x |" in text

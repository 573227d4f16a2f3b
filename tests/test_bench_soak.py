"""The soak's judgement (bench/soak_report.py): the figures it reads from /metrics, what
fails a run, the table it writes; and the serial service's KV gauge it relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.soak_report import markdown, metric, verdict
from lookahead.server.metrics import Metrics


def clean_run(**changes: Any) -> dict[str, Any]:
    run = {"parallel": 4, "extra_args": ["--kv-per-request"], "requests": 120, "outcomes": {"greedy 200": 120},
           "5xx": 0, "server_5xx": 0, "unexpected": 0, "compared": 60, "differs_from_solo": 0, "problems": [],
           "health_p50_ms": 4.0, "health_p99_ms": 80.0, "health_max_ms": 120.0, "rss_start_mb": 300.0,
           "rss_end_mb": 302.0, "rss_peak_mb": 310.0, "kv_cells_after": 40, "kv_cells_cached_after": 40,
           "exit_code": 0, "traceback": False}
    run.update(changes)
    return run


def test_metrics_are_read_by_name_and_label_from_the_services_own_registry() -> None:
    m = Metrics()
    m.requests.labels("completions", "200").inc(5)
    m.requests.labels("completions", "503").inc(2)
    m.requests.labels("chat", "500").inc()
    m.kv_cells.set(7)
    text = m.render().decode()
    assert metric(text, "lookahead_requests_total", {"status": "5.."}) == 3
    assert metric(text, "lookahead_requests_total", {"status": "5..", "endpoint": "chat"}) == 1
    assert metric(text, "lookahead_requests_total") == 8
    assert metric(text, "lookahead_kv_cells") == 7
    assert metric(text, "lookahead_requests_running") == 0
    assert metric(text, "lookahead_no_such_metric") == 0


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"5xx": 1}, "5xx"),
        ({"server_5xx": 1}, "5xx"),
        ({"unexpected": 2}, "unexpected"),
        ({"differs_from_solo": 1}, "solo"),
        ({"health_p99_ms": 1000.0}, "/health"),
        ({"kv_cells_after": 52}, "KV cells"),
        ({"kv_cells_cached_after": 0}, "KV cells"),
        ({"parallel": 1, "kv_cells_cached_after": 41}, "KV cells"),
        ({"exit_code": 1}, "exit code"),
        ({"traceback": True}, "traceback"),
    ],
)
def test_each_broken_promise_fails_the_run(changes: dict[str, Any], needle: str) -> None:
    assert verdict(clean_run()) == []
    failed = verdict(clean_run(**changes))
    assert len(failed) == 1 and needle in failed[0]


def test_the_table_has_a_row_per_run_with_its_verdict() -> None:
    good = clean_run(parallel=1, extra_args=[], failed=[])
    bad = clean_run(differs_from_solo=3, problems=["greedy: output differs"])
    bad["failed"] = verdict(bad)
    record = {"model": "smollm2-135m", "commit": "abc1234", "clients": 8, "minutes": 10.0, "machine": "x86_64",
              "note": "an idle machine", "runs": [good, bad]}
    text = markdown(record)
    rows = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 4 ")]
    assert len(rows) == 2
    assert rows[0].endswith("| pass |") and "60 of 60" in rows[0]
    assert rows[1].endswith("| FAIL |") and "57 of 60" in rows[1] and "--kv-per-request" in rows[1]
    assert "failed: 3 greedy outputs differ" in text and "an idle machine" in text


@pytest.mark.model
def test_the_serial_service_reports_its_kv_cells(smol_path: Path) -> None:
    """A cached prompt (/completion keeps its cells) shows in lookahead_kv_cells, all of them
    kept for the prompt cache; a request with `cache_prompt: false` frees every cell, and both
    gauges say 0 again."""
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig
    from lookahead.server import ServeConfig
    from lookahead.server.background import serving

    config = ServeConfig(model_id="smollm2-135m", parallel=1)
    loader = lambda: load(smol_path, backend=BackendConfig(n_ctx=1024, n_threads=1))  # noqa: E731
    with serving(config, loader) as server, server.client() as c:
        assert c.post("/completion", json={"prompt": "def add(a, b):", "n_predict": 4}).status_code == 200
        text = c.get("/metrics").text
        kept, cached = metric(text, "lookahead_kv_cells"), metric(text, "lookahead_kv_cells_cached")
        body = {"prompt": "Hello", "max_tokens": 4, "cache_prompt": False}
        assert c.post("/v1/completions", json=body).status_code == 200
        text = c.get("/metrics").text
        after, cached_after = metric(text, "lookahead_kv_cells"), metric(text, "lookahead_kv_cells_cached")
    assert kept > 0 and cached == kept and after == 0 and cached_after == 0


def test_the_serial_worker_may_keep_parked_cells_beside_its_cache() -> None:
    assert verdict(clean_run(parallel=1, extra_args=[], kv_cells_after=72, kv_cells_cached_after=46)) == []
    assert verdict(clean_run(parallel=4, kv_cells_after=72, kv_cells_cached_after=46)) != []

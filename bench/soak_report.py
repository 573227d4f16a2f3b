"""The soak's figures, judged and written: what each run must show (`verdict`), the JSON
record and the markdown table for the README's reliability section. Pure functions, so a
test can check them without a server."""

from __future__ import annotations

import re
from typing import Any

HEALTH_P99_LIMIT_MS = 1000.0  # /health must answer within 1 s at the 99th percentile


def pct(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def metric(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of every sample called `name` in Prometheus text whose labels match `labels`
    (each value a regular expression, e.g. {"status": "5.."})."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
        and all(re.fullmatch(v, sample.labels.get(k, "")) for k, v in (labels or {}).items())
    )


def verdict(run: dict[str, Any]) -> list[str]:
    """What a run failed of the soak's promises (empty: it passed)."""
    failed = []
    if run["5xx"] or run["server_5xx"]:
        failed.append(f"5xx: {run['5xx']} seen by clients, {run['server_5xx']} counted by the server")
    if run["unexpected"]:
        failed.append(f"{run['unexpected']} unexpected answers")
    if run["differs_from_solo"]:
        failed.append(f"{run['differs_from_solo']} greedy outputs differ from their solo output")
    if run["health_p99_ms"] >= HEALTH_P99_LIMIT_MS:
        failed.append(f"/health p99 {run['health_p99_ms']} ms")
    # Idle, the cells left are the prompt cache's: the committed tokens of the last prompt and
    # output each slot saw. The one-at-a-time worker also keeps the last request's parked
    # cells with them (rejected draft cells kept in place for exactness, freed when a later
    # prompt reuses fewer cells than they are), so there the cached cells are a lower bound;
    # per-request KV streams park nothing, so there every cell must be a cached one.
    cells, cached = run["kv_cells_after"], run.get("kv_cells_cached_after", 0)
    if cells < cached or (run["parallel"] > 1 and cells != cached):
        failed.append(
            f"{run['kv_cells_after']} KV cells in use after the run, "
            f"{run.get('kv_cells_cached_after', 0)} of them kept for the prompt cache"
        )
    if run["exit_code"] != 0 or run["traceback"]:
        failed.append(f"exit code {run['exit_code']}" + (", a traceback in its log" if run["traceback"] else ""))
    return failed


def markdown(record: dict[str, Any]) -> str:
    """The runs as a table and a few lines, for the README's reliability section."""
    lines = [
        f"Soak of `lookahead serve` ({record['model']}, commit {record['commit']}): {record['clients']} clients for "
        f"{record['minutes']:g} min per setting on 127.0.0.1, each looping over a random mix of greedy completions "
        "and chats (streamed or not, each compared with the same request's output when sent alone), sampled "
        "streams, streams left after a few chunks, Predicted Outputs up to and past the context, bodies over the "
        "8 MB limit (with and without a length), wrong keys, and hostile bodies (grammars that hang or crash "
        "llama.cpp's parser, schemas with large bounds, fields over the published limits, llama.cpp's routes "
        "with several prompts or a long suffix, `/tokenize` of a lone surrogate or of a long text).",
        "",
        f"Machine: {record['machine']}. {record['note']}".rstrip(),
        "",
        "| --parallel | requests | 5xx | unexpected | greedy outputs = solo | /health p50 / p99 / max (ms) "
        "| server RSS after warm-up → end, peak (MB) | KV cells after (kept for the prompt cache) | exit | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in record["runs"]:
        same = run["compared"] - run["differs_from_solo"]
        lines.append(
            f"| {run['parallel']}{' ' + ' '.join(run['extra_args']) if run['extra_args'] else ''} "
            f"| {run['requests']} | {run['5xx']} | {run['unexpected']} | {same} of {run['compared']} "
            f"| {run['health_p50_ms']} / {run['health_p99_ms']} / {run['health_max_ms']} "
            f"| {run['rss_start_mb']} → {run['rss_end_mb']}, {run['rss_peak_mb']} "
            f"| {run['kv_cells_after']} ({run.get('kv_cells_cached_after', 0)}) "
            f"| {run['exit_code']} | {'pass' if not run['failed'] else 'FAIL'} |"
        )
    for run in record["runs"]:
        mix = ", ".join(f"{k} {v}" for k, v in run["outcomes"].items())
        lines += ["", f"`--parallel {run['parallel']}`: {mix}."]
        lines += [f"- failed: {f}" for f in run["failed"]]
        lines += [f"- {p}" for p in run["problems"][:10]]
    return "\n".join(lines) + "\n"

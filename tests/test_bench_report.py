"""The bench's statistics, tables, charts, HTML report and resume, on synthetic runs (no model)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

import bench.methods
import bench.run
import lookahead.api
from bench import charts, report
from bench.llama_server import completion_request, parse_completion, server_command
from bench.methods import Measurement, is_chain
from bench.run import BenchConfig, BenchError, BenchInterrupted, Planned, plan, read_runs
from bench.summary import acceptance_by_depth, itl_gaps, noise, percentile, summarize
from bench.tasks import Task

PNG = b"\x89PNG\r\n\x1a\n"
SPEED = {"plain": 10.0, "adaptive": 15.0, "fixed2": 12.0, "fixed4": 14.0, "oracle": 25.0, "oracle4": 20.0}
TASKS = {"code_edit/a": "code_edit", "code_edit/b": "code_edit", "prose/a": "prose", "prose/b": "prose"}


def run_record(task: str, method: str, repeat: int, tok_s: float | None = None) -> dict[str, Any]:
    """A run of 12 tokens in steps; chains draft 4 and accept 2 on code, 0 on prose."""
    k = 4 if method in ("fixed4", "oracle4", "adaptive", "oracle") else 2 if method == "fixed2" else 0
    code = TASKS[task] == "code_edit"
    acc = min(k, 2 if code else 0) if not method.startswith("oracle") else k
    steps = 4
    return {
        "task": task, "kind": TASKS[task], "method": method, "repeat": repeat, "position": 0,
        "config": "c", "commit": "abc1234",
        "tok_s": (tok_s or SPEED[method]) * (1 + 0.1 * repeat), "decode_s": 1.0, "prefill_s": 0.1,
        "ttft_s": 0.15, "n_tokens": 12, "decode_tokens": 12, "steps": steps, "drafted": k * steps,
        "accepted": acc * steps, "k_trace": [k] * steps,
        "tokens": [1, 2, 3] if method != "fixed2" or repeat == 0 else [1, 2, 4],
        "step_t": [0.15, 0.25, 0.35, 0.5], "step_tokens": [acc + 1] * steps, "step_accepted": [acc] * steps,
        "step_verify_s": [0.09] * steps, "step_draft_s": [0.001] * steps, "extra": {},
    }  # fmt: skip


def synthetic_runs(repeats: int = 2) -> list[dict[str, Any]]:
    return [run_record(t, m, r) for r in range(repeats) for t in TASKS for m in SPEED]


COSTS = {1: 0.01, 2: 0.015, 4: 0.02, 8: 0.035, 16: 0.06}


def meta() -> dict[str, Any]:
    return {
        "command": "lookahead bench --quick",
        "started": "2026-01-01T00:00:00+00:00",
        "commit": "abc1234",
        "config": {"model": "toy", "model_file": "toy.gguf", "methods": list(SPEED), "repeats": 2,
                   "max_tokens": 12, "threads": 2},
        "machine": {"cpu": "Toy CPU", "cpus_usable": 2, "versions": {"llama-cpp-python": "0.3"}},
        "verify_cost": {"seconds": {str(n): t for n, t in COSTS.items()},
                        "relative": {str(n): t / COSTS[1] for n, t in COSTS.items()},
                        "t1_ms": 10.0, "ceiling": 2.67, "ceiling_at": 16},
    }  # fmt: skip


# -- statistics ----------------------------------------------------------------------------


def test_summary_speedups_with_min_max_over_repeats_and_output_equality() -> None:
    s = summarize(synthetic_runs(), list(SPEED))
    e = s["all"]["fixed4"]
    assert e["speedup_vs_plain"] == pytest.approx(1.4)
    assert e["speedup_repeats_range"] == pytest.approx([1.4, 1.4])  # both scale by the repeat alike
    assert s["all"]["fixed2"]["same_runs"] == 4 and s["all"]["fixed2"]["runs"] == 8  # repeat 1 differs
    assert s["all"]["adaptive"]["same_runs"] == 8
    assert s["all"]["adaptive"]["ttft_ms"] == pytest.approx(150)
    assert s["all"]["adaptive"]["itl_ms_p50"] == pytest.approx(100)
    assert s["all"]["adaptive"]["k_mean_drafting"] == pytest.approx(4)


def test_noise_is_the_spread_of_plain_over_repeats() -> None:
    n = noise(synthetic_runs())
    assert n["code_edit"]["spread_median"] == pytest.approx(1.0 / 10.5)  # 10 and 11 tok/s
    assert n["all"]["prompts"] == 4 and n["all"]["repeats"] == 2
    assert noise(synthetic_runs(repeats=1))["all"]["spread_median"] is None


def test_acceptance_by_depth_counts_reached_and_accepted_depths() -> None:
    rec = run_record("code_edit/a", "fixed4", 0)
    rec["k_trace"], rec["step_accepted"] = [4, 4, 0, 2], [2, 4, 0, 0]
    counts = acceptance_by_depth([rec], is_chain)["code_edit"]
    # 4/2: depths 1-2 accepted, 3 rejected; 4/4: all four accepted; 0: nothing; 2/0: depth 1 rejected
    assert counts["reached"] == [3, 2, 2, 1]
    assert counts["accepted"] == [2, 2, 1, 1]
    rec["method"] = "adaptive"  # a tree method: not pooled
    assert acceptance_by_depth([rec], is_chain) == {}


def test_itl_and_percentiles() -> None:
    rec = {"step_t": [0.1, 0.2, 0.2, 0.5], "step_tokens": [1, 3, 0, 2]}
    assert itl_gaps(rec) == pytest.approx([0.1, 0.3])  # a step that delivered nothing is no gap
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile([], 90) is None


# -- charts --------------------------------------------------------------------------------


def test_speedup_chart_draws_fixed_and_oracle_lines_and_markers() -> None:
    s = summarize(synthetic_runs(), list(SPEED))
    data = charts.speedup_data(s)
    code = data["code_edit"]
    assert [k for k, _ in code["lines"]["fixed K (ours)"]] == [2, 4]
    assert [x for _, x in code["lines"]["fixed K (ours)"]] == pytest.approx([1.2, 1.4])
    assert code["lines"]["oracle drafts, fixed K"][0] == pytest.approx((4, 2.0))
    assert code["markers"]["adaptive (ours)"] == pytest.approx((4, 1.5))
    assert code["markers"]["oracle, best K per step"] == pytest.approx((4, 2.5))
    fig = charts.speedup_figure(data)
    ax = fig.axes[0]
    assert ax.get_title() == "code_edit"
    drawn = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert drawn["fixed K (ours)"] == pytest.approx([1.2, 1.4])
    assert drawn["adaptive (ours)"] == pytest.approx([1.5])


def test_acceptance_heatmap_puts_code_and_prose_side_by_side() -> None:
    data = charts.acceptance_data(synthetic_runs(), is_chain)
    assert set(data) == {"code", "prose"}
    assert data["code"]["code_edit"] == pytest.approx([1.0, 1.0, 0.0])  # fixed2 2/2 and fixed4 2/4
    assert data["prose"]["prose"] == pytest.approx([0.0])
    fig = charts.acceptance_figure(data)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("code") and titles[1].startswith("prose")


def test_latency_and_cost_charts() -> None:
    lat = charts.latency_data(synthetic_runs(), ["plain", "adaptive", "fixed4"])
    assert lat["plain"]["ttft_ms"] == pytest.approx([150] * 8)
    assert len(lat["plain"]["itl_ms"]) == 8 * 3
    fig = charts.latency_figure(lat)
    assert [line.get_label() for line in fig.axes[1].get_lines()] == ["plain", "adaptive", "fixed4"]
    cost = charts.cost_data(COSTS)
    assert cost["relative"] == pytest.approx([1, 1.5, 2, 3.5, 6])
    assert cost["ceiling"] == pytest.approx([1, 2 / 1.5, 2, 8 / 3.5, 16 / 6])


def test_report_writes_tables_pngs_and_a_self_contained_html(tmp_path: Path) -> None:
    text = report.write(tmp_path, meta(), synthetic_runs())
    for name in report.CHARTS:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG), name
        assert base64.b64encode(data).decode() in (tmp_path / "report.html").read_text()
        assert f"({name})" in text
    assert "### code_edit (2 prompts)" in text
    assert "fixed4 | 14.7 | 1.40 | 1.40-1.40" in text
    assert "The machine's noise" in text and "Latency" in text and "Acceptance by draft depth" in text
    assert "commit abc1234" in text
    page = (tmp_path / "report.html").read_text()
    assert "<table>" in page and "src=\"http" not in page and 'src="data:image/png;base64,' in page
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["summary"]["all"]["fixed4"]["speedup_vs_plain"] == pytest.approx(1.4)
    assert report.best_fixed(summary["summary"]) == "fixed4"


# -- the run loop: plan, JSON lines, resume --------------------------------------------------


def test_plan_interleaves_and_puts_oracles_after_plain_in_the_first_repeat() -> None:
    tasks = [Task(f"k/{i}", "k", "p") for i in range(3)]
    methods = ["plain", "adaptive", "oracle", "fixed4"]
    p = plan(tasks, methods, 2)
    assert len(p) == 3 * 4 * 2
    first = [x.method for x in p if x.repeat == 0 and x.task.id == "k/2"]  # rotated by 2: oracle, fixed4, plain
    assert first == ["fixed4", "plain", "oracle", "adaptive"]
    second = [x.method for x in p if x.repeat == 1 and x.task.id == "k/1"]  # rotated by 2, no constraint
    assert second == ["oracle", "fixed4", "plain", "adaptive"]
    assert all(isinstance(x, Planned) for x in p)


def test_read_runs_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(run_record("prose/a", "plain", 0)) + "\n" + '{"task": "pro')
    assert [r["task"] for r in read_runs(path)] == ["prose/a"]


class FakeTuning:
    def calibrate(self) -> dict[int, float]:
        return dict(COSTS)


class FakeModel:
    def __init__(self, path: Path) -> None:
        self.backend = type("B", (), {"path": path})()
        self.tuning = FakeTuning()

    def close(self) -> None:
        pass


@pytest.fixture
def no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """run() with a fake model and fake runners; returns the (task, method) list they ran."""
    gguf = tmp_path / "toy.gguf"
    gguf.write_bytes(b"GGUF")
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(lookahead.api, "load", lambda *a, **k: FakeModel(gguf))
    monkeypatch.setattr(bench.run, "machine_info", lambda threads: meta()["machine"])

    def fake_runners(model, methods, threads, truths, server=None):  # type: ignore[no-untyped-def]
        def runner_for(method: str):  # type: ignore[no-untyped-def]
            def run(task: Task, max_tokens: int) -> Measurement:
                if bench.methods.needs_truth(method):
                    assert task.id in truths, "an oracle ran before plain"
                calls.append((task.id, method))
                if len(calls) == getattr(run_fn_state, "stop_at", -1):
                    raise KeyboardInterrupt
                return Measurement([1, 2], 2, 0.1, 0.01, 2, 0, 0, [0, 0], step_t=[0.02, 0.03], step_tokens=[1, 1],
                                   step_accepted=[0, 0])

            return run

        return {m: runner_for(m) for m in methods}

    monkeypatch.setattr(bench.methods, "build_runners", fake_runners)
    return calls


class _State:
    stop_at = -1


run_fn_state = _State()


def config(out: Path, resume: bool = False) -> BenchConfig:
    return BenchConfig(model="toy", kinds=["code_edit", "prose"], methods=["plain", "fixed4", "oracle"],
                       repeats=2, max_tokens=8, per_kind=1, out=out, resume=resume, threads=1)


def test_resume_skips_runs_already_recorded(tmp_path: Path, no_model: list[tuple[str, str]]) -> None:
    out = tmp_path / "out"
    run_fn_state.stop_at = 3 + 5  # 3 warm-ups, then 4 measured runs kept, the 5th interrupted
    try:
        with pytest.raises(BenchInterrupted, match="after 4 of 12 runs.*--resume"):
            bench.run.run(config(out))
    finally:
        run_fn_state.stop_at = -1
    kept = read_runs(out / "runs.jsonl")
    assert len(kept) == 4 and (out / "meta.json").exists()
    with pytest.raises(BenchError, match="--resume"):
        bench.run.run(config(out))
    no_model.clear()
    outcome = bench.run.run(config(out, resume=True))
    assert outcome.skipped == 4 and outcome.measured == 2 * 2 * 3 - 4
    measured = [c for c in no_model if c[0] != "burn-in"]
    assert len(measured) == 8  # only what was missing
    runs = read_runs(out / "runs.jsonl")
    assert len(runs) == 12 and len({bench.run.run_key(r) for r in runs}) == 12
    for name in ("report.md", "report.html", "summary.json", *report.CHARTS):
        assert (out / name).exists(), name


def test_bench_config_checks_names_before_loading() -> None:
    with pytest.raises(BenchError, match="unknown methods"):
        BenchConfig(methods=["plain", "nope"]).resolved()
    with pytest.raises(BenchError, match="unknown kinds"):
        BenchConfig(kinds=["poems"]).resolved()
    assert BenchConfig().resolved().kinds == ["code_edit", "report", "completion", "summarize", "prose"]
    with pytest.raises(BenchError, match="llama-server"):
        BenchConfig(methods=["server_ngram_mod"]).resolved()
    quick = BenchConfig(quick=True).resolved()
    assert (quick.repeats, quick.max_tokens, quick.per_kind) == (1, 40, 1)
    assert quick.methods is not None and quick.methods[0] == "plain" and "oracle" in quick.methods
    full = BenchConfig(methods=["adaptive"], repeats=5).resolved()
    assert full.methods == ["plain", "adaptive"] and full.repeats == 5 and full.max_tokens == 128


# -- llama-server ----------------------------------------------------------------------------


def test_llama_server_command_line() -> None:
    cmd = server_command(Path("/opt/llama-server"), Path("m.gguf"), 8123, 2, 4096, "ngram-mod")
    assert cmd[0] == "/opt/llama-server"
    assert cmd[cmd.index("--model") + 1] == "m.gguf" and cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[cmd.index("--threads") + 1] == "2" and cmd[cmd.index("--spec-type") + 1] == "ngram-mod"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert "--spec-type" not in server_command(Path("s"), Path("m.gguf"), 1, 1, 1, None)
    body = completion_request([1, 2, 3], 64)
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 64 and body["temperature"] == 0
    assert body["cache_prompt"] is False


def test_llama_server_timings_are_parsed() -> None:
    reply = {
        "content": "x", "tokens": [5, 6, 7, 8], "stop_type": "limit",
        "timings": {"prompt_n": 20, "prompt_ms": 50.0, "predicted_n": 40, "predicted_ms": 800.0,
                    "predicted_per_second": 50.0, "draft_n": 30, "draft_n_accepted": 15},
    }  # fmt: skip
    m = parse_completion(reply)
    assert m.tokens == [5, 6, 7, 8]
    assert m.decode_tokens == 40 and m.decode_s == pytest.approx(0.8) and m.tok_s == pytest.approx(50)
    assert m.prefill_s == pytest.approx(0.05)
    assert (m.drafted, m.accepted, m.steps) == (30, 15, 25)
    assert m.extra["timings"]["prompt_n"] == 20
    no_spec = parse_completion({"timings": {"predicted_n": 3, "predicted_ms": 30.0}})
    assert (no_spec.drafted, no_spec.accepted, no_spec.steps, no_spec.tokens) == (0, 0, 3, [])
    with pytest.raises(ValueError, match="timings"):
        parse_completion({"content": "x"})


def test_a_set_without_the_kinds_asked_stops_before_loading_a_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_load(*a: object, **k: object) -> None:
        raise AssertionError("loaded a model for a run with no prompts")

    monkeypatch.setattr(lookahead.api, "load", no_load)
    cfg = BenchConfig(model="toy", kinds=["prose"], methods=["plain"], repeats=1, max_tokens=8,
                      prompt_set="pasted", out=tmp_path / "out", threads=1)
    with pytest.raises(BenchError, match="the pasted set has no prompts of the kinds prose"):
        bench.run.run(cfg)

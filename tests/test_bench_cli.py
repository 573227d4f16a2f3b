"""`lookahead bench`: bad input fails before a model loads; a quick run on the small model
writes the runs, the tables, the charts and the report."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lookahead.api
import lookahead.cli.bench_cmd
from bench import report
from bench.run import read_runs
from lookahead.cli.main import app
from tests.test_cli import assert_cli_error

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def trap(*args: object, **kwargs: object) -> None:
    raise AssertionError("the model was loaded")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--methods", "plain,warp"], "unknown methods warp"),
        (["--kinds", "poems"], "unknown kinds poems"),
        (["--methods", "server_ngram_mod"], "--llama-server"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--llama-server", "/nonexistent/llama-server"], "no llama-server binary"),
    ],
)
def test_bad_options_fail_before_loading(args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookahead.api, "load", trap)
    assert_cli_error(runner.invoke(app, ["bench", *args]), needle)


def test_it_finds_the_checkout_it_runs_from() -> None:
    assert lookahead.cli.bench_cmd.checkout_root() == Path(__file__).resolve().parent.parent


def test_without_a_checkout_it_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookahead.cli.bench_cmd, "checkout_root", lambda: None)
    assert_cli_error(runner.invoke(app, ["bench", "--quick"]), "source checkout", "pip install -e '.[bench]'")


def test_the_command_line_is_recorded_without_defaults() -> None:
    line = lookahead.cli.bench_cmd.command_line(
        dict(model="m", kinds=["a", "b"], methods=None, repeats=2, quick=True, resume=False, prompt_set="bench",
             threads=0, out=Path("o"))
    )  # fmt: skip
    assert line == "lookahead bench --model m --kinds a,b --repeats 2 --quick --out o"


@pytest.mark.model
def test_quick_bench_on_the_small_model(smol_path: Path, tmp_path: Path) -> None:
    args = [
        "bench", "--quick", "--kinds", "code_edit,prose", "--repeats", "1", "--model", str(smol_path),
        "--methods", "plain,adaptive,fixed4,oracle", "--max-tokens", "12", "--threads", "1", "--out", str(tmp_path),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "### code_edit (1 prompts)" in result.stdout
    runs = read_runs(tmp_path / "runs.jsonl")
    assert sorted((r["task"].split("/")[0], r["method"]) for r in runs) == sorted(
        (k, m) for k in ("code_edit", "prose") for m in ("plain", "adaptive", "fixed4", "oracle")
    )
    plain = {r["task"]: r["tokens"] for r in runs if r["method"] == "plain"}
    for r in runs:
        assert r["step_t"] and r["ttft_s"] is not None and len(r["step_verify_s"]) == r["steps"]
        assert "thread_switches" not in r["extra"]  # --threads pins the count: no governor
        if r["method"] == "oracle":  # SmolLM2 is batch-invariant here: every drafted token is right
            assert r["tokens"] == plain[r["task"]]
            assert r["step_accepted"] == r["k_trace"] and r["accepted"] == r["drafted"] > 0
    html = (tmp_path / "report.html").read_text()
    for name in report.CHARTS:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG)
        assert base64.b64encode(data).decode() in html
    assert (tmp_path / "meta.json").exists() and (tmp_path / "summary.json").exists()
    # resume: everything is recorded, so nothing runs again (the report is written anew)
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert len(read_runs(tmp_path / "runs.jsonl")) == len(runs)
    assert "0 runs measured, 8 already recorded" in again.stderr


def test_the_compare_script_takes_the_bench_commands_flags_without_the_cli() -> None:
    from bench.compare import parse

    config = parse(["--kinds", "code_edit,prose", "--repeats", "1", "--set", "tune", "--quick"])
    assert config.kinds == ["code_edit", "prose"] and config.repeats == 1
    assert config.prompt_set == "tune" and config.quick and config.threads == 0
    assert config.command == "python -m bench.compare --kinds code_edit,prose --repeats 1 --set tune --quick"

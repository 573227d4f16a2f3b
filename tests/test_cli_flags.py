"""Flags people already type (llama.cpp's spellings), one name per concept across commands,
and the renamed spellings that keep working with a note: every spelling of a flag must
reach the command as the same value. No model is loaded: each command's runner is replaced
by a recorder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import lookahead.cli.complete_cmd
import lookahead.cli.doctor_cmd
import lookahead.cli.generate_cmd
import lookahead.cli.report_cmd
import lookahead.cli.serve_cmd
from lookahead.cli.main import app
from lookahead.cli.options import RENAMED, rename_args
from lookahead.cli.serve_cmd import check_parallel
from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig

runner = CliRunner()


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """What each command's runner was called with, by command."""
    calls: dict[str, dict[str, Any]] = {}

    def recorder(name: str, result: Any = None) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            calls[name] = {"args": args, **kwargs}
            return result

        return record

    monkeypatch.setattr(lookahead.cli.generate_cmd, "run_generate", recorder("generate"))
    monkeypatch.setattr(lookahead.cli.report_cmd, "run_report", recorder("report"))
    monkeypatch.setattr(lookahead.cli.complete_cmd, "run_complete", recorder("complete"))
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", recorder("serve"))
    monkeypatch.setattr(lookahead.cli.doctor_cmd, "run_doctor", recorder("doctor", 0))
    return calls


def head(command: str, tmp_path: Path) -> list[str]:
    """The command and its required arguments."""
    if command == "generate":
        return ["generate", "hi"]
    if command == "report":
        return ["report", str(tmp_path / "t.md"), str(tmp_path / "d.csv")]
    if command == "complete":
        return ["complete", str(tmp_path / "f.py")]
    return [command]


def value(call: dict[str, Any], key: str) -> Any:
    """A parameter as the runner got it, wherever the command put it (a keyword, or inside
    the `sampling` / `draft` dicts)."""
    for where in (call, call.get("sampling") or {}, call.get("draft") or {}):
        if key in where:
            return where[key]
    raise KeyError(key)


ALL = ("generate", "report", "complete", "serve", "doctor")

# (commands, key the runner sees, the spellings, the value every spelling must give)
SPELLINGS: list[tuple[tuple[str, ...], str, list[list[str]], Any]] = [
    (ALL, "model", [["-m", "x.gguf"], ["--model", "x.gguf"]], "x.gguf"),
    (
        ("generate", "report", "complete", "serve"),
        "n_ctx",
        [["-c", "512"], ["--ctx-size", "512"], ["--ctx-size=512"], ["--n-ctx", "512"], ["--n-ctx=512"]],
        512,
    ),
    (ALL, "threads", [["-t", "3"], ["--threads", "3"]], 3),
    (
        ("generate", "complete"),
        "max_tokens",
        [["-n", "7"], ["--max-tokens", "7"], ["--n-predict", "7"], ["--max-tokens=7"]],
        7,
    ),
    (("report",), "max_tokens", [["-n", "7"], ["--max-tokens", "7"], ["--n-predict", "7"]], 7),
    (
        ("generate", "report", "complete"),
        "temperature",
        [["--temp", "0.5"], ["--temp=0.5"], ["--temperature", "0.5"], ["--temperature=0.5"]],
        0.5,
    ),
    (("generate", "report", "complete"), "top_p", [["--top-p", "0.9"]], 0.9),
    (("generate", "report", "complete"), "top_k", [["--top-k", "5"]], 5),
    (("generate", "report", "complete"), "min_p", [["--min-p", "0.1"]], 0.1),
    (("generate", "report", "complete"), "repeat_penalty", [["--repeat-penalty", "1.1"]], 1.1),
    (("generate", "report", "complete"), "seed", [["-s", "9"], ["--seed", "9"]], 9),
    (("serve",), "parallel", [["-np", "2"], ["--parallel", "2"], ["--parallel=2"]], 2),
    (("serve",), "parallel", [["-np", "-1"], ["--parallel", "-1"]], -1),
]


@pytest.mark.parametrize(
    ("command", "key", "spellings", "expected"),
    [(c, key, sp, exp) for cmds, key, sp, exp in SPELLINGS for c in cmds],
)
def test_every_spelling_gives_the_same_value(
    seen: dict[str, dict[str, Any]], tmp_path: Path, command: str, key: str, spellings: list[list[str]], expected: Any
) -> None:
    for spelling in spellings:
        seen.clear()
        result = runner.invoke(app, [*head(command, tmp_path), *spelling])
        assert result.exit_code == 0, (spelling, result.output, result.exception)
        call = seen[command]
        got = value(call, key)
        assert got == expected, (command, spelling, got)


@pytest.mark.parametrize("command", ["generate", "report"])
def test_stop_corpus_and_no_records_on_generate_and_report(
    seen: dict[str, dict[str, Any]], tmp_path: Path, command: str
) -> None:
    args = ["--stop", "END", "--stop", "##", "--corpus", str(tmp_path), "--no-records"]
    assert runner.invoke(app, [*head(command, tmp_path), *args]).exit_code == 0
    call = seen[command]
    assert tuple(call["stop"]) == ("END", "##")
    assert value(call, "corpora") == (tmp_path,)
    assert value(call, "records") is False


def test_complete_drafts_from_corpus_under_either_spelling(seen: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    for spelling in (["--corpus", str(tmp_path)], ["--context", str(tmp_path)]):
        assert runner.invoke(app, [*head("complete", tmp_path), *spelling]).exit_code == 0
        assert seen["complete"]["context"] == tmp_path
    for spelling in (["--no-corpus"], ["--no-context"]):
        assert runner.invoke(app, [*head("complete", tmp_path), *spelling]).exit_code == 0
        assert seen["complete"]["no_context"] is True


def test_complete_c_is_the_context_size_not_the_column(seen: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    assert runner.invoke(app, [*head("complete", tmp_path), "-c", "1024", "--line", "2", "--col", "3"]).exit_code == 0
    assert seen["complete"]["n_ctx"] == 1024 and seen["complete"]["col"] == 3


def test_an_old_spelling_prints_one_note_on_stderr(seen: dict[str, dict[str, Any]]) -> None:
    result = runner.invoke(app, ["generate", "hi", "--n-ctx", "512", "--temperature", "0.2", "--n-ctx", "600"])
    assert result.exit_code == 0
    notes = result.stderr.strip().splitlines()
    assert notes == [
        "note: --n-ctx is deprecated and will be removed; use --ctx-size",
        "note: --temperature is deprecated and will be removed; use --temp",
    ]
    assert seen["generate"]["n_ctx"] == 600


def test_new_spellings_print_nothing(seen: dict[str, dict[str, Any]]) -> None:
    result = runner.invoke(app, ["generate", "hi", "-c", "512", "--temp", "0.2"])
    assert result.exit_code == 0 and result.stderr == ""


def test_nothing_after_a_double_dash_is_renamed() -> None:
    notes: list[str] = []
    args = ["--n-ctx", "5", "--", "--n-ctx"]
    assert rename_args("generate", args, notes.append) == ["--ctx-size", "5", "--", "--n-ctx"]
    assert len(notes) == 1
    assert rename_args("models", ["--n-ctx"], notes.append) == ["--n-ctx"]  # not a flag of that command


def test_every_renamed_flag_points_at_a_flag_the_command_has() -> None:
    group = typer.main.get_command(app)
    for command, table in RENAMED.items():
        opts = {o for p in group.commands[command].params for o in (*p.opts, *p.secondary_opts)}  # type: ignore[attr-defined]
        for old, new in table.items():
            assert new in opts, (command, new)
            assert old not in opts, (command, old)  # the old spelling is not declared twice


def test_parallel_auto_is_minus_one_and_zero_still_means_auto() -> None:
    assert check_parallel(-1, exact=False) == check_parallel(0, exact=False) == 0
    assert check_parallel(3, exact=False) == 3
    assert check_parallel(-1, exact=True) == 1


def test_drafting_and_sampling_defaults_come_from_the_config_dataclasses() -> None:
    group = typer.main.get_command(app)
    draft, sampling = DraftConfig(), SamplingConfig()
    defaults = {p.name: p.default for p in group.commands["generate"].params}  # type: ignore[attr-defined]
    for name in ("k", "k_max", "budget", "branches"):
        assert defaults[name] == getattr(draft, name), name
    for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty"):
        assert defaults[name] == getattr(sampling, name), name

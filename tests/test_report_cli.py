"""`lookahead report`: the shipped example on SmolLM2, and every bad input as one `error:`
line naming the file (and line and column) with exit 1, before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import JSON_KEYS, assert_cli_error, invoke, no_llama, no_load, on  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "examples" / "sales" / "weekly.md"
DATA = ROOT / "examples" / "sales" / "sales.csv"


def never(*args: object, **kwargs: object) -> None:
    raise AssertionError("tried to download an unknown model")


def report(*args: str) -> list[str]:
    return ["report", str(TEMPLATE), str(DATA), *args]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.usefixtures("no_load")
@pytest.mark.parametrize(
    ("name", "text", "needles"),
    [
        ("bad.csv", 'region,revenue\nNorth,1\nSouth,"2\n', ["bad.csv", "line 3", "malformed CSV"]),
        ("rows.csv", "region,revenue\nNorth,1\nSouth,2,3\n", ["rows.csv", "line 3", "3 fields"]),
        ("bad.json", '[\n  {"region": "North",, "revenue": 1}\n]', ["bad.json", "line 2, column 22"]),
        ("empty.jsonl", "\n", ["empty.jsonl", "empty"]),
        # templates: a syntax error, a column the data lacks
        ("bad.md", "Report\n\n### {{ fields.region }\n", ["bad.md", "line 3"]),
        ("var.md", "Report\n- Profit: {{ fields.profit }}\n", ["var.md", "line 2", "profit"]),
    ],
)
def test_bad_file(tmp_path: Path, name: str, text: str, needles: list[str]) -> None:
    path = write(tmp_path / name, text)
    args = [path, DATA] if name.endswith(".md") else [TEMPLATE, path]
    assert_cli_error(invoke(["report", *map(str, args)]), *needles)


@pytest.mark.usefixtures("no_load")
def test_missing_files(tmp_path: Path) -> None:
    missing = tmp_path / "nothere.md"
    assert_cli_error(invoke(["report", str(missing), str(DATA)]), "template file not found", "nothere.md")
    assert_cli_error(invoke(["report", str(TEMPLATE), str(tmp_path / "no.csv")]), "data file not found", "no.csv")


@pytest.mark.usefixtures("no_load")
def test_bad_output_path(tmp_path: Path) -> None:
    assert_cli_error(invoke(report("-o", str(tmp_path))), "is a folder")
    assert_cli_error(invoke(report("-o", str(tmp_path / "no" / "r.md"))), "output folder not found")


@pytest.mark.usefixtures("no_load", "no_llama")
def test_unknown_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lookahead.models.catalog._pip_download", never)
    assert_cli_error(invoke(report("--model", "no-such-model")), "unknown model 'no-such-model'")


@pytest.mark.usefixtures("no_load")
def test_bad_options() -> None:
    assert_cli_error(invoke(report("--max-tokens", "0")), "--max-tokens")
    assert_cli_error(invoke(report("--temp", "-1")), "temperature")


# --- the shipped example on SmolLM2 -------------------------------------------------------


@pytest.mark.model
def test_report_to_stdout_and_json(smol_path: Path) -> None:
    result = invoke(report(*on(smol_path), "-n", "48"))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    assert "Traceback" not in result.stderr and "48 tokens in" in result.stderr

    result = invoke(report(*on(smol_path), "-n", "48", "--json"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    data = json.loads(lines[0])
    for key, kind in JSON_KEYS.items():
        assert isinstance(data[key], kind), key
    assert data["text"].strip() and data["n_tokens"] == 48
    assert "finish_reason" in data and "k_trace" in data


@pytest.mark.model
def test_report_to_a_file(smol_path: Path, tmp_path: Path) -> None:
    out = write(tmp_path / "report.md", "old report\n")
    result = invoke(report(*on(smol_path), "-n", "32", "--no-chat", "-o", str(out), "--json"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["output"] == str(out)
    text = out.read_text(encoding="utf-8")
    assert text.strip() and text.rstrip("\n") == data["text"].rstrip("\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]  # no temporary file left

    result = invoke(report(*on(smol_path), "-n", "32", "-o", str(out)))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the report went to the file


@pytest.mark.model
def test_failed_report_leaves_the_file(smol_path: Path, tmp_path: Path) -> None:
    out = write(tmp_path / "report.md", "old report\n")
    result = invoke(report(*on(smol_path), "-n", "8", "-o", str(out), "--chat", "--ctx-size", "64"))
    assert_cli_error(result, "the prompt has", "context")
    assert out.read_text(encoding="utf-8") == "old report\n"

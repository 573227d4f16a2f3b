"""`lookahead.apps.report`: the prompt from a template and data rows, and every bad input as a
`ReportError` naming the file (and the line and column where there is one). No model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lookahead.apps.report import ReportError, Table, build_report, data_block, read_table, save
from lookahead.errors import UserError
from lookahead.index.datablock import TokenText, parse_data_block
from tests.test_records import Vocab

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sales"

TEMPLATE = """One section per region ({{ count }} of them):

### {{ fields.region }}
- Revenue: {{ fields.revenue }} EUR
- Comment: <a sentence>
"""
ROWS = [("North", "120"), ("South", "80"), ("East", "95")]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def template(tmp_path: Path) -> Path:
    return write(tmp_path / "t.md", TEMPLATE)


def csv_text(rows: list[tuple[str, str]] = ROWS) -> str:
    return "region,revenue\n" + "".join(f"{a},{b}\n" for a, b in rows)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("d.csv", csv_text()),
        ("d.json", '[{"region": "North", "revenue": 120}, {"region": "South", "revenue": 80},\n'
                   ' {"region": "East", "revenue": 95}]'),
        ("d.jsonl", '{"region": "North", "revenue": 120}\n{"region": "South", "revenue": 80}\n\n'
                    '{"region": "East", "revenue": "95"}\n'),
        ("d.data", csv_text()),  # sniffed: CSV
        ("d.txt", "region;revenue\nNorth;120\nSouth;80\nEast;95\n"),  # another delimiter
        ("d.dat", '[{"region": "North", "revenue": 120}, {"region": "South", "revenue": 80},'
                  ' {"region": "East", "revenue": 95}]'),  # sniffed: JSON
        ("d.rows", '{"region": "North", "revenue": 120}\n{"region": "South", "revenue": 80}\n'
                   '{"region": "East", "revenue": 95}\n'),  # sniffed: JSON Lines
    ],
)  # fmt: skip
def test_every_data_format_reads_the_same_table(tmp_path: Path, name: str, text: str) -> None:
    table = read_table(write(tmp_path / name, text))
    assert table == Table(("region", "revenue"), tuple(ROWS))


def test_prompt_is_the_rendered_template_then_the_data_block(tmp_path: Path, template: Path) -> None:
    report = build_report(template, write(tmp_path / "d.csv", csv_text()))
    assert report.prompt.startswith("One section per region (3 of them):\n\n### <region>\n- Revenue: <revenue> EUR\n")
    assert report.prompt.endswith("region, revenue\nNorth, 120\nSouth, 80\nEast, 95\n")


def test_the_record_index_finds_the_rows_header_and_placeholders(tmp_path: Path, template: Path) -> None:
    report = build_report(template, write(tmp_path / "d.csv", csv_text()))
    vocab = Vocab(["revenue", "region"])  # a "<name>" placeholder spans a few tokens
    block = parse_data_block(vocab.encode(report.prompt), TokenText(vocab.token_bytes, vocab.encode))
    assert block.columns == ("region", "revenue")
    assert [vocab.decode(list(row[0])) for row in block.rows] == ["North", "South", "East"]
    assert [p.field for p in block.placeholders] == [0, 1]


def test_the_shipped_example_builds() -> None:
    report = build_report(EXAMPLE / "weekly.md", EXAMPLE / "sales.csv")
    assert 6 <= len(report.table.rows) <= 10
    assert "<region>" in report.prompt and "{{" not in report.prompt


def test_a_template_may_place_the_data_itself(tmp_path: Path) -> None:
    template = write(tmp_path / "t.md", "Rows:\n{{ data }}\nOne line per {{ columns[0] }}: <region>\n")
    report = build_report(template, write(tmp_path / "d.csv", csv_text()))
    assert report.prompt == "Rows:\nregion, revenue\nNorth, 120\nSouth, 80\nEast, 95\n\nOne line per region: <region>\n"


def test_separator_avoids_the_values() -> None:
    assert data_block(Table(("a", "b"), (("x, y", "1"), ("z", "2")))) == "a; b\nx, y; 1\nz; 2\n"
    every = (", ", "; ", " | ")
    table = Table(("a", "b"), tuple((f"v{s}w", "1") for s in every))
    assert data_block(table).splitlines()[0] == "a\tb"


def test_values_are_kept_on_one_line(tmp_path: Path) -> None:
    table = read_table(write(tmp_path / "d.csv", 'a,b\n"two\nlines",1\nx,2\n'))
    assert table.rows == (("two lines", "1"), ("x", "2"))


def test_max_tokens_grows_with_the_data_and_is_capped(tmp_path: Path, template: Path) -> None:
    small = build_report(template, write(tmp_path / "s.csv", csv_text()))
    big = build_report(template, write(tmp_path / "b.csv", csv_text(ROWS * 10)))
    assert 0 < small.max_tokens(100_000) < big.max_tokens(100_000)
    # enough for the records: each is at least as long as its shape and its values
    assert small.max_tokens(100_000) > 3 * (len("### North\n- Revenue: 120 EUR\n- Comment: ") // 2)
    assert big.max_tokens(50) == 50


# --- bad input: one ReportError naming the file, line and column -----------------------


def error(template: Path, data: Path) -> str:
    with pytest.raises(ReportError) as info:
        build_report(template, data)
    assert isinstance(info.value, UserError)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("name", "text", "needles"),
    [
        ("d.json", '[{"region": "North", "revenue": 1},\n {"region": "South" "revenue": 2}]',
         ["d.json", "line 2, column 21", "delimiter"]),
        ("d.jsonl", '{"region": "North", "revenue": 1}\n{"region": "South", "revenue": }\n',
         ["d.jsonl", "line 2, column 32"]),
        ("d.csv", 'region,revenue\nNorth,1\nSouth,"2\nEast,3\n', ["d.csv", "line 3", "malformed CSV"]),
        ("d.csv", "region,revenue\nNorth,1\nSouth,2,9\n", ["d.csv", "line 3", "3 fields", "header has 2"]),
        ("d.json", '[{"region": "North", "revenue": 1}, {"region": "South"}]',
         ["d.json", "item 2", "lacks revenue"]),
        ("d.jsonl", '{"region": "North", "revenue": 1}\n{"region": "S", "revenue": 2, "x": 3}\n',
         ["d.jsonl", "line 2", "has x too"]),
        ("d.json", '{"region": "North"}', ["d.json", "a JSON list of objects"]),
        ("d.json", "[1, 2]", ["d.json", "item 1", "expected an object"]),
        ("d.json", "[]", ["d.json", "no rows"]),
        ("d.csv", "", ["d.csv", "is empty"]),
        ("d.csv", " \n\n", ["d.csv", "is empty"]),
        ("d.csv", "region,revenue\n", ["d.csv", "no rows"]),
        ("d.csv", "region,\nNorth,1\n", ["d.csv", "every column needs a name"]),
    ],
)  # fmt: skip
def test_bad_data(tmp_path: Path, template: Path, name: str, text: str, needles: list[str]) -> None:
    message = error(template, write(tmp_path / name, text))
    for needle in needles:
        assert needle in message, (needle, message)


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("Hello\n{% for r in rows %}\n{{ r.region }\n", ["t.md", "line 3", "unexpected '}'"]),
        ("Hello\n{% for r in rows %}{{ r.region }}\n", ["t.md", "line", "endfor"]),
        ("### {{ fields.regoin }}\n", ["t.md", "line 1", "regoin", "columns: region, revenue"]),
        ("Week\n\n{{ week }}\n", ["t.md", "line 3", "'week' is undefined"]),
        ("{% for r in rows %}\n{{ r.region }} {{ r.profit }}\n{% endfor %}", ["t.md", "line 2", "profit"]),
        ("{{ rows.__class__.__mro__ }}", ["t.md", "line 1"]),  # the sandbox refuses it
        ("{{ 1 / 0 }}", ["t.md", "line 1", "division"]),
    ],
)
def test_bad_template(tmp_path: Path, text: str, needles: list[str]) -> None:
    message = error(write(tmp_path / "t.md", text), write(tmp_path / "d.csv", csv_text()))
    for needle in needles:
        assert needle in message, (needle, message)


def test_missing_files(tmp_path: Path, template: Path) -> None:
    data = write(tmp_path / "d.csv", csv_text())
    assert "template file not found" in error(tmp_path / "none.md", data)
    assert "data file not found" in error(template, tmp_path / "none.csv")
    assert "is a folder" in error(template, tmp_path)
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00a,b")
    assert "not UTF-8" in error(template, tmp_path / "bin.csv")


# --- saving ----------------------------------------------------------------------------


def test_save_replaces_the_file_whole(tmp_path: Path) -> None:
    path = write(tmp_path / "r.md", "old\n")
    save(path, "new\n")
    assert path.read_text(encoding="utf-8") == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["r.md"]  # no temporary file left


def test_save_failure_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "r.md", "old\n")

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(ReportError, match="cannot write .*r.md: No space left"):
        save(path, "new\n")
    assert path.read_text(encoding="utf-8") == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["r.md"]


def test_save_into_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="output folder not found"):
        save(tmp_path / "no" / "r.md", "x")
    with pytest.raises(ReportError, match="is a folder"):
        save(tmp_path, "x")

"""Templated reports: a prompt built from a Jinja2 template and a table of data rows.

    report = build_report(Path("weekly.md"), Path("sales.csv"))
    model.generate(report.prompt, chat=True, max_tokens=report.max_tokens(n_ctx, prompt_len))

The template is Markdown: the instructions and the shape of one record, rendered by
Jinja2 in a sandbox with undefined variables as errors. It sees

- `rows`: the data rows, each a dict column -> value (text);
- `columns`: the column names, in order;
- `count`: how many rows;
- `fields`: column -> "<column>", so `### {{ fields.region }}` writes the placeholder
  `### <region>` and a misspelt column is an error, not a record the model must guess;
- `data`: the data block (below); a template that does not place it gets it at the end.

The data is CSV (with a header), JSON (a list of objects) or JSON Lines, chosen by the
file's extension or, for any other, by its first character. The data block is laid out
for the record index (`lookahead.index.datablock`): the header line, then one line per row,
the fields joined by ", " (or by the first of "; ", " | ", tab that no value holds), so
every line has the same number of fields and the header's names match the template's
`<column>` placeholders. A value's newlines become spaces.

Every bad input raises `ReportError` (a `UserError`) naming the file, and the line and
column where there is one.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from lookahead.errors import UserError

_SEPARATORS = (", ", "; ", " | ", "\t")
_CHARS_PER_TOKEN = 3.0  # a low estimate of characters per token (English, digits): more tokens
_SLACK_TOKENS = 64  # a closing line, a title


class ReportError(UserError):
    """A template or data file that cannot make a report (the message names the file)."""


@dataclass(frozen=True)
class Table:
    """Data rows with the same columns, values as text."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Report:
    """A report's prompt and what it was built from."""

    prompt: str
    table: Table
    template: str  # the rendered template, without the data block when appended

    def max_tokens(self, limit: int) -> int:
        """Enough tokens for every record, at most `limit` (what the context has left).

        A record is estimated as long as the rendered template (its instructions included,
        so this errs high: the model stops at its end token) plus its row, at 3 characters
        a token."""
        per_row = len(self.template) + max(len(", ".join(row)) for row in self.table.rows)
        estimate = int(len(self.table.rows) * per_row / _CHARS_PER_TOKEN) + _SLACK_TOKENS
        return max(1, min(estimate, limit))


def build_report(template: Path, data: Path) -> Report:
    """Read the data and the template and render the report's prompt (see the module doc)."""
    table = read_table(data)
    source = _read_text(template, "template")
    block = data_block(table)
    rendered = render_template(str(template), source, table, block)
    if block in rendered:
        return Report(rendered, table, rendered)
    prompt = rendered.rstrip("\n") + "\n\n" + "Data (one record per row):\n" + block
    return Report(prompt, table, rendered)


def data_block(table: Table) -> str:
    """The header line and one line per row (see the module doc), ending with a newline."""
    cells = [*table.columns, *(v for row in table.rows for v in row)]
    sep = next((s for s in _SEPARATORS if not any((s.strip() or s) in c for c in cells)), ", ")
    lines = [sep.join(table.columns), *(sep.join(row) for row in table.rows)]
    return "\n".join(lines) + "\n"


def render_template(name: str, source: str, table: Table, block: str) -> str:
    """`source` rendered with the table (Jinja2, sandboxed, undefined names are errors)."""
    from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, UndefinedError
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        compiled = env.from_string(source)
    except TemplateSyntaxError as exc:
        raise ReportError(f"template {name}, line {exc.lineno}: {exc.message}") from None
    context = {
        "rows": [dict(zip(table.columns, row, strict=True)) for row in table.rows],
        "columns": list(table.columns),
        "count": len(table.rows),
        "fields": {c: f"<{c}>" for c in table.columns},
        "data": block,
    }
    try:
        return compiled.render(context)
    except UndefinedError as exc:
        where = _template_line(exc.__traceback__)
        raise ReportError(
            f"template {name}{where}: {exc.message} (the data's columns: {', '.join(table.columns)}; "
            "the template also sees rows, columns, count, fields, data)"
        ) from None
    except TemplateError as exc:  # a sandbox violation, a filter given the wrong type, ...
        raise ReportError(f"template {name}{_template_line(exc.__traceback__)}: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        raise ReportError(f"template {name}{_template_line(exc.__traceback__)}: {exc}") from None


def _template_line(tb: TracebackType | None) -> str:
    """', line N' of the template where a render error happened (Jinja2 rewrites the
    traceback so that template frames carry the template's own line numbers)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f", line {line}" if line is not None else ""


def read_table(path: Path) -> Table:
    """The rows of a CSV, JSON (a list of objects) or JSON Lines file."""
    text = _read_text(path, "data")
    if not text.strip():
        raise ReportError(f"data file {path} is empty")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        table = _json_lines(path, text)
    elif suffix == ".json":
        table = _json_list(path, text)
    elif suffix in (".csv", ".tsv", ".txt") or text.lstrip()[:1] not in ("[", "{"):
        table = _csv(path, text)
    elif text.lstrip().startswith("["):
        table = _json_list(path, text)
    else:
        table = _json_lines(path, text)
    if not table.rows:
        raise ReportError(f"data file {path} has no rows")
    if not table.columns or any(not c for c in table.columns):
        raise ReportError(f"data file {path}: every column needs a name (the header: {', '.join(table.columns)})")
    return table


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ReportError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise ReportError(f"{what} file {path} is a folder") from None
    except UnicodeDecodeError as exc:
        raise ReportError(f"cannot read {what} file {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ReportError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None


def _csv(path: Path, text: str) -> Table:
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect, strict=True)
    records: list[tuple[int, list[str]]] = []
    done = 0  # lines read: a bad record starts on the next one (a quote left open ends at EOF)
    with _csv_errors(path, lambda: done + 1):
        for row in reader:
            if any(cell.strip() for cell in row):
                records.append((done + 1, [_cell(c) for c in row]))
            done = reader.line_num
    if not records:
        raise ReportError(f"data file {path} has no rows")
    (_, header), body = records[0], records[1:]
    for line, row in body:
        if len(row) != len(header):
            raise ReportError(
                f"data file {path}, line {line}: {len(row)} fields, but the header has {len(header)}"
            )
    return Table(tuple(header), tuple(tuple(row) for _, row in body))


@contextmanager
def _csv_errors(path: Path, line: Callable[[], int]) -> Iterator[None]:
    try:
        yield
    except csv.Error as exc:
        raise ReportError(f"data file {path}, line {line()}: malformed CSV: {exc}") from None


def _json_list(path: Path, text: str) -> Table:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"data file {path}, line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(value, list):
        raise ReportError(f"data file {path}: expected a JSON list of objects, got {type(value).__name__}")
    return _objects(path, [(None, v) for v in value])


def _json_lines(path: Path, text: str) -> Table:
    items: list[tuple[int | None, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ReportError(f"data file {path}, line {n}, column {exc.colno}: {exc.msg}") from None
    return _objects(path, items)


def _objects(path: Path, items: Sequence[tuple[int | None, Any]]) -> Table:
    """Rows from JSON objects with the same keys (line numbers for JSON Lines)."""
    if not items:
        raise ReportError(f"data file {path} has no rows")
    columns: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = []
    for i, (line, obj) in enumerate(items):
        where = f"line {line}" if line is not None else f"item {i + 1}"
        if not isinstance(obj, dict):
            raise ReportError(f"data file {path}, {where}: expected an object, got {type(obj).__name__}")
        keys = tuple(str(k) for k in obj)
        if i == 0:
            columns = keys
        elif set(keys) != set(columns):
            missing = [k for k in columns if k not in keys]
            extra = [k for k in keys if k not in columns]
            detail = "; ".join(
                part
                for part in (
                    f"lacks {', '.join(missing)}" if missing else "",
                    f"has {', '.join(extra)} too" if extra else "",
                )
                if part
            )
            raise ReportError(f"data file {path}, {where}: not the first row's fields ({detail})")
        rows.append(tuple(_cell(_json_text(obj[k])) for k in columns))
    return Table(columns, tuple(rows))


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _cell(value: str) -> str:
    """A value on one line, without edge spaces."""
    return " ".join(value.split())


def check_output(path: Path) -> None:
    """Raise ReportError unless a report can be saved at `path` (checked before generating)."""
    if path.is_dir():
        raise ReportError(f"output {path} is a folder")
    if not path.parent.is_dir():
        raise ReportError(f"output folder not found: {path.parent}")


def save(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file in the same folder,
    then renamed over it (an existing file is untouched if anything fails)."""
    check_output(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with suppress(OSError):
            os.unlink(tmp)
        raise ReportError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise

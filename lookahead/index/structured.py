"""Tables of records found in a prompt's text by parsing it: JSON, YAML-like lists, CSV.

The record index used to find data rows by line shape only (>= 3 one-line records with the
same separators), which misses data as prompts often carry it: pretty-printed JSON (one
field per line), JSON nested under a key, YAML lists, `key: value` blocks, CSV with quoted
fields. Here the text is parsed instead, and every value keeps its character span, so the
caller (`lookahead.index.datablock`) can map it back to the prompt's tokens.

Recognised, each giving one `Table` (records x columns):
- JSON anywhere in the text (in ``` fences or not, pretty-printed or compact): an array
  of >= 2 objects, maybe the value of a key of an object ({"servers": [...]}); and JSON
  Lines, consecutive lines that are each an object;
- YAML-like lists of mappings ("- name: web-01" then "  cpu: 42" lines), maybe under a
  "servers:" line, and `key: value` blocks separated by blank lines (>= 3 blocks);
- CSV with quoted fields (a field may hold the delimiter), delimiters `,` `;` tab `|`.
  Plain CSV, TSV and markdown tables are left to the line-shape detection, which reads them
  as well and is what the rest was tuned on.

Only the simple shapes are read: the parsers are small and restricted on purpose (no YAML
anchors, multi-line strings or flow style); a value that is itself an object or a list is
not a column. Everything is pure and bounded: at most `_MAX_TEXT` characters are read and
at most `_MAX_TRIES` JSON parses tried.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]

Span = tuple[int, int]  # [start, end) characters of the text

_MAX_TEXT = 200_000
_MAX_TRIES = 2000
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_INTEGER = re.compile(r"-?\d+")
_WORDS = {"true": True, "false": False, "null": None}
_WS = " \t\n\r"
# "key: value" and "- key: value": a short key, then a value on the same line
_KEY_VALUE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<dash>- +)?(?P<key>[A-Za-z_][\w .\-]{0,39}?)"
    r"[ \t]*:[ \t]+(?P<value>\S.*?)[ \t]*$"
)
_DELIMITERS = (",", ";", "\t", "|")


@dataclass(frozen=True)
class Table:
    """Records found in the text: rows[r][c] is the value of column c in record r, as
    (span in the text, value text); None where the record lacks it. A value's text can
    differ from the text at its span (JSON escapes); the span is where it was written."""

    columns: tuple[str, ...]
    rows: tuple[tuple[tuple[Span, str] | None, ...], ...]
    span: Span  # the whole data, from its first character to its last

    @property
    def cells(self) -> int:
        return sum(cell is not None for row in self.rows for cell in row)


def find_table(text: str, plain: bool = False) -> Table | None:
    """The biggest table (most values) of records in the text, or None. With `plain`, only
    delimited lines under a header (TSV, a markdown table, CSV without quotes): what the
    line shape reads too, but not always well (a tab or a "," glued to the next word in one
    token, a "07:45" split at its ":")."""
    text = text[:_MAX_TEXT]
    tables = _csv_tables(text, plain=True) if plain else _json_tables(text) + _yaml_tables(text) + _csv_tables(text)
    tables = [t for t in tables if len(t.rows) >= 2 and len(t.columns) >= 2]
    return max(tables, key=lambda t: t.cells, default=None)


# --- JSON ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scalar:
    span: Span
    text: str


class _Object(dict):  # key -> node; the object's span kept beside
    span: Span = (0, 0)


class _Array(list):
    span: Span = (0, 0)


def _json_tables(text: str) -> list[Table]:
    """Tables from the JSON values in the text: arrays of objects (top level or one key
    down) and runs of objects on consecutive lines (JSON Lines)."""
    values: list[_Object | _Array] = []
    tries, i = 0, 0
    while tries < _MAX_TRIES:
        i = _next_open(text, i)
        if i < 0:
            break
        tries += 1
        try:
            node, end = _value(text, i)
        except (ValueError, IndexError, RecursionError):
            i += 1
            continue
        if isinstance(node, (_Object, _Array)):
            values.append(node)
        i = end
    tables: list[Table] = []
    run: list[_Object] = []  # objects one after the other, only white space between
    for node in values + [_Array()]:
        if isinstance(node, _Object) and (not run or not text[run[-1].span[1] : node.span[0]].strip(_WS)):
            run.append(node)
        else:
            if len(run) >= 2:
                tables.extend(_records(run, (run[0].span[0], run[-1].span[1])))
            run = [node] if isinstance(node, _Object) else []
        if isinstance(node, _Array):
            tables.extend(_records(list(node), node.span))
        elif isinstance(node, _Object):
            for child in node.values():
                if isinstance(child, _Array):
                    tables.extend(_records(list(child), child.span))
    return tables


def _next_open(text: str, i: int) -> int:
    a, b = text.find("[", i), text.find("{", i)
    return min(a, b) if a >= 0 and b >= 0 else max(a, b)


def _records(items: Sequence[object], span: Span) -> list[Table]:
    """The table of a list of JSON objects: columns are the first object's keys with a
    scalar value (in its order) that most objects have."""
    if len(items) < 2 or not all(isinstance(o, _Object) for o in items):
        return []
    objects: list[_Object] = [o for o in items if isinstance(o, _Object)]
    keys = [k for k, v in objects[0].items() if isinstance(v, _Scalar)]
    keys = [k for k in keys if 2 * sum(isinstance(o.get(k), _Scalar) for o in objects) > len(objects)]
    rows = tuple(
        tuple((o[k].span, o[k].text) if isinstance(o.get(k), _Scalar) else None for k in keys) for o in objects
    )
    return [Table(tuple(keys), rows, span)]


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _value(text: str, i: int) -> tuple[object, int]:
    """The JSON value starting at text[i] (after white space) and the index past it."""
    i = _skip(text, i)
    c = text[i]
    if c == "{":
        obj = _Object()
        i = _skip(text, i + 1)
        if text[i] == "}":
            obj.span = (i, i + 1)
            return obj, i + 1
        start = i
        while True:
            if text[i] != '"':
                raise ValueError("key expected")
            key, i = scanstring(text, i + 1)
            i = _skip(text, i)
            if text[i] != ":":
                raise ValueError("':' expected")
            obj[key], i = _value(text, i + 1)
            i = _skip(text, i)
            if text[i] == "}":
                obj.span = (start - 1, i + 1)
                return obj, i + 1
            if text[i] != ",":
                raise ValueError("',' expected")
            i = _skip(text, i + 1)
    if c == "[":
        arr = _Array()
        start = i
        i = _skip(text, i + 1)
        if text[i] == "]":
            arr.span = (start, i + 1)
            return arr, i + 1
        while True:
            item, i = _value(text, i)
            arr.append(item)
            i = _skip(text, i)
            if text[i] == "]":
                arr.span = (start, i + 1)
                return arr, i + 1
            if text[i] != ",":
                raise ValueError("',' expected")
            i += 1
    if c == '"':
        s, end = scanstring(text, i + 1)
        return _Scalar((i + 1, end - 1), s), end
    m = _NUMBER.match(text, i)
    if m:
        return _Scalar(m.span(), m.group()), m.end()
    for word in _WORDS:
        if text.startswith(word, i):
            return _Scalar((i, i + len(word)), word), i + len(word)
    raise ValueError("value expected")


# --- YAML lists and key: value blocks --------------------------------------------------


def _yaml_tables(text: str) -> list[Table]:
    """Records of "key: value" lines: a "- " line starts one (a YAML list of mappings),
    and so does the first such line after a blank or other line; a line with the same
    indent as the record's keys goes on with it. Runs of records with the same keys, only
    blank lines between them, are tables."""
    records: list[tuple[bool, dict[str, tuple[Span, str]], Span]] = []  # (dashed, values, span)
    cur: dict[str, tuple[Span, str]] | None = None
    key_col, dashed, start, end = -1, False, 0, 0
    pos = 0
    for line in text.split("\n"):
        line_start, pos = pos, pos + len(line) + 1
        m = _KEY_VALUE.match(line)
        if m is None:
            if cur is not None:
                records.append((dashed, cur, (start, end)))
                cur = None
            if line.strip():
                records.append((False, {}, (line_start, line_start)))  # breaks a run
            continue
        col = m.start("key")
        if cur is not None and (m.group("dash") or col != key_col or m.group("key") in cur):
            records.append((dashed, cur, (start, end)))
            cur = None
        if cur is None:
            cur, key_col, dashed, start = {}, col, bool(m.group("dash")), line_start + m.start()
        value_start, value_end = m.span("value")
        value = m.group("value")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value, value_start, value_end = value[1:-1], value_start + 1, value_end - 1
        cur[m.group("key")] = ((line_start + value_start, line_start + value_end), value)
        end = line_start + m.end()
    if cur is not None:
        records.append((dashed, cur, (start, end)))
    tables: list[Table] = []
    run: list[tuple[bool, dict[str, tuple[Span, str]], Span]] = []
    for rec in records + [(False, {}, (0, 0))]:
        if run and rec[1] and rec[0] == run[0][0] and rec[1].keys() == run[0][1].keys():
            run.append(rec)
            continue
        if run and len(run) >= (2 if run[0][0] else 3) and len(run[0][1]) >= 2:
            keys = tuple(run[0][1])
            if not any(_placeholder(v) for r in run for _, v in r[1].values()):
                tables.append(
                    Table(keys, tuple(tuple(r[1][k] for k in keys) for r in run), (run[0][2][0], run[-1][2][1]))
                )
        run = [rec] if rec[1] else []
    return tables


def _placeholder(value: str) -> bool:
    """A template's "<name>" value: the template's own lines, not data."""
    return "<" in value and ">" in value


# --- CSV with quoted fields ------------------------------------------------------------


def _csv_tables(text: str, plain: bool = False) -> list[Table]:
    """Runs of >= 3 lines that split into the same number (>= 2) of fields at one
    delimiter, reading double-quoted fields as CSV does, a markdown table's outer pipes and
    `---` line set aside. Only runs with a quoted field holding the delimiter, unless
    `plain`: then only runs under a header line (the line shape reads the others)."""
    lines: list[tuple[int, str]] = []
    pos = 0
    for line in text.split("\n"):
        lines.append((pos, line))
        pos += len(line) + 1
    tables: list[Table] = []
    for delim in _DELIMITERS:
        split = [_split(line, start, delim) for start, line in lines]
        i = 0
        while i < len(split):
            j = i
            while j < len(split) and split[j] is not None and len(split[j]) == len(split[i] or ()) >= 2:  # type: ignore[arg-type]
                j += 1
            rows = [row for row in split[i:j] if row is not None and not _rule(row)]
            quoted = any(delim in value for row in rows for _, value in row)
            if j - i >= 3 and len(rows) >= 3 and (quoted or plain):
                names = [value.strip().lower() for _, value in rows[0]]
                # a header names columns the template names too; else row 0 is data
                named = sum(text.lower().count(w) >= 2 for w in names if w and not _NUMBER.fullmatch(w))
                header = 2 * named >= len(names) and not any(_NUMBER.fullmatch(w) for w in names)
                if header or not plain:
                    columns = tuple(names) if header else tuple(str(c) for c in range(len(names)))
                    body = tuple(tuple(row) for row in rows[1 if header else 0 :])
                    tables.append(Table(columns, body, (lines[i][0], lines[j - 1][0] + len(lines[j - 1][1]))))
            i = max(j, i + 1)
    return tables


def _rule(row: list[tuple[Span, str]]) -> bool:
    """A markdown table's `| --- | :-: |` line."""
    return all(value and not value.strip("-: ") for _, value in row)


def _split(line: str, offset: int, delim: str) -> list[tuple[Span, str]] | None:
    """The line's fields at `delim` (spans from `offset`), quotes as CSV reads them; None for
    a line without the delimiter or with an unclosed quote."""
    if delim not in line:
        return None
    fields: list[tuple[Span, str]] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] == " ":
            i += 1
        if i < n and line[i] == '"':
            j, parts = i + 1, []
            while True:
                k = line.find('"', j)
                if k < 0:
                    return None
                parts.append(line[j:k])
                if line.startswith('""', k):
                    parts.append('"')
                    j = k + 2
                    continue
                break
            fields.append(((offset + i + 1, offset + k), "".join(parts)))
            i = k + 1
            while i < n and line[i] == " ":
                i += 1
            if i < n and line[i] != delim:
                return None
        else:
            k = line.find(delim, i)
            k = n if k < 0 else k
            raw = line[i:k].rstrip(" \r")
            fields.append(((offset + i, offset + i + len(raw)), raw))
            i = k
        if i >= n:
            if delim == "|" and len(fields) > 2 and not fields[0][1] and not fields[-1][1].strip():
                fields = fields[1:-1]  # "| a | b |": the pipes at the edges hold no field
            return fields
        i += 1  # past the delimiter


# --- values the report may write in another format ---------------------------------------


def other_forms(values: list[str | None]) -> list[tuple[str, list[str | None]]]:
    """Other ways a report writes a column's values, as (name suffix, values): "%" for
    fractions written as percentages (0.31 as "31"), "," for integers of 1000 and more
    written with a thousands separator (1284500 as "1,284,500"), "!" and "?" for JSON's
    true and false written as "True" or "Yes". Each becomes a column of its own, so a value
    written either way is still recognised and copied."""
    present = [v for v in values if v is not None]
    if len(present) >= 2 and all(v in ("true", "false") for v in present):
        return [
            ("!", [None if v is None else v.capitalize() for v in values]),
            ("?", [None if v is None else ("Yes" if v == "true" else "No") for v in values]),
        ]
    numbers: list[float] = []
    for v in values:
        if v is None:
            continue
        if not _NUMBER.fullmatch(v):
            return []
        numbers.append(float(v))
    if len(numbers) < 2:
        return []
    out: list[tuple[str, list[str | None]]] = []
    if all(-1 <= x <= 1 for x in numbers) and any(x != int(x) for x in numbers):
        out.append(("%", [None if v is None else f"{round(float(v) * 100, 6):g}" for v in values]))
    if all(_INTEGER.fullmatch(v) for v in present) and any(abs(int(v)) >= 1000 for v in present):
        out.append((",", [None if v is None else f"{int(v):,}" for v in values]))
    return out

"""A prompt's data block, parsed for the record index: data rows, header, placeholders.

Step 1 of the record index (see `lookahead.index.records`). The prompt's text is parsed
first (`lookahead.index.structured`: JSON, YAML-like lists, `key: value` blocks, quoted
CSV), and each value found is mapped back to the prompt's tokens: the tokens it spans when
its edges fall on token edges, else the value's own tokenization. Columns the report may
write in another format (fractions as percentages, thousands separators, true as "Yes")
get a column per format, with `DataBlock.aliases` naming the column each one rewrites.

When no such table is found, the line shape is read: in the prompt, a line's fields are
its runs of tokens between separator tokens (made of `,;|:` and tabs, maybe with spaces),
without the spaces, quotes and brackets at their edges. The data block is the run of >= 3
consecutive lines with the same number (>= 2) of fields that has the most cells past the
first column. Its first line is a header when it names the template's columns. If it has
none, delimited lines under a header are parsed instead (a tab or a "," glued to the next
word in one token, a "07:45" split at its ":" mislead the line shape). Each "<name>"
placeholder of the template that names a column (loosely: "<last_reading>" names
"last reading") is that column's value; "<share>%" names the column's percentage form.

`parse_data_block` is pure: it reads the prompt's tokens and returns a `DataBlock`, which
the record index only reads. `TokenText` holds a vocabulary's token texts and the
per-token classes both of them use (cached per token, the only state it keeps).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from lookahead.index.structured import Table, find_table, other_forms

Field = tuple[int, ...]  # a field's tokens
FormKey = tuple[int, int, bool]  # (row, field, spaced)

_SEPARATOR_CHARS = frozenset(b"\t,;|:")
# Tokens of only these (and no separator) pad a field: dropped at its edges, kept inside it.
_PAD_CHARS = frozenset(b" \"'`()[]{}")
MAX_FIELDS = 4096  # data cells indexed at most
_PLACEHOLDER_TOKENS = 8  # a "<name>" placeholder spans fewer tokens than this


class Kind:
    """What a token is to a data line."""

    OTHER, SEPARATOR, NEWLINE, SPACE = 0, 1, 2, 3


class TokenText:
    """A vocabulary's token texts and the classes the record index reads, cached per token."""

    def __init__(self, token_bytes: Callable[[int], bytes], tokenize: Callable[[str], list[int]] | None = None) -> None:
        """token_bytes: a token's text (to find lines and separators); tokenize: text to
        tokens, to find the spaced form of a line's first word (" web" in "### web-02" for
        "web" at the start of a data line) and the text around a placeholder."""
        self.token_bytes = token_bytes
        self.tokenize = tokenize
        self._kinds: dict[int, int] = {}
        self._numbers: dict[int, bool] = {}

    def kind(self, token: int) -> int:
        kind = self._kinds.get(token)
        if kind is None:
            raw = self.token_bytes(token)
            if b"\n" in raw:
                kind = Kind.NEWLINE
            elif raw and all(c in _SEPARATOR_CHARS or c in _PAD_CHARS for c in raw):
                # "," or ", " separates fields; a lone " " may sit inside one ("python 3.8"),
                # a quote or bracket around one ("{"name": "web-01"}")
                kind = Kind.SEPARATOR if any(c in _SEPARATOR_CHARS for c in raw) else Kind.SPACE
            else:
                kind = Kind.OTHER
            self._kinds[token] = kind
        return kind

    def numeric(self, token: int) -> bool:
        number = self._numbers.get(token)
        if number is None:
            number = self._numbers[token] = any(c in b"0123456789" for c in self.token_bytes(token))
        return number

    def bytes(self, tokens: Iterable[int]) -> bytes:
        return b"".join(self.token_bytes(t) for t in tokens)

    def text(self, tokens: Iterable[int]) -> str:
        return self.bytes(tokens).decode("utf-8", "replace")

    def with_space(self, field: Field) -> Field | None:
        """The tokens of " " + the field's text (the field itself if it starts with a space;
        maybe a lone " " token and then the field, as digits are written)."""
        raw = self.bytes(field)
        if raw[:1].isspace():
            return field
        if self.tokenize is None:
            return None
        try:
            toks = tuple(self.tokenize(" " + raw.decode("utf-8")))
        except UnicodeDecodeError:
            return None
        return toks or None


@dataclass(frozen=True)
class Placeholder:
    """A template's "<name>" naming column `field`: prompt tokens [start, end) read as the
    tokens `before` the "<", that field's value, and the tokens `after` the ">"."""

    start: int
    end: int
    before: Field
    field: int
    spaced: bool  # a space comes before the value
    after: Field


@dataclass(frozen=True)
class DataBlock:
    """What `parse_data_block` finds in a prompt (no rows: not a report's prompt)."""

    tokens: tuple[int, ...]  # the prompt
    rows: tuple[tuple[Field, ...], ...]  # rows[r][f]: the tokens of field f of data row r
    columns: tuple[str, ...]  # the header's column names (lowercased last words), or none
    span: tuple[int, int]  # the block's lines (header included) as a token span of the prompt
    placeholders: tuple[Placeholder, ...]  # in prompt order, never overlapping
    # forms[(row, field, spaced)]: a field's tokens as in the prompt (spaced=False) and as
    # written after a space (" Ghent" is " Gh" "ent", not " " "G" "h" "ent")
    forms: Mapping[FormKey, Field]
    # aliases[f]: the column that column f writes in another format ("1,284,500" for
    # "1284500"); where that format changes nothing ("956") f has no form, the column's is used
    aliases: Mapping[int, int] = dataclasses.field(default_factory=dict)


def parse_data_block(prompt: Sequence[int], text: TokenText) -> DataBlock:
    """The prompt's data rows, header and column placeholders (see the module docstring)."""
    tokens = tuple(prompt)
    parsed = _parsed_block(tokens, text)
    if parsed is not None:
        return parsed
    block = _line_block(tokens, text)
    if not block.columns:
        # no header found by line shape: delimited lines under a header, parsed, do better
        parsed = _parsed_block(tokens, text, plain=True)
        if parsed is not None:
            return parsed
    return block


def _line_block(tokens: tuple[int, ...], text: TokenText) -> DataBlock:
    """The data block found by line shape (see the module docstring)."""
    lines, ends = _lines(tokens, text)
    # the biggest block of consecutive lines with the same field count (>= 2)
    best: tuple[int, int, int] = (0, 0, 0)  # (cells, start, end)
    start = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or len(lines[i]) != len(lines[start]):
            count, width = i - start, len(lines[start])
            # data has several columns; a template's "key: <value>" lines have two
            if count >= 3 and width >= 2 and count * (width - 1) > best[0]:
                best = (count * (width - 1), start, i)
            start = i
    rows = lines[best[1] : best[2]]
    span = (ends[best[1] - 1] if best[1] > 0 else 0, ends[best[2] - 1]) if rows else (0, 0)
    columns: tuple[str, ...] = ()
    if len(rows) >= 3 and _is_header(rows[0], rows[1], tokens, text):
        # column names, to read the template's placeholders ("<region>") as fields
        columns = tuple(_column_name(f, text) for f in rows.pop(0))
    return _block(tokens, text, rows, columns, span)


def _block(
    tokens: tuple[int, ...],
    text: TokenText,
    rows: Sequence[Sequence[Field]],
    columns: tuple[str, ...],
    span: tuple[int, int],
) -> DataBlock:
    if sum(len(row) for row in rows) > MAX_FIELDS:
        return DataBlock(tokens, (), (), (0, 0), (), {})  # too big to tokenize every field twice
    forms: dict[FormKey, Field] = {}
    for r, row in enumerate(rows):
        for f, field in enumerate(row):
            if not field:
                continue  # a value the record lacks (or an empty one) is never copied
            forms[(r, f, False)] = field
            spaced = text.with_space(field)
            if spaced is not None:
                forms[(r, f, True)] = spaced
    placeholders = _placeholders(tokens, columns, text) if columns else ()
    return DataBlock(tokens, tuple(tuple(row) for row in rows), columns, span, placeholders, forms)


def _parsed_block(tokens: tuple[int, ...], text: TokenText, plain: bool = False) -> DataBlock | None:
    """The data block of the table the prompt's text parses into, or None (no table, or
    none of its values could be mapped to tokens)."""
    pieces = [text.token_bytes(t) for t in tokens]
    raw = b"".join(pieces)
    string = raw.decode("utf-8", "surrogateescape")  # one character per byte it cannot read
    table = find_table(string, plain=plain)
    if table is None:
        return None
    char_byte = [0] * (len(string) + 1)  # character offset -> byte offset
    for i, ch in enumerate(string):
        char_byte[i + 1] = char_byte[i] + len(ch.encode("utf-8", "surrogateescape"))
    starts = [0] * (len(tokens) + 1)  # token i covers bytes [starts[i], starts[i + 1])
    for i, piece in enumerate(pieces):
        starts[i + 1] = starts[i] + len(piece)
    first = {b: i for i, b in reversed(list(enumerate(starts[:-1])))}  # byte -> token starting there
    past = {b: i for i, b in enumerate(starts)}  # byte -> the token just past one ending there
    rows: list[list[Field]] = []
    for record in table.rows:
        row: list[Field] = []
        for cell in record:
            if cell is None or not cell[1].strip():
                row.append(())
                continue
            (a, b), value = cell
            lo, hi = first.get(char_byte[a]), past.get(char_byte[b])
            if lo is not None and hi is not None and lo < hi and string[a:b] == value:
                row.append(tokens[lo:hi])  # the value's own tokens in the prompt
            elif text.tokenize is not None:
                row.append(tuple(text.tokenize(value)))  # its edges cut tokens: as written alone
            else:
                row.append(())
        rows.append(row)
    if not any(field for row in rows for field in row):
        return None
    columns = [_normal(c) for c in table.columns]
    aliases = _add_other_forms(table, rows, columns, text)
    start = bisect.bisect_right(starts, char_byte[table.span[0]]) - 1
    end = bisect.bisect_left(starts, char_byte[table.span[1]])
    block = _block(tokens, text, rows, tuple(columns), (max(start, 0), min(end, len(tokens))))
    return replace(block, aliases=aliases) if block.rows else block


def _add_other_forms(table: Table, rows: list[list[Field]], columns: list[str], text: TokenText) -> dict[int, int]:
    """A column the report may write in another format gets a column per format (named
    after it: "share%", "revenue,", "loanable!"), its values tokenized as written that way; a
    value that format leaves as it was is not repeated (two columns would claim it).
    Returns each new column's original."""
    aliases: dict[int, int] = {}
    if text.tokenize is None:
        return aliases
    for f in range(len(table.columns)):
        values = [None if record[f] is None else record[f][1] for record in table.rows]  # type: ignore[index]
        for suffix, formatted in other_forms(values):
            aliases[len(columns)] = f
            columns.append(columns[f] + suffix)
            for row, value, old in zip(rows, formatted, values, strict=True):
                row.append(tuple(text.tokenize(value)) if value and value != old else ())
    return aliases


def _normal(name: str) -> str:
    """A column or placeholder name compared loosely: "Last_Reading" reads "last reading"."""
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def _lines(tokens: tuple[int, ...], text: TokenText) -> tuple[list[list[Field]], list[int]]:
    """Each line's fields, and the token index just past each line."""
    lines: list[list[Field]] = []
    ends: list[int] = []
    fields: list[Field] = []
    cur: list[int] = []
    for i, t in enumerate(tokens):
        kind = text.kind(t)
        if kind == Kind.OTHER or (kind == Kind.SPACE and cur):
            cur.append(t)
            continue
        if kind == Kind.SPACE:
            continue  # space before a field
        while cur and text.kind(cur[-1]) == Kind.SPACE:
            cur.pop()  # space after a field
        if cur:
            fields.append(tuple(cur))
            cur = []
        if kind == Kind.NEWLINE:
            lines.append(fields)
            ends.append(i + 1)
            fields = []
    while cur and text.kind(cur[-1]) == Kind.SPACE:
        cur.pop()
    if cur:
        fields.append(tuple(cur))
    lines.append(fields)
    ends.append(len(tokens))
    return lines, ends


def _is_header(row: list[Field], after: list[Field], tokens: tuple[int, ...], text: TokenText) -> bool:
    """A block's first line is its header (column names, not data) when it shares no field
    with the next line (JSON lines repeat their keys) and most of its words also occur
    elsewhere in the prompt: the template names the same columns."""
    if set(row) & set(after):
        return False
    prompt = text.text(tokens).lower()
    words = [w for w in (text.text(f).strip(" ()[]:").lower() for f in row) if sum(c.isalpha() for c in w) >= 3]
    named = sum(prompt.count(w) >= 2 for w in words)
    return len(words) >= 2 and 2 * named >= len(row)


def _column_name(field: Field, text: TokenText) -> str:
    words = text.text(field).lower().replace("(", " ").replace(")", " ").split()
    return words[-1] if words else ""


def _placeholders(tokens: tuple[int, ...], columns: tuple[str, ...], text: TokenText) -> tuple[Placeholder, ...]:
    """Every "<name>" naming a column ("<region>", "<old version>" for the column "old"),
    scanning the prompt left to right past each one found."""
    found: list[Placeholder] = []
    i = 0
    while i < len(tokens):
        p = _placeholder(tokens, i, columns, text)
        if p is None:
            i += 1
        else:
            found.append(p)
            i = p.end
    return tuple(found)


def _placeholder(tokens: tuple[int, ...], i: int, columns: tuple[str, ...], text: TokenText) -> Placeholder | None:
    """A "<name>" placeholder naming a column, opening at token i, or None."""
    opening = text.text([tokens[i]])
    if not opening.endswith("<") or text.tokenize is None:
        return None
    for j in range(i + 1, min(i + _PLACEHOLDER_TOKENS, len(tokens))):
        closing = text.text([tokens[j]])
        if ">" not in closing:
            continue
        inner = text.text(tokens[i + 1 : j]) + closing[: closing.index(">")]
        name = _normal(inner)
        field = next(
            (f for f, col in enumerate(columns) if col and (name == col or name.startswith(col + " "))),
            None,
        )
        if field is None:
            return None
        lead, rest = opening[:-1], closing[closing.index(">") + 1 :]
        after_text = rest or text.text(tokens[j + 1 : j + 2])
        if after_text.startswith("%") and columns[field] + "%" in columns:
            field = columns.index(columns[field] + "%")  # "<share>%": the fraction as a percentage
        spaced = lead.endswith(" ") or (lead == "" and opening.startswith(" "))
        before = tuple(text.tokenize(lead.rstrip(" "))) if lead.rstrip(" ") else ()
        after = tuple(text.tokenize(rest)) if rest else ()
        return Placeholder(i, j + 1, before, field, spaced, after)
    return None

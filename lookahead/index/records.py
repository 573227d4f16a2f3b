"""Record drafting: the next record of a report is the last one with the next data row's values.

A templated report writes one record per data row ("### web-02\\n- CPU: 87%\\n- Memory: ...").
The suffix and n-gram indexes copy the template between values, but every value is new
text, so each one breaks their match and the template after it is only found again a token
or two later. This index drafts straight through the values:

1. **Data rows.** In the prompt, a line's fields are its runs of tokens between separator
   tokens (made of `,;|:` and tabs, maybe with spaces), without the spaces, quotes and
   brackets at their edges. The data block is the run of >= 3 consecutive lines with the
   same number (>= 2) of fields that has the most cells past the first column (a template's
   "key: <value>" lines have only two columns): a CSV-like or markdown table, JSON lines.
   Parsing it is `lookahead.index.datablock.parse_data_block`, a pure function.
2. **Values.** Each output token that starts a field of a data row (preferring a later field
   of the row in use, then the next row), and the tokens that go on copying that field,
   form a value. The output is kept a second time, normalized: each value becomes one
   symbol, VALUE + its field number, so records with different values read the same.
3. **Drafting.** The longest recent suffix (up to 4 symbols) of the normalized stream is
   looked up at its previous occurrence; what followed there is the draft, with each value
   symbol replaced by that field of the row the current record uses, and a value still being
   written finished first. The row shift is learned from the last value before the match
   (the same field of one record and the next are one row apart), or, at the start of a
   record, the row after the one the copied record used.

Everything per token is O(1) (a few dict updates); a proposal walks at most `max_depth`
symbols. `RecordIndex` drafts over one parsed block; `RecordSource` is the draft source a
`Proposer` holds: it parses its first `observe` (the prompt) and, when that has data rows,
hands the stream to a `RecordIndex`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from lookahead.core.draft import SOURCE_RECORD, Candidate
from lookahead.index.datablock import DataBlock, FormKey, Kind, TokenText, parse_data_block
from lookahead.index.walk import int_list

# Normalized symbols for values: VALUE + field number, above any vocabulary.
VALUE = 1 << 40
_LONGEST = 4  # longest normalized suffix looked up
_TEMPLATE_ROW = -1  # the row of a template placeholder's value symbol: before the first
_TEXT = -2  # the "row" of a symbol that is not a value
_Q_NUMBER = 0.5  # q factor for a digit copied from an earlier record's text (not its data)
_Q_ONCE = 0.85  # q factor for text seen only once (not yet repeated by two records)
_Q_PLACEHOLDER = 0.1  # q factor for a template's own "<...>" placeholder text
_Q_SHORT = (0.0, 0.7, 0.85)  # q factor for what follows a match of 1 or 2 symbols


class RecordSource:
    """The record draft source of a `Proposer`: the first `observe` is the prompt, parsed
    into a data block; with data rows a `RecordIndex` drafts from then on, without any it
    drafts nothing and skips the stream."""

    source = SOURCE_RECORD

    def __init__(
        self,
        token_bytes: Callable[[int], bytes],
        tokenize: Callable[[str], list[int]] | None = None,
        max_candidates: int = 1,
    ) -> None:
        """token_bytes, tokenize: as for `TokenText`; max_candidates: as for `RecordIndex`."""
        self._text = TokenText(token_bytes, tokenize)
        self._max_candidates = max_candidates
        self._prompt_seen = False
        self.index: RecordIndex | None = None

    def observe(self, tokens: Iterable[int]) -> None:
        if self._prompt_seen:
            if self.index is not None:
                self.index.observe(tokens)
            return
        self._prompt_seen = True
        block = parse_data_block(int_list(tokens), self._text)
        if block.rows:
            self.index = RecordIndex(block, self._text, max_candidates=self._max_candidates)

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        return [] if self.index is None else self.index.propose(max_depth, max_candidates)


class RecordIndex:
    """Record drafts over a prompt's data block (see the module docstring): the prompt is
    the start of the stream; `observe` appends the output."""

    source = SOURCE_RECORD

    def __init__(
        self,
        block: DataBlock,
        text: TokenText,
        q_template: float = 0.95,
        q_value: float = 0.93,
        max_candidates: int = 1,
    ) -> None:
        """block: the prompt's data block, from `parse_data_block`; text: the vocabulary it
        was parsed with; q_template, q_value: the estimates given to copied template tokens
        and to substituted value tokens; max_candidates: drafts offered per step at most,
        whatever the tree could take (see `propose`)."""
        self.block = block
        self._text = text
        self.q_template = q_template
        self.q_value = q_value
        self.max_candidates = max_candidates
        self._forms = block.forms
        # token -> the (row, field, spaced) forms it starts; a lone " " first is its own
        # token in text, so such a form is never started
        self._starts: dict[int, list[FormKey]] = {}
        for key, form in block.forms.items():
            if text.token_bytes(form[0]).strip():
                self._starts.setdefault(form[0], []).append(key)
        # normalized stream: symbols, the data row of each value symbol (_TEMPLATE_ROW for a
        # template placeholder, _TEXT for a symbol that is not a value)
        self._sym: list[int] = []
        self._sym_row: list[int] = []
        self._sym_spaced: list[bool] = []  # a value whose first token took a space
        # key (last L symbols) -> (latest end index, previous end index, occurrences)
        self._seen: dict[tuple[int, ...], tuple[int, int, int]] = {}
        # The value being written: (row, field, offset, spaced) and its tokens so far. It
        # joins the normalized stream once it has copied its whole field; if it stops short
        # its tokens join as text ("80" in "below 80" is not the field "87").
        self._open: tuple[int, int, int, bool] | None = None
        self._open_tokens: list[int] = []
        # row and field of the last whole value
        self._last_row = -1
        self._last_field = -1
        self._row_fields: set[int] = set()  # the fields of that row written since it began
        # how the written records moved between data rows: to the next row (as drafts
        # assume) or elsewhere (records in another order than the data)
        self._next_moves = 0
        self._other_moves = 0
        # a column of numbers with another format (see `DataBlock.aliases`): the format the
        # report last wrote where the two differ, to read a value they agree on the same way
        self._variants: dict[int, list[int]] = {}
        for variant, column in block.aliases.items():
            self._variants.setdefault(column, []).append(variant)
        self._format: dict[int, int] = {}
        self._data_span = self._push_prompt()  # the data block in the normalized stream
        self._prompt_len = len(self._sym)  # symbols of the prompt in the normalized stream

    def __len__(self) -> int:
        return len(self._sym)

    # --- observing -------------------------------------------------------------------

    def observe(self, tokens: Iterable[int]) -> None:
        """Append output tokens (the prompt came with the block)."""
        for t in int_list(tokens):
            self._observe_output(t)

    def _text_factor(self, j: int) -> float:
        """How far to trust copying symbol j of the normalized stream as template text."""
        s = self._sym[j]
        if j < self._prompt_len and b"<" in self._text.token_bytes(s):
            return _Q_PLACEHOLDER  # "<major, minor or patch>": the model fills it in
        factor = 1.0
        if self._text.numeric(s):
            # a number outside the data is likely computed ("average 44.27"): it changes
            # from record to record
            factor *= _Q_NUMBER
        if j >= 2 and self._seen.get(tuple(self._sym[j - 2 : j + 1]), (0, 0, 0))[2] < 2:
            # written once so far: free text of one record as much as template
            factor *= _Q_ONCE
        return factor

    def _push_prompt(self) -> tuple[int, int]:
        """The prompt into the normalized stream, each template placeholder naming a column
        as that field's value symbol of a row before the first: so the first record can be
        drafted from the template. Returns the data block's span in the normalized stream."""
        tokens, data = self.block.tokens, self.block.span
        placeholders = {p.start: p for p in self.block.placeholders}
        i = 0
        span: list[int] = []  # where the data block begins and ends in the normalized stream
        while i < len(tokens):
            while len(span) < 2 and i >= data[len(span)]:
                span.append(len(self._sym))
            found = placeholders.get(i)
            if found is None:
                self._push(tokens[i])
                i += 1
                continue
            for t in found.before:
                self._push(t)
            self._push(VALUE + found.field, _TEMPLATE_ROW, found.spaced)
            for t in found.after:
                self._push(t)
            i = found.end
        span += [len(self._sym)] * (2 - len(span))
        return span[0], span[1]

    def _observe_output(self, t: int) -> None:
        if self._open is not None:
            r, f, o, spaced = self._open
            if self._forms[(r, f, spaced)][o + 1] != t:
                # another field that starts the same way ("web-01" or "web-02")?
                other = self._field_start(self._open_tokens + [t])
                if other is None or other[2] != spaced:
                    # it stopped before the field's end: text that only began like a value
                    pending, self._open, self._open_tokens = self._open_tokens, None, []
                    for p in pending:
                        self._push(p)
                    self._start_value(t)
                    return
                r, f = other[0], other[1]
            self._open = (r, f, o + 1, spaced)
            self._open_tokens.append(t)
            if o + 2 == len(self._forms[(r, f, spaced)]):
                self._close_value()
            return
        self._start_value(t)

    def _start_value(self, t: int) -> None:
        start = self._field_start([t])
        if start is None:
            self._push(t)
            return
        r, f, spaced = start
        self._open, self._open_tokens = (r, f, 0, spaced), [t]
        if len(self._forms[(r, f, spaced)]) == 1:
            self._close_value()

    def _close_value(self) -> None:
        """The open value copied its whole field: it becomes one symbol of the stream."""
        assert self._open is not None
        r, f, _, spaced = self._open
        self._open, self._open_tokens = None, []
        f = self._written_format(r, f)
        if r != self._last_row:
            if r == self._last_row + 1:
                self._next_moves += 1
            else:
                self._other_moves += 1
        if r != self._last_row:
            self._row_fields = set()
        self._row_fields.update((f, self.block.aliases.get(f, f)))
        self._last_row, self._last_field = r, f
        self._push(VALUE + f, r, spaced)

    def _written_format(self, r: int, f: int) -> int:
        """The column a whole value of row r, field f stands for: a number written in one
        of two formats that agree on it ("956" with or without a thousands separator) is
        read in the format the report last showed."""
        column = self.block.aliases.get(f)
        if column is not None:
            self._format[column] = f  # "1,284,500": the report writes separators
            return f
        variants = self._variants.get(f)
        if not variants:
            return f
        if any((r, v, False) in self._forms for v in variants):
            self._format[f] = f  # "1284500": it does not
            return f
        return self._format.get(f, f)

    def _field_start(self, prefix: list[int]) -> tuple[int, int, bool] | None:
        """The (row, field, spaced) whose field the tokens `prefix` most likely begin to
        copy: a later field of the row in use or one not written yet (the template may order
        the fields otherwise than the data), then the next row, then the same row again (a
        value said twice), then the nearest row."""
        places = self._starts.get(prefix[0])
        if not places:
            return None
        if len(prefix) > 1:
            rest = tuple(prefix[1:])
            places = [p for p in places if self._forms[p][1 : len(prefix)] == rest]
            if not places:
                return None
        row, field, written = self._last_row, self._last_field, self._row_fields
        aliases = self.block.aliases

        def rank(p: tuple[int, int, bool]) -> tuple[int, int, int]:
            if p[0] == row:
                later = p[1] > field or not (p[1] in written or aliases.get(p[1]) in written)
                return (0 if later else 2, 0, p[1])
            if p[0] == row + 1:
                return (1, 0, p[1])
            return (3, abs(p[0] - row - 1), p[0] * 1000 + p[1])

        return min(places, key=rank)

    def _push(self, symbol: int, row: int = _TEXT, spaced: bool = False) -> None:
        sym = self._sym
        sym.append(symbol)
        self._sym_row.append(row)
        self._sym_spaced.append(spaced)
        end = len(sym) - 1
        seen = self._seen
        for n in range(1, min(_LONGEST, len(sym)) + 1):
            key = tuple(sym[-n:])
            prev = seen.get(key)
            seen[key] = (end, prev[0], prev[2] + 1) if prev is not None else (end, -1, 1)

    # --- proposing -------------------------------------------------------------------

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        if not self.block.rows or max_depth <= 0 or len(self._sym) < 2:
            return []
        # Only the best match's draft by default: other matches' drafts are mostly wrong where
        # they differ from it, and took its first-child place on ties (bench/README.md).
        max_candidates = min(max_candidates, self.max_candidates)
        # A value being written is read both ways: as that value (finish it, then what
        # followed the value), or as text that only begins like one ("8" of "below 80").
        readings: list[tuple[list[int], bool]] = [([], False)]
        if self._open is not None:
            readings = [([VALUE + self._open[1]], True), (list(self._open_tokens), False)]
        found = [(n, end, finish) for tail, finish in readings for n, end in self._matches(tail)]
        found.sort(key=lambda m: -m[0])  # longest match first (stable: values first on ties)
        out: list[Candidate] = []
        seen: set[tuple[int, ...]] = set()
        for length, prev_end, finish in found:
            cand = self._draft(length, prev_end, max_depth, finish)
            if cand is not None and (key := tuple(cand.tokens.tolist())) not in seen:
                seen.add(key)
                out.append(cand)
                if len(out) >= max_candidates:
                    break
        return out

    def _matches(self, tail: list[int]) -> list[tuple[int, int]]:
        """(length, end index) of earlier occurrences of the suffixes of the normalized
        stream + `tail`, the latest one for each length, longest first, each place once. A
        shorter match can be the better one: "\n\n###" may last occur in the prompt's
        template while "###" alone finds the previous record."""
        sym = self._sym[-_LONGEST:] + tail
        end = len(self._sym) - 1  # the stream's own last symbol matches only itself
        out: list[tuple[int, int]] = []
        for n in range(min(_LONGEST, len(sym)), 0, -1):
            latest, prev, _ = self._seen.get(tuple(sym[-n:]), (-1, -1, 0))
            earlier = prev if latest == end and not tail else latest
            if earlier >= 0 and (earlier < end or tail) and all(e != earlier for _, e in out):
                out.append((n, earlier))
        return out

    def _draft(self, length: int, prev_end: int, max_depth: int, finish: bool) -> Candidate | None:
        """What followed the match ending at `prev_end`, values taken from the current row;
        with `finish`, the rest of the value being written first."""
        tokens: list[int] = []
        qs: list[float] = []
        # a match of one or two symbols is weak evidence of where in the record we are, for
        # the template tokens and the values it brings alike (a value after a weak match
        # would otherwise tie with the same place's value after a strong one)
        weak = _Q_SHORT[length] if length < len(_Q_SHORT) else 1.0
        q_tpl, q_val = weak * self.q_template, weak * self.q_value
        row = self._last_row
        if finish and self._open is not None:
            r, f, o, spaced = self._open
            row = r
            for t in self._forms[(r, f, spaced)][o + 1 :]:
                tokens.append(t)
                qs.append(self.q_value)
        shift = self._shift(prev_end, max_depth, row)
        sym, rows = self._sym, self._sym_row
        j = prev_end + 1
        in_data = self._data_span[0] <= j < self._data_span[1]
        while len(tokens) < max_depth and j < len(sym):
            s = sym[j]
            if in_data and self._text.kind(s) in (Kind.SEPARATOR, Kind.NEWLINE):
                break  # a match inside a data line copies the rest of that field only
            if s < VALUE:
                tokens.append(s)
                qs.append(q_tpl * self._text_factor(j))
            else:
                r = rows[j] + shift if shift is not None else -1
                f = s - VALUE
                # written with a space before or not, as the copied value was
                value = self._forms.get((r, f, self._sym_spaced[j]))
                if value is None and f in self.block.aliases:  # that format changes nothing there
                    value = self._forms.get((r, self.block.aliases[f], self._sym_spaced[j]))
                if value is None:
                    break  # past the last data row, a row of another shape, no such form
                tokens.extend(value)
                q = q_val if r == max(row, 0) else q_val * self._order_factor()
                qs.extend([q] * len(value))
            j += 1
        if not tokens:
            return None
        del tokens[max_depth:], qs[max_depth:]
        return Candidate(np.array(tokens, dtype=np.int32), np.array(qs, dtype=np.float32), SOURCE_RECORD)

    def _order_factor(self) -> float:
        """How far to trust a value of a row other than the one being written: the share of
        the record's moves between rows so far that went to the next row (1 before any)."""
        return (self._next_moves + 1) / (self._next_moves + self._other_moves + 1)

    def _shift(self, prev_end: int, max_scan: int, row: int) -> int | None:
        """Rows between the record being written (its row so far: `row`) and the one the
        match copies from.

        The last value at or before the match's end sits at the same place of the copied
        record as the last value written sits in the current one, so their rows differ by
        the shift: 1 between consecutive records, 0 inside one record, and also 1 at the
        start of a record (the copied record's start follows the record before it). With no
        value before the match (the first record was copied), the first value after it says
        which row the copied record used, and the current record uses the next one.
        """
        rows = self._sym_row
        # A template placeholder is row -1 to whatever record copies it; nothing written
        # yet (row -1) means the first record, row 0.
        for j in range(prev_end, max(prev_end - 512, -1), -1):
            if rows[j] != _TEXT:
                shift = max(row, 0) - rows[j]
                return shift if shift >= 0 else None
        for j in range(prev_end + 1, min(prev_end + 1 + max_scan, len(rows))):
            if rows[j] == _TEMPLATE_ROW:
                return row + 2  # a record start: the row after the last one written (row 0 first)
            if rows[j] != _TEXT:
                return row + 1 - rows[j] if row >= rows[j] else None
        return None

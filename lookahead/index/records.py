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
symbols.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from lookahead.draft import SOURCE_RECORD, Candidate
from lookahead.index.walk import int_list

# Normalized symbols for values: VALUE + field number, above any vocabulary.
VALUE = 1 << 40
_SEPARATOR_CHARS = frozenset(b"\t,;|:")
# Tokens of only these (and no separator) pad a field: dropped at its edges, kept inside it.
_PAD_CHARS = frozenset(b" \"'`()[]{}")
_LONGEST = 4  # longest normalized suffix looked up
_MAX_FIELDS = 4096  # data cells indexed at most
_TEMPLATE_ROW = -1  # the row of a template placeholder's value symbol: before the first
_TEXT = -2  # the "row" of a symbol that is not a value
_Q_NUMBER = 0.5  # q factor for a digit copied from an earlier record's text (not its data)
_Q_ONCE = 0.85  # q factor for text seen only once (not yet repeated by two records)
_Q_PLACEHOLDER = 0.1  # q factor for a template's own "<...>" placeholder text
_Q_SHORT = (0.0, 0.7, 0.85)  # q factor for what follows a match of 1 or 2 symbols


class _Kind:
    OTHER, SEPARATOR, NEWLINE, SPACE = 0, 1, 2, 3


class RecordIndex:
    """The record draft source (see the module docstring). The first `observe` is the prompt."""

    source = SOURCE_RECORD

    def __init__(
        self,
        token_bytes: Callable[[int], bytes],
        tokenize: Callable[[str], list[int]] | None = None,
        q_template: float = 0.95,
        q_value: float = 0.93,
    ) -> None:
        """token_bytes: a token's text (to find lines and separators); tokenize: text to
        tokens, to find the spaced form of a line's first word (" web" in "### web-02" for
        "web" at the start of a data line); q_template, q_value: the estimates given to copied
        template tokens and to substituted value tokens."""
        self._token_bytes = token_bytes
        self._tokenize = tokenize
        self._kinds: dict[int, int] = {}
        self._numbers: dict[int, bool] = {}
        self.q_template = q_template
        self.q_value = q_value
        self.max_candidates = 1  # drafts offered per step, whatever the tree could take
        self._prompt_seen = False
        self._columns: list[str] = []  # the data block's header, lowercased last words
        self._data_span = (0, 0)  # the data block in the normalized stream
        self._prompt_len = 0  # symbols of the prompt in the normalized stream
        # data rows: rows[r] = fields, each a tuple of tokens
        self.rows: list[list[tuple[int, ...]]] = []
        self._starts: dict[int, list[tuple[int, int, bool]]] = {}  # token -> (row, field, spaced)
        # forms[(row, field, spaced)]: a field's tokens as in the prompt (spaced=False) and
        # as written after a space (" Ghent" is " Gh" "ent", not " " "G" "h" "ent")
        self._forms: dict[tuple[int, int, bool], tuple[int, ...]] = {}
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

    def __len__(self) -> int:
        return len(self._sym)

    # --- observing -------------------------------------------------------------------

    def observe(self, tokens: Iterable[int]) -> None:
        toks = int_list(tokens)
        if not self._prompt_seen:
            self._prompt_seen = True
            self._push_prompt(toks, self._find_rows(toks))
            self._prompt_len = len(self._sym)
            return
        for t in toks:
            self._observe_output(t)

    def _text_factor(self, j: int) -> float:
        """How far to trust copying symbol j of the normalized stream as template text."""
        s = self._sym[j]
        if j < self._prompt_len and b"<" in self._token_bytes(s):
            return _Q_PLACEHOLDER  # "<major, minor or patch>": the model fills it in
        factor = 1.0
        if self._numeric(s):
            # a number outside the data is likely computed ("average 44.27"): it changes
            # from record to record
            factor *= _Q_NUMBER
        if j >= 2 and self._seen.get(tuple(self._sym[j - 2 : j + 1]), (0, 0, 0))[2] < 2:
            # written once so far: free text of one record as much as template
            factor *= _Q_ONCE
        return factor

    def _numeric(self, token: int) -> bool:
        number = self._numbers.get(token)
        if number is None:
            number = self._numbers[token] = any(c in b"0123456789" for c in self._token_bytes(token))
        return number

    def _kind(self, token: int) -> int:
        kind = self._kinds.get(token)
        if kind is None:
            raw = self._token_bytes(token)
            if b"\n" in raw:
                kind = _Kind.NEWLINE
            elif raw and all(c in _SEPARATOR_CHARS or c in _PAD_CHARS for c in raw):
                # "," or ", " separates fields; a lone " " may sit inside one ("python 3.8"),
                # a quote or bracket around one ("{"name": "web-01"}")
                kind = _Kind.SEPARATOR if any(c in _SEPARATOR_CHARS for c in raw) else _Kind.SPACE
            else:
                kind = _Kind.OTHER
            self._kinds[token] = kind
        return kind

    def _find_rows(self, tokens: list[int]) -> tuple[int, int]:
        """Find the data rows (and a header's column names); returns the block's token span."""
        lines: list[list[tuple[int, ...]]] = []
        ends: list[int] = []  # token index just past each line
        fields: list[tuple[int, ...]] = []
        cur: list[int] = []
        for i, t in enumerate(tokens):
            kind = self._kind(t)
            if kind == _Kind.OTHER or (kind == _Kind.SPACE and cur):
                cur.append(t)
                continue
            if kind == _Kind.SPACE:
                continue  # space before a field
            while cur and self._kind(cur[-1]) == _Kind.SPACE:
                cur.pop()  # space after a field
            if cur:
                fields.append(tuple(cur))
                cur = []
            if kind == _Kind.NEWLINE:
                lines.append(fields)
                ends.append(i + 1)
                fields = []
        while cur and self._kind(cur[-1]) == _Kind.SPACE:
            cur.pop()
        if cur:
            fields.append(tuple(cur))
        lines.append(fields)
        ends.append(len(tokens))
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
        self.rows = lines[best[1] : best[2]]
        span = (ends[best[1] - 1] if best[1] > 0 else 0, ends[best[2] - 1]) if self.rows else (0, 0)
        if len(self.rows) >= 3 and self._is_header(self.rows[0], self.rows[1], tokens):
            # column names, to read the template's placeholders ("<region>") as fields
            self._columns = [self._column_name(f) for f in self.rows.pop(0)]
        if sum(len(row) for row in self.rows) > _MAX_FIELDS:
            self.rows = []  # not a report's data: too big to tokenize every field twice
        for r, row in enumerate(self.rows):
            for f, field in enumerate(row):
                self._add_form((r, f, False), field)
                spaced = self._with_space(field)
                if spaced is not None:
                    self._add_form((r, f, True), spaced)
        return span

    def _add_form(self, key: tuple[int, int, bool], tokens: tuple[int, ...]) -> None:
        self._forms[key] = tokens
        if self._token_bytes(tokens[0]).strip():  # a lone " " first is its own token in text
            self._starts.setdefault(tokens[0], []).append(key)

    def _column_name(self, field: tuple[int, ...]) -> str:
        words = self._text(field).lower().replace("(", " ").replace(")", " ").split()
        return words[-1] if words else ""

    def _push_prompt(self, tokens: list[int], data: tuple[int, int]) -> None:
        """The prompt into the normalized stream, each template placeholder naming a column
        ("<region>", "<old version>" for the column "old") as that field's value symbol of a
        row before the first: so the first record can be drafted from the template. `data`:
        the data block's token span, located again in the normalized stream."""
        i = 0
        span: list[int] = []  # where the data block begins and ends in the normalized stream
        while i < len(tokens):
            while len(span) < 2 and i >= data[len(span)]:
                span.append(len(self._sym))
            found = self._placeholder(tokens, i) if self._columns else None
            if found is None:
                self._push(tokens[i])
                i += 1
                continue
            before, field, spaced, after, i = found
            for t in before:
                self._push(t)
            self._push(VALUE + field, _TEMPLATE_ROW, spaced)
            for t in after:
                self._push(t)
        span += [len(self._sym)] * (2 - len(span))
        self._data_span = (span[0], span[1])

    def _placeholder(self, tokens: list[int], i: int) -> tuple[list[int], int, bool, list[int], int] | None:
        """A "<name>" placeholder opening at token i: (tokens before the "<", field,
        spaced, tokens after the ">", index past it), or None."""
        opening = self._text([tokens[i]])
        if not opening.endswith("<") or self._tokenize is None:
            return None
        for j in range(i + 1, min(i + 8, len(tokens))):
            text = self._text([tokens[j]])
            if ">" not in text:
                continue
            inner = self._text(tokens[i + 1 : j]) + text[: text.index(">")]
            name = inner.strip().lower()
            field = next(
                (f for f, col in enumerate(self._columns) if col and (name == col or name.startswith(col + " "))),
                None,
            )
            if field is None:
                return None
            lead, rest = opening[:-1], text[text.index(">") + 1 :]
            spaced = lead.endswith(" ") or (lead == "" and opening.startswith(" "))
            before = self._tokenize(lead.rstrip(" ")) if lead.rstrip(" ") else []
            after = self._tokenize(rest) if rest else []
            return before, field, spaced, after, j + 1
        return None

    def _is_header(self, row: list[tuple[int, ...]], after: list[tuple[int, ...]], tokens: list[int]) -> bool:
        """A block's first line is its header (column names, not data) when it shares no
        field with the next line (JSON lines repeat their keys) and most of its words also
        occur elsewhere in the prompt: the template names the same columns."""
        if set(row) & set(after):
            return False
        prompt = self._text(tokens).lower()
        words = [w for w in (self._text(f).strip(" ()[]:").lower() for f in row) if sum(c.isalpha() for c in w) >= 3]
        named = sum(prompt.count(w) >= 2 for w in words)
        return len(words) >= 2 and 2 * named >= len(row)

    def _bytes(self, tokens: Iterable[int]) -> bytes:
        return b"".join(self._token_bytes(t) for t in tokens)

    def _text(self, tokens: Iterable[int]) -> str:
        return self._bytes(tokens).decode("utf-8", "replace")

    def _with_space(self, field: tuple[int, ...]) -> tuple[int, ...] | None:
        """The tokens of " " + the field's text (the field itself if it starts with a space;
        maybe a lone " " token and then the field, as digits are written)."""
        raw = self._bytes(field)
        if raw[:1].isspace():
            return field
        if self._tokenize is None:
            return None
        try:
            toks = tuple(self._tokenize(" " + raw.decode("utf-8")))
        except UnicodeDecodeError:
            return None
        return toks or None

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
        self._last_row, self._last_field = r, f
        self._push(VALUE + f, r, spaced)

    def _field_start(self, prefix: list[int]) -> tuple[int, int, bool] | None:
        """The (row, field, spaced) whose field the tokens `prefix` most likely begin to
        copy: a later field of the row in use, then the next row, then the same row again
        (a value said twice), then the nearest row."""
        places = self._starts.get(prefix[0])
        if not places:
            return None
        if len(prefix) > 1:
            rest = tuple(prefix[1:])
            places = [p for p in places if self._forms[p][1 : len(prefix)] == rest]
            if not places:
                return None
        row, field = self._last_row, self._last_field

        def rank(p: tuple[int, int, bool]) -> tuple[int, int, int]:
            if p[0] == row:
                return (0 if p[1] > field else 2, 0, p[1])
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
        if not self.rows or max_depth <= 0 or len(self._sym) < 2:
            return []
        # Only the best match's draft. The others come from shorter matches elsewhere in
        # the stream; at the first token where they differ from it they are mostly wrong,
        # and as siblings in a tree they took the first-child place on ties (offline replay
        # of 8 report prompts, two prompt sets: never slower with one, up to 30% faster).
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
            if in_data and self._kind(s) in (_Kind.SEPARATOR, _Kind.NEWLINE):
                break  # a match inside a data line copies the rest of that field only
            if s < VALUE:
                tokens.append(s)
                qs.append(q_tpl * self._text_factor(j))
            else:
                r = rows[j] + shift if shift is not None else -1
                f = s - VALUE
                # written with a space before or not, as the copied value was
                value = self._forms.get((r, f, self._sym_spaced[j]))
                if value is None:
                    break  # past the last data row, a row of another shape, no such form
                tokens.extend(value)
                qs.extend([q_val] * len(value))
            j += 1
        if not tokens:
            return None
        del tokens[max_depth:], qs[max_depth:]
        return Candidate(np.array(tokens, dtype=np.int32), np.array(qs, dtype=np.float32), SOURCE_RECORD)

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
                return max(row, 0) + 1
            if rows[j] != _TEXT:
                return row + 1 - rows[j] if row >= rows[j] else None
        return None

"""The record index: drafting the next record of a templated report, values from the data rows."""

from __future__ import annotations

from lookahead.index.datablock import DataBlock, TokenText, parse_data_block
from lookahead.index.records import RecordIndex, RecordSource


class Vocab:
    """A toy tokenizer: greedy longest match over a word list, else one character per token."""

    def __init__(self, words: list[str] = ()) -> None:  # type: ignore[assignment]
        self.pieces: list[str] = []
        self.ids: dict[str, int] = {}
        for w in words:
            self.id(w)
        self.longest = max((len(w) for w in words), default=1)

    def id(self, piece: str) -> int:
        if piece not in self.ids:
            self.ids[piece] = len(self.pieces)
            self.pieces.append(piece)
        return self.ids[piece]

    def encode(self, text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for n in range(min(self.longest, len(text) - i), 0, -1):
                if text[i : i + n] in self.ids or n == 1:
                    out.append(self.id(text[i : i + n]))
                    i += n
                    break
        return out

    def decode(self, tokens: list[int]) -> str:
        return "".join(self.pieces[t] for t in tokens)

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token].encode()


PROMPT = """Write a section per server:
### <name>
- CPU: <cpu>%
- Disk: <disk>%
- Status: OK if every value is below 80
- Note: <a sentence>

Servers (name, cpu, disk):
web-01, 42, 55
web-02, 87, 58
db-01, 35, 77
"""

OUTPUT = """### web-01
- CPU: 42%
- Disk: 55%
- Status: OK if every value is below 80
- Note: fine.

### web-02
- CPU: 87%
- Disk: 58%
- Status: OK if every value is below 80
- Note: busy cpu.

### db-01
- CPU: 35%
- Disk: 77%
"""


def parse(vocab: Vocab, prompt: str) -> DataBlock:
    return parse_data_block(vocab.encode(prompt), TokenText(vocab.token_bytes, vocab.encode))


def index_after(vocab: Vocab, prompt: str, written: str, max_candidates: int = 1) -> RecordIndex:
    text = TokenText(vocab.token_bytes, vocab.encode)
    index = RecordIndex(parse_data_block(vocab.encode(prompt), text), text, max_candidates=max_candidates)
    for t in vocab.encode(written):  # token by token, as a generation would
        index.observe([t])
    return index


def drafts(vocab: Vocab, index: RecordIndex, depth: int = 100) -> list[str]:
    return [vocab.decode(c.tokens.tolist()) for c in index.propose(depth, 3)]


def test_data_rows_found_and_header_dropped() -> None:
    vocab = Vocab()
    block = parse(vocab, PROMPT)
    rows = [[vocab.decode(list(f)) for f in row] for row in block.rows]
    assert rows == [["web-01", "42", "55"], ["web-02", "87", "58"], ["db-01", "35", "77"]]
    assert block.columns == ("name", "cpu", "disk")


def test_placeholders_naming_a_column_are_found_in_prompt_order() -> None:
    # "<a sentence>" names no column: it stays template text
    vocab = Vocab()
    block = parse(vocab, PROMPT)
    assert [p.field for p in block.placeholders] == [0, 1, 2]
    assert [vocab.decode(list(block.tokens[p.start : p.end])) for p in block.placeholders] == [
        "<name>",
        "<cpu>",
        "<disk>",
    ]


def test_parsing_is_pure_and_repeatable() -> None:
    vocab = Vocab()
    text = TokenText(vocab.token_bytes, vocab.encode)
    tokens = vocab.encode(PROMPT)
    block = parse_data_block(tokens, text)
    RecordIndex(block, text).observe(vocab.encode(OUTPUT))
    assert parse_data_block(tokens, text) == block


def test_first_record_drafted_from_the_templates_placeholders() -> None:
    # "<cpu>" names the header's column "cpu": the template itself, with row 1's values
    vocab = Vocab()
    index = index_after(vocab, PROMPT, "### ")
    expected = "web-01\n- CPU: 42%\n- Disk: 55%\n- Status: OK if every value is below 80\n- Note: <a"
    assert any(d.startswith(expected) for d in drafts(vocab, index)), drafts(vocab, index)


def test_placeholders_left_for_the_model_are_doubted() -> None:
    # "<a sentence>" names no column: the model writes something there, so the draft's
    # estimate drops at its "<" (the controller then stops before it)
    vocab = Vocab()
    index = index_after(vocab, PROMPT, "### ")
    cand = next(c for c in index.propose(100, 3) if vocab.decode(c.tokens.tolist()).startswith("web-01"))
    text = [vocab.decode([t]) for t in cand.tokens.tolist()]
    at = text.index("<")
    assert float(cand.q[at]) <= 0.1 < float(cand.q[at - 1])


def test_a_match_inside_a_data_line_copies_one_field() -> None:
    vocab = Vocab()
    # the text reading is not the best match: ask for more drafts
    index = index_after(vocab, PROMPT, "### web-01\n- CPU: 4", max_candidates=4)
    found = drafts(vocab, index)
    assert "2" in found  # "4" read as text matches the data line "42, 55": the field's rest only
    assert not any(d.startswith("2,") for d in found), found


def test_only_the_best_match_is_drafted() -> None:
    vocab = Vocab()
    assert len(index_after(vocab, PROMPT, "### web-01\n- CPU: 4").propose(64, 4)) == 1
    assert len(index_after(vocab, PROMPT, "### web-01\n- CPU: 4", max_candidates=4).propose(64, 4)) > 1


def test_short_matches_give_lower_estimates() -> None:
    vocab = Vocab()
    lo, hi = OUTPUT.index("### web-02"), OUTPUT.index("### db-01")
    weak, strong = [], []
    for cut in range(lo, hi):
        index = index_after(vocab, PROMPT, OUTPUT[:cut])
        for length, end in index._matches([]):
            cand = index._draft(length, end, 100, False)
            if cand is not None:
                (weak if length == 1 else strong).append(float(cand.q.max()))
    assert weak and max(strong) >= index.q_value
    # after a one-symbol match, values are doubted like the template tokens around them
    assert max(weak) <= 0.7 * index.q_template + 1e-6


def test_next_record_drafted_with_next_rows_values() -> None:
    vocab = Vocab()
    start = OUTPUT.index("### web-02") + len("### ")
    index = index_after(vocab, PROMPT, OUTPUT[:start])
    expected = "web-02\n- CPU: 87%\n- Disk: 58%\n- Status: OK if every value is below 80\n- Note: "
    assert any(d.startswith(expected) for d in drafts(vocab, index)), drafts(vocab, index)


def test_value_being_written_is_finished_then_the_template_goes_on() -> None:
    vocab = Vocab()
    start = OUTPUT.index("- CPU: 87") + len("- CPU: 8")
    index = index_after(vocab, PROMPT, OUTPUT[:start])
    assert any(d.startswith("7%\n- Disk: 58%\n- Status:") for d in drafts(vocab, index))


def test_third_record_uses_third_row() -> None:
    vocab = Vocab()
    start = OUTPUT.index("### db-01") + len("### db-01")
    index = index_after(vocab, PROMPT, OUTPUT[:start])
    assert any(d.startswith("\n- CPU: 35%\n- Disk: 77%\n") for d in drafts(vocab, index))


def test_number_in_the_template_is_not_a_value() -> None:
    # "8" of "below 80" starts like the field "87", but "80" is template text: the draft
    # after "below 8" must go on with "0" first: the earlier record wrote it as text
    vocab = Vocab()
    start = OUTPUT.index("below 80", OUTPUT.index("web-02")) + len("below 8")
    index = index_after(vocab, PROMPT, OUTPUT[:start])
    found = drafts(vocab, index)
    assert found and found[0].startswith("0\n- Note: "), found


def test_spaced_form_of_a_line_start_field() -> None:
    # At the start of a data line "Ghent" is "G" "h" "ent"; after "Shop:" the model writes
    # " Gh" "ent": the field is still recognized and the next record gets " Lyon"-style names.
    vocab = Vocab([" Gh", "ent", " Ly", "on", " Po", "rto"])
    prompt = "Per shop:\n## Shop: <city>\nsales <n>\n\nData:\nGhent, 12\nLyon, 40\nPorto, 7\n"
    written = "## Shop: Ghent\nsales 12\n\n## Shop:"
    index = index_after(vocab, prompt, written)
    assert any(d.startswith(" Lyon\nsales 40\n") for d in drafts(vocab, index)), drafts(vocab, index)


def test_json_lines_data() -> None:
    # fields split at ":" and ",", quotes and braces stripped: the values are bare
    vocab = Vocab()
    prompt = (
        "One line per host:\nhost <name>: load <load>\n\n"
        '{"name": "alpha", "load": 12}\n{"name": "beta", "load": 7}\n{"name": "gamma", "load": 30}\n'
    )
    index = index_after(vocab, prompt, "host alpha: load 12\nhost beta")
    # what followed "host alpha", with the next row: up to where the output ends
    assert any(d.startswith(": load 7\nhost gamma") for d in drafts(vocab, index)), drafts(vocab, index)


def test_no_data_rows_no_drafts() -> None:
    vocab = Vocab()
    index = index_after(vocab, "Write a poem about the sea.\n", "The sea, the sea, the sea")
    assert index.block.rows == ()
    assert drafts(vocab, index) == []


def test_source_drafts_as_the_index_over_its_first_observe() -> None:
    vocab = Vocab()
    start = OUTPUT.index("### web-02") + len("### ")
    source = RecordSource(vocab.token_bytes, vocab.encode)
    assert source.propose(100, 3) == []
    source.observe(vocab.encode(PROMPT))
    for t in vocab.encode(OUTPUT[:start]):
        source.observe([t])
    index = index_after(vocab, PROMPT, OUTPUT[:start])
    got = [c.tokens.tolist() for c in source.propose(100, 3)]
    assert got and got == [c.tokens.tolist() for c in index.propose(100, 3)]


def test_source_without_data_rows_keeps_no_index() -> None:
    vocab = Vocab()
    source = RecordSource(vocab.token_bytes, vocab.encode)
    source.observe(vocab.encode("Write a poem about the sea.\n"))
    source.observe(vocab.encode("The sea, the sea, the sea"))
    assert source.index is None
    assert source.propose(100, 3) == []


def test_drafts_respect_max_depth() -> None:
    vocab = Vocab()
    start = OUTPUT.index("### web-02") + len("### ")
    index = index_after(vocab, PROMPT, OUTPUT[:start])
    found = index.propose(5, 3)
    assert found and all(len(c.tokens) <= 5 for c in found)
    assert all(0 < q <= 1 for c in found for q in c.q.tolist())

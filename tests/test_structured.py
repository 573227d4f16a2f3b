"""Data found by parsing the prompt (JSON, YAML-like lists, key: value blocks, quoted CSV),
mapped back to the prompt's tokens, and the record drafts made from it."""

from __future__ import annotations

import json
import re

from lookahead.index.datablock import DataBlock, TokenText, parse_data_block
from lookahead.index.structured import find_table, other_forms
from tests.test_records import Vocab, drafts, index_after

TEMPLATE = """Write a section per server:
### <name>
- CPU: <cpu>%
- Disk: <disk>%
- Note: <a sentence>

"""
SERVERS = [
    {"name": "web-01", "cpu": 42, "disk": 55},
    {"name": "web-02", "cpu": 87, "disk": 58},
    {"name": "db-01", "cpu": 35, "disk": 77},
    {"name": "db-02", "cpu": 29, "disk": 83},
]
VALUES = [["web-01", "42", "55"], ["web-02", "87", "58"], ["db-01", "35", "77"], ["db-02", "29", "83"]]
WRITTEN = (
    "### web-01\n- CPU: 42%\n- Disk: 55%\n- Note: fine.\n\n### web-02\n- CPU: 87%\n- Disk: 58%\n- Note: busy.\n\n### "
)

LAYOUTS = {
    "pretty": "```json\n" + json.dumps(SERVERS, indent=2) + "\n```\n",
    "nested": json.dumps({"servers": SERVERS}, indent=4) + "\n",
    "compact": json.dumps(SERVERS, separators=(",", ":")) + "\n",
    "lines": "".join(json.dumps(s) + "\n" for s in SERVERS),
    "yaml": "servers:\n"
    + "".join(f"  - name: {s['name']}\n    cpu: {s['cpu']}\n    disk: {s['disk']}\n" for s in SERVERS),
    "blocks": "\n".join(f"name: {s['name']}\ncpu: {s['cpu']}\ndisk: {s['disk']}\n" for s in SERVERS),
}


def parse(vocab: Vocab, prompt: str) -> DataBlock:
    return parse_data_block(vocab.encode(prompt), TokenText(vocab.token_bytes, vocab.encode))


def values(vocab: Vocab, block: DataBlock, columns: int = 3) -> list[list[str]]:
    return [[vocab.decode(list(f)) for f in row[:columns]] for row in block.rows]


def test_every_layout_gives_the_rows_and_columns() -> None:
    for name, data in LAYOUTS.items():
        vocab = Vocab()
        block = parse(vocab, TEMPLATE + data)
        assert values(vocab, block) == VALUES, name
        assert block.columns[:3] == ("name", "cpu", "disk"), name
        assert [p.field for p in block.placeholders] == [0, 1, 2], name


def test_values_are_the_prompts_own_tokens_and_the_span_holds_the_data() -> None:
    vocab = Vocab()
    prompt = TEMPLATE + LAYOUTS["pretty"]
    tokens = vocab.encode(prompt)
    block = parse_data_block(tokens, TokenText(vocab.token_bytes, vocab.encode))
    lo, hi = block.span
    assert vocab.decode(tokens[lo:hi]).strip() == json.dumps(SERVERS, indent=2)
    at = prompt.index('"web-02"') + 1  # one character per token here: offsets are token indexes
    assert block.rows[1][0] == tuple(tokens[at : at + len("web-02")])


def test_a_value_cutting_tokens_is_tokenized_alone() -> None:
    # '"web' and '02",' are single tokens: the value's edges fall inside them
    vocab = Vocab(['"web', '02",', "web", "02"])
    block = parse(vocab, TEMPLATE + LAYOUTS["compact"])
    assert values(vocab, block)[1] == ["web-02", "87", "58"]
    assert block.rows[1][0] == tuple(vocab.encode("web-02"))


def test_quoted_csv_fields_keep_their_delimiters() -> None:
    vocab = Vocab(["exhibit", "curator"])  # a "<name>" placeholder spans a few tokens
    prompt = "Per exhibit:\n## <exhibit>\nCurator: <curator>\n\nexhibit,hall,curator\n" + (
        '"Maps, 1600-1800",East,"Berg, Anna"\nTools,West,"Okafor, James"\n"Glass, Light",Atrium,Silva\n'
    )
    block = parse(vocab, prompt)
    assert values(vocab, block) == [
        ["Maps, 1600-1800", "East", "Berg, Anna"],
        ["Tools", "West", "Okafor, James"],
        ["Glass, Light", "Atrium", "Silva"],
    ]
    assert [p.field for p in block.placeholders] == [0, 2]


def test_line_shape_is_the_fallback() -> None:
    vocab = Vocab()
    table = "| name | cpu | disk |\n| --- | --- | --- |\n" + "".join(f"| {' | '.join(v)} |\n" for v in VALUES)
    assert find_table(TEMPLATE + table) is None
    assert values(vocab, parse(vocab, TEMPLATE + table))[-3:] == VALUES[1:]


def test_prompts_without_data_have_no_rows() -> None:
    for prompt in (
        "Write a poem about the sea.\n",
        'Fix this:\n\n```python\ndef f(x):\n    return {"a": x, "b": [1, 2]}\n```\n',
        "Summarize:\nNote: the meeting moved.\nRoom: 4\n\nThe budget is fine.\n",
    ):
        vocab = Vocab()
        assert parse(vocab, prompt).rows == (), prompt
    assert find_table(TEMPLATE) is None  # the template's own "key: <value>" lines are no data


def test_next_record_drafted_from_pretty_json() -> None:
    vocab = Vocab()
    index = index_after(vocab, TEMPLATE + LAYOUTS["pretty"], WRITTEN)
    found = drafts(vocab, index)
    assert any(d.startswith("db-01\n- CPU: 35%\n- Disk: 77%\n- Note: ") for d in found), found


def test_first_record_drafted_from_the_template_with_yaml_data() -> None:
    vocab = Vocab()
    index = index_after(vocab, TEMPLATE + LAYOUTS["yaml"], "### ")
    assert any(d.startswith("web-01\n- CPU: 42%\n- Disk: 55%\n") for d in drafts(vocab, index))


def test_fields_in_another_order_than_the_template() -> None:
    vocab = Vocab()
    data = json.dumps([{"disk": s["disk"], "cpu": s["cpu"], "name": s["name"]} for s in SERVERS], indent=1)
    index = index_after(vocab, TEMPLATE + data, WRITTEN)
    assert any(d.startswith("db-01\n- CPU: 35%\n- Disk: 77%\n") for d in drafts(vocab, index))


def test_renamed_fields_are_drafted_from_the_records_written() -> None:
    # the template's names match no key: no first record from the template, but the values
    # written are still the data's, so the next record is drafted with the next row
    vocab = Vocab()
    template = TEMPLATE.replace("<name>", "<host>").replace("<cpu>", "<load>")
    data = json.dumps([{"server_id": s["name"], "cpu_load": s["cpu"], "disk": s["disk"]} for s in SERVERS])
    block = parse(vocab, template + data)
    assert [p.field for p in block.placeholders] == [2]
    index = index_after(vocab, template + data, WRITTEN)
    assert any(d.startswith("db-01\n- CPU: 35%\n- Disk: 77%\n") for d in drafts(vocab, index))
    # the first record, copied from the template, doubts the placeholders it cannot fill
    first = index_after(vocab, template + data, "### ").propose(100, 3)
    assert first
    for cand in first:
        text = [vocab.decode([t]) for t in cand.tokens.tolist()]
        assert "<" not in text or float(cand.q[text.index("<")]) <= 0.1, text


def test_number_formats() -> None:
    assert other_forms(["0.31", "0.07", None]) == [("%", ["31", "7", None])]
    assert other_forms(["1284500", "956", "-4200"]) == [(",", ["1,284,500", "956", "-4,200"])]
    assert other_forms(["12", "7"]) == [] and other_forms(["0.5", "web"]) == []
    assert other_forms(["true", None, "false"]) == [("!", ["True", None, "False"]), ("?", ["Yes", None, "No"])]


def test_fractions_written_as_percentages() -> None:
    vocab = Vocab()
    template = "Per region:\n== <region> ==\nShare: <share>%\nNote: <a sentence>\n\n"
    data = json.dumps([{"region": r, "share": s} for r, s in (("North", 0.31), ("South", 0.23), ("East", 0.27))])
    block = parse(vocab, template + data)
    share = block.columns.index("share%")
    assert [p.field for p in block.placeholders] == [0, share]
    index = index_after(vocab, template + data, "== ")
    assert any(d.startswith("North ==\nShare: 31%\n") for d in drafts(vocab, index)), drafts(vocab, index)
    written = "== North ==\nShare: 31%\nNote: big.\n\n== South ==\nShare: 2"
    assert any(d.startswith("3%\nNote: ") for d in drafts(vocab, index_after(vocab, template + data, written)))


def test_records_in_another_order_than_the_data_lower_the_estimates() -> None:
    # The report goes row 2, row 0, row 1: drafts still assume the next row (2), but after
    # two of three moves elsewhere its values are doubted; the template text is not.
    vocab = Vocab()
    written = (
        "".join(
            f"### {VALUES[r][0]}\n- CPU: {VALUES[r][1]}%\n- Disk: {VALUES[r][2]}%\n- Note: ok.\n\n" for r in (2, 0, 1)
        )
        + "### "
    )
    in_order = index_after(vocab, TEMPLATE + LAYOUTS["pretty"], WRITTEN)
    shuffled = index_after(vocab, TEMPLATE + LAYOUTS["pretty"], written)
    (trusted,) = [c for c in in_order.propose(100, 3) if vocab.decode(c.tokens.tolist()).startswith("db-01\n")]
    (doubted,) = [c for c in shuffled.propose(100, 3) if vocab.decode(c.tokens.tolist()).startswith("db-01\n")]
    assert float(doubted.q[0]) <= 0.6 * float(trusted.q[0])
    newline = len("db-01")  # the template's "\n" after the value keeps its estimate
    assert float(doubted.q[newline]) == float(trusted.q[newline])


def test_every_report_of_the_data_set_has_its_records_found() -> None:
    # the tuning set's layouts, each found with all its records (5-8) and >= 4 columns
    from bench.tasks import load_tasks

    tasks = load_tasks(prompt_set="data")
    assert len(tasks) >= 10 and {t.kind for t in tasks} == {"report"}
    for task in tasks:
        vocab = Vocab(re.findall(r"<([^<>]+)>", task.prompt))  # a placeholder is a few tokens
        block = parse(vocab, task.prompt)
        assert 5 <= len(block.rows) <= 8 and len(block.rows[0]) >= 4, task.id
        assert block.placeholders, task.id  # the first record can be drafted from the template


def test_delimited_lines_under_a_header_when_the_line_shape_finds_none() -> None:
    # "07:45" splits at ":" for the line shape (a field too many, no header found); parsed at
    # the pipes, the table has its header and the template's placeholders name its columns
    vocab = Vocab(["code", "gate", "time"])
    prompt = "Per flight:\nFlight <code> at <time>, gate <gate>\n\n| code | gate | time |\n| --- | --- | --- |\n" + (
        "| KL12 | B12 | 07:45 |\n| LH09 | C3 | 08:10 |\n| AF15 | B7 | 08:30 |\n"
    )
    block = parse(vocab, prompt)
    assert values(vocab, block) == [["KL12", "B12", "07:45"], ["LH09", "C3", "08:10"], ["AF15", "B7", "08:30"]]
    assert [p.field for p in block.placeholders] == [0, 2, 1]
    index = index_after(vocab, prompt, "Flight KL12 at 07:45, gate B12\nFlight ")
    assert any(d.startswith("LH09 at 08:10, gate C3\n") for d in drafts(vocab, index)), drafts(vocab, index)


def test_a_number_format_that_changes_nothing_falls_back_to_the_column() -> None:
    # 956 has no thousands separator: the "revenue," column uses the "revenue" value there
    vocab = Vocab(["region", "revenue"])
    template = "Per region:\n== <region> ==\nRevenue: $<revenue>\n\n"
    data = json.dumps([{"region": r, "revenue": v} for r, v in (("North", 1284500), ("South", 956), ("East", 4200))])
    block = parse(vocab, template + data)
    assert block.aliases == {2: 1} and (1, 2, False) not in block.forms
    written = "== North ==\nRevenue: $1,284,500\n\n== South ==\nRevenue: $956\n\n== "
    assert any(
        d.startswith("East ==\nRevenue: $4,200\n") for d in drafts(vocab, index_after(vocab, template + data, written))
    )


def test_a_value_being_written_is_finished_from_the_row_in_use_whatever_the_field_order() -> None:
    # the template writes the data's last field first: after the plate (field 2) and the
    # fuel (field 1), "2026-0" begins the date (field 0) of that same row, not the next one
    vocab = Vocab(["plate", "fuel", "next"])
    template = "Per van:\nVan <plate>\nFuel: <fuel>\nNext: <next>\n\n"
    vans = [
        ("2026-04-10", "diesel", "KJ-204"),
        ("2026-03-22", "electric", "IM-117"),
        ("2026-05-01", "diesel", "PZ-380"),
    ]
    data = json.dumps([{"next": n, "fuel": f, "plate": p} for n, f, p in vans], indent=2)
    written = "Van KJ-204\nFuel: diesel\nNext: 2026-04-10\n\nVan IM-117\nFuel: electric\nNext: 2026-0"
    found = drafts(vocab, index_after(vocab, template + data, written))
    assert found and found[0].startswith("3-22\n\nVan PZ-380\nFuel: diesel\n"), found

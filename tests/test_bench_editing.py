"""The editing-session benchmark's session, with no server and no model: the pauses rebuild
the buffer as it was when the user stopped typing, the requests are llama.vim's, and the
summary and its table come out of recorded requests."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.editing import Record, markdown, paired, parse, sessions, summarize
from bench.editing_session import body_start, infill_body, pauses, session, warm_up_body
from tests.test_infill import LLAMA_VIM, LLAMA_VIM_WARMUP

LINES = [f"line {i}" for i in range(10)]
TYPED = ["    total = values[0]", "    return total"]


def test_each_pause_is_the_buffer_up_to_the_cursor() -> None:
    lines = LINES[:5] + TYPED + LINES[5:]
    got = pauses(lines, 5, 2, pause_chars=6, n_prefix=3, n_suffix=2)
    # a pause after each line's indentation, and mid-line at word ends 6+ characters apart
    assert [p.middle for p in got] == ["    ", "    total = values", "    ", "    return total"[:10]]
    for p in got:
        i = 0 if p.typed <= len(TYPED[0]) else 1  # the line being typed
        assert TYPED[i].startswith(p.middle)
        assert p.prefix == "".join(s + "\n" for s in (LINES[:5] + TYPED[:i])[-3:])
        assert p.suffix == "\nline 5\nline 6\n"  # the rest of the cursor line is empty
        assert p.indent == 4
    assert [p.typed for p in got] == sorted(p.typed for p in got)


def test_typing_starts_in_a_function_body_past_its_signature_and_docstring() -> None:
    lines = ["x = 1"] * 3 + [
        "def f(",
        "    a: int,",
        ") -> int:",
        '    """Doc',
        '    string."""',
        "    b = a + 1",
        "    c = b * 2",
        "    return c",
    ]
    assert body_start(lines, min_line=0) == 8


def test_the_requests_are_llama_vims(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    src.mkdir()
    body = "\n".join(f"    v{i} = {i}" for i in range(6))
    (src / "main.py").write_text("\n".join(["import os"] * 45) + "\ndef g():\n" + body + "\n")
    (src / "other.py").write_text("\n".join(f"o = {i}" for i in range(100)) + "\n")
    s = session(src / "main.py", tmp_path, [src / "other.py"], n_lines=2, n_extra=1, pause_chars=8)
    assert s.start == 46 and s.typed == "    v0 = 0\n    v1 = 1"
    assert s.extra == [{"filename": "pkg/other.py", "text": "".join(f"o = {i}\n" for i in range(64))}]
    req = infill_body(s, s.pauses[0])
    # llama.vim's fields, plus what the bench needs to measure (no response_fields)
    assert set(req) == (set(LLAMA_VIM) - {"response_fields"}) | {"return_tokens", "seed"}
    assert req["stream"] is True and req["cache_prompt"] is True and req["input_extra"] == s.extra
    assert set(warm_up_body(s)) == set(LLAMA_VIM_WARMUP) and warm_up_body(s)["n_predict"] == 0
    greedy = infill_body(s, s.pauses[0], greedy=True)
    assert greedy["temperature"] == 0 and "temperature" in greedy["samplers"]
    assert set(greedy) - set(req) == {"temperature"}


def test_the_summary_and_its_table() -> None:
    def rec(server: str, total: float, cached: int, ttft: float = 0.1) -> Record:
        return Record(server, 0, "f.py", 0, ttft, total, 10, 8, 100, cached, 6, 3, "x")

    records = [rec("lookahead", 1.0, 90), rec("lookahead", 2.0, 80), rec("server_plain", 3.0, 0, math.nan)]
    summary = summarize(records, ["lookahead", "server_plain"], repeats=1)
    assert summary["lookahead"]["complete_p50_ms"] == 1500
    assert summary["lookahead"]["cached_share"] == 170 / 200
    assert summary["lookahead"]["acceptance"] == 0.5
    assert math.isnan(summary["server_plain"]["ttft_p50_ms"])  # no token came
    out = {
        "model": "m", "date": "d", "commit": "c", "note": "", "machine": {"cpu": "CPU X", "cpus": 2},
        "settings": {"threads": 2, "repeats": 1, "sampling": "greedy", "n_predict": 128, "budget_ms": 1000,
                     "prefix_lines": 128, "suffix_lines": 16, "time_limit": 420},
        "sessions": [{"name": "f.py", "start": 0, "pauses": 1}], "requests_per_server": 2,
        "cut_by_time_limit": True, "summary": summary, "paired": paired(records, ["lookahead", "server_plain"]),
    }  # fmt: skip
    md = markdown(out)
    assert "CPU X (2 usable CPUs, 2 threads)" in md and "| lookahead | 100 |" in md and "time limit" in md
    assert "| lookahead / server_plain | 1 | 0.67 |" in md


def test_servers_compare_request_by_request() -> None:
    def rec(server: str, pause: int, total: float, content: str = "x") -> Record:
        return Record(server, 0, "f.py", pause, total / 2, total, 10, 8, 100, 0, 0, 0, content)

    # lookahead faster on two of three requests, much slower on the third: the median of the
    # per-request ratios says faster, where the difference of the two medians would not
    records = [rec("lookahead", 0, 1.0), rec("lookahead", 1, 1.0), rec("lookahead", 2, 9.0, "y"),
               rec("server_plain", 0, 2.0), rec("server_plain", 1, 1.25), rec("server_plain", 2, 1.0),
               rec("server_ngram_simple", 0, 1.0)]  # fmt: skip
    got = paired(records, ["lookahead", "server_plain", "server_ngram_simple"])
    plain = got["lookahead / server_plain"]
    assert plain["pairs"] == 3 and plain["complete_ratio_median"] == 0.8 and plain["same_text"] == 2
    assert got["lookahead / server_ngram_simple"]["pairs"] == 1  # only the pause both answered
    assert paired(records, ["server_plain"]) == {}


def test_a_session_in_the_standard_library() -> None:
    args = parse(["--files", "stdlib:json/decoder.py", "--sessions", "1"])
    (s,) = sessions(args.files.split(","), args)
    assert s.name == "stdlib:json/decoder.py" and s.pauses
    assert all(not c["filename"].startswith("/") for c in s.extra)  # named inside the library
    with pytest.raises(SystemExit, match="standard library"):
        sessions(["stdlib:no/such.py"], args)


# ---- llama.vim's own pattern (bench/vim_session.py, bench/editing_vim.py) --------------------
EXTRA_CHUNKS = [{"text": "import os\n", "time": [0, 0], "filename": "other.py"}]


def _file(n: int) -> list[str]:
    return [f"    line_{i} = {i}" for i in range(n)]


def test_vim_quick_request_is_llama_vims_body_with_its_window() -> None:
    from bench.vim_session import MEASURED_FIELDS, ctx_local, fim_body

    buf = _file(300)
    buf[100] = "    "  # a new line holding its indentation only: sent from its beginning
    ctx = ctx_local(buf, 100, 4)
    body = fim_body(ctx, EXTRA_CHUNKS, quick=True)
    expected = {**LLAMA_VIM, "t_max_predict_ms": 250, "n_predict": 128, "input_extra": EXTRA_CHUNKS,
                "n_indent": 0, "prompt": "",
                "input_prefix": "".join(s + "\n" for s in buf[:100]),
                "input_suffix": "\n" + "".join(s + "\n" for s in buf[101:165]),
                "response_fields": LLAMA_VIM["response_fields"] + MEASURED_FIELDS}  # fmt: skip
    assert body == expected
    assert fim_body(ctx, [], quick=False)["t_max_predict_ms"] == 1000
    # a line with text: the indentation counts and the rest of the line opens the suffix
    buf[100] = "    x = f(a)"
    ctx = ctx_local(buf, 100, 9)
    assert (ctx.middle, ctx.indent, ctx.suffix.split("\n")[0]) == ("    x = f", 4, "(a)")


def test_vim_window_slides_by_a_line_past_line_256() -> None:
    from bench.vim_session import ctx_local

    buf = _file(700)
    firsts = []
    for y in (255, 256, 257, 258):
        prefix = ctx_local(buf, y, 0).prefix.split("\n")[:-1]
        assert len(prefix) == min(y, 256)
        assert prefix[-1] == buf[y - 1]
        firsts.append(prefix[0])
    assert firsts == [buf[0], buf[0], buf[1], buf[2]]
    # near the end of the file the suffix is what is left
    assert ctx_local(buf, 690, 0).suffix == "".join(s + "\n" for s in buf[690:])  # the cursor line's rest first


def test_vim_follow_up_assumes_the_suggestion_accepted() -> None:
    from bench.vim_session import ctx_local, render

    buf = _file(400)
    buf[300] = "    "
    prev, ok = render("    a = 1\n    b = 2\n    return a + b\n\n", buf, 300, 4)
    # trailing empty lines dropped, the indentation the line already has taken off the first
    assert (prev, ok) == (["a = 1", "    b = 2", "    return a + b"], True)
    ctx = ctx_local(buf, 300, 4, prev, indent_last=0)
    prefix = ctx.prefix.split("\n")[:-1]
    assert len(prefix) == 256  # the window starts len(prev) - 1 lines later
    assert prefix[0] == buf[300 - 256 + 2]
    assert prefix[-3:] == [buf[299], "    a = 1", "    b = 2"]
    assert (ctx.middle, ctx.indent) == ("    return a + b", 0)
    assert ctx.suffix == "\n" + "".join(s + "\n" for s in buf[301:365])  # the same suffix
    # a one-line suggestion is appended to the cursor line, the window unmoved
    one = ctx_local(buf, 300, 4, ["x = 2"], indent_last=0)
    assert one.middle == "    x = 2" and one.prefix == ctx_local(buf, 300, 4).prefix
    # a suggestion that repeats the next line is discarded, then sent as an empty line
    assert render(buf[301], buf, 300, 4) == ([""], False)


def test_vim_tab_accepts_and_the_next_follow_up_continues_the_first() -> None:
    from bench.editing_vim import accept
    from bench.vim_session import ctx_local, render
    from lookahead.server.idle import accepted

    buf = _file(200)
    buf[100] = "    "
    quick = ctx_local(buf, 100, 4)
    prev, _ = render("    a = 1\n    b = 2\n", buf, 100, 4)
    follow = ctx_local(buf, 100, 4, prev, indent_last=quick.indent)
    buf2, y2, x2 = accept(buf, 100, prev)
    assert buf2[100:102] == ["    a = 1", "    b = 2"] and buf2[102:] == buf[101:]
    assert (y2, x2) == (101, len("    b = 2"))
    # llama.vim finds the follow-up's answer cached for the place after the Tab: the same context
    here = ctx_local(buf2, y2, x2)
    assert (here.prefix, here.middle, here.suffix) == (follow.prefix, follow.middle, follow.suffix)
    # the next follow-up assumes the follow-up's suggestion accepted too: what `serve` guesses
    content = "\n    return a + b\n"
    nxt = ctx_local(buf2, y2, x2, render(content, buf2, y2, x2)[0], indent_last=quick.indent)
    assert accepted(follow.prefix, follow.middle, content) == (nxt.prefix, nxt.middle)
    assert nxt.suffix == follow.suffix


def test_vim_session_types_new_lines_before_and_past_the_window() -> None:
    from bench.editing_vim import vim_sessions

    plan = vim_sessions(["argparse.py"], 8, 2)
    assert [s.past_window() for s in plan] == [False, True]
    before, past = plan
    assert before.start + 8 <= 256 < past.start
    for s in plan:
        steps = s.new_lines()
        assert len(steps) == 8
        for i, nl in enumerate(steps):
            line = s.lines[s.start + i]
            assert nl.buf[: nl.y] == s.lines[: s.start + i]  # typed so far
            assert nl.buf[nl.y] == line[: nl.x] and not nl.buf[nl.y].strip()
            assert nl.buf[nl.y + 1 :] == s.lines[s.start + 8 :]  # the rest, as before the session
        assert len(s.extra) == 2 and all(c["text"].count("\n") == 33 for c in s.extra)


def test_vim_summary_pairs_requests_by_kind_and_position() -> None:
    from bench.editing_vim import Record as VimRecord
    from bench.editing_vim import markdown as vim_markdown
    from bench.editing_vim import summarize as vim_summarize

    def rec(server: str, line: int, kind: str, past: bool, wall: float, prefilled: int) -> VimRecord:
        return VimRecord(server, "f.py:1", line, kind, past, wall, prefilled, 100, 30.0, 10, 0, 0, 0, "x", kind)

    records = [rec("lookahead", i, k, p, w, 50) for i, (k, p, w) in enumerate([("quick", False, 1.0),
               ("quick", True, 4.0), ("follow-up", True, 2.0)])]  # fmt: skip
    records += [rec("llama-server", i, k, p, 2.0, 99) for i, (k, p, _) in enumerate([("quick", False, 0),
                ("quick", True, 0), ("follow-up", True, 0)])]  # fmt: skip
    got = vim_summarize(records, ["lookahead", "llama-server"])
    assert list(got) == ["quick, before line 256", "quick, past line 256", "follow-up, past line 256"]
    assert got["quick, past line 256"]["lookahead / llama-server"]["wall_ratio_p50"] == 2.0
    assert got["quick, before line 256"]["lookahead / llama-server"]["prefilled_ratio_p50"] == 0.51
    assert got["follow-up, past line 256"]["lookahead"]["wall_p50_s"] == 2.0
    out = {"model": "m", "date": "d", "commit": "c", "note": "", "machine": {"cpu": "CPU X", "cpus": 2},
           "settings": {"lines": 8, "time_limit": 1}, "commands": {"a": "lookahead serve"},
           "llama_server_version": "b1", "sessions": [], "cut_by_time_limit": False, "summary": got}  # fmt: skip
    md = vim_markdown(out)
    assert "CPU X" in md and "| quick, past line 256 | lookahead / llama-server | 1 (1 the same) | 2.00 |" in md


def test_vim_variants_are_more_lookahead_servers_compared_request_by_request() -> None:
    from bench.editing_vim import Record as VimRecord
    from bench.editing_vim import commands, parse, variants
    from bench.editing_vim import summarize as vim_summarize

    args = parse(["--servers", "lookahead", "--variant", "k16=--k-max 16", "--lookahead-args", "-t 2"])
    assert variants(args.variant) == {"k16": ["--k-max", "16"]}
    cmd = commands(["lookahead", "k16"], args, Path("m.gguf"), 2)["k16"]
    assert cmd[-6:] == ["--model", "qwen2.5-coder-0.5b", "-t", "2", "--k-max", "16"]
    for bad in (["nameless"], ["=--k-max 16"], ["lookahead=-t 1"], ["a=-t 1", "a=-t 2"]):
        with pytest.raises(SystemExit):
            variants(bad)

    def rec(server: str, line: int, tps: float, predicted: int = 10) -> VimRecord:
        return VimRecord(server, "f.py:1", line, "quick", False, 1.0, 50, 100, tps, predicted, 0, 0, 0, "x", "q")

    records = [rec("lookahead", 0, 40.0), rec("lookahead", 1, 50.0), rec("lookahead", 2, 10.0, predicted=1)]
    records += [rec("k16", 0, 50.0), rec("k16", 1, 50.0), rec("k16", 2, 90.0, predicted=1)]
    pair = vim_summarize(records, ["lookahead", "k16"])["quick, before line 256"]["lookahead / k16"]
    assert pair["decode_ratio_p50"] == pytest.approx(0.9)  # (0.8 + 1.0) / 2: one-token answers left out


def test_vim_bench_reads_the_idle_gauge_not_its_help_line() -> None:
    from bench.editing_vim import idle_working

    help_lines = (
        "# HELP lookahead_idle_work 1 while the service begins a guessed next request\n"
        "# TYPE lookahead_idle_work gauge\n"
    )
    assert not idle_working(help_lines + "lookahead_idle_work 0.0\n")
    assert idle_working(help_lines + "lookahead_idle_work 1.0\n")
    assert not idle_working("llama-server's metrics, no such gauge 1\n")


def test_idle_typing_refuses_bad_delays_before_starting_a_server() -> None:
    from bench.idle_typing import main as idle_typing

    for argv in (["--delays", "x"], ["--delays", "-1"], ["--idle-tokens", "0"]):
        with pytest.raises(SystemExit) as exc:
            idle_typing(argv)
        assert exc.value.code == 2


def test_idle_typing_pairs_each_quick_request_with_the_next_line_of_its_file() -> None:
    from bench.idle_typing import line_pairs

    kinds = ["warm-up", "quick", "follow-up", "accepted", "quick", "follow-up", "warm-up", "quick", "quick"]
    requests = [{"kind": k, "body": {"i": i}} for i, k in enumerate(kinds)]
    assert [(a["i"], b["i"]) for a, b in line_pairs(requests)] == [(1, 4), (7, 8)]  # not across a file's warm-up

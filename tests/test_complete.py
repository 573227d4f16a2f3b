"""`lookahead complete FILE`: the cursor, the prompt, the atomic write, bad input (one
`error:` line, before any model loads) and real completions with SmolLM2 (no FIM tokens)
and Qwen2.5-Coder-0.5B (FIM)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lookahead.api
import lookahead.cli.complete_cmd
import lookahead.cli.generate_cmd
from lookahead.apps.complete import (
    CompletionPrompt,
    Cursor,
    Split,
    completion_prompt,
    split_at_cursor,
    write_completion,
)
from lookahead.errors import BackendError, UserError
from lookahead.index.corpus import CorpusIndex
from lookahead.models import catalog as models
from tests.test_cli import JSON_KEYS, assert_cli_error, invoke, no_load, on  # noqa: F401 (a fixture)

SOURCE = '''import math


def mean(values):
    """The arithmetic mean of values."""
    return sum(values) / len(values)


def variance(values):
    <CURSOR>


def main():
    print(variance([1, 2, 3]))
'''


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "stats.py"
    path.write_text(SOURCE, encoding="utf-8")
    return path


@pytest.fixture
def no_model(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if the command reads the model (weights or vocabulary) before checking input:
    `no_load`'s trap (test_cli), set on the vocabulary and the name lookup too."""
    request.getfixturevalue("no_load")
    trap = lookahead.cli.generate_cmd.load
    monkeypatch.setattr(lookahead.cli.generate_cmd, "locate", trap)
    monkeypatch.setattr(lookahead.cli.complete_cmd, "LlamaVocab", trap)


# ---- the cursor --------------------------------------------------------------------------


def test_marker_is_the_cursor_and_is_taken_out() -> None:
    split = split_at_cursor("ab\ncd<CURSOR>ef\n")
    assert (split.prefix, split.suffix) == ("ab\ncd", "ef\n")
    assert split.cursor == Cursor(2, 3)
    assert split.text == "ab\ncdef\n"
    other = split_at_cursor("x = @@\n", marker="@@")
    assert (other.prefix, other.suffix, other.cursor) == ("x = ", "\n", Cursor(1, 5))


def test_line_and_col() -> None:
    text = "one\ntwo\r\nthree"
    assert split_at_cursor(text, line=1) == Split("one", "\ntwo\r\nthree", Cursor(1, 4))
    assert split_at_cursor(text, line=2).prefix == "one\ntwo"  # the end of the line is before \r
    assert split_at_cursor(text, line=3, col=1) == Split("one\ntwo\r\n", "three", Cursor(3, 1))
    assert split_at_cursor(text, line=3, col=6).suffix == ""
    # the line after a final newline is a line (the end of the file)
    assert split_at_cursor("a\n", line=2) == Split("a\n", "", Cursor(2, 1))


@pytest.mark.parametrize(
    ("text", "kwargs", "needle"),
    [
        ("a\nb\n", {"line": 4}, "--line 4 is outside the file (lines 1 to 3)"),
        ("a\nb\n", {"line": 0}, "--line 0"),
        ("abc\n", {"line": 1, "col": 5}, "--col 5 is outside line 1 (columns 1 to 4)"),
        ("abc\n", {"line": 1, "col": 0}, "--col 0"),
        ("abc\n", {}, "no <CURSOR> marker"),
        ("a<CURSOR>b<CURSOR>\n", {}, "2 <CURSOR> markers"),
        ("a<CURSOR>b\n", {"line": 1}, "also has a <CURSOR> marker"),
        ("abc\n", {"col": 2}, "--col needs --line"),
        ("abc\n", {"marker": ""}, "marker must not be empty"),
    ],
)
def test_bad_cursor(text: str, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(UserError, match=None) as info:
        split_at_cursor(text, **kwargs)
    assert needle in str(info.value)


def test_with_completion_keeps_crlf() -> None:
    split = split_at_cursor("a\r\n<CURSOR>\r\nb\r\n")
    assert split.with_completion("x\ny") == "a\r\nx\r\ny\r\nb\r\n"


# ---- the prompt -------------------------------------------------------------------------------


class FakeVocab:
    """One token per character (its code point); FIM tokens 1, 2, 3 if `fim`."""

    def __init__(self, fim: bool, bos: bool = False) -> None:
        self.fim, self.bos = fim, bos

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return ([0] if add_special and self.bos else []) + [ord(c) for c in text]

    def fim_pre(self) -> int | None:
        return 1 if self.fim else None

    def fim_suf(self) -> int | None:
        return 2 if self.fim else None

    def fim_mid(self) -> int | None:
        return 3 if self.fim else None


def chars(tokens: list[int]) -> str:
    return "".join(chr(t) if t > 3 else f"<{t}>" for t in tokens)


def test_fim_prompt_when_the_vocabulary_has_fim_tokens() -> None:
    split = split_at_cursor("def f():\n    x<CURSOR>\n    return x\n")
    prompt = completion_prompt(FakeVocab(fim=True, bos=True), split, room=1000)
    assert prompt.fim
    assert chars(prompt.tokens) == "<0><1>def f():\n    x<2>\n    return x\n<3>"
    assert chars(prompt.suffix_tokens) == "\n    return x\n"
    # --no-fim, or a model without FIM tokens: the prefix alone
    for vocab, fim in ((FakeVocab(fim=True), False), (FakeVocab(fim=False), True)):
        plain = completion_prompt(vocab, split, fim=fim, room=1000)
        assert not plain.fim and chars(plain.tokens) == "def f():\n    x"


def test_prompt_cut_to_fit_keeps_the_code_nearest_the_cursor() -> None:
    split = Split("p" * 100 + "P", "S" + "s" * 100, Cursor(1, 102))
    prompt = completion_prompt(FakeVocab(fim=True), split, room=43)
    body = chars(prompt.tokens)
    assert len(prompt.tokens) == 43
    assert body.startswith("<1>ppp") and "P<2>S" in body and body.endswith("s<3>")
    assert body.count("s") + 1 == 10  # a quarter of the 40 free tokens for the suffix
    assert prompt.cut == 101 + 101 - 40
    short_suffix = completion_prompt(FakeVocab(fim=True), Split("p" * 100, "S", Cursor(1, 101)), room=43)
    assert chars(short_suffix.tokens).count("p") == 39  # the suffix's unused share goes to the prefix
    with pytest.raises(UserError, match="no room for a prompt"):
        completion_prompt(FakeVocab(fim=True), split, room=3)


def test_indentation_before_the_cursor_is_left_to_the_model() -> None:
    split = split_at_cursor("def f():\n    <CURSOR>\n")
    prompt = completion_prompt(FakeVocab(fim=False), split, room=100)
    assert chars(prompt.tokens) == "def f():\n" and prompt.healed == "    "
    assert prompt.heal("    return 1") == "return 1"
    assert prompt.heal("\n    return 1") == "\n    return 1"  # not there: nothing to take off
    assert CompletionPrompt([1], False, []).heal("  x") == "  x"


# ---- writing ----------------------------------------------------------------------------------


def test_write_completion_inserts_at_the_cursor(src: Path) -> None:
    os.chmod(src, 0o640)
    split = split_at_cursor(src.read_text(encoding="utf-8"))
    write_completion(src, split, "return 0")
    assert src.read_text(encoding="utf-8") == SOURCE.replace("<CURSOR>", "return 0")
    assert src.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in src.parent.iterdir()) == ["stats.py"]


def test_write_completion_failure_leaves_the_file_alone(src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = src.read_bytes()

    def broken_replace(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_completion(src, split_at_cursor(before.decode()), "return 0")
    assert src.read_bytes() == before
    assert sorted(p.name for p in src.parent.iterdir()) == ["stats.py"]  # no temporary file left


# ---- bad input on the command line: one line, exit 1, before any model loads --------------


def test_missing_file(no_model: None, tmp_path: Path) -> None:
    assert_cli_error(invoke(["complete", str(tmp_path / "nothere.py")]), "file not found")


def test_file_is_a_folder(no_model: None, tmp_path: Path) -> None:
    assert_cli_error(invoke(["complete", str(tmp_path)]), "is a folder")


def test_file_not_text(no_model: None, tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_bytes(b"\xff\xfe\x00")
    assert_cli_error(invoke(["complete", str(path)]), "not a text file")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--line", "99"], "--line 99 is outside the file (lines 1 to 15)"),
        (["--line", "1", "--col", "99"], "--col 99 is outside line 1 (columns 1 to 12)"),
        (["--marker", "@@HERE@@"], "no @@HERE@@ marker"),
        (["--corpus", "/no/such/folder"], "context folder not found"),
        (["--corpus", ".", "--no-corpus"], "not both"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--temp", "-1"], "temperature"),
        (["--threads", "-1"], "--threads"),
    ],
)
def test_bad_input(no_model: None, src: Path, args: list[str], needle: str) -> None:
    if "--line" in args:
        src.write_text(SOURCE.replace("<CURSOR>", ""), encoding="utf-8")
    assert_cli_error(invoke(["complete", str(src), *args]), needle)


def test_line_with_a_marker_in_the_file(no_model: None, src: Path) -> None:
    # one cursor only: a marker left in by mistake would go to the model as code
    assert_cli_error(invoke(["complete", str(src), "--line", "2"]), "also has a <CURSOR> marker")


def test_two_markers(no_model: None, src: Path) -> None:
    src.write_text(SOURCE + "# <CURSOR>\n", encoding="utf-8")
    assert_cli_error(invoke(["complete", str(src)]), "2 <CURSOR> markers")


def test_no_marker_no_line(no_model: None, src: Path) -> None:
    src.write_text(SOURCE.replace("<CURSOR>", ""), encoding="utf-8")
    assert_cli_error(invoke(["complete", str(src)]), "no cursor", "--line")


def test_unknown_model(src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError("tried to download or load")

    monkeypatch.setattr("lookahead.models.catalog._pip_download", trap)
    monkeypatch.setattr(lookahead.api, "LlamaBackend", trap)
    monkeypatch.setattr(lookahead.cli.complete_cmd, "LlamaVocab", trap)
    assert_cli_error(invoke(["complete", str(src), "--model", "no-such-model"]), "unknown model 'no-such-model'")


def test_help_has_an_example() -> None:
    result = invoke(["complete", "--help"])
    assert result.exit_code == 0
    assert "Example: lookahead complete" in result.stdout


# ---- real models ------------------------------------------------------------------------------


def complete_json(args: list[str]) -> dict[str, Any]:
    result = invoke(["complete", *args, "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def check_json(data: dict[str, Any]) -> None:
    stats = {key: kind for key, kind in JSON_KEYS.items() if key != "text"}  # generate's, but text
    types = {"completion": str, "line": int, "col": int, "fim": bool, "written": bool, **stats}
    types |= {"finish_reason": str, "k_trace": list, "context_full": bool}
    assert set(data) == set(types)
    for key, kind in types.items():
        assert isinstance(data[key], kind), (key, data[key])
    assert data["finish_reason"] in ("stop", "length")
    assert len(data["k_trace"]) == data["steps"]
    assert 0 < data["n_tokens"] <= 64


@pytest.mark.model
def test_prefix_completion_with_smollm2(smol_path: Path, src: Path) -> None:
    data = complete_json([str(src), *on(smol_path), "-n", "64", "--no-corpus"])
    check_json(data)
    assert data["fim"] is False
    assert (data["line"], data["col"]) == (10, 5)
    assert data["completion"].strip()
    # the block stop: nothing after the function's end (main is already there)
    assert "def main" not in data["completion"]
    assert src.read_text(encoding="utf-8") == SOURCE  # not written without --write


@pytest.mark.model
def test_fim_completion_with_qwen_coder(src: Path) -> None:
    qwen = models.resolve_model("qwen2.5-coder-0.5b", models.default_cache_dir())
    data = complete_json([str(src), *on(qwen), "-n", "64", "--no-corpus", "--ctx-size", "2048"])
    check_json(data)
    assert data["fim"] is True
    assert "return" in data["completion"]
    assert "def main" not in data["completion"]
    nofim = complete_json([str(src), *on(qwen), "-n", "8", "--no-corpus", "--no-fim", "--ctx-size", "2048"])
    assert nofim["fim"] is False


@pytest.mark.model
def test_write_inserts_the_completion_at_the_cursor(smol_path: Path, src: Path) -> None:
    src.write_text(SOURCE.replace("    <CURSOR>", "    return sum((v - mean(values)) ** 2 <CURSOR>"), encoding="utf-8")
    data = complete_json([str(src), *on(smol_path), "-n", "32", "--no-corpus", "--write"])
    assert data["written"] is True
    expected = SOURCE.replace("    <CURSOR>", "    return sum((v - mean(values)) ** 2 " + data["completion"])
    assert src.read_text(encoding="utf-8") == expected
    assert "<CURSOR>" not in expected


@pytest.mark.model
@pytest.mark.parametrize(("error", "exit_code"), [(BackendError("llama.cpp failed"), 1), (RuntimeError("bug"), 2)])
def test_write_leaves_the_file_intact_when_generation_fails(
    smol_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, exit_code: int
) -> None:
    before = src.read_bytes()
    real = lookahead.cli.complete_cmd.stream_completion

    def failing(*args: Any, **kwargs: Any) -> Iterator[Any]:
        events = real(*args, **kwargs)
        yield next(events)  # some text has come ...
        raise error  # ... and then generation fails

    monkeypatch.setattr(lookahead.cli.complete_cmd, "stream_completion", failing)
    result = invoke(["complete", str(src), *on(smol_path), "-n", "16", "--no-corpus", "--write"])
    assert result.exit_code == exit_code
    assert src.read_bytes() == before
    assert sorted(p.name for p in src.parent.iterdir()) == ["stats.py"]


@pytest.mark.model
def test_context_drafts_from_the_repository_without_its_ignored_files(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("private/\n*.gen.py\n", encoding="utf-8")
    (repo / "util.py").write_text("def helper(values):\n    return [v * 2 for v in values]\n", encoding="utf-8")
    (repo / "tables.gen.py").write_text("TABLE = [1, 2, 3]\n", encoding="utf-8")
    (repo / "private").mkdir()
    (repo / "private" / "secret.py").write_text("TOKEN = 'abc'\n", encoding="utf-8")
    path = repo / "stats.py"
    path.write_text(SOURCE, encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a fresh corpus cache
    seen: list[CorpusIndex] = []
    real = lookahead.cli.complete_cmd.context_corpus

    def spy(*args: Any, **kwargs: Any) -> CorpusIndex:
        index = real(*args, **kwargs)
        seen.append(index)
        return index

    monkeypatch.setattr(lookahead.cli.complete_cmd, "context_corpus", spy)
    # the default: the file's git repository
    check_json(complete_json([str(path), *on(smol_path), "-n", "16"]))
    assert seen and seen[-1].files == ("repo/util.py",)  # not ignored files, not the file itself
    # a folder named with --context (no git repository needed)
    (repo / ".git").rmdir()
    check_json(complete_json([str(path), *on(smol_path), "-n", "16", "--corpus", str(repo)]))
    assert seen[-1].files == ("repo/util.py",)
    # --no-corpus: none
    count = len(seen)
    complete_json([str(path), *on(smol_path), "-n", "8", "--no-corpus"])
    assert len(seen) == count

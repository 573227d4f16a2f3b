"""`lookahead generate --compare`: the same prompt decoded again without drafts, both speeds
shown (on stderr, or as `compare` in the --json object)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookahead.cli.compare import compare_json, compare_line, plain_config, rate
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Result, Stats
from tests.test_cli import assert_cli_error, invoke, no_load, on, run_cli  # noqa: F401 (a fixture)


def result(text: str, n_tokens: int, decode_s: float) -> Result:
    return Result(text=text, tokens=[], finish_reason="length", stats=Stats(n_tokens=n_tokens, decode_s=decode_s))


def test_rates_ratio_and_sameness() -> None:
    drafted, plain = result("abc", 100, 2.0), result("abc", 100, 4.0)
    assert rate(drafted) == 50.0 and rate(plain) == 25.0
    data = compare_json(drafted, plain)
    assert data["speedup"] == 2.0 and data["same_text"] is True
    assert data["tokens_per_s"] == 50.0 and data["plain_tokens_per_s"] == 25.0
    line = compare_line(drafted, result("abd", 100, 4.0), greedy=True, exact=False)
    assert "50.0 tokens/s" in line and "25.0 tokens/s" in line and "2.00x" in line and "differ" in line
    assert compare_json(drafted, result("", 0, 0.0))["speedup"] is None  # nothing decoded: no ratio


def test_a_difference_says_what_it_means_and_how_to_remove_it() -> None:
    drafted, same, other = result("abc", 10, 1.0), result("abc", 10, 1.0), result("abd", 10, 1.0)
    assert compare_line(drafted, same, greedy=True, exact=False).endswith("same text)")
    greedy = compare_line(drafted, other, greedy=True, exact=False)
    assert "near tie" in greedy and "--exact gives plain decoding's text" in greedy
    assert "sampling" not in greedy  # a greedy run drew nothing: the old wording blamed sampling
    sampled = compare_line(drafted, other, greedy=False, exact=False)
    assert "samples" in sampled and "--temp 0 --exact: one text" in sampled
    assert "please report" in compare_line(drafted, other, greedy=True, exact=True)


def test_the_baseline_is_the_same_config_without_drafts() -> None:
    draft = DraftConfig(budget=16, exact=True)
    plain = plain_config(draft)
    assert plain.enabled is False and plain.budget == 16 and plain.exact is True


@pytest.mark.usefixtures("no_load")
def test_compare_without_drafts_is_refused_before_loading() -> None:
    assert_cli_error(invoke(["generate", "hi", "--compare", "--no-spec"]), "--compare", "--no-spec")


@pytest.mark.model
def test_compare_reports_both_runs(smol_path: Path) -> None:
    proc = run_cli(["generate", "def add(a, b):", *on(smol_path), "-n", "16", "--compare", "--json"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    compare = data["compare"]
    assert compare["plain_n_tokens"] > 0 and compare["plain_tokens_per_s"] > 0 and compare["tokens_per_s"] > 0
    assert isinstance(compare["same_text"], bool)
    proc = run_cli(["generate", "def add(a, b):", *on(smol_path), "-n", "16", "--compare"])
    assert proc.returncode == 0, proc.stderr
    assert "plain decoding" in proc.stderr.strip().splitlines()[-1]

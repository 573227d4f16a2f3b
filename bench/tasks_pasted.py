"""The tune set's code edits as users often paste them (`--set pasted`): the code under the
instruction without its ``` fence lines, as in the README's example. The copy-through-edits
source must recognise such code by its lines (`lookahead.index.codetext`) to copy it as
boldly as fenced code.
"""

from __future__ import annotations

import re
from dataclasses import replace

from bench.task import Task

_FENCE_LINE = re.compile(r"^```[^\n]*\n?", re.MULTILINE)


def tasks_of(kind: str) -> list[Task]:
    """The set's prompts of `kind`: code edits only, other kinds have none here."""
    if kind != "code_edit":
        return []
    from bench.tasks_tune import tasks_of as tune_tasks

    return [replace(t, prompt=_FENCE_LINE.sub("", t.prompt)) for t in tune_tasks(kind)]

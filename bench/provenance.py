"""Where a bench's figures come from: the checkout's commit and the CPU, written the same way
by every bench that records them."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any


def git_commit() -> str | None:
    """The checkout's commit, with +dirty when the tree has changes."""
    cwd = Path(__file__).parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=cwd, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=cwd,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def cpu_label() -> str:
    """The CPU's model and architecture, e.g. "AMD EPYC (x86_64)"."""
    from lookahead.backend.probe import cpu_model

    return f"{cpu_model()} ({platform.machine()})"


def run_info(model: str, threads: int | str) -> dict[str, Any]:
    """The head of a bench's `info` record: the model, the CPU, the threads and the commit."""
    return {"model": model, "cpu": cpu_label(), "threads": threads, "commit": git_commit() or "?"}

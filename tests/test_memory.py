"""The service's memory of earlier requests: bounded, partitioned by key, saved atomically and
durably (a failed save is tried again), and never loaded from a damaged file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from lookahead.core.draft import SOURCE_SHARED
from lookahead.server import memory
from lookahead.server.memory import SharedIndex, partition_of

DOC = list(range(10, 60))


def test_a_partition_drafts_what_it_saw_and_others_do_not() -> None:
    mem = SharedIndex("tok")
    try:
        a, b = partition_of("key-a"), partition_of("key-b")
        mem.add(a, [DOC])
        assert mem.wait_built()
        src = mem.source(a)
        assert src is not None and src.source == SOURCE_SHARED
        src.observe(DOC[:6])
        (cand, *_) = src.propose(4, 1)
        assert cand.tokens.tolist() == DOC[6:10]
        assert mem.source(b) is None
    finally:
        mem.close()


def test_keys_never_reach_memory_or_disk(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    mem = SharedIndex("tok", path=path)
    mem.add(partition_of("secret-key-123"), [DOC])
    mem.close()
    assert "secret-key-123" not in path.read_text()


def test_the_oldest_requests_are_evicted_past_the_bounds() -> None:
    mem = SharedIndex("tok", max_tokens=120, max_requests=2)
    try:
        p = partition_of(None)
        for i in range(4):
            mem.add(p, [[i * 1000 + t for t in range(50)]])
        stats = mem.stats()
        assert stats["documents"] == 2 and stats["tokens"] == 100
    finally:
        mem.close()


def test_saved_and_loaded_again(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    mem = SharedIndex("tok", path=path)
    mem.add(partition_of(None), [DOC])
    mem.close()
    again = SharedIndex("tok", path=path)
    try:
        assert again.stats()["tokens"] == len(DOC)
        assert again.wait_built() and again.source(partition_of(None)) is not None
    finally:
        again.close()


def test_a_damaged_or_foreign_file_is_set_aside_and_memory_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    for content in ("{not json", json.dumps({"format": "x"}), None):
        if content is None:  # valid, but for another tokenizer
            mem = SharedIndex("other", path=path)
            mem.add(partition_of(None), [DOC])
            mem.close()
        else:
            path.write_text(content)
        mem = SharedIndex("tok", path=path)
        try:
            assert mem.stats()["tokens"] == 0
            assert (tmp_path / "shared.json.corrupt").exists()
        finally:
            mem.close()


def test_a_failed_save_is_tried_again_without_a_new_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save that fails once (a full disk, a volume briefly read-only) is retried by itself:
    the file holds the documents soon after, though no request came since."""
    path = tmp_path / "shared.json"
    real_replace = os.replace
    failures: list[str] = []

    def replace_failing_once(src: object, dst: object) -> None:
        if Path(str(dst)) == path and not failures:
            failures.append(str(src))
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(memory.os, "replace", replace_failing_once)
    mem = SharedIndex("tok", path=path, retry_after=0.05)
    try:
        mem.add(partition_of(None), [DOC])  # rebuilt, then saved: the save fails
        deadline = time.monotonic() + 10
        while not path.exists():
            assert time.monotonic() < deadline, "the failed save was never tried again"
            time.sleep(0.02)
        assert failures, "the injected failure never happened"
        assert not Path(failures[0]).exists(), "the failed attempt's temporary file is removed"
        saved = json.loads(path.read_text())
        assert list(saved["partitions"].values()) == [[DOC]]
    finally:
        mem.close()


def test_the_save_is_flushed_to_disk_before_and_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash or a power cut right after a save leaves the old file or the new one, never an
    empty one: the temporary file is fsync'd before the rename, the directory after it."""
    if not Path("/proc/self/fd").exists():
        pytest.skip("needs /proc to name a file descriptor")
    path = tmp_path / "shared.json"
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: object, dst: object) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(memory.os, "fsync", fsync)
    monkeypatch.setattr(memory.os, "replace", replace)
    mem = SharedIndex("tok", path=path)
    mem.add(partition_of(None), [DOC])
    mem.close()
    at = max(i for i, e in enumerate(events) if e == ("replace", str(path)))  # the last save
    before, after = events[:at], events[at + 1 :]
    assert before and before[-1][0] == "fsync" and before[-1][1].endswith(".tmp"), events
    assert ("fsync", str(tmp_path)) in after, events

"""The service's memory of earlier requests: bounded, partitioned by key, saved atomically,
and never loaded from a damaged file."""

from __future__ import annotations

import json
from pathlib import Path

from lookahead.core.draft import SOURCE_SHARED
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
